# kvpolicy's Conan 2 recipe: a header library, packaged by copying headers.
#
#   conan create . -pr:a <profile>                  # host headers; kvpolicy::kvpolicy, kvpolicy::sim
#   conan create . -pr:a <profile> -o "&:cuda=True"  # plus the device headers and kvpolicy::cuda
#   conan create . -pr:a <profile> -o "&:with_redis=True"  # plus the Redis client and kvpolicy::redis (hiredis)
#
# Consumers: find_package(kvpolicy CONFIG REQUIRED) through CMakeDeps, then
# the same targets as the CMake package. scripts/check-packaging.sh creates
# the package offline (range-v3, zlib and hiredis from the system through a profile's
# [platform_requires]) and builds test_package/ against it.
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load

required_conan_version = ">=2.0.0"


class KvpolicyConan(ConanFile):
    name = "kvpolicy"
    description = "Header-only C++20 KV-cache policy framework for LLM serving engines"
    topics = ("kv-cache", "llm", "eviction", "cache", "cuda", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False], "with_redis": [True, False]}
    default_options = {"cuda": False, "with_redis": False}
    exports_sources = "include/*", "cuda/include/*", "redis/include/*", "cmake/KvpolicyCudaCxx20.cmake"
    no_copy_source = True

    def set_version(self):
        # One version, CMakeLists.txt's project(VERSION).
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(kvpolicy\s+VERSION\s+(\d+\.\d+\.\d+)", text).group(1)

    def requirements(self):
        self.requires("range-v3/[>=0.12.0 <1]")
        self.requires("zlib/[>=1.2.11 <2]")  # kvpolicy/sim/ reads gzip traces
        if self.options.with_redis:
            self.requires("hiredis/[>=0.14 <2]")  # kvpolicy::redis, the remote tier's client

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        # Headers only: no setting or dependency changes the files; the
        # `cuda` and `with_redis` options do (they add headers), so they stay.
        self.info.settings.clear()
        self.info.requires.clear()

    def package(self):
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))
        if self.options.with_redis:
            copy(self, "*.hpp", os.path.join(self.source_folder, "redis", "include"),
                 os.path.join(self.package_folder, "include"))
        if self.options.cuda:
            copy(self, "*.cuh", os.path.join(self.source_folder, "cuda", "include"),
                 os.path.join(self.package_folder, "include"))
            copy(self, "KvpolicyCudaCxx20.cmake", os.path.join(self.source_folder, "cmake"),
                 os.path.join(self.package_folder, self._cmake_module_dir))

    @property
    def _cmake_module_dir(self):
        return os.path.join("lib", "cmake", "kvpolicy-modules")

    def _is_package(self, name):
        # A requirement the profile's [platform_requires] takes from the
        # system is no Conan package: it has no cpp_info, is absent from
        # self.dependencies, and CMakeDeps rejects a component that names it.
        try:
            self.dependencies[name]
            return True
        except KeyError:
            return False

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "kvpolicy")
        self.cpp_info.set_property("cmake_target_name", "kvpolicy::kvpolicy-all")
        self.cpp_info.set_property("pkg_config_name", "kvpolicy-all")

        host = self.cpp_info.components["kvpolicy"]
        host.set_property("cmake_target_name", "kvpolicy::kvpolicy")
        host.set_property("pkg_config_name", "kvpolicy")
        # System range-v3: its headers are on the compiler's default paths.
        host.requires = ["range-v3::range-v3"] if self._is_package("range-v3") else []
        host.bindirs = []
        host.libdirs = []

        sim = self.cpp_info.components["sim"]
        sim.set_property("cmake_target_name", "kvpolicy::sim")
        sim.set_property("pkg_config_name", "kvpolicy-sim")
        sim.requires = ["kvpolicy"]
        if self._is_package("zlib"):
            sim.requires.append("zlib::zlib")
        else:
            sim.system_libs = ["z"]  # the system's zlib
        sim.bindirs = []
        sim.libdirs = []

        if self.options.with_redis:
            remote = self.cpp_info.components["redis"]
            remote.set_property("cmake_target_name", "kvpolicy::redis")
            remote.requires = ["kvpolicy"]
            if self._is_package("hiredis"):  # ConanCenter's recipe names its library component hiredislib
                components = self.dependencies["hiredis"].cpp_info.components
                remote.requires.append("hiredis::hiredislib" if "hiredislib" in components else "hiredis::hiredis")
            else:
                remote.system_libs = ["hiredis"]  # the system's hiredis; its headers are under <hiredis/...>
            # OpenSSL from the system (Debian libssl-dev), as the CMake build finds it: libssl for TLS
            # to the store, libcrypto for the SHA-256 block identity and HMAC.
            remote.system_libs += ["ssl", "crypto"]
            remote.bindirs = []
            remote.libdirs = []

        if self.options.cuda:
            # nvcc compiles the device headers; CMake links CUDA programs to
            # the CUDA runtime itself. The module gives CMake 3.25 nvcc's C++20
            # flag: enable CUDA before find_package(kvpolicy).
            device = self.cpp_info.components["cuda"]
            device.set_property("cmake_target_name", "kvpolicy::cuda")
            device.requires = ["kvpolicy"]
            device.bindirs = []
            device.libdirs = []
            self.cpp_info.set_property(
                "cmake_build_modules", [os.path.join(self._cmake_module_dir, "KvpolicyCudaCxx20.cmake")])
