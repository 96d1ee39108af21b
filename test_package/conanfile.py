# Conan's test of the kvpolicy package: builds test_package/ (the same
# consumer CI builds against the CMake install) through CMakeDeps and runs it.
# With the package's `cuda` option on, the CUDA consumer is built too; with
# `with_redis`, the Redis client's consumer.
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class KvpolicyTestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["KVPOLICY_TEST_PACKAGE_CUDA"] = bool(self.dependencies["kvpolicy"].options.cuda)
        tc.cache_variables["KVPOLICY_TEST_PACKAGE_REDIS"] = bool(self.dependencies["kvpolicy"].options.with_redis)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            if self.dependencies["kvpolicy"].options.with_redis:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_redis"), env="conanrun")
            if self.dependencies["kvpolicy"].options.cuda:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_cuda"), env="conanrun")
