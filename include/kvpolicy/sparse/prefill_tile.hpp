// prefill_tile: the per-thread math of prefill attention over a set of keys,
// shared by the host and the CUDA kernels (kvpolicy/cuda/minference.cuh).
//
// Prefill attention for query token i of head h is a softmax over the keys
// it may read: every j <= i (dense causal), or MInference's vertical-slash
// set (the kept columns j <= i, plus i - o for each kept diagonal offset
// o <= i). A *key source* enumerates one query's keys as candidates
// 0 .. count()-1; a candidate may be void (a vertical column that a kept
// diagonal covers too, so that each key counts once). Attention walks the
// candidates in tiles with FlashAttention's online softmax (Dao,
// "FlashAttention-2", 2023): a running max m, denominator l and accumulator,
// rescaled by exp(m_old - m_new) as each tile arrives; the output is acc / l
// and lse = m + log l (natural log, the convention of lse_merge.hpp).
//
// Every function here is KVPOLICY_HOST_DEVICE and takes raw pointers: the
// device kernels call them per lane (a lane owns the channels c0, c0 + step,
// ...), and the CPU tests call them per thread index against the double
// reference (sparse/minference.hpp, tests/support/naive_prefill_attention.hpp).
// Arithmetic is float, summed in a fixed order, so host and device agree to
// float rounding (the device may contract a multiply-add into an FMA).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy {

/// Running state of an online softmax: the largest logit seen (-inf before
/// any) and the denominator relative to it.
struct softmax_state {
    float m = -INFINITY;
    float l = 0.0f;
};

/// scale * (q . k) over `head_dim` channels, summed in channel order.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float prefill_logit(const float* q, const float* k, std::uint32_t head_dim,
                                                              float scale) noexcept {
    float dot = 0.0f;
    for (std::uint32_t c = 0; c < head_dim; ++c) dot += q[c] * k[c];
    return dot * scale;
}

/// The state of two disjoint sets of logits merged (either may be empty).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline softmax_state combine_softmax_states(softmax_state a,
                                                                               softmax_state b) noexcept {
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    const float m = a.m > b.m ? a.m : b.m;
    return {m, a.l * ::expf(a.m - m) + b.l * ::expf(b.m - m)};
}

/// log of the softmax denominator: m + log l; -inf for no logits.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float softmax_lse(softmax_state s) noexcept {
    return s.m == -INFINITY ? -INFINITY : s.m + ::logf(s.l);
}

/// One tile of online softmax: folds `count` candidates into (state, acc).
/// scores[t] is candidate t's scaled logit, -inf for a void candidate;
/// keys[t] its token. acc holds the channels c0 + j * c_step, j < c_count,
/// of the unnormalised output; v_head points at token 0's values of the KV
/// head read, token j at v_head + j * v_row. Every lane of a warp calls this
/// with the same scores (so the same state) and its own channels.
KVPOLICY_HOST_DEVICE inline void online_softmax_tile(softmax_state& state, float* acc, const float* scores,
                                                     const std::uint32_t* keys, std::uint32_t count,
                                                     const float* v_head, std::size_t v_row, std::uint32_t c0,
                                                     std::uint32_t c_step, std::uint32_t c_count) noexcept {
    float tile_max = -INFINITY;
    for (std::uint32_t t = 0; t < count; ++t) tile_max = scores[t] > tile_max ? scores[t] : tile_max;
    if (tile_max == -INFINITY) return;  // only void candidates: nothing changes
    const float m = state.m > tile_max ? state.m : tile_max;
    const float correction = ::expf(state.m - m);  // 0 for the first tile (m_old = -inf)
    for (std::uint32_t j = 0; j < c_count; ++j) acc[j] *= correction;
    float sum = 0.0f;
    for (std::uint32_t t = 0; t < count; ++t) {
        if (scores[t] == -INFINITY) continue;
        const float p = ::expf(scores[t] - m);
        sum += p;
        const float* v = v_head + std::size_t{keys[t]} * v_row + c0;
        for (std::uint32_t j = 0; j < c_count; ++j) acc[j] += p * v[std::size_t{j} * c_step];
    }
    state.l = state.l * correction + sum;
    state.m = m;
}

/// Ends an online softmax: acc[j] /= l (0 with no keys); returns the lse.
KVPOLICY_HOST_DEVICE inline float finish_online_softmax(softmax_state state, float* acc,
                                                        std::uint32_t c_count) noexcept {
    for (std::uint32_t j = 0; j < c_count; ++j) acc[j] = state.l > 0.0f ? acc[j] / state.l : 0.0f;
    return softmax_lse(state);
}

