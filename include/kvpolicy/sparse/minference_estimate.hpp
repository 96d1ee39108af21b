// minference_estimate: the per-thread math of MInference's index estimation,
// shared by the host and the CUDA kernels (kvpolicy/cuda/minference.cuh).
//
// The estimate looks at the last `last_q` queries of the prompt (rows
// r = 0 .. last_q-1, query token i_r = num_tokens - last_q + r) against every
// key, causally, per query head:
//   1. logits S[h][r][j] = scale * q_{i_r,h} . k_{j,kv(h)} for j <= i_r, else -inf
//      (one thread per (h, r, j));
//   2. each row's log-sum-exp, from per-thread partial softmax states
//      (thread t of a row's threads takes j = t, t + threads, ...) merged by
//      combine_softmax_states (one thread block per (h, r));
//   3. per column j the attention mass sum_r exp(S[h][r][j] - lse[h][r]),
//      and per diagonal offset o = i - j the mass sum_r exp(S[h][r][i_r - o] -
//      lse[h][r]) (one thread per (h, j) and per (h, o)); the first
//      num_sink_tokens columns and the num_recent_diags smallest offsets get
//      +inf so that the top-k always keeps them (the paper's code does the
//      same with torch.inf).
// Jiang et al., "MInference 1.0: Accelerating Pre-filling for Long-Context
// LLMs via Dynamic Sparse Attention", NeurIPS 2024, Algorithm 2 (vertical-
// slash). The host reference (sparse/minference.hpp) computes the same masses
// in double straight from q and k; the CPU tests drive these functions over
// every thread index and compare.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/prefill_tile.hpp"

namespace kvpolicy {

/// What the estimation kernels read (raw pointers: host or device arrays).
struct minference_estimate_args {
    const float* q = nullptr;        ///< [num_tokens][num_q_heads][head_dim]
    const float* k = nullptr;        ///< [num_tokens][num_kv_heads][head_dim]
    const float* logits = nullptr;   ///< [num_q_heads][last_q][num_tokens], step 1's output
    const float* row_lse = nullptr;  ///< [num_q_heads][last_q], step 2's output
    std::uint32_t num_tokens = 0;
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    float scale = 1.0f;
    std::uint32_t last_q = 64;
    std::uint32_t num_sink_tokens = 30;
    std::uint32_t num_recent_diags = 100;
};

/// Step 1 for one thread: S[h][r][j].
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float estimation_logit(const minference_estimate_args& a, std::uint32_t h,
                                                                 std::uint32_t r, std::uint32_t j) noexcept {
    const std::uint32_t i = a.num_tokens - a.last_q + r;
    if (j > i) return -INFINITY;
    const std::uint32_t kvh = h / (a.num_q_heads / a.num_kv_heads);
    const std::size_t d = a.head_dim;
    return prefill_logit(a.q + (std::size_t{i} * a.num_q_heads + h) * d,
                         a.k + (std::size_t{j} * a.num_kv_heads + kvh) * d, a.head_dim, a.scale);
}

/// Step 2 for one thread: the softmax state of row (h, r) over the columns
/// j = begin, begin + step, ... (< num_tokens), one at a time in that order.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline softmax_state estimation_row_partial(const minference_estimate_args& a,
                                                                               std::uint32_t h, std::uint32_t r,
                                                                               std::uint32_t begin,
                                                                               std::uint32_t step) noexcept {
    const float* row = a.logits + (std::size_t{h} * a.last_q + r) * a.num_tokens;
    softmax_state s{};
    for (std::uint32_t j = begin; j < a.num_tokens; j += step) {
        const float x = row[j];
        if (x == -INFINITY) continue;
        if (x > s.m) {
            s.l = s.l * ::expf(s.m - x) + 1.0f;  // exp(-inf) = 0 on the first logit
            s.m = x;
        } else {
            s.l += ::expf(x - s.m);
        }
    }
    return s;
}

/// Step 3 for one thread: the attention mass of column j of head h over the
/// last_q rows (summed in row order); +inf for a sink column.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float estimation_column_mass(const minference_estimate_args& a,
                                                                       std::uint32_t h, std::uint32_t j) noexcept {
    if (j < a.num_sink_tokens) return INFINITY;
    const std::uint32_t first = a.num_tokens - a.last_q;
    float mass = 0.0f;
    for (std::uint32_t r = j > first ? j - first : 0; r < a.last_q; ++r) {
        const std::size_t row = std::size_t{h} * a.last_q + r;
        mass += ::expf(a.logits[row * a.num_tokens + j] - a.row_lse[row]);
    }
    return mass;
}

/// Step 3 for one thread: the attention mass of diagonal offset o (keys
/// j = i_r - o) of head h over the last_q rows; +inf for a recent diagonal.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float estimation_diagonal_mass(const minference_estimate_args& a,
                                                                         std::uint32_t h, std::uint32_t o) noexcept {
    if (o < a.num_recent_diags) return INFINITY;
    const std::uint32_t first = a.num_tokens - a.last_q;
    float mass = 0.0f;
    for (std::uint32_t r = o > first ? o - first : 0; r < a.last_q; ++r) {
        const std::size_t row = std::size_t{h} * a.last_q + r;
        mass += ::expf(a.logits[row * a.num_tokens + (first + r - o)] - a.row_lse[row]);
    }
    return mass;
}

}  // namespace kvpolicy
