// One warp of the CUDA decode kernel (kvpolicy/cuda/attention.cuh),
// simulated lane by lane on the host over decode_attention_math.hpp's
// per-lane code: every token of the sequence goes to this warp; the lanes'
// shares of q . k are summed (the kernel's shuffle does the same sum in
// another order). K and V are read as stored (fp32, bf16, fp16): block b of
// the table starts at b * block_stride values of k and of v, laid out
// [block_size][num_kv_heads][head_dim]. Used by tests/sparse_kv_element.cpp
// (decode attention, and the ring pipeline over 16-bit K/V).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/sparse/decode_attention_math.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

namespace kvpolicy::testing {

template <class T>
void warp_decode(const float* q, const T* k, const T* v, const std::vector<block_id>& table, std::uint64_t tokens,
                 const decode_attention_shape& s, std::size_t block_stride, std::vector<float>& o,
                 std::vector<float>& lse) {
    constexpr unsigned max_per_lane = 8;
    const std::size_t d = s.head_dim, row = std::size_t{s.num_kv_heads} * d;
    const unsigned per_lane = static_cast<unsigned>(d / warp_lanes);
    for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
        const std::size_t kvh = h / (s.num_q_heads / s.num_kv_heads);
        online_softmax_lane<max_per_lane> lane_state[warp_lanes];
        float q_lane[warp_lanes][max_per_lane];
        for (unsigned lane = 0; lane < warp_lanes; ++lane)
            for (unsigned j = 0; j < per_lane; ++j) q_lane[lane][j] = q[h * d + lane + warp_lanes * j];
        for (std::uint64_t t = 0; t < tokens; ++t) {
            const std::size_t at = table[t / s.block_size].index() * block_stride + (t % s.block_size) * row + kvh * d;
            float dot = 0.0f;
            for (unsigned lane = 0; lane < warp_lanes; ++lane)
                dot += lane_partial_dot(q_lane[lane], k + at, lane, per_lane);
            for (unsigned lane = 0; lane < warp_lanes; ++lane)
                lane_state[lane].step(dot * s.scale, v + at, lane, per_lane);
        }
        for (unsigned lane = 0; lane < warp_lanes; ++lane)
            for (unsigned j = 0; j < per_lane; ++j) o[h * d + lane + warp_lanes * j] = lane_state[lane].output(j);
        lse[h] = tokens == 0 ? -std::numeric_limits<float>::infinity() : lane_state[0].m + std::log(lane_state[0].l);
    }
}

}  // namespace kvpolicy::testing
