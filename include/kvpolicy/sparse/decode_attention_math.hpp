// decode_attention_math: one lane's arithmetic of warp-per-token decode
// attention, over fp32, bf16 or fp16 K and V with fp32 accumulation.
//
// The CUDA decode kernel (kvpolicy/cuda/attention.cuh) gives each warp a
// stream of tokens and each of its 32 lanes the channels lane, lane + 32, ...
// of head_dim (head_dim a multiple of 32, at most 32 x max_per_lane). Per
// token, a lane forms its share of q . k (`lane_partial_dot`), the warp sums
// the shares, and every lane folds the token into its online softmax
// (`online_softmax_lane::step`: running max m, denominator l, and its
// channels of the weighted value sum), Milakov & Gimelshein's online
// softmax as FlashAttention-2 uses it (Dao, 2023). K and V are read as
// stored (kv_element.hpp) and widened to float, so the 16-bit KV path and
// the fp32 path are the same code. `KVPOLICY_HOST_DEVICE`: the CPU tests
// (tests/sparse_kv_element.cpp) run it for every lane of a warp and check
// the result against reference_decode_attention over the widened K and V.
#pragma once

#include <cmath>
#include <cstddef>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/float_math.hpp"
#include "kvpolicy/sparse/kv_element.hpp"

namespace kvpolicy {

inline constexpr unsigned warp_lanes = 32;

/// Lane `lane`'s share of q . k for one token and KV head: the sum over
/// j < per_lane of q_lane[j] * k[lane + 32 j], k widened to float.
/// q_lane holds the lane's query channels (q[lane + 32 j]). The loops run to
/// MaxPerLane, unrolled, with a guard, so the arrays stay in registers.
template <unsigned MaxPerLane, kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float lane_partial_dot(const float (&q_lane)[MaxPerLane], const T* k,
                                                                 unsigned lane, unsigned per_lane) noexcept {
    float dot = 0.0f;
    KVPOLICY_UNROLL
    for (unsigned j = 0; j < MaxPerLane; ++j)
        if (j < per_lane) dot += q_lane[j] * to_float(k[lane + warp_lanes * j]);
    return dot;
}

/// One lane's online-softmax state over the tokens it has folded in.
template <unsigned MaxPerLane>
struct online_softmax_lane {
    float m = -__builtin_huge_valf();  ///< running max of the scaled logits
    float l = 0.0f;                    ///< sum of exp(s - m)
    float acc[MaxPerLane] = {};        ///< sum of exp(s - m) v[lane + 32 j]

    /// Folds in a token with scaled logit s and values v (the token's row of
    /// this KV head, [head_dim]).
    template <kv_element T>
    KVPOLICY_HOST_DEVICE void step(float s, const T* v, unsigned lane, unsigned per_lane) noexcept {
        const float m_new = s > m ? s : m;
        const float correction = detail::exp_f(m - m_new);  // 0 on the first token (m = -inf)
        const float p = detail::exp_f(s - m_new);
        l = l * correction + p;
        KVPOLICY_UNROLL
        for (unsigned j = 0; j < MaxPerLane; ++j)
            if (j < per_lane) acc[j] = acc[j] * correction + p * to_float(v[lane + warp_lanes * j]);
        m = m_new;
    }

    /// This lane's output channels j (o[lane + 32 j] = acc[j] / l); 0 with no tokens.
    [[nodiscard]] KVPOLICY_HOST_DEVICE float output(unsigned j) const noexcept { return l > 0.0f ? acc[j] / l : 0.0f; }
};

}  // namespace kvpolicy
