// prefill_block: the per-thread math of CTA-tiled prefill attention
// (FlashAttention-2 on CUDA cores, fp32), shared by the host and the CUDA
// kernels (kvpolicy/cuda/minference.cuh). The CTA's shape, shared memory and
// registers are sparse/prefill_block_layout.hpp's; the key tiles a block
// walks (dense causal or vertical-slash) are sparse/prefill_block_tiles.hpp's.
//
// One CTA owns a block of 64 queries [i0, i1) of one query head. For each key
// tile of up to 64 keys, staged in shared memory:
//   load keys   the tile's key ids, masks and K rows -> shared      | sync
//   scores      thread (tx, ty) = (t % 16, t / 16) computes the 4 x 4
//               micro-tile S[ty*4 + r][tx + 16 c] = scale * q . k in
//               registers, masks it, and writes each row's partial max  | sync
//   softmax     each row's max of the 16 partials; the online softmax
//               update (running max m, denominator l, rescaled
//               accumulators); P -> shared; V rows -> shared (K's buffer)  | sync
//   accumulate  O[ty*4 + r][64 j + 4 tx + e] += P V in registers           | sync
// and finally sums each row's 16 partial denominators and writes o = acc / l
// and lse = m + log l (natural log; a row without keys: o 0, lse -inf).
//
// Every phase is a KVPOLICY_HOST_DEVICE function of one thread index over raw
// pointers; prefill_block_attention strings them together with a `threads`
// callable that runs a phase for every thread and then synchronises: the
// kernel passes `phase(threadIdx.x); __syncthreads()`, the CPU tests a loop
// over all 256 thread indices (in shuffled order), so the CTA's whole
// algorithm runs on the host against the double reference.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/float_math.hpp"
#include "kvpolicy/sparse/prefill_block_layout.hpp"
#include "kvpolicy/sparse/prefill_block_tiles.hpp"

namespace kvpolicy {

namespace detail {

struct prefill_f4 {
    float v[4];
};

/// Four floats at p (16-byte aligned on the device when `vec`).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline prefill_f4 prefill_load4(const float* p, bool vec) noexcept {
#if defined(__CUDA_ARCH__)
    if (vec) {
        const float4 x = *reinterpret_cast<const float4*>(p);
        return {{x.x, x.y, x.z, x.w}};
    }
#else
    (void)vec;
#endif
    return {{p[0], p[1], p[2], p[3]}};
}

KVPOLICY_HOST_DEVICE inline void prefill_store4(float* p, const prefill_f4& x) noexcept {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<float4*>(p) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
#else
    p[0] = x.v[0];
    p[1] = x.v[1];
    p[2] = x.v[2];
    p[3] = x.v[3];
#endif
}

/// The token of slot `slot` of the tile whose rows the load phase reads
/// (prefill_no_key past the tile); a column list entry is read as is
/// (below n by the index's precondition, clamped for safety).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline std::uint32_t prefill_row_key(const prefill_block_ctx& c,
                                                                        const prefill_key_tile& tile,
                                                                        std::uint32_t slot) noexcept {
    if (slot >= tile.count) return prefill_no_key;
    if (tile.kind != prefill_tile_kind::column) return tile.first + slot;
    const std::uint32_t j = c.verticals[tile.first + slot];
    return j < c.n ? j : prefill_no_key;
}

/// Thread t's share of loading `rows` rows of [.. ][heads][head_dim] from
/// `src` into shared rows of D + 4 floats: row r is token key_of(r) (zeros
/// for prefill_no_key and for the channels at or past head_dim).
template <std::uint32_t D, class KeyOf>
KVPOLICY_HOST_DEVICE inline void prefill_load_rows(const float* src, std::size_t token_stride, std::size_t head_offset,
                                                   std::uint32_t head_dim, bool vec, float* dst, std::uint32_t rows,
                                                   std::uint32_t t, KeyOf key_of) noexcept {
    constexpr std::uint32_t per_row = D / 4;
    for (std::uint32_t chunk = t; chunk < rows * per_row; chunk += prefill_block_threads) {
        const std::uint32_t r = chunk / per_row, c = (chunk % per_row) * 4;
        const std::uint32_t key = key_of(r);
        prefill_f4 x{{0.0f, 0.0f, 0.0f, 0.0f}};
        if (key != prefill_no_key && c < head_dim) x = prefill_load4(src + key * token_stride + head_offset + c, vec);
        prefill_store4(dst + std::size_t{r} * prefill_block_layout<D>::row_stride + c, x);
    }
}

}  // namespace detail