/// Index of the first element of sorted[0, n) greater than x.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline std::uint32_t upper_bound_index(const std::uint32_t* sorted, std::uint32_t n,
                                                                          std::uint32_t x) noexcept {
    std::uint32_t lo = 0, hi = n;
    while (lo < hi) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/// Keys of query i in dense causal attention: candidates 0 .. i, key = c.
struct dense_causal_keys {
    std::uint32_t query = 0;

    [[nodiscard]] KVPOLICY_HOST_DEVICE std::uint32_t count() const noexcept { return query + 1; }
    /// Writes candidate c's token to `key`; returns false for a void candidate.
    KVPOLICY_HOST_DEVICE bool key(std::uint32_t c, std::uint32_t& key) const noexcept {
        key = c;
        return true;
    }
};

/// Keys of query i under a vertical-slash index of one head: the kept
/// columns v <= i (candidates 0 .. nv-1, void when the diagonal i - v is kept
/// too), then i - o for the kept offsets o <= i (candidates nv ..). Both
/// lists ascending, without repeats.
struct vertical_slash_keys {
    const std::uint32_t* verticals = nullptr;  ///< [vertical_count] kept columns, ascending
    const std::uint32_t* slashes = nullptr;    ///< [slash_count] kept diagonal offsets i - j, ascending
    std::uint32_t slash_count = 0;
    std::uint32_t query = 0;
    std::uint32_t nv = 0;  ///< kept columns <= query
    std::uint32_t ns = 0;  ///< kept offsets <= query

    [[nodiscard]] KVPOLICY_HOST_DEVICE static vertical_slash_keys make(const std::uint32_t* verticals,
                                                                       std::uint32_t vertical_count,
                                                                       const std::uint32_t* slashes,
                                                                       std::uint32_t slash_count,
                                                                       std::uint32_t query) noexcept {
        return {verticals,
                slashes,
                slash_count,
                query,
                upper_bound_index(verticals, vertical_count, query),
                upper_bound_index(slashes, slash_count, query)};
    }
    [[nodiscard]] KVPOLICY_HOST_DEVICE std::uint32_t count() const noexcept { return nv + ns; }
    /// A candidate beyond the query (only possible with unsorted lists, e.g.
    /// an index left unfinished on the device) is void, so no read leaves
    /// the prompt whatever the lists hold.
    KVPOLICY_HOST_DEVICE bool key(std::uint32_t c, std::uint32_t& key) const noexcept {
        if (c < nv) {
            key = verticals[c];
            if (key > query) return false;
            const std::uint32_t offset = query - key;
            const std::uint32_t at = upper_bound_index(slashes, ns, offset);
            return at == 0 || slashes[at - 1] != offset;  // a kept diagonal reads it already
        }
        const std::uint32_t offset = slashes[c - nv];
        key = offset <= query ? query - offset : 0;
        return offset <= query;
    }
};

/// Where one head's prefill attention reads and writes, as raw pointers
/// into prefill_qkv_view / prefill_output_view arrays.
struct prefill_head_args {
    const float* q = nullptr;  ///< [num_tokens][num_q_heads][head_dim]
    const float* k = nullptr;  ///< [num_tokens][num_kv_heads][head_dim]
    const float* v = nullptr;  ///< [num_tokens][num_kv_heads][head_dim]
    float* o = nullptr;        ///< [num_tokens][num_q_heads][head_dim]
    float* lse = nullptr;      ///< [num_tokens][num_q_heads]
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    float scale = 1.0f;
};

/// Candidates per tile: a warp's width on the device.
inline constexpr std::uint32_t prefill_tile_keys = 32;

/// Prefill attention of query `i`, head `h`, over `keys`, one tile of
/// prefill_tile_keys candidates at a time, all channels: the device kernel's
/// work for one (query, head) done by one thread. `acc` has head_dim floats
/// of scratch. Writes o and lse of row (i, h).
template <class Keys>
KVPOLICY_HOST_DEVICE inline void prefill_attention_row(const prefill_head_args& a, const Keys& keys, std::uint32_t i,
                                                       std::uint32_t h, float* acc) noexcept {
    const std::uint32_t d = a.head_dim;
    const std::uint32_t kvh = h / (a.num_q_heads / a.num_kv_heads);
    const std::size_t kv_row = std::size_t{a.num_kv_heads} * d;
    const float* q = a.q + (std::size_t{i} * a.num_q_heads + h) * d;
    for (std::uint32_t j = 0; j < d; ++j) acc[j] = 0.0f;
    softmax_state state{};
    float scores[prefill_tile_keys];
    std::uint32_t tile[prefill_tile_keys];
    const std::uint32_t n = keys.count();
    for (std::uint32_t begin = 0; begin < n; begin += prefill_tile_keys) {
        const std::uint32_t count = n - begin < prefill_tile_keys ? n - begin : prefill_tile_keys;
        for (std::uint32_t t = 0; t < count; ++t) {
            std::uint32_t key = 0;
            const bool live = keys.key(begin + t, key);
            tile[t] = key;
            scores[t] =
                live ? prefill_logit(q, a.k + std::size_t{key} * kv_row + std::size_t{kvh} * d, d, a.scale) : -INFINITY;
        }
        online_softmax_tile(state, acc, scores, tile, count, a.v + std::size_t{kvh} * d, kv_row, 0, 1, d);
    }
    const std::size_t row = std::size_t{i} * a.num_q_heads + h;
    a.lse[row] = finish_online_softmax(state, acc, d);
    for (std::uint32_t j = 0; j < d; ++j) a.o[row * d + j] = acc[j];
}

}  // namespace kvpolicy
