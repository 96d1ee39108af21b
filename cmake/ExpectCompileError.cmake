# Runs: cmake -D COMPILER=... -D SOURCE=... -D INCLUDE_DIRS=... [-D FLAGS=...] -P ExpectCompileError.cmake
# Passes when SOURCE fails to compile AND the diagnostic matches the regex on
# SOURCE's first line, written as `// expect-error: <regex>`. FLAGS (a list)
# replaces the default `-fsyntax-only`: nvcc has no syntax-only mode and its
# execution-space errors come from its front end, so .cu cases compile to
# /dev/null with an architecture instead.
file(STRINGS "${SOURCE}" first_line LIMIT_COUNT 1)
if(NOT first_line MATCHES "^// expect-error: (.+)$")
    message(FATAL_ERROR "${SOURCE}: first line must be `// expect-error: <regex>`")
endif()
set(expected "${CMAKE_MATCH_1}")
set(includes "")
foreach(d IN LISTS INCLUDE_DIRS)
    list(APPEND includes "-I${d}")
endforeach()
if(NOT DEFINED FLAGS)
    set(FLAGS -fsyntax-only)
endif()
execute_process(
    COMMAND "${COMPILER}" -std=c++20 ${FLAGS} ${includes} "${SOURCE}"
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err)
if(rc EQUAL 0)
    message(FATAL_ERROR "${SOURCE} compiled, but it must not: the wrong composition went unnoticed")
endif()
if(NOT "${out}${err}" MATCHES "${expected}")
    message(FATAL_ERROR "${SOURCE} failed to compile, but the diagnostic does not match '${expected}':\n${err}")
endif()
message(STATUS "${SOURCE}: rejected as expected (matched '${expected}')")
