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
endfunction()
