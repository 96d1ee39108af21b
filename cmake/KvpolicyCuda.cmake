# Finds nvcc and turns CUDA on according to KVPOLICY_CUDA (AUTO, ON, OFF).
# Sets KVPOLICY_HAS_CUDA.
#
# Two facts of the toolchain this handles:
# - CMake 3.25 does not know nvcc's C++20 flag, so CUDA sources would
#   silently build as C++17 and every concept would fail. We tell it.
# - asking CMake for the architectures of "the GPU in this machine" fails on a
#   machine with no GPU, so the default names them (Ampere and Hopper).

macro(kvpolicy_enable_cuda)
    set(KVPOLICY_HAS_CUDA OFF)
    if(NOT KVPOLICY_CUDA STREQUAL "OFF")
        if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "/usr/local/cuda/bin/nvcc")
            set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc" CACHE FILEPATH "CUDA compiler")
        endif()
        include(CheckLanguage)
        check_language(CUDA)
        if(CMAKE_CUDA_COMPILER)
            if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
                set(CMAKE_CUDA_ARCHITECTURES 80 90)
            endif()
            enable_language(CUDA)
            set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
            set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
            # ...and that nvcc has the cuda_std_20 feature, so targets may require it.
            if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
                list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
                set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
            endif()
            find_package(CUDAToolkit REQUIRED)
            # The project's own device programs (header checks, tests,
            # benchmarks) build for one architecture by default, which halves
            # nvcc's time in CI where nothing runs them; a GPU machine builds
            # them for itself (scripts/gpu-check.sh passes "native").
            set(KVPOLICY_CUDA_TEST_ARCHITECTURES "90" CACHE STRING
                "CUDA architectures of kvpolicy's own device tests, header checks and benchmarks")
            set(KVPOLICY_HAS_CUDA ON)
            message(STATUS "kvpolicy: CUDA headers enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
        elseif(KVPOLICY_CUDA STREQUAL "ON")
            message(FATAL_ERROR "KVPOLICY_CUDA=ON but no CUDA compiler was found: put /usr/local/cuda/bin on PATH or set CMAKE_CUDA_COMPILER")
        else()
            message(STATUS "kvpolicy: no CUDA compiler found, CUDA headers disabled (KVPOLICY_CUDA=AUTO)")
        endif()
    endif()
endmacro()
