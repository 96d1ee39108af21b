// merge: log-sum-exp merge of partial attention states on the device.
//
// The CUDA twin of sparse/lse_merge.hpp (which explains the formula and is
// the reference these kernels are tested against): given attention over
// disjoint key sets as (o, lse) pairs, produce attention over their union.
// `merge_attention_state` folds one state into an accumulator in place (what
// the ring pipeline does as each slot's partial arrives);
// `merge_attention_states` combines S partials at once (split-KV decode).
// FlashAttention's split-KV combine / FlashInfer's `merge_state`
// (Ye et al., "FlashInfer", MLSys'25). Departures: natural-log lse (as
// FlashAttention), float arithmetic with expf/logf; an empty part (lse =
// -inf) is the identity, and all-empty gives o = 0, lse = -inf.
// The o values may be stored as fp32, bf16 or fp16 (the template's T, as
// FlashInfer's merge_state takes them); lse and the arithmetic are fp32.
// Each thread's arithmetic is sparse/lse_merge_math.hpp's, run on the CPU
// for every thread index by tests/sparse_kv_element.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/sparse/kv_element.hpp"
#include "kvpolicy/sparse/lse_merge_math.hpp"

namespace kvpolicy::cuda {

namespace detail {

inline constexpr int merge_threads = 128;

// grid.x = rows; o_* [rows][head_dim], lse_* [rows]. The arithmetic is
// sparse/lse_merge_math.hpp's (tested on the CPU thread by thread).
template <kv_element T>
__global__ void __launch_bounds__(merge_threads)
    merge_state_inplace_kernel(T* o_a, float* lse_a, const T* o_b, const float* lse_b, std::uint32_t head_dim) {
    const std::uint32_t r = blockIdx.x;
    const lse_pair_merge w = lse_merge_pair(lse_a[r], lse_b[r]);
    if (w.how == lse_pair_merge::kind::keep_a) return;
    T* oa = o_a + std::size_t{r} * head_dim;
    const T* ob = o_b + std::size_t{r} * head_dim;
    for (std::uint32_t i = threadIdx.x; i < head_dim; i += blockDim.x) oa[i] = lse_merge_channel(w, oa[i], ob[i]);
    __syncthreads();  // every thread has read lse_a[r] before it changes
    if (threadIdx.x == 0) lse_a[r] = w.lse;
}

// grid.x = rows; parts: o [num_parts][rows][head_dim], lse [num_parts][rows].
template <kv_element T>
__global__ void __launch_bounds__(merge_threads)
    merge_states_kernel(const T* o_parts, const float* lse_parts, std::uint32_t num_parts, std::uint32_t rows,
                        std::uint32_t head_dim, T* o, float* lse) {
    const std::uint32_t r = blockIdx.x;
    const lse_parts_merge w = lse_merge_parts_row(lse_parts, num_parts, rows, r);
    T* out = o + std::size_t{r} * head_dim;
    for (std::uint32_t i = threadIdx.x; i < head_dim; i += blockDim.x)
        out[i] = lse_merge_parts_channel(w, o_parts, lse_parts, num_parts, rows, head_dim, r, i);
    if (threadIdx.x == 0) lse[r] = w.lse();
}

}  // namespace detail

/// Effects: enqueues, for each row r of lse_a.size() rows, the merge of
/// (o_b, lse_b) into (o_a, lse_a). Shapes: o_* [rows][head_dim], lse_*
/// [rows], device memory; o stored as T (fp32, bf16 or fp16: widened,
/// merged in fp32, narrowed once), lse fp32. T is deduced from o_a.
/// Throws: usage_error if the shapes disagree (nothing enqueued).
template <kv_element T>
void merge_attention_state(device_span<T> o_a, device_span<float> lse_a, std::type_identity_t<device_span<const T>> o_b,
                           device_span<const float> lse_b, std::uint32_t head_dim, cudaStream_t stream) {
    const std::size_t rows = lse_a.size();
    if (lse_b.size() != rows || o_a.size() != rows * head_dim || o_b.size() != rows * head_dim)
        throw usage_error(
            "merge_attention_state: lse of " + std::to_string(rows) + " and " + std::to_string(lse_b.size()) +
            " rows, o of " + std::to_string(o_a.size()) + " and " + std::to_string(o_b.size()) +
            " values; give rows x head_dim = " + std::to_string(rows * head_dim) + " values of o per lse row");
    if (rows == 0) return;
    detail::merge_state_inplace_kernel<T><<<static_cast<unsigned>(rows), detail::merge_threads, 0, stream>>>(
        o_a.data(), lse_a.data(), o_b.data(), lse_b.data(), head_dim);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

/// Effects: enqueues (o, lse) = the merge of `num_parts` states, rows =
/// lse.size(). Shapes: o_parts [num_parts][rows][head_dim], lse_parts
/// [num_parts][rows], o [rows][head_dim], lse [rows], device memory; o
/// values stored as T (deduced from `o`), lse and the arithmetic fp32.
/// Throws: usage_error if the shapes disagree (nothing enqueued).
template <kv_element T>
void merge_attention_states(std::type_identity_t<device_span<const T>> o_parts, device_span<const float> lse_parts,
                            std::uint32_t num_parts, std::uint32_t head_dim, device_span<T> o, device_span<float> lse,
                            cudaStream_t stream) {
    const std::size_t rows = lse.size();
    if (o.size() != rows * head_dim || lse_parts.size() != rows * num_parts ||
        o_parts.size() != rows * num_parts * head_dim)
        throw usage_error("merge_attention_states: " + std::to_string(num_parts) + " parts of " +
                          std::to_string(lse_parts.size()) + " lse and " + std::to_string(o_parts.size()) +
                          " o values into " + std::to_string(rows) + " rows of " + std::to_string(o.size()) +
                          " o values; give parts x rows lse, parts x rows x head_dim o, rows x head_dim out");
    if (rows == 0) return;
    detail::merge_states_kernel<T><<<static_cast<unsigned>(rows), detail::merge_threads, 0, stream>>>(
        o_parts.data(), lse_parts.data(), num_parts, static_cast<std::uint32_t>(rows), head_dim, o.data(), lse.data());
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvpolicy::cuda
