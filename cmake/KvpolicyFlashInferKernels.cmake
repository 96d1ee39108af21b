# kvpolicy_flashinfer_kernels: the FlashInfer instantiations kvpolicy's own
# CUDA tests and benchmarks link (cuda/src/flashinfer_{decode,prefill,top_k}.cu,
# one translation unit per kernel family, so nvcc compiles each FlashInfer
# kernel once per build however many programs use it). Made only where
# kvpolicy::flashinfer exists; tests/ and bench/ both call this, the first
# call makes it. Built for KVPOLICY_CUDA_TEST_ARCHITECTURES, as the programs
# that link it.
function(kvpolicy_flashinfer_kernels)
    if(TARGET kvpolicy_flashinfer_kernels OR NOT TARGET kvpolicy::flashinfer)
        return()
    endif()
    add_library(kvpolicy_flashinfer_kernels STATIC
        "${PROJECT_SOURCE_DIR}/cuda/src/flashinfer_decode.cu"
        "${PROJECT_SOURCE_DIR}/cuda/src/flashinfer_prefill.cu"
        "${PROJECT_SOURCE_DIR}/cuda/src/flashinfer_top_k.cu")
    target_link_libraries(kvpolicy_flashinfer_kernels PUBLIC kvpolicy::flashinfer)
    set_target_properties(kvpolicy_flashinfer_kernels PROPERTIES CUDA_ARCHITECTURES "${KVPOLICY_CUDA_TEST_ARCHITECTURES}")
    kvpolicy_project_target(kvpolicy_flashinfer_kernels)
endfunction()
