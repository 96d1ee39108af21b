# kvpolicy-sim's --option POLICY.NAME=VALUE as a user runs it: the option's
# default value changes nothing, another value reaches the policy in every
# mode that builds it (flat, prefix, tiered, offload), and each bad spec is
# refused (exit 2) with a message naming the fix, as are the driver's checks of
# the options (sim::prepare) the command line cannot make alone.
#
#   cmake -D SIM=path/to/kvpolicy-sim -P sim_tool_options.cmake
cmake_minimum_required(VERSION 3.25)

# hit(OUT ARGS...): the JSON row's hit ratio of a one-policy, one-capacity run.
function(hit out)
    execute_process(COMMAND "${SIM}" ${ARGN} --sessions 20 --threads 1 --output json
                    OUTPUT_VARIABLE json ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "kvpolicy-sim ${ARGN} failed (${rc}): ${err}")
    endif()
    string(JSON ratio GET "${json}" hit_ratio)
    set(${out} "${ratio}" PARENT_SCOPE)
endfunction()

# refused(EXPECTED ARGS...): exit 2 and EXPECTED in the message.
function(refused expected)
    execute_process(COMMAND "${SIM}" ${ARGN} --sessions 20 --threads 1
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    string(FIND "${err}" "${expected}" at)
    if(NOT rc EQUAL 2 OR at EQUAL -1)
        message(FATAL_ERROR "kvpolicy-sim ${ARGN}: exit ${rc}, '${err}'; expected exit 2 and '${expected}'")
    endif()
endfunction()

foreach(mode IN ITEMS flat prefix tiered offload)
    set(args --policy s3fifo --capacity 300 --mode ${mode})
    if(mode STREQUAL "tiered" OR mode STREQUAL "offload")
        list(APPEND args --cpu-capacity 600)
    endif()
    hit(plain ${args})
    hit(same ${args} --option s3fifo.small_fraction=0.10)  # its default
    hit(other ${args} --option s3fifo.small_fraction=0.6 --option s3fifo.move_to_main_threshold=3)
    if(NOT same STREQUAL plain)
        message(FATAL_ERROR "--mode ${mode}: the default small_fraction gave ${same}, not ${plain}")
    endif()
    if(other STREQUAL plain)
        message(FATAL_ERROR "--mode ${mode}: small_fraction=0.6, move_to_main_threshold=3 left the hit ratio at ${plain}")
    endif()
endforeach()

refused("give POLICY.NAME=VALUE" --policy s3fifo --capacity 300 --option s3fifo=0.2)
refused("give POLICY.NAME=VALUE" --policy s3fifo --capacity 300 --option s3fifo.small_fraction=lots)
refused("arc is not compared here; add it to --policy" --policy s3fifo --capacity 300 --option arc.p=1)
refused("unknown eviction policy 'nosuch'" --policy s3fifo --capacity 300 --option nosuch.x=1)
refused("s3fifo: unknown option 'smal_fraction'" --policy s3fifo --capacity 300 --option s3fifo.smal_fraction=0.2)
refused("is outside" --policy s3fifo --capacity 300 --option s3fifo.small_fraction=2)
# The driver's checks (sim::prepare), as kvpolicy.simulate meets them too.
refused("--mode prefix needs requests (mooncake JSONL or the built-in workload); a CSV holds only block accesses: use --mode flat"
        --trace nosuch.csv --mode prefix --policy lru --capacity 10)
