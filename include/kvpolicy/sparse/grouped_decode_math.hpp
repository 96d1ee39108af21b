// grouped_decode_math: one lane's arithmetic of the grouped (GQA) decode
// attention kernel, over fp32, bf16 or fp16 K and V with fp32 accumulation.
//
// Decode attention reads every K and V value once and does two FMAs per
// value and query head: it is bound by memory bandwidth, and a kernel gets
// near the bound only if (a) each KV head's bytes leave HBM once, not once
// per query head sharing it (GQA), and (b) each warp has many independent
// loads in flight. The fast kernel of kvpolicy/cuda/attention.cuh therefore
// gives one CTA a KV head, up to GMax of the query heads that share it and a
// contiguous share of the tokens; each warp walks tiles of U consecutive
// tokens, issuing the tile's K and V loads together before any arithmetic,
// and lane `lane` owns the E contiguous channels [lane E, lane E + E) of a
// row (head_dim = 32 E, so a row is one coalesced load per warp, 8 to 32
// bytes per lane). Per tile, every lane forms its share of q . k for each
// head (`grouped_lane_shares`), the warp sums the shares (a reduce-scatter,
// below, whose totals every lane then reads from shared memory), and every
// lane folds the tile
// into its online-softmax state per head (`grouped_decode_lane::fold`:
// running max m, denominator l and its channels of the weighted value sum;
// one rescale per tile, not per token). At the end the CTA's warps are
// merged per head and channel (`merge_warp_states`), and the splits by
// merge.cuh's log-sum-exp merge. FlashDecoding (Dao et al., 2023) and
// FlashInfer's decode kernel (Ye et al., MLSys'25) are the models; the math
// is FlashAttention-2's online softmax (natural-log lse).
//
// `KVPOLICY_HOST_DEVICE`: tests/sparse_kv_element.cpp runs these functions
// for every lane, warp, CTA and split of the kernel's mapping
// (tests/support/grouped_decode.hpp) and checks the result against
// reference_decode_attention over the widened K and V.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/decode_attention_math.hpp"
#include "kvpolicy/sparse/kv_element.hpp"
#include "kvpolicy/sparse/lse_merge_math.hpp"

namespace kvpolicy {

/// The grouped kernel's tile depth: tokens per warp per tile. 16-bit rows
/// are half as many bytes, so a tile holds twice as many to keep the bytes
/// in flight per warp the same.
template <kv_element T>
inline constexpr unsigned grouped_decode_tile = sizeof(T) == 4 ? 4u : 8u;

/// A token's place in a paged cache: its block's index in the block table
/// and its offset within the block. The kernel steps it forward (by one
/// token in a tile, by a warp's stride between tiles) instead of dividing
/// the token index by block_size per token: a 64-bit division is a long
/// instruction sequence on a GPU, as long as a token's arithmetic.
struct paged_cursor {
    std::uint64_t block = 0;
    std::uint32_t offset = 0;

