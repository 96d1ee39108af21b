# `cmake --install`: both header sets, the exported targets, a CMake package
# (kvpolicyConfig.cmake + version file) and pkg-config files.
#
# Layout under the prefix:
#   include/kvpolicy/...                 host headers (and the Redis client's with kvpolicy::redis,
#                                        device headers with kvpolicy::cuda)
#   share/cmake/kvpolicy/                kvpolicyConfig.cmake, its version file, one targets
#                                        file per export set, KvpolicyCudaCxx20.cmake
#   share/pkgconfig/kvpolicy.pc          (and kvpolicy-sim.pc)
# Everything is architecture-independent (headers only), hence share/.
#
# One export set per target: a consumer machine without zlib, hiredis or the
# CUDA toolkit still finds the package, and kvpolicy::sim / kvpolicy::redis /
# kvpolicy::cuda are simply absent there unless asked for with COMPONENTS.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVPOLICY_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/kvpolicy"
    CACHE STRING "Where kvpolicyConfig.cmake goes, relative to the prefix")
set(KVPOLICY_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_DATADIR}/pkgconfig"
    CACHE STRING "Where kvpolicy.pc goes, relative to the prefix")

install(TARGETS kvpolicy EXPORT kvpolicyTargets FILE_SET HEADERS)
install(EXPORT kvpolicyTargets NAMESPACE kvpolicy:: DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")

set(KVPOLICY_INSTALLS_SIM OFF)
if(TARGET kvpolicy_sim)
    set(KVPOLICY_INSTALLS_SIM ON)
    install(TARGETS kvpolicy_sim EXPORT kvpolicySimTargets)
    install(EXPORT kvpolicySimTargets NAMESPACE kvpolicy:: DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")
endif()

set(KVPOLICY_INSTALLS_REDIS OFF)
if(TARGET kvpolicy_redis)
    set(KVPOLICY_INSTALLS_REDIS ON)
    install(TARGETS kvpolicy_redis EXPORT kvpolicyRedisTargets
        FILE_SET redis_headers DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
    install(EXPORT kvpolicyRedisTargets NAMESPACE kvpolicy:: DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")
endif()

set(KVPOLICY_INSTALLS_CUDA OFF)
if(TARGET kvpolicy_cuda)
    set(KVPOLICY_INSTALLS_CUDA ON)
    install(TARGETS kvpolicy_cuda EXPORT kvpolicyCudaTargets
        FILE_SET cuda_headers DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
    install(EXPORT kvpolicyCudaTargets NAMESPACE kvpolicy:: DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")
    # The FlashInfer adapter (not in kvpolicy::cuda's file set: it compiles
    # only against FlashInfer, which `COMPONENTS flashinfer` fetches into the
    # consumer's build tree, as this build fetched it).
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/cuda/include/kvpolicy/cuda/flashinfer"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kvpolicy/cuda" OPTIONAL)
endif()

configure_package_config_file(
    "${PROJECT_SOURCE_DIR}/cmake/kvpolicyConfig.cmake.in"
    "${PROJECT_BINARY_DIR}/kvpolicyConfig.cmake"
    INSTALL_DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")
# 0.x releases promise what SameMajorVersion says; headers only, so any
# architecture (a 32-bit consumer of a 64-bit install) is fine.
write_basic_package_version_file(
    "${PROJECT_BINARY_DIR}/kvpolicyConfigVersion.cmake"
    COMPATIBILITY SameMajorVersion
    ARCH_INDEPENDENT)
install(FILES
    "${PROJECT_BINARY_DIR}/kvpolicyConfig.cmake"
    "${PROJECT_BINARY_DIR}/kvpolicyConfigVersion.cmake"
    "${PROJECT_SOURCE_DIR}/cmake/KvpolicyCudaCxx20.cmake"
    "${PROJECT_SOURCE_DIR}/cmake/KvpolicyFlashInfer.cmake"
    DESTINATION "${KVPOLICY_INSTALL_CMAKEDIR}")

# pkg-config. range-v3 ships no .pc file, so its include directory is
# written into Cflags when it is not one the compiler searches anyway.
set(KVPOLICY_PC_EXTRA_CFLAGS "")
get_target_property(_kvp_rv3_includes range-v3::range-v3 INTERFACE_INCLUDE_DIRECTORIES)
foreach(_d IN LISTS _kvp_rv3_includes)
    if(_d AND NOT _d MATCHES "\\$<" AND NOT _d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
        string(APPEND KVPOLICY_PC_EXTRA_CFLAGS " -I${_d}")
    endif()
endforeach()
file(RELATIVE_PATH KVPOLICY_PC_PREFIX_FROM_PCDIR
    "${CMAKE_INSTALL_PREFIX}/${KVPOLICY_INSTALL_PKGCONFIGDIR}" "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" KVPOLICY_PC_PREFIX_FROM_PCDIR "${KVPOLICY_PC_PREFIX_FROM_PCDIR}")
configure_file("${PROJECT_SOURCE_DIR}/cmake/kvpolicy.pc.in" "${PROJECT_BINARY_DIR}/kvpolicy.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/kvpolicy.pc" DESTINATION "${KVPOLICY_INSTALL_PKGCONFIGDIR}")
if(KVPOLICY_INSTALLS_SIM)
    configure_file("${PROJECT_SOURCE_DIR}/cmake/kvpolicy-sim.pc.in" "${PROJECT_BINARY_DIR}/kvpolicy-sim.pc" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/kvpolicy-sim.pc" DESTINATION "${KVPOLICY_INSTALL_PKGCONFIGDIR}")
endif()
