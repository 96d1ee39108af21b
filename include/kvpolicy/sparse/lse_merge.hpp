// lse_merge: combine attention computed over disjoint sets of keys.
//
// Attention over keys A and B is recovered from attention over A alone,
// (o_a, lse_a), and over B alone, (o_b, lse_b), where lse is the log of the
// softmax denominator (log-sum-exp of the scaled logits):
//
//     lse = log(exp(lse_a) + exp(lse_b))          (computed around the max)
//     o   = exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b
//
// That is what lets a decode step stream offloaded blocks through a ring of
// device slots (seed 001's pipeline) and still get exact attention: each slot
// gives a partial state, merged as it arrives. An empty part (lse = -inf,
// o ignored) is the identity. Use it on the host as the reference for the
// CUDA merge (kvpolicy/cuda/merge.cuh) and wherever partial states meet.
//
// The formula is FlashAttention's (Dao, "FlashAttention-2", 2023, the split-KV
// combine) and FlashInfer's `merge_state` (Ye et al., "FlashInfer", MLSys'25).
// Departure: lse is in natural log (FlashAttention's convention); FlashInfer's
// kernels keep it in base 2. The host version computes in double and stores
// float.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// Effects: for each row r, merges (o_b[r], lse_b[r]) into (o_a[r],
/// lse_a[r]). Shapes: o_* [rows][head_dim], lse_* [rows].
/// Throws: usage_error if the shapes disagree (nothing merged).
inline void merge_attention_state(std::span<float> o_a, std::span<float> lse_a, std::span<const float> o_b,
                                  std::span<const float> lse_b, std::size_t head_dim) {
    const std::size_t rows = lse_a.size();
    if (lse_b.size() != rows || o_a.size() != rows * head_dim || o_b.size() != rows * head_dim)
        throw usage_error("merge_attention_state: shapes disagree: lse " + std::to_string(rows) + " and " +
                          std::to_string(lse_b.size()) + " rows, o " + std::to_string(o_a.size()) + " and " +
                          std::to_string(o_b.size()) + " values, head_dim " + std::to_string(head_dim) +
                          "; give o as [rows][head_dim] and lse as [rows] for both states");
    constexpr float empty = -std::numeric_limits<float>::infinity();
    for (std::size_t r = 0; r < rows; ++r) {
        float* oa = o_a.data() + r * head_dim;
        const float* ob = o_b.data() + r * head_dim;
        if (lse_b[r] == empty) continue;
        if (lse_a[r] == empty) {
            std::copy_n(ob, head_dim, oa);
            lse_a[r] = lse_b[r];
            continue;
        }
        const double la = lse_a[r], lb = lse_b[r];
        const double m = std::max(la, lb);
        const double wa = std::exp(la - m), wb = std::exp(lb - m);
        const double s = wa + wb;
        for (std::size_t i = 0; i < head_dim; ++i)
            oa[i] = static_cast<float>((wa * static_cast<double>(oa[i]) + wb * static_cast<double>(ob[i])) / s);
        lse_a[r] = static_cast<float>(m + std::log(s));
    }
}

}  // namespace kvpolicy