    [[nodiscard]] KVPOLICY_HOST_DEVICE static paged_cursor at(std::uint64_t token, std::uint32_t block_size) noexcept {
        return {token / block_size, static_cast<std::uint32_t>(token % block_size)};
    }
    /// The cursor `n` tokens further on.
    [[nodiscard]] KVPOLICY_HOST_DEVICE paged_cursor advanced(std::uint32_t n, std::uint32_t block_size) const noexcept {
        std::uint64_t o = std::uint64_t{offset} + n;
        std::uint64_t b = block;
        if (o >= block_size) {
            if (o < 2ull * block_size) {  // the usual step: into the next block
                o -= block_size;
                ++b;
            } else {
                b += o / block_size;
                o %= block_size;
            }
        }
        return {b, static_cast<std::uint32_t>(o)};
    }
    friend constexpr bool operator==(const paged_cursor&, const paged_cursor&) = default;
};

/// Lane `lane`'s E channels of one K or V row (head_dim = 32 E values of T),
/// widened. On the device the E values are one or two aligned vector loads
/// (the caller guarantees `row` is aligned to E * sizeof(T) bytes, up to 16);
/// on the host they are read one by one: the same values either way.
template <unsigned E, kv_element T>
KVPOLICY_HOST_DEVICE inline void load_lane_channels(const T* row, unsigned lane, float (&out)[E]) noexcept {
    const T* at = row + std::size_t{lane} * E;
#if defined(__CUDA_ARCH__)
    constexpr std::size_t bytes = E * sizeof(T);
    static_assert(bytes % 4 == 0 && (bytes <= 16 || bytes % 16 == 0), "a lane's channels are whole words");
    constexpr std::size_t words = bytes / 4;
    std::uint32_t w[words];
    if constexpr (bytes >= 16) {
        KVPOLICY_UNROLL
        for (std::size_t i = 0; i < words / 4; ++i) {
            const uint4 v = reinterpret_cast<const uint4*>(at)[i];
            w[4 * i] = v.x;
            w[4 * i + 1] = v.y;
            w[4 * i + 2] = v.z;
            w[4 * i + 3] = v.w;
        }
    } else if constexpr (bytes == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(at);
        w[0] = v.x;
        w[1] = v.y;
    } else {
        w[0] = *reinterpret_cast<const std::uint32_t*>(at);
    }
    KVPOLICY_UNROLL
    for (unsigned e = 0; e < E; ++e) {
        if constexpr (sizeof(T) == 4) {
            out[e] = __uint_as_float(w[e]);
        } else {
            const std::uint32_t half_bits = e % 2 == 0 ? (w[e / 2] & 0xffffu) : (w[e / 2] >> 16);
            out[e] = to_float(T{static_cast<std::uint16_t>(half_bits)});
        }
    }
#else
    for (unsigned e = 0; e < E; ++e) out[e] = to_float(at[e]);
#endif
}

/// Lane shares of q . k for each of the GMax heads: share[h] = sum over the
/// lane's channels e of q[h][e] k[e]. Heads the CTA does not own carry a zero
/// query, so their shares are 0 and never written out.
template <unsigned E, unsigned GMax>
KVPOLICY_HOST_DEVICE inline void grouped_lane_shares(const float (&q)[GMax][E], const float (&k)[E],
                                                     float (&share)[GMax]) noexcept {
    KVPOLICY_UNROLL
    for (unsigned h = 0; h < GMax; ++h) {
        float s = 0.0f;
        KVPOLICY_UNROLL
        for (unsigned e = 0; e < E; ++e) s += q[h][e] * k[e];
        share[h] = s;
    }
}

/// The tile depth actually used for E channels per lane and GMax heads:
/// U x GMax logits are reduced across the warp at once, and the
/// reduce-scatter below takes at most one value per lane (32); the tile's K
/// and V take 2 U E registers per lane, kept at most 64.
template <kv_element T, unsigned E, unsigned GMax>
inline constexpr unsigned grouped_decode_depth = [] {
    unsigned u = grouped_decode_tile<T>;
    while (u * GMax > warp_lanes || u * E > 32) u /= 2;
    return u;
}();

/// How many query heads one CTA takes (GMax) for head_dim = 32 E and a GQA
/// group of `group_size`: up to 8 where registers allow (q and the
/// accumulators take 2 GMax E registers per lane), and 4 where the group has
/// no more (the unused heads cost arithmetic, not bytes).
[[nodiscard]] constexpr unsigned grouped_decode_heads(unsigned e, unsigned group_size) noexcept {
    return e <= 4 && group_size > 4 ? 8u : 4u;
}

/// The warp sums N = U x GMax lane shares (N a power of two, <= 32) by a
/// reduce-scatter: at the step with shuffle offset `off`, a lane whose `off`
/// bit is set keeps the upper half of its `n` live values and sends the
/// lower half to its partner, which does the opposite; each keeps kept +
/// received. N/2 + N/4 + ... shuffles instead of 5 N for N butterflies;
/// after log2 N steps every lane holds one total (the rest of the offsets
/// then sum it as a plain butterfly), that of value
/// `reduce_scatter_index(lane, N)`, and the warp shares the totals through
/// shared memory. The send and keep halves are these functions on the
/// device and in the CPU test that simulates all 32 lanes.
/// `lo` and `hi` are a lane's values i and i + n / 2; the selects are on
/// values, not addresses, so the array stays in registers.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float reduce_scatter_send(float lo, float hi, bool upper) noexcept {
    return upper ? lo : hi;
}
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float reduce_scatter_keep(float lo, float hi, bool upper) noexcept {
    return upper ? hi : lo;
}
/// Which of the N values lane `lane` holds the warp's total of at the end.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr unsigned reduce_scatter_index(unsigned lane, unsigned n) noexcept {
    unsigned shift = 0;
    while ((warp_lanes >> shift) > n) ++shift;
    return lane >> shift;
}

