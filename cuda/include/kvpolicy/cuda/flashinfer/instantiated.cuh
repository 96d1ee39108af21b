// The FlashInfer kernels kvpolicy instantiates, declared with kvpolicy's
// types only: the seam between the adapter's public headers (decode.cuh,
// prefill.cuh, top_k.cuh, which validate and never include FlashInfer) and
// the three headers that do include it and define these functions
// (decode_kernels.cuh, prefill_kernels.cuh, top_k_kernels.cuh).
//
// Each *_kernels.cuh ends with the explicit instantiations of its family and
// must be compiled in exactly one translation unit of a program (kvpolicy's
// own: cuda/src/flashinfer_*.cu, the kvpolicy_flashinfer_kernels library);
// everything else includes only the public headers, so nvcc compiles each
// FlashInfer kernel once per build, not once per test or bench.
//
// What is instantiated, and nothing more (each one costs nvcc time in CI):
// head_dim 128; K, V, q and o in bf16 or fp16 (`flashinfer_element`); no
// positional encoding in the kernel (engines store K with RoPE applied), no
// soft cap, no sliding window, no custom mask; decode over NHD pages, any
// GQA group FlashInfer dispatches (1, 2, 3, 4, 6, 8, 16); causal prefill
// or unmasked, with FlashInfer's CTA tiles 16, 64 and 128 (what its planner
// picks for head_dim 128), and its LSE merge; DeviceTopK over float scores. The public headers refuse
// anything else with a config_error naming what is instantiated.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/select.cuh"
#include "kvpolicy/sparse/kv_element.hpp"