/// Phase 0, thread t: its registers cleared; its share of the block's
/// queries loaded (zeros past n).
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_start(const prefill_block_ctx& c, const prefill_block_shared& sh,
                                                     std::uint32_t t, prefill_block_thread<D>& th) noexcept {
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
        th.m[r] = -INFINITY;
        th.l[r] = 0.0f;
        KVPOLICY_UNROLL
        for (std::uint32_t j = 0; j < prefill_block_thread<D>::cols; ++j) th.acc[r][j] = 0.0f;
    }
    const std::size_t d = c.a.head_dim;
    detail::prefill_load_rows<D>(c.a.q, std::size_t{c.a.num_q_heads} * d, std::size_t{c.h} * d, c.a.head_dim, c.vec,
                                 sh.q, prefill_block_rows, t,
                                 [&](std::uint32_t r) { return c.i0 + r < c.i1 ? c.i0 + r : prefill_no_key; });
}

/// Phase 1, thread t: threads 0 .. 63 write slot t's key (void past the
/// tile, and for a column inside the slash union) and, for a slash tile, its
/// column flag; threads 64 .. 191 a slash tile's offset flags
/// off_kept[x] = offset i0 - first - 63 + x is kept; every thread its share
/// of the K rows.
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_load_keys(const prefill_block_ctx& c, const prefill_key_tile& tile,
                                                         const prefill_block_shared& sh, std::uint32_t t) noexcept {
    if (t < prefill_block_keys) {
        std::uint32_t key = detail::prefill_row_key(c, tile, t);
        if (tile.kind == prefill_tile_kind::column && key != prefill_no_key) {
            // In the union of the slash intervals of the block iff a kept
            // offset lies in [max(0, i0 - j), i1 - 1 - j].
            if (key >= c.i1 || sorted_holds_in(c.slashes, c.slash_count, key >= c.i0 ? 0u : c.i0 - key, c.i1 - 1 - key))
                key = prefill_no_key;
        }
        sh.keys[t] = key;
        if (tile.kind == prefill_tile_kind::slash)
            sh.col_kept[t] = key != prefill_no_key && sorted_contains(c.verticals, c.vertical_count, key);
    } else if (tile.kind == prefill_tile_kind::slash && t - prefill_block_keys < prefill_block_window) {
        const std::uint32_t x = t - prefill_block_keys;
        const std::int64_t o = std::int64_t{c.i0} - tile.first - (prefill_block_keys - 1) + x;
        sh.off_kept[x] = o >= 0 && sorted_contains(c.slashes, c.slash_count, static_cast<std::uint32_t>(o));
    }
    const std::size_t d = c.a.head_dim;
    detail::prefill_load_rows<D>(c.a.k, std::size_t{c.a.num_kv_heads} * d, std::size_t{c.kvh} * d, c.a.head_dim, c.vec,
                                 sh.kv, prefill_block_keys, t,
                                 [&](std::uint32_t r) { return detail::prefill_row_key(c, tile, r); });
}

/// Whether row `row` of the block reads slot `slot` of the tile (after the
/// load phase).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline bool prefill_block_admits(const prefill_block_ctx& c,
                                                                    const prefill_key_tile& tile,
                                                                    const prefill_block_shared& sh, std::uint32_t row,
                                                                    std::uint32_t slot) noexcept {
    const std::uint32_t j = sh.keys[slot], i = c.i0 + row;
    if (j == prefill_no_key || j > i) return false;
    if (tile.kind != prefill_tile_kind::slash) return true;
    return sh.col_kept[slot] != 0 || sh.off_kept[row + (tile.first + prefill_block_keys - 1 - j)] != 0;
}

/// Phase 2, thread t: the 4 x 4 micro-tile of scale * Q K^T (rows ty*4 + r,
/// slots tx + 16 c; channels summed in order), masked to -inf, and each
/// row's maximum over the thread's slots in red[row][tx].
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_scores(const prefill_block_ctx& c, const prefill_key_tile& tile,
                                                      const prefill_block_shared& sh, std::uint32_t t,
                                                      prefill_block_thread<D>& th) noexcept {
    constexpr std::uint32_t stride = prefill_block_layout<D>::row_stride;
    const std::uint32_t tx = t % prefill_block_tx, ty = t / prefill_block_tx;
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
        KVPOLICY_UNROLL
        for (std::uint32_t k = 0; k < prefill_block_tn; ++k) th.s[r][k] = 0.0f;
    }
    const float* q = sh.q + std::size_t{ty} * prefill_block_tm * stride;
    const float* kv = sh.kv + std::size_t{tx} * stride;
    for (std::uint32_t d = 0; d < D; d += 4) {
        detail::prefill_f4 qa[prefill_block_tm], kb[prefill_block_tn];
        KVPOLICY_UNROLL
        for (std::uint32_t r = 0; r < prefill_block_tm; ++r) qa[r] = detail::prefill_load4(q + r * stride + d, true);
        KVPOLICY_UNROLL
        for (std::uint32_t k = 0; k < prefill_block_tn; ++k)
            kb[k] = detail::prefill_load4(kv + k * prefill_block_tx * stride + d, true);
        KVPOLICY_UNROLL
        for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
            KVPOLICY_UNROLL
            for (std::uint32_t k = 0; k < prefill_block_tn; ++k) {
                KVPOLICY_UNROLL
                for (std::uint32_t e = 0; e < 4; ++e) th.s[r][k] += qa[r].v[e] * kb[k].v[e];
            }
        }
    }
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
        float mx = -INFINITY;
        KVPOLICY_UNROLL
        for (std::uint32_t k = 0; k < prefill_block_tn; ++k) {
            float s = th.s[r][k] * c.a.scale;
            if (tile.masked && !prefill_block_admits(c, tile, sh, ty * prefill_block_tm + r, tx + prefill_block_tx * k))
                s = -INFINITY;
            th.s[r][k] = s;
            mx = s > mx ? s : mx;
        }
        sh.red[(ty * prefill_block_tm + r) * prefill_block_tx + tx] = mx;
    }
}

