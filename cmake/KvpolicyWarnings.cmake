# Flags for kvpolicy's own targets (tests, examples, benchmarks, tools), never
# for consumers of the library: warnings as errors and, on request, sanitizers.
#
#   kvpolicy_project_target(<target>)  applies them to a target.

add_library(kvpolicy_project_flags INTERFACE)

target_compile_options(kvpolicy_project_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
# GCC 12 warns falsely with -Wrestrict on `"literal" + std::string` at -O2
# (GCC PR 105329, fixed in GCC 13); the warning is inside libstdc++.
target_compile_options(kvpolicy_project_flags INTERFACE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
# Errors only where the project controls the compiler (the presets and CI turn
# KVPOLICY_WARNINGS_AS_ERRORS on): a user's own configure, with a compiler we
# never tried, gets the warnings but still builds.
if(KVPOLICY_WARNINGS_AS_ERRORS)
    target_compile_options(kvpolicy_project_flags INTERFACE
        $<$<COMPILE_LANGUAGE:CXX>:-Werror>
        $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror --Werror=all-warnings>)
endif()

# GCC collects its garbage each time its heap grows by its own default
# (128 MB on any machine with a GiB of memory): on kvpolicy's test programs,
# which instantiate dozens of policies each, that is 6-15% of the compile
# (-ftime-report; 25.3 -> 22.2 s for eviction_checked_policy under ASan,
# 17.3 -> 15.8 s for engine_any_cache_policy at -O3). Collecting only past
# 1 GB costs about 0.3-0.7 GB more per compile job (1.6 GB at the largest).
# Off on a machine with less than 2 GB of memory per build job.
option(KVPOLICY_COMPILER_LARGE_HEAP "GCC: collect the compiler's garbage only past 1 GB (faster builds of kvpolicy's own targets, ~0.5 GB more per job)" ON)
if(KVPOLICY_COMPILER_LARGE_HEAP)
    target_compile_options(kvpolicy_project_flags INTERFACE
        $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:--param=ggc-min-heapsize=1048576>)
endif()

# Under the sanitizers, the programs that instantiate much and run little
# compile at -O0 rather than the presets' -Og: a third less compile time
# (engine_any_offload_manager 49.7 -> 30.2 s, eviction_checked_policy 25.3
# -> 17.2 s), for tests that then run about 3.5 times slower, which costs
# more than it saves only where a program runs longer than a seventh of its
# compile (eviction_lrfu: 38 s at -Og, 118 s at -O0, so it stays). Measured
# per program from a CI run's compile and test times (docs/reliability.md);
# what the sanitizers check is the same at either level.
set(KVPOLICY_SANITIZED_AT_O0
    # the simulator: every policy's model, and a tiered cache per replay mode
    kvpolicy_sim_driver kvpolicy-sim
    # run-time choices over every policy, each against the concrete types
    engine_any_offload_manager engine_any_cache_policy cache_any_tiered_cache eviction_dyn_policy
    eviction_checked_policy engine_lmcache_order
    # tables and checks over the whole registry
    core_concepts core_policy_options core_clock_errors cache_presets bad_input_catalogue readme_examples
    sim_capacity sim_queue sim_critical_path sim_reuse_oracle_lru cache_remote cache_transfer_faults redis_identity
    # the fuzz harnesses' corpus replays and the examples
    fuzz_cache_ops_replay fuzz_select_victims_replay fuzz_redis_replies_replay
    replay_trace two_tier_scenario custom_policy minimal_two_tier)

if(KVPOLICY_SANITIZE)
    # Host code only: the CUDA runtime and ASan do not mix (CUDA's pinned
    # allocations trip the shadow gap), so device test programs stay plain.
    set(_kvp_san -fsanitize=${KVPOLICY_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_compile_options(kvpolicy_project_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_kvp_san}>)
    target_compile_definitions(kvpolicy_project_flags INTERFACE KVPOLICY_ENABLE_ASSERTS)
    set(KVPOLICY_SANITIZER_LINK_FLAGS ${_kvp_san})
endif()

function(kvpolicy_project_target target)
    target_link_libraries(${target} PRIVATE kvpolicy_project_flags)
    get_target_property(_srcs ${target} SOURCES)
    set(_is_cuda OFF)
    foreach(_s IN LISTS _srcs)
        if(_s MATCHES "\\.cu$")
            set(_is_cuda ON)
        endif()
    endforeach()
    if(KVPOLICY_SANITIZER_LINK_FLAGS AND NOT _is_cuda)
        target_link_options(${target} PRIVATE ${KVPOLICY_SANITIZER_LINK_FLAGS})
    endif()
    if(KVPOLICY_SANITIZE AND target IN_LIST KVPOLICY_SANITIZED_AT_O0)
        target_compile_options(${target} PRIVATE -O0)  # after the build type's -Og, so it wins
    endif()
endfunction()
