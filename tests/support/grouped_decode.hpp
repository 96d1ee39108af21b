// The grouped decode kernel of kvpolicy/cuda/attention.cuh simulated on the
// host, CTA by CTA, warp by warp and lane by lane, over
// sparse/grouped_decode_math.hpp's per-lane code and the kernel's mapping:
// a CTA per (KV head, group of up to GMax query heads, split), warps taking
// every fourth tile of U tokens, the warp's reduce-scatter of the logits
// shuffle step by shuffle step (each lane's partner read from before the
// step, as __shfl_xor_sync does), the warps merged per head and channel,
// and the splits by lse_merge_math.hpp. K and V are read as stored (fp32,
// bf16, fp16): block b of the table starts at b * block_stride values,
// laid out [block_size][num_kv_heads][head_dim]. Used by
// tests/sparse_kv_element.cpp against reference_decode_attention.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/sparse/grouped_decode_math.hpp>
#include <kvpolicy/sparse/lse_merge_math.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

namespace kvpolicy::testing {

inline constexpr unsigned grouped_warps = 4;  // cuda/attention.cuh's grouped_warps

/// The warp's reduce-scatter of vals[lane][0..N) over the 32 lanes, as the
/// kernel runs it; returns each lane's vals[0] at the end.
template <unsigned N>
std::vector<float> simulate_reduce_scatter(std::vector<std::array<float, N>> vals) {
    unsigned off = 16;
    for (unsigned half = N / 2; half >= 1 && off >= 1; half /= 2, off /= 2) {
        const auto before = vals;
        for (unsigned lane = 0; lane < warp_lanes; ++lane) {
            const bool upper = (lane & off) != 0;
            const unsigned partner = lane ^ off;
            const bool partner_upper = (partner & off) != 0;
            for (unsigned i = 0; i < half; ++i)
                vals[lane][i] = reduce_scatter_keep(before[lane][i], before[lane][i + half], upper) +
                                reduce_scatter_send(before[partner][i], before[partner][i + half], partner_upper);
        }
    }
    for (; off > 0; off /= 2) {
        const auto before = vals;
        for (unsigned lane = 0; lane < warp_lanes; ++lane) vals[lane][0] = before[lane][0] + before[lane ^ off][0];
    }
    std::vector<float> out(warp_lanes);
    for (unsigned lane = 0; lane < warp_lanes; ++lane) out[lane] = vals[lane][0];
    return out;
}

template <class T, unsigned E, unsigned GMax>
void grouped_decode(const float* q, const T* k, const T* v, const std::vector<block_id>& table, std::uint64_t tokens,
                    const decode_attention_shape& s, std::size_t block_stride, std::uint32_t splits,
                    std::vector<float>& o, std::vector<float>& lse) {
    constexpr unsigned U = grouped_decode_depth<T, E, GMax>, N = U * GMax, D = 32 * E;
    const std::uint32_t group_size = s.num_q_heads / s.num_kv_heads;
    const std::uint32_t groups = (group_size + GMax - 1) / GMax;
    const std::size_t row = std::size_t{s.num_kv_heads} * D;
    const std::uint64_t chunk = (tokens + splits - 1) / splits;
    std::vector<float> o_parts(std::size_t{splits} * s.num_q_heads * D), lse_parts(std::size_t{splits} * s.num_q_heads);
    for (std::uint32_t kvh = 0; kvh < s.num_kv_heads; ++kvh)
        for (std::uint32_t grp = 0; grp < groups; ++grp)
            for (std::uint32_t split = 0; split < splits; ++split) {
                const std::uint32_t first = grp * GMax;
                const std::uint32_t heads = group_size - first < GMax ? group_size - first : GMax;
                const std::uint32_t h0 = kvh * group_size + first;
                const std::uint64_t begin = chunk * split;
                const std::uint64_t end = begin + chunk < tokens ? begin + chunk : tokens;
                float q_lane[warp_lanes][GMax][E];
                for (unsigned lane = 0; lane < warp_lanes; ++lane)
                    for (unsigned h = 0; h < GMax; ++h) {
                        if (h < heads) load_lane_channels<E>(q + std::size_t{h0 + h} * D, lane, q_lane[lane][h]);
                        for (unsigned e = 0; e < E; ++e)
                            q_lane[lane][h][e] = h < heads ? q_lane[lane][h][e] * s.scale : 0.0f;
                    }
                // [warp][lane] states; then merged per head and channel.
                std::vector<grouped_decode_lane<E, GMax>> state(grouped_warps * warp_lanes);
                for (unsigned warp = 0; warp < grouped_warps; ++warp) {
                    const std::uint64_t first_tile = begin + std::uint64_t{warp} * U;
                    paged_cursor tile = paged_cursor::at(first_tile, s.block_size);
                    for (std::uint64_t t0 = first_tile; t0 < end; t0 += std::uint64_t{grouped_warps} * U,
                                       tile = tile.advanced(grouped_warps * U, s.block_size)) {
                        const unsigned valid = end - t0 < U ? static_cast<unsigned>(end - t0) : U;
                        std::vector<std::array<float, N>> shares(warp_lanes);
                        std::vector<std::array<std::array<float, E>, U>> vv(warp_lanes);
                        for (unsigned lane = 0; lane < warp_lanes; ++lane) {
                            paged_cursor at_token = tile;
                            for (unsigned u = 0; u < U; ++u, at_token = at_token.advanced(1, s.block_size)) {
                                float kk[E] = {}, vl[E] = {};
                                if (u < valid) {
                                    const std::size_t at = table[at_token.block].index() * block_stride +
                                                           std::size_t{at_token.offset} * row + std::size_t{kvh} * D;
                                    load_lane_channels<E>(k + at, lane, kk);
                                    load_lane_channels<E>(v + at, lane, vl);
                                }
                                float share[GMax];
                                grouped_lane_shares(q_lane[lane], kk, share);
                                for (unsigned h = 0; h < GMax; ++h) shares[lane][u * GMax + h] = share[h];
                                for (unsigned e = 0; e < E; ++e) vv[lane][u][e] = vl[e];
                            }
                        }
                        const std::vector<float> totals = simulate_reduce_scatter<N>(shares);
                        float logits[N];
                        for (unsigned lane = 0; lane < warp_lanes; ++lane)
                            logits[reduce_scatter_index(lane, N)] = totals[lane];
                        float sc[U][GMax];
                        for (unsigned i = 0; i < N; ++i) sc[i / GMax][i % GMax] = logits[i];
                        for (unsigned lane = 0; lane < warp_lanes; ++lane) {
                            float vl[U][E];
                            for (unsigned u = 0; u < U; ++u)
                                for (unsigned e = 0; e < E; ++e) vl[u][e] = vv[lane][u][e];
                            state[warp * warp_lanes + lane].template fold<U>(sc, vl, valid);
                        }
                    }
                }
                for (unsigned h = 0; h < heads; ++h)
                    for (unsigned c = 0; c < D; ++c) {
                        const unsigned lane = c / E, e = c % E;
                        float m[grouped_warps], l[grouped_warps], acc[grouped_warps];
                        for (unsigned w = 0; w < grouped_warps; ++w) {
                            const auto& st = state[w * warp_lanes + lane];
                            m[w] = st.m[h];
                            l[w] = st.l[h];
                            acc[w] = st.acc[h][e];
                        }
                        float out = 0.0f;
                        const float part_lse = merge_warp_states(m, l, 1, acc, 1, grouped_warps, out);
                        const std::size_t r = std::size_t{split} * s.num_q_heads + h0 + h;
                        o_parts[r * D + c] = out;
                        lse_parts[r] = part_lse;
                    }
            }
    for (std::uint32_t r = 0; r < s.num_q_heads; ++r) {
        const lse_parts_merge w = lse_merge_parts_row(lse_parts.data(), splits, s.num_q_heads, r);
        for (std::uint32_t c = 0; c < D; ++c)
            o[std::size_t{r} * D + c] =
                lse_merge_parts_channel<float>(w, o_parts.data(), lse_parts.data(), splits, s.num_q_heads, D, r, c);
        lse[r] = w.lse();
    }
}

}  // namespace kvpolicy::testing