/// Phase 3a, thread t: for each of its rows, the tile's maximum (over the 16
/// partials), the online softmax update (acc and l rescaled by
/// exp(m_old - m_new)), P = exp(S - m_new) (0 where masked) into shared.
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_softmax(const prefill_block_shared& sh, std::uint32_t t,
                                                       prefill_block_thread<D>& th) noexcept {
    constexpr std::uint32_t p_stride = prefill_block_layout<D>::p_stride;
    const std::uint32_t tx = t % prefill_block_tx, ty = t / prefill_block_tx;
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
        const std::uint32_t row = ty * prefill_block_tm + r;
        float mx = th.m[r];
        KVPOLICY_UNROLL
        for (std::uint32_t u = 0; u < prefill_block_tx; ++u) {
            const float x = sh.red[row * prefill_block_tx + u];
            mx = x > mx ? x : mx;
        }
        float* p = sh.p + std::size_t{row} * p_stride + tx;
        if (mx == -INFINITY) {  // no key for this row yet
            KVPOLICY_UNROLL
            for (std::uint32_t k = 0; k < prefill_block_tn; ++k) p[k * prefill_block_tx] = 0.0f;
            continue;
        }
        const float correction = detail::exp_f(th.m[r] - mx);  // 0 while m was -inf
        th.l[r] *= correction;
        KVPOLICY_UNROLL
        for (std::uint32_t j = 0; j < prefill_block_thread<D>::cols; ++j) th.acc[r][j] *= correction;
        KVPOLICY_UNROLL
        for (std::uint32_t k = 0; k < prefill_block_tn; ++k) {
            const float e = th.s[r][k] == -INFINITY ? 0.0f : detail::exp_f(th.s[r][k] - mx);
            th.l[r] += e;
            p[k * prefill_block_tx] = e;
        }
        th.m[r] = mx;
    }
}

/// Phase 3b, thread t: its share of the tile's V rows into shared (K's
/// buffer, free after phase 2).
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_load_values(const prefill_block_ctx& c, const prefill_key_tile& tile,
                                                           const prefill_block_shared& sh, std::uint32_t t) noexcept {
    const std::size_t d = c.a.head_dim;
    detail::prefill_load_rows<D>(c.a.v, std::size_t{c.a.num_kv_heads} * d, std::size_t{c.kvh} * d, c.a.head_dim, c.vec,
                                 sh.kv, prefill_block_keys, t,
                                 [&](std::uint32_t r) { return detail::prefill_row_key(c, tile, r); });
}

/// Phase 4, thread t: acc[r][4 j + e] += sum over the tile's slots of
/// P[ty*4 + r][slot] * V[slot][64 j + 4 tx + e], slots in order (float4
/// reads of V: D is a multiple of 64).
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_accumulate(const prefill_key_tile& tile, const prefill_block_shared& sh,
                                                          std::uint32_t t, prefill_block_thread<D>& th) noexcept {
    constexpr std::uint32_t stride = prefill_block_layout<D>::row_stride;
    constexpr std::uint32_t p_stride = prefill_block_layout<D>::p_stride;
    const std::uint32_t tx = t % prefill_block_tx, ty = t / prefill_block_tx;
    const std::uint32_t slots = (tile.count + 3u) & ~3u;  // P is 0 and V zeros past count
    const float* p = sh.p + std::size_t{ty} * prefill_block_tm * p_stride;
    for (std::uint32_t k = 0; k < slots; k += 4) {
        detail::prefill_f4 pa[prefill_block_tm];
        KVPOLICY_UNROLL
        for (std::uint32_t r = 0; r < prefill_block_tm; ++r) pa[r] = detail::prefill_load4(p + r * p_stride + k, true);
        KVPOLICY_UNROLL
        for (std::uint32_t e = 0; e < 4; ++e) {
            const float* v = sh.kv + std::size_t{k + e} * stride + 4 * tx;
            KVPOLICY_UNROLL
            for (std::uint32_t j = 0; j < D / 64; ++j) {
                const detail::prefill_f4 x = detail::prefill_load4(v + 64 * j, true);
                KVPOLICY_UNROLL
                for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
                    KVPOLICY_UNROLL
                    for (std::uint32_t u = 0; u < 4; ++u) th.acc[r][4 * j + u] += pa[r].v[e] * x.v[u];
                }
            }
        }
    }
}