/// One lane's online-softmax state for GMax query heads over its E channels.
template <unsigned E, unsigned GMax>
struct grouped_decode_lane {
    float m[GMax];       ///< running max of the scaled logits (-inf: no token yet)
    float l[GMax];       ///< sum of exp(s - m)
    float acc[GMax][E];  ///< sum of exp(s - m) v over the lane's channels

    KVPOLICY_HOST_DEVICE grouped_decode_lane() noexcept {
        KVPOLICY_UNROLL
        for (unsigned h = 0; h < GMax; ++h) {
            m[h] = -__builtin_huge_valf();
            l[h] = 0.0f;
            KVPOLICY_UNROLL
            for (unsigned e = 0; e < E; ++e) acc[h][e] = 0.0f;
        }
    }

    /// Folds in a tile of `valid` tokens (valid <= U; the rest of the tile is
    /// past the CTA's share and ignored): s[u][h] is token u's scaled logit
    /// for head h, v[u] its value channels. One rescale per head per tile.
    template <unsigned U>
    KVPOLICY_HOST_DEVICE void fold(const float (&s)[U][GMax], const float (&v)[U][E], unsigned valid) noexcept {
        KVPOLICY_UNROLL
        for (unsigned h = 0; h < GMax; ++h) {
            float m_new = m[h];
            KVPOLICY_UNROLL
            for (unsigned u = 0; u < U; ++u)
                if (u < valid && s[u][h] > m_new) m_new = s[u][h];
            // No token with a finite logit yet: nothing to add (and exp(-inf -
            // -inf) would be NaN).
            if (m_new == -__builtin_huge_valf()) continue;
            const float correction = detail::exp_f(m[h] - m_new);  // 0 while m = -inf
            float sum = l[h] * correction;
            float part[E];
            KVPOLICY_UNROLL
            for (unsigned e = 0; e < E; ++e) part[e] = acc[h][e] * correction;
            KVPOLICY_UNROLL
            for (unsigned u = 0; u < U; ++u) {
                if (u >= valid) continue;
                const float p = detail::exp_f(s[u][h] - m_new);
                sum += p;
                KVPOLICY_UNROLL
                for (unsigned e = 0; e < E; ++e) part[e] += p * v[u][e];
            }
            l[h] = sum;
            KVPOLICY_UNROLL
            for (unsigned e = 0; e < E; ++e) acc[h][e] = part[e];
            m[h] = m_new;
        }
    }
};

/// One (head, channel) of the merge of `warps` warp states: warp w's m and
/// l of the head at m[w * ml_stride], l[w * ml_stride], its acc of the
/// channel at acc[w * acc_stride]. Writes the channel's output (0 if no warp
/// saw a token) and returns the head's lse (-inf if none did).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float merge_warp_states(const float* m, const float* l, std::size_t ml_stride,
                                                                  const float* acc, std::size_t acc_stride,
                                                                  unsigned warps, float& out) noexcept {
    constexpr float neg_inf = -__builtin_huge_valf();
    float big = neg_inf;
    for (unsigned w = 0; w < warps; ++w) big = m[w * ml_stride] > big ? m[w * ml_stride] : big;
    if (big == neg_inf) {
        out = 0.0f;
        return neg_inf;
    }
    float denom = 0.0f, sum = 0.0f;
    for (unsigned w = 0; w < warps; ++w) {
        if (m[w * ml_stride] == neg_inf) continue;
        const float scale = detail::exp_f(m[w * ml_stride] - big);
        denom += l[w * ml_stride] * scale;
        sum += acc[w * acc_stride] * scale;
    }
    out = sum / denom;
    return big + detail::log_f(denom);
}

}  // namespace kvpolicy
