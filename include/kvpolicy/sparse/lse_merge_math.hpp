// lse_merge_math: one thread's share of the log-sum-exp merge of partial
// attention states, in fp32, over outputs stored as fp32, bf16 or fp16.
//
// The CUDA merge kernels (kvpolicy/cuda/merge.cuh) run these functions, and
// the CPU tests (tests/sparse_kv_element.cpp) run them for every thread
// index against sparse/lse_merge.hpp's double reference (STYLE.md 13). The
// formula is lse_merge.hpp's: lse = m + log(exp(lse_a - m) + exp(lse_b -
// m)), o = (exp(lse_a - m) o_a + exp(lse_b - m) o_b) / that sum, m the
// larger lse; an empty part (lse = -inf) is the identity and its o is never
// read (it may hold anything, NaN too).
//
// The partial outputs o may be stored as T (kv_element.hpp): engines keep
// attention outputs in the K/V type (FlashInfer's merge_state takes bf16 /
// fp16 o with fp32 lse). They are widened, combined in fp32 and narrowed once
// per merge (round to nearest even), so a merged channel carries one
// rounding of T (relative 2^-8 for bf16, 2^-11 for fp16) on top of the fp32
// arithmetic; lse stays fp32. FlashAttention-2's split-KV combine (Dao,
// 2023), FlashInfer's merge_state (Ye et al., MLSys'25).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/float_math.hpp"
#include "kvpolicy/sparse/kv_element.hpp"

namespace kvpolicy {

/// How two states (o_a, lse_a) and (o_b, lse_b) of one row combine.
struct lse_pair_merge {
    enum class kind : std::uint8_t { keep_a, take_b, blend };
    kind how = kind::keep_a;
    float wa = 1.0f;   ///< exp(lse_a - m) (blend)
    float wb = 0.0f;   ///< exp(lse_b - m) (blend)
    float sum = 1.0f;  ///< wa + wb (blend)
    float lse = 0.0f;  ///< the merged lse
};

/// The weights of merging lse_b into lse_a (the whole row's share, the same
/// for every channel: each thread of the row computes it).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline lse_pair_merge lse_merge_pair(float lse_a, float lse_b) noexcept {
    constexpr float empty = -__builtin_huge_valf();
    if (lse_b == empty) return {.how = lse_pair_merge::kind::keep_a, .lse = lse_a};
    if (lse_a == empty) return {.how = lse_pair_merge::kind::take_b, .wa = 0.0f, .wb = 1.0f, .lse = lse_b};
    const float m = lse_a > lse_b ? lse_a : lse_b;
    const float wa = detail::exp_f(lse_a - m), wb = detail::exp_f(lse_b - m);
    const float sum = wa + wb;
    return {.how = lse_pair_merge::kind::blend, .wa = wa, .wb = wb, .sum = sum, .lse = m + detail::log_f(sum)};
}

/// One channel of the pairwise merge: o_a widened, combined in fp32 with
/// o_b, narrowed to T. keep_a returns o_a as it is, take_b reads no o_a.
template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline T lse_merge_channel(const lse_pair_merge& w, T o_a, T o_b) noexcept {
    if (w.how == lse_pair_merge::kind::keep_a) return o_a;
    if (w.how == lse_pair_merge::kind::take_b) return o_b;
    return from_float<T>((w.wa * to_float(o_a) + w.wb * to_float(o_b)) / w.sum);
}

/// One row's share of merging `num_parts` states at once: the largest lse
/// (m, -inf if every part is empty) and sum of exp(lse_p - m).
struct lse_parts_merge {
    float m = -__builtin_huge_valf();
    float sum = 0.0f;
    [[nodiscard]] KVPOLICY_HOST_DEVICE bool empty() const noexcept { return m == -__builtin_huge_valf(); }
    [[nodiscard]] KVPOLICY_HOST_DEVICE float lse() const noexcept { return empty() ? m : m + detail::log_f(sum); }
};

/// Row r's weights over parts lse_parts[p * rows + r], p < num_parts.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline lse_parts_merge lse_merge_parts_row(const float* lse_parts,
                                                                              std::uint32_t num_parts,
                                                                              std::uint32_t rows,
                                                                              std::uint32_t r) noexcept {
    lse_parts_merge w;
    for (std::uint32_t p = 0; p < num_parts; ++p) {
        const float l = lse_parts[std::size_t{p} * rows + r];
        w.m = l > w.m ? l : w.m;
    }
    if (w.empty()) return w;
    for (std::uint32_t p = 0; p < num_parts; ++p) w.sum += detail::exp_f(lse_parts[std::size_t{p} * rows + r] - w.m);
    return w;
}

/// Channel i of row r merged over the parts (o_parts [num_parts][rows]
/// [head_dim] as T), in fp32, narrowed to T; 0 if every part is empty.
/// Empty parts' o is not read.
template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline T lse_merge_parts_channel(const lse_parts_merge& w, const T* o_parts,
                                                                    const float* lse_parts, std::uint32_t num_parts,
                                                                    std::uint32_t rows, std::uint32_t head_dim,
                                                                    std::uint32_t r, std::uint32_t i) noexcept {
    if (w.empty()) return from_float<T>(0.0f);
    float acc = 0.0f;
    for (std::uint32_t p = 0; p < num_parts; ++p) {
        const float l = lse_parts[std::size_t{p} * rows + r];
        if (l == -__builtin_huge_valf()) continue;
        acc += detail::exp_f(l - w.m) * to_float(o_parts[(std::size_t{p} * rows + r) * head_dim + i]);
    }
    return from_float<T>(acc / w.sum);
}

}  // namespace kvpolicy
