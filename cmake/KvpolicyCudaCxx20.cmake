# Teaches CMake that nvcc compiles C++20: CMake 3.25 knows no C++20 flag for
# nvcc, so a target that needs `cuda_std_20` (kvpolicy::cuda does) fails to
# configure, and one that sets CUDA_STANDARD 20 silently builds as C++17,
# where kvpolicy's concepts do not exist.
#
# kvpolicyConfig.cmake (and Conan's generated config) include this file.
# It acts on the CUDA compiler as loaded in the including directory, so
# enable CUDA first:
#
#   project(app LANGUAGES CXX CUDA)   # or enable_language(CUDA)
#   find_package(kvpolicy CONFIG REQUIRED COMPONENTS cuda)
#
# Where CUDA is enabled after find_package(kvpolicy), include it again after
# enable_language(CUDA):  include("${kvpolicy_DIR}/KvpolicyCudaCxx20.cmake")
# It sets nothing a newer CMake already knows, so it is safe to include twice.
#
# It also makes sure the imported kvpolicy::cuda requires cuda_std_20: the
# CMake package's export says so already, Conan's generated config cannot.

if(CMAKE_CUDA_COMPILER_LOADED AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        # nvcc has no GNU dialect switch: CUDA_EXTENSIONS gets the same flag.
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
        list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
        set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    endif()
endif()

if(TARGET kvpolicy::cuda)
    get_target_property(_kvpolicy_cuda_aliased kvpolicy::cuda ALIASED_TARGET)
    get_target_property(_kvpolicy_cuda_features kvpolicy::cuda INTERFACE_COMPILE_FEATURES)
    if(NOT _kvpolicy_cuda_aliased AND NOT "cuda_std_20" IN_LIST _kvpolicy_cuda_features)
        set_property(TARGET kvpolicy::cuda APPEND PROPERTY INTERFACE_COMPILE_FEATURES cuda_std_20)
    endif()
    unset(_kvpolicy_cuda_aliased)
    unset(_kvpolicy_cuda_features)
endif()
