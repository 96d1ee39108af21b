// quest_math: one thread's share of Quest's metadata and scoring, over fp32,
// bf16 or fp16 keys, with fp32 scores; the code the CUDA kernels run
// (kvpolicy/cuda/quest.cuh) and the host reference calls, so the CPU tests
// check the device arithmetic thread by thread (STYLE.md 13).
//
// Metadata in the stored type. Quest's metadata is, per block, KV head and
// channel, the min and max key over the block's tokens (sparse/quest.hpp
// explains the bound). Here it is kept in the keys' own type T: the min or
// max of T values is one of those values, so T metadata is exact (the same
// numbers an fp32 copy would hold, widened), and it halves the bytes the
// scoring pass reads for 16-bit keys, the pass that is pure memory traffic
// (32K tokens, 8 KV heads x 128: 8.4 MB instead of 16.8 MB). It is what
// Quest's own kernels do (metadata in the KV dtype, fp16). The query and the
// score are fp32: each term max(q_c * min_c, q_c * max_c) is formed from the
// widened min/max and summed in fp32.
//
// Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML'24. Departures are sparse/quest.hpp's. Tested by
// tests/sparse_kv_element.cpp against a naive model in double over the
// dequantized keys.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/kv_element.hpp"

namespace kvpolicy {

/// Whether v is NaN or infinite: v - v is 0 for every finite v and NaN for
/// the rest. Plain arithmetic, so it is the same test in a kernel and on
/// the host (std::isfinite is neither constexpr nor callable in a kernel).
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool is_nonfinite(float v) noexcept { return !(v - v == 0.0f); }

/// One thread's share of the device Quest's query check: whether any of
/// query[first], query[first + stride], ... below n is NaN or infinite.
/// Thread t of T passes (t, T); the OR over every t is "the query holds a
/// non-finite value" (tests/sparse_selectors.cpp checks that on the CPU for
/// every thread index). Precondition: stride >= 1.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool quest_query_thread_nonfinite(const float* query, std::size_t n,
                                                                               std::size_t first,
                                                                               std::size_t stride) noexcept {
    bool bad = false;
    for (std::size_t i = first; i < n; i += stride) bad = bad || is_nonfinite(query[i]);
    return bad;
}

/// One (KV head, channel) element's metadata over a block's valid tokens.
template <kv_element T>
struct quest_channel_bounds {
    T min{};                ///< the smallest key, as stored
    T max{};                ///< the largest key, as stored
    bool nonfinite = true;  ///< a key is NaN or infinite, or there are no tokens: no bound
};

/// Min and max of keys[t * row + e] over t < valid (element e of each
/// token's [num_kv_heads][head_dim] row), compared widened and kept as
/// stored. On equal values the earlier token's is kept (so -0 and +0 keep
/// their order, as std::min / std::max do on the host). The metadata
/// kernel runs this for its elements e = threadIdx.x, + blockDim.x, ...
template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline quest_channel_bounds<T> quest_channel_minmax(const T* keys, std::size_t row,
                                                                                       std::uint32_t valid,
                                                                                       std::size_t e) noexcept {
    quest_channel_bounds<T> b;
    if (valid == 0) return b;
    b.min = b.max = keys[e];
    float mn = to_float(b.min), mx = mn;
    bool bad = is_nonfinite(mn);
    for (std::uint32_t t = 1; t < valid; ++t) {
        const T k = keys[t * row + e];
        const float v = to_float(k);
        bad = bad || is_nonfinite(v);
        if (v < mn) {
            mn = v;
            b.min = k;
        }
        if (mx < v) {
            mx = v;
            b.max = k;
        }
    }
    b.nonfinite = bad;
    return b;
}

/// Quest's term for one channel: max(q * min, q * max), min and max widened;
/// an upper bound of q * k for every key k in [min, max] (rounding is
/// monotone, so it bounds the rounded product too).
template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float quest_channel_term(float q, T key_min, T key_max) noexcept {
    const float a = q * to_float(key_min), b = q * to_float(key_max);
    return a < b ? b : a;  // std::max's choice on ties
}

/// One thread's partial of a block's score: the fp32 sum, in order, of
/// quest_channel_term over e = first, first + stride, ... below
/// num_q_heads x head_dim, where e = h x head_dim + c reads query[e] and the
/// metadata of KV head h / group, channel c. The scoring kernel's thread t
/// of T passes (t, T) and the block sums the partials (cub::BlockReduce);
/// key_min, key_max: the block's [num_kv_heads][head_dim].
/// Preconditions: stride >= 1, group >= 1.
template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float quest_score_thread_partial(const float* query, const T* key_min,
                                                                           const T* key_max, std::uint32_t num_q_heads,
                                                                           std::uint32_t group, std::uint32_t head_dim,
                                                                           std::uint32_t first,
                                                                           std::uint32_t stride) noexcept {
    float partial = 0.0f;
    const std::uint32_t n = num_q_heads * head_dim;
    if (first >= n) return partial;
    // Term e is query head h = e / head_dim, channel c = e % head_dim, KV
    // head h / group; all three are stepped along with e rather than
    // divided out per term (three integer divisions cost more than the
    // term's arithmetic on a GPU). The terms and their order are the same.
    std::uint32_t c = first % head_dim, h = first / head_dim;
    std::uint32_t kv = h / group, in_group = h % group;
    for (std::uint32_t e = first;;) {
        const std::size_t m = std::size_t{kv} * head_dim + c;
        partial += quest_channel_term(query[e], key_min[m], key_max[m]);
        if (n - e <= stride) break;
        e += stride;
        c += stride;
        while (c >= head_dim) {
            c -= head_dim;
            if (++in_group == group) {
                in_group = 0;
                ++kv;
            }
        }
    }
    return partial;
}

/// The host reference's score for one block: per query head h, the sum in
/// channel order of its terms against KV head h / group, then the heads'
/// sums in head order (the order sparse/quest.hpp documents: a float q . k
/// summed the same way never exceeds it).
template <kv_element T>
[[nodiscard]] inline float quest_block_score(const float* query, const T* key_min, const T* key_max,
                                             std::uint32_t num_q_heads, std::uint32_t num_kv_heads,
                                             std::uint32_t head_dim) noexcept {
    const std::uint32_t group = num_q_heads / num_kv_heads;
    float s = 0.0f;
    for (std::uint32_t h = 0; h < num_q_heads; ++h) {
        const std::size_t kv = std::size_t{h / group} * head_dim;
        float head = 0.0f;
        for (std::uint32_t c = 0; c < head_dim; ++c)
            head += quest_channel_term(query[std::size_t{h} * head_dim + c], key_min[kv + c], key_max[kv + c]);
        s += head;
    }
    return s;
}

/// The host reference's metadata for one block: key_min / key_max[e] for
/// every e < row from `valid` tokens of keys ([valid][row]); returns false
/// (the block gets no bound) if a key is NaN or infinite or valid is 0.
template <kv_element T>
inline bool quest_block_metadata(const T* keys, std::size_t row, std::uint32_t valid, T* key_min, T* key_max) noexcept {
    bool bad = valid == 0;
    for (std::size_t e = 0; e < row; ++e) {
        const quest_channel_bounds<T> b = quest_channel_minmax(keys, row, valid, e);
        key_min[e] = b.min;
        key_max[e] = b.max;
        bad = bad || b.nonfinite;
    }
    return !bad;
}

}  // namespace kvpolicy
