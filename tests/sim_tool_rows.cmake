# kvpolicy-sim as a user runs it: `--output json` has exactly one row per
# requested (policy, capacity), in capacity-major order; --bounds adds lru and
# belady rows; --match-lru replays LRU as its target without showing it.
#
#   cmake -D SIM=path/to/kvpolicy-sim -P sim_tool_rows.cmake
cmake_minimum_required(VERSION 3.25)

# check(EXPECTED_ROWS ARGS...): EXPECTED_ROWS is "policy@capacity;..." in order.
function(check expected)
    execute_process(COMMAND "${SIM}" ${ARGN} --sessions 20 --threads 1 --output json
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "kvpolicy-sim ${ARGN} failed (${rc}): ${err}")
    endif()
    string(STRIP "${out}" out)
    string(REPLACE "\n" ";" lines "${out}")
    set(got "")
    foreach(line IN LISTS lines)
        string(JSON policy GET "${line}" policy)
        string(JSON capacity GET "${line}" capacity)
        list(APPEND got "${policy}@${capacity}")
        if(ARGN MATCHES "--match-lru")
            string(JSON match ERROR_VARIABLE missing GET "${line}" lru_match_capacity)
            if(missing)
                message(FATAL_ERROR "kvpolicy-sim ${ARGN}: no lru_match_capacity in ${line}")
            endif()
        endif()
    endforeach()
    if(NOT got STREQUAL expected)
        message(FATAL_ERROR "kvpolicy-sim ${ARGN}: rows ${got}, expected ${expected}")
    endif()
endfunction()

check("lru@300" --policy lru --capacity 300 --mode flat)
check("lru@300" --policy lru --capacity 300)
check("s3fifo@300;s3fifo@600" --policy s3fifo --capacity 300,600)
check("arc@300;s3fifo@300" --policy arc,s3fifo --capacity 300)
check("arc@300;lru@300;belady@300" --policy arc --capacity 300 --bounds)
check("arc@300;belady@300;lru@300" --policy arc,belady --capacity 300 --mode flat --bounds)
check("arc@300" --policy arc --capacity 300 --match-lru)
check("arc@300;lru@300" --policy arc,lru --capacity 300 --match-lru)
