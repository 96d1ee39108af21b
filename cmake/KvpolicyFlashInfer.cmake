# FlashInfer's headers for kvpolicy's attention adapter (optional):
#
#   kvpolicy_add_flashinfer(TARGET)     # after CUDA is enabled and kvpolicy::cuda exists
#
# kvpolicy decides which KV blocks a query reads (Quest pages, MInference's
# vertical-slash indices); FlashInfer's kernels attend over them. Its
# C++/CUDA headers ship in the `flashinfer-python` wheel on PyPI
# (flashinfer/data/include, with the CCCL it builds against in
# flashinfer/data/cccl), so kvpolicy takes them from one pinned release:
# downloaded at configure time into the build tree, checked against the
# release's SHA-256, and extracted (FlashInfer's headers and its CCCL only,
# about 31 MB). Nothing is committed.
#
# KVPOLICY_FLASHINFER: AUTO (the default: on where CUDA is, off with a note
# if the wheel cannot be had), ON (an error if it cannot), OFF.
# KVPOLICY_FLASHINFER_ROOT: a folder already holding the extracted headers
# (`scripts/fetch-deps.sh DIR` makes DIR/flashinfer for a machine that
# reaches no registry) or the wheel file itself; then nothing is downloaded.
#
# TARGET (an INTERFACE library) carries kvpolicy::cuda, FlashInfer's
# headers and its CCCL as system headers, its CCCL ahead of the toolkit's
# (FlashInfer needs CCCL >= 3.3; CUDA 13.0 ships 3.0), nvcc's
# --expt-relaxed-constexpr (FlashInfer calls constexpr host functions in
# device code); the adapter headers (cuda/include/kvpolicy/cuda/flashinfer/)
# come with kvpolicy::cuda's include directory, and only programs that link
# TARGET may include them.
# A program that links it compiles every CUDA file with that CCCL; do not
# link objects built against the toolkit's CCCL into the same program.

set(KVPOLICY_FLASHINFER_VERSION "0.7.2.post1")
set(KVPOLICY_FLASHINFER_WHEEL "flashinfer_python-${KVPOLICY_FLASHINFER_VERSION}-py3-none-any.whl")
set(KVPOLICY_FLASHINFER_URL
    "https://files.pythonhosted.org/packages/b6/ad/da1fc7644b28ab82db922021955a0c85c8d6b3b1d6db224a13ef65cef85e/${KVPOLICY_FLASHINFER_WHEEL}")
set(KVPOLICY_FLASHINFER_SHA256 "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49")
# The wheel's members kvpolicy uses (relative to flashinfer/data/).
set(KVPOLICY_FLASHINFER_MEMBERS include cccl/cub cccl/thrust cccl/libcudacxx/include)

# True if DIR holds the extracted headers of the pinned release.
function(_kvpolicy_flashinfer_complete dir out)
    set(ok FALSE)
    if(EXISTS "${dir}/VERSION" AND EXISTS "${dir}/include/flashinfer/attention/decode.cuh"
       AND EXISTS "${dir}/cccl/cub/cub/version.cuh")
        file(READ "${dir}/VERSION" v)
        string(STRIP "${v}" v)
        if(v STREQUAL KVPOLICY_FLASHINFER_VERSION)
            set(ok TRUE)
        endif()
    endif()
    set(${out} ${ok} PARENT_SCOPE)
endfunction()