namespace kvpolicy::cuda::flashinfer {

/// The element types the kernels are instantiated for (binary-compatible
/// with CUDA's __nv_bfloat16 and __half).
template <class T>
concept flashinfer_element = std::same_as<T, bf16> || std::same_as<T, fp16>;

/// The one head dimension instantiated.
inline constexpr std::uint32_t instantiated_head_dim = 128;

/// The GQA group sizes FlashInfer's decode and prefill dispatch over.
inline constexpr std::array<std::uint32_t, 7> instantiated_groups{1, 2, 3, 4, 6, 8, 16};

/// Bytes of FlashInfer's two workspaces for one plan: the float one
/// (split-KV partial outputs) and the int one (its schedule), whose host
/// twin is pinned.
struct workspace_sizes {
    std::size_t float_bytes = 0;
    std::size_t int_bytes = 0;
};

namespace detail {

/// FlashInfer's DecodePlanInfo / PrefillPlanInfo in the form it serializes
/// them (`ToVector`), so no FlashInfer type crosses this header.
using decode_plan_info = std::array<std::int64_t, 10>;
using prefill_plan_info = std::array<std::int64_t, 15>;

/// A plan's input: FlashInfer's page indptr (and for prefill its query
/// indptr) on the host, and the head counts.
struct plan_shape {
    host_span<const std::int32_t> kv_indptr;  ///< [batch + 1] pages
    host_span<const std::int32_t> qo_indptr;  ///< prefill: [batch + 1] query rows; decode: empty
    std::uint32_t num_q_heads = 0;
    std::uint32_t num_kv_heads = 0;
    std::uint32_t page_size = 0;
};

/// The workspaces a plan writes; `pinned_int` is the int workspace's host
/// twin (page-locked), of the same size.
struct plan_workspace {
    device_span<std::byte> float_ws;
    device_span<std::byte> int_ws;
    host_span<std::byte> pinned_int;
};

/// NHD pages: page p of K starts at k + p * page_stride, [page_size][num_kv_heads][head_dim];
/// V likewise, with the same stride (FlashInfer's decode reads both through K's strides).
template <flashinfer_element T>
struct paged_kv_launch {
    device_span<const T> k;
    device_span<const T> v;
    std::uint32_t page_stride = 0;   ///< elements between pages (FlashInfer keeps it in 32 bits)
    std::uint32_t token_stride = 0;  ///< elements between a page's tokens
    std::uint32_t page_size = 0;
    std::uint32_t num_kv_heads = 0;
    device_span<const std::int32_t> indptr;         ///< [batch + 1]
    device_span<const std::int32_t> indices;        ///< [indptr[batch]]
    device_span<const std::int32_t> last_page_len;  ///< [batch]
};

template <flashinfer_element T>
struct batch_decode_launch {
    device_span<const T> q;  ///< [batch][num_q_heads][head_dim]
    device_span<T> o;        ///< [batch][num_q_heads][head_dim]
    device_span<float> lse;  ///< [batch][num_q_heads] (log2 scale, FlashInfer's) or empty
    paged_kv_launch<T> kv;
    std::uint32_t batch_size = 0;
    std::uint32_t num_q_heads = 0;
    float sm_scale = 0.0f;
    decode_plan_info plan{};
    device_span<std::byte> float_ws;
    device_span<std::byte> int_ws;
};

template <flashinfer_element T>
struct single_decode_launch {
    device_span<const T> q;  ///< [num_q_heads][head_dim]
    device_span<const T> k;  ///< [kv_len][num_kv_heads][head_dim]
    device_span<const T> v;  ///< [kv_len][num_kv_heads][head_dim]
    device_span<T> o;        ///< [num_q_heads][head_dim]
    device_span<T> tmp;      ///< split-KV partials (single_decode_tmp_elements) or empty
    std::uint32_t kv_len = 0;
    std::uint32_t num_q_heads = 0;
    std::uint32_t num_kv_heads = 0;
    float sm_scale = 0.0f;
};

template <flashinfer_element T>
struct batch_prefill_paged_launch {
    device_span<const T> q;                     ///< [qo_indptr[batch]][num_q_heads][head_dim]
    device_span<T> o;                           ///< same shape as q
    device_span<float> lse;                     ///< [rows][num_q_heads] (base 2) or empty
    device_span<const std::int32_t> qo_indptr;  ///< [batch + 1]
    bool causal = true;                         ///< causal (diagonal aligned to the end) or no mask
    paged_kv_launch<T> kv;
    std::uint32_t batch_size = 0;
    std::uint32_t num_q_heads = 0;
    float sm_scale = 0.0f;
    prefill_plan_info plan{};
    device_span<std::byte> float_ws;
    device_span<std::byte> int_ws;
};

template <flashinfer_element T>
struct single_prefill_launch {
    device_span<const T> q;  ///< [qo_len][num_q_heads][head_dim]
    device_span<const T> k;  ///< [kv_len][num_kv_heads][head_dim]
    device_span<const T> v;  ///< [kv_len][num_kv_heads][head_dim]
    device_span<T> o;        ///< [qo_len][num_q_heads][head_dim]
    std::uint32_t qo_len = 0;
    std::uint32_t kv_len = 0;
    std::uint32_t num_q_heads = 0;
    std::uint32_t num_kv_heads = 0;
    float sm_scale = 0.0f;
};

// ---- decode family (decode_kernels.cuh) ----
template <flashinfer_element T>
workspace_sizes batch_decode_workspace(const plan_shape& shape, cudaStream_t stream);
template <flashinfer_element T>
decode_plan_info batch_decode_plan(const plan_workspace& ws, const plan_shape& shape, cudaStream_t stream);
template <flashinfer_element T>
void batch_decode_run(const batch_decode_launch<T>& launch, cudaStream_t stream);
template <flashinfer_element T>
void single_decode_run(const single_decode_launch<T>& launch, cudaStream_t stream);

// ---- prefill family (prefill_kernels.cuh) ----
template <flashinfer_element T>
workspace_sizes batch_prefill_workspace(const plan_shape& shape, std::uint32_t total_rows, cudaStream_t stream);
template <flashinfer_element T>
prefill_plan_info batch_prefill_plan(const plan_workspace& ws, const plan_shape& shape, std::uint32_t total_rows,
                                     cudaStream_t stream);
template <flashinfer_element T>
void batch_prefill_paged_run(const batch_prefill_paged_launch<T>& launch, cudaStream_t stream);
/// FlashInfer's MergeStateInPlace: (o, lse) <- merge of (o, lse) and
/// (o_other, lse_other), [rows][num_heads][head_dim] and [rows][num_heads], base 2.
template <flashinfer_element T>
void merge_state_in_place(device_span<T> o, device_span<float> lse, device_span<T> o_other,
                          device_span<float> lse_other, std::uint32_t rows, std::uint32_t num_heads,
                          cudaStream_t stream);
template <flashinfer_element T>
void single_prefill_causal_run(const single_prefill_launch<T>& launch, cudaStream_t stream);

// ---- top-K family (top_k_kernels.cuh) ----
/// select.cuh's select_lowest contract on cub::DeviceTopK (top_k.cuh says
/// how the results compare).
void device_top_k_lowest(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                         device_span<const float> scores, device_span<const std::uint32_t> ids,
                         device_span<std::uint32_t> out, std::uint32_t k, device_span<select_status> status,
                         cudaStream_t stream);

}  // namespace detail
}  // namespace kvpolicy::cuda::flashinfer
