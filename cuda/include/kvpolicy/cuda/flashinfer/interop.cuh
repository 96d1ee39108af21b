// Shared by the *_kernels.cuh headers: kvpolicy's 16-bit storage types as
// CUDA's (same bits), FlashInfer's non-const parameter pointers, and
// FlashInfer's failures as kvpolicy's errors. No FlashInfer header here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <concepts>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/flashinfer/instantiated.cuh"

namespace kvpolicy::cuda::flashinfer::detail {

/// kvpolicy's storage type -> CUDA's (same bits).
template <flashinfer_element T>
using native_t = std::conditional_t<std::same_as<T, bf16>, __nv_bfloat16, __half>;

static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && sizeof(fp16) == sizeof(__half));

template <flashinfer_element T>
native_t<T>* native(T* p) noexcept {
    return reinterpret_cast<native_t<T>*>(p);
}
template <flashinfer_element T>
native_t<T>* native(const T* p) noexcept {  // FlashInfer's params hold non-const pointers it only reads
    return reinterpret_cast<native_t<T>*>(const_cast<T*>(p));
}
inline std::int32_t* mutable_ids(const std::int32_t* p) noexcept { return const_cast<std::int32_t*>(p); }

/// Runs f (a FlashInfer call returning cudaError_t); FlashInfer's exceptions
/// (flashinfer::Error and the like) become usage_error naming `what`.
template <class F>
void call_flashinfer(const char* what, F&& f) {
    cudaError_t status = cudaSuccess;
    try {
        status = f();
    } catch (const kvpolicy::error&) {
        throw;
    } catch (const std::exception& e) {
        throw usage_error(std::string("flashinfer ") + what + ": " + e.what());
    }
    ::kvpolicy::cuda::check(status, what, __FILE__, __LINE__);
}

}  // namespace kvpolicy::cuda::flashinfer::detail