# Extracts the pinned wheel WHEEL (checked against its SHA-256) into DIR
# (include/, cccl/..., VERSION, LICENSE). Sets OUT to "" or to why it could not.
function(kvpolicy_flashinfer_extract wheel dir out)
    file(SHA256 "${wheel}" sum)
    if(NOT sum STREQUAL KVPOLICY_FLASHINFER_SHA256)
        set(${out} "${wheel} has SHA-256 ${sum}, not flashinfer-python ${KVPOLICY_FLASHINFER_VERSION}'s ${KVPOLICY_FLASHINFER_SHA256}" PARENT_SCOPE)
        return()
    endif()
    set(staging "${dir}.staging")
    file(REMOVE_RECURSE "${staging}" "${dir}")
    set(patterns "flashinfer_python-${KVPOLICY_FLASHINFER_VERSION}.dist-info/licenses/LICENSE")
    foreach(m IN LISTS KVPOLICY_FLASHINFER_MEMBERS)
        list(APPEND patterns "flashinfer/data/${m}/*")
    endforeach()
    file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${staging}" PATTERNS ${patterns})
    file(MAKE_DIRECTORY "${dir}/cccl/libcudacxx")
    foreach(m IN LISTS KVPOLICY_FLASHINFER_MEMBERS)
        if(NOT IS_DIRECTORY "${staging}/flashinfer/data/${m}")
            file(REMOVE_RECURSE "${staging}" "${dir}")
            set(${out} "${wheel} has no flashinfer/data/${m}" PARENT_SCOPE)
            return()
        endif()
        file(RENAME "${staging}/flashinfer/data/${m}" "${dir}/${m}")
    endforeach()
    file(RENAME "${staging}/flashinfer_python-${KVPOLICY_FLASHINFER_VERSION}.dist-info/licenses/LICENSE" "${dir}/LICENSE")
    file(REMOVE_RECURSE "${staging}")
    file(WRITE "${dir}/VERSION" "${KVPOLICY_FLASHINFER_VERSION}\n")
    set(${out} "" PARENT_SCOPE)
endfunction()

# Downloads the pinned wheel and extracts it into DIR (the wheel is not
# kept). Sets OUT to "" or to why it could not.
function(kvpolicy_flashinfer_fetch dir out)
    set(wheel "${dir}.whl")
    message(STATUS "kvpolicy: fetching flashinfer-python ${KVPOLICY_FLASHINFER_VERSION}'s headers (62 MB wheel) from PyPI")
    file(DOWNLOAD "${KVPOLICY_FLASHINFER_URL}" "${wheel}" STATUS st TLS_VERIFY ON INACTIVITY_TIMEOUT 60)
    list(GET st 0 code)
    if(NOT code EQUAL 0)
        list(GET st 1 msg)
        file(REMOVE "${wheel}")
        set(${out} "downloading ${KVPOLICY_FLASHINFER_URL} failed (${msg}); on a machine without PyPI give -DKVPOLICY_FLASHINFER_ROOT=<the wheel, or a folder from scripts/fetch-deps.sh>" PARENT_SCOPE)
        return()
    endif()
    kvpolicy_flashinfer_extract("${wheel}" "${dir}" err)
    file(REMOVE "${wheel}")
    set(${out} "${err}" PARENT_SCOPE)
endfunction()

# Sets OUT_DIR to a folder with the pinned release's headers (fetching them
# into BINARY_DIR/_deps if need be), or to "" and WHY_NOT to the reason.
function(kvpolicy_flashinfer_headers binary_dir out_dir why_not)
    set(${out_dir} "" PARENT_SCOPE)
    set(root "${KVPOLICY_FLASHINFER_ROOT}")
    if(root AND IS_DIRECTORY "${root}")
        _kvpolicy_flashinfer_complete("${root}" ok)
        if(ok)
            set(${out_dir} "${root}" PARENT_SCOPE)
        else()
            set(${why_not} "KVPOLICY_FLASHINFER_ROOT=${root} holds no flashinfer-python ${KVPOLICY_FLASHINFER_VERSION} headers (VERSION, include/flashinfer/, cccl/); make it with scripts/fetch-deps.sh" PARENT_SCOPE)
        endif()
        return()
    endif()
    set(dir "${binary_dir}/_deps/flashinfer-${KVPOLICY_FLASHINFER_VERSION}")
    _kvpolicy_flashinfer_complete("${dir}" ok)
    if(ok)
        set(${out_dir} "${dir}" PARENT_SCOPE)
        return()
    endif()
    if(root)
        if(NOT EXISTS "${root}")
            set(${why_not} "KVPOLICY_FLASHINFER_ROOT=${root} does not exist" PARENT_SCOPE)
            return()
        endif()
        kvpolicy_flashinfer_extract("${root}" "${dir}" err)
    else()
        kvpolicy_flashinfer_fetch("${dir}" err)
    endif()
    if(err)
        set(${why_not} "${err}" PARENT_SCOPE)
        return()
    endif()
    set(${out_dir} "${dir}" PARENT_SCOPE)
