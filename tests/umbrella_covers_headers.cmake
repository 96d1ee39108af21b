# CTest script: every host header is reached from the umbrella
# <kvpolicy/kvpolicy.hpp>, directly or through another header, as g++ (and,
# with -D__CUDACC__, as nvcc's host pass would, where the simulator's
# headers are left out) sees it; a header the umbrella misses is named.
# Inputs: CXX (the compiler), INCLUDE_DIR (include/), EXCEPT_UNDER_NVCC (a
# regex of headers the umbrella leaves out under nvcc).
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/kvpolicy/*.hpp")
list(REMOVE_ITEM headers "kvpolicy/kvpolicy.hpp")
foreach(pass IN ITEMS host nvcc)
    set(defs "")
    if(pass STREQUAL "nvcc")
        set(defs "-D__CUDACC__")
    endif()
    execute_process(
        COMMAND "${CXX}" -std=c++20 -MM ${defs} -I "${INCLUDE_DIR}" "${INCLUDE_DIR}/kvpolicy/kvpolicy.hpp"
        OUTPUT_VARIABLE deps ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "umbrella ${pass} pass: ${CXX} -MM failed: ${err}")
    endif()
    set(missing "")
    foreach(h IN LISTS headers)
        if(pass STREQUAL "nvcc" AND h MATCHES "${EXCEPT_UNDER_NVCC}")
            continue()
        endif()
        string(FIND "${deps}" "/${h}" at)
        if(at EQUAL -1)
            list(APPEND missing "${h}")
        endif()
    endforeach()
    if(missing)
        list(JOIN missing "\n  " text)
        message(FATAL_ERROR "kvpolicy/kvpolicy.hpp (${pass} pass) does not reach:\n  ${text}\n"
                            "include them in include/kvpolicy/kvpolicy.hpp")
    endif()
endforeach()