/// Phase 5, thread t: its rows' partial denominators into red[row][tx].
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_share_l(const prefill_block_shared& sh, std::uint32_t t,
                                                       const prefill_block_thread<D>& th) noexcept {
    const std::uint32_t tx = t % prefill_block_tx, ty = t / prefill_block_tx;
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r)
        sh.red[(ty * prefill_block_tm + r) * prefill_block_tx + tx] = th.l[r];
}

/// Phase 6, thread t: each row's denominator (the 16 partials in order);
/// o = acc / l (0 without keys) for its channels below head_dim, and
/// (thread tx 0) lse = m + log l (-inf without keys), rows below n.
template <std::uint32_t D>
KVPOLICY_HOST_DEVICE inline void prefill_block_store(const prefill_block_ctx& c, const prefill_block_shared& sh,
                                                     std::uint32_t t, const prefill_block_thread<D>& th) noexcept {
    const std::uint32_t tx = t % prefill_block_tx, ty = t / prefill_block_tx;
    const std::uint32_t d = c.a.head_dim;
    KVPOLICY_UNROLL
    for (std::uint32_t r = 0; r < prefill_block_tm; ++r) {
        const std::uint32_t row = ty * prefill_block_tm + r, i = c.i0 + row;
        if (i >= c.i1) continue;
        float l = 0.0f;
        KVPOLICY_UNROLL
        for (std::uint32_t u = 0; u < prefill_block_tx; ++u) l += sh.red[row * prefill_block_tx + u];
        const std::size_t out = std::size_t{i} * c.a.num_q_heads + c.h;
        float* o = c.a.o + out * d;
        KVPOLICY_UNROLL
        for (std::uint32_t j = 0; j < D / 64; ++j) {
            const std::uint32_t ch = 64 * j + 4 * tx;
            if (ch >= d) continue;  // d is a multiple of 32: all four or none
            KVPOLICY_UNROLL
            for (std::uint32_t u = 0; u < 4; ++u) o[ch + u] = l > 0.0f ? th.acc[r][4 * j + u] / l : 0.0f;
        }
        if (tx == 0) c.a.lse[out] = th.m[r] == -INFINITY || !(l > 0.0f) ? -INFINITY : th.m[r] + detail::log_f(l);
    }
}

/// The whole CTA: `threads(phase)` must run phase(t, state of thread t) for
/// every t < prefill_block_threads, then synchronise (the kernel: one thread,
/// then __syncthreads; the CPU tests: a loop). `tiles` is the block's tile
/// source (dense_block_tiles or vertical_slash_block_tiles), the same in
/// every thread.
template <std::uint32_t D, class Tiles, class Threads>
KVPOLICY_HOST_DEVICE inline void prefill_block_attention(const prefill_block_ctx& c, Tiles tiles,
                                                         const prefill_block_shared& sh, Threads&& threads) {
    threads([&](std::uint32_t t, prefill_block_thread<D>& th) { prefill_block_start<D>(c, sh, t, th); });
    prefill_key_tile tile{};
    while (tiles.next_tile(tile)) {
        threads([&](std::uint32_t t, prefill_block_thread<D>&) { prefill_block_load_keys<D>(c, tile, sh, t); });
        threads([&](std::uint32_t t, prefill_block_thread<D>& th) { prefill_block_scores<D>(c, tile, sh, t, th); });
        threads([&](std::uint32_t t, prefill_block_thread<D>& th) {
            prefill_block_softmax<D>(sh, t, th);
            prefill_block_load_values<D>(c, tile, sh, t);
        });
        threads([&](std::uint32_t t, prefill_block_thread<D>& th) { prefill_block_accumulate<D>(tile, sh, t, th); });
    }
    threads([&](std::uint32_t t, prefill_block_thread<D>& th) { prefill_block_share_l<D>(sh, t, th); });
    threads([&](std::uint32_t t, prefill_block_thread<D>& th) { prefill_block_store<D>(c, sh, t, th); });
}

}  // namespace kvpolicy