endfunction()

# TARGET over the headers in DIR (also what the installed package's
# `COMPONENTS flashinfer` makes, in the consumer's build tree).
function(kvpolicy_flashinfer_target target dir)
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    target_link_libraries(${target} INTERFACE kvpolicy::cuda)
    # BEFORE: ahead of the toolkit's own CCCL. libcudacxx's folder goes in as
    # -I, not -isystem: nvcc passes the toolkit's include folder to the host
    # compiler as -I, which is searched before every -isystem folder, and
    # CUDA 13.0 ships nv/target there (outside include/cccl), so with
    # -isystem CCCL 3.6's cub found the toolkit's older nv/target (no
    # NV_HAS_FEATURE_SM_100f: every cub/warp reduction failed to compile,
    # kvpolicy's quest.cuh included). CCCL's headers are clean under the
    # project's -Wall -Wextra -Werror; FlashInfer's stay system headers.
    target_include_directories(${target} SYSTEM BEFORE INTERFACE
        "${dir}/cccl/cub" "${dir}/cccl/thrust" "${dir}/include")
    target_include_directories(${target} BEFORE INTERFACE "${dir}/cccl/libcudacxx/include")
    target_compile_options(${target} INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>")
endfunction()

# Creates TARGET (see the top of this file) if FlashInfer's headers can be
# had; sets KVPOLICY_HAS_FLASHINFER in the caller.
function(kvpolicy_add_flashinfer target)
    set(KVPOLICY_HAS_FLASHINFER OFF PARENT_SCOPE)
    if(KVPOLICY_FLASHINFER STREQUAL "OFF")
        return()
    endif()
    if(NOT TARGET kvpolicy::cuda)
        if(KVPOLICY_FLASHINFER STREQUAL "ON")
            message(FATAL_ERROR "KVPOLICY_FLASHINFER=ON needs CUDA: no kvpolicy::cuda (KVPOLICY_CUDA=${KVPOLICY_CUDA}, nvcc not found or CUDA off)")
        endif()
        return()
    endif()
    kvpolicy_flashinfer_headers("${PROJECT_BINARY_DIR}" dir why)
    if(NOT dir)
        if(KVPOLICY_FLASHINFER STREQUAL "ON")
            message(FATAL_ERROR "KVPOLICY_FLASHINFER=ON: FlashInfer's headers: ${why}")
        endif()
        message(STATUS "kvpolicy: FlashInfer adapter off (KVPOLICY_FLASHINFER=AUTO): ${why}")
        return()
    endif()
    kvpolicy_flashinfer_target(${target} "${dir}")
    message(STATUS "kvpolicy: FlashInfer adapter on (flashinfer-python ${KVPOLICY_FLASHINFER_VERSION} headers in ${dir})")
    set(KVPOLICY_HAS_FLASHINFER ON PARENT_SCOPE)
    set(KVPOLICY_FLASHINFER_DIR "${dir}" CACHE INTERNAL "FlashInfer's extracted headers")
endfunction()

# Script mode, for scripts/fetch-deps.sh:
#   cmake -D KVPOLICY_FLASHINFER_DEST=DIR -P cmake/KvpolicyFlashInfer.cmake
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
    if(NOT KVPOLICY_FLASHINFER_DEST)
        message(FATAL_ERROR "usage: cmake -D KVPOLICY_FLASHINFER_DEST=DIR -P ${CMAKE_CURRENT_LIST_FILE}")
    endif()
    _kvpolicy_flashinfer_complete("${KVPOLICY_FLASHINFER_DEST}" ok)
    if(NOT ok)
        kvpolicy_flashinfer_fetch("${KVPOLICY_FLASHINFER_DEST}" err)
        if(err)
            message(FATAL_ERROR "FlashInfer's headers: ${err}")
        endif()
    endif()
    message(STATUS "flashinfer-python ${KVPOLICY_FLASHINFER_VERSION} headers in ${KVPOLICY_FLASHINFER_DEST}")
endif()
