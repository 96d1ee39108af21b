// prefill_block_layout: the shape of one CTA of CTA-tiled prefill attention
// (sparse/prefill_block.hpp, FlashAttention-2 on CUDA cores, fp32): its
// sizes, its shared memory, one thread's registers and the block it works on.
//
// One CTA of prefill_block_threads (256) threads owns a block of
// prefill_block_rows (64) queries [i0, i1) of one query head and walks key
// tiles of up to prefill_block_keys (64) keys (sparse/prefill_block_tiles.hpp
// says which). Thread t is (tx, ty) = (t % 16, t / 16): it computes the
// 4 x 4 score micro-tile of rows ty*4 + r and slots tx + 16 c, and keeps the
// output accumulators of its 4 rows at channels 64 j + 4 tx + e. Shared
// memory holds the block's queries, the tile's K rows (then its V rows), the
// tile's probabilities, per-thread row partials and the tile's key ids and
// masks (prefill_block_layout<D>, carved by prefill_block_carve).
//
// The head_dim template argument D (64, 128 or 256) sizes the registers and
// shared memory; the runtime head_dim is a multiple of 32 at most D, its
// missing channels read as zeros (so 32 runs on D = 64, 96 on 128, 160 ..
// 224 on 256): prefill_block_dim picks D.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/prefill_tile.hpp"

namespace kvpolicy {

inline constexpr std::uint32_t prefill_block_rows = 64;      ///< queries per CTA
inline constexpr std::uint32_t prefill_block_keys = 64;      ///< keys per tile
inline constexpr std::uint32_t prefill_block_threads = 256;  ///< threads per CTA
inline constexpr std::uint32_t prefill_block_tx = 16;        ///< thread columns (t % 16)
inline constexpr std::uint32_t prefill_block_tm = 4;         ///< rows per thread
inline constexpr std::uint32_t prefill_block_tn = 4;         ///< score columns per thread
/// Offsets i - j one slash tile can hold: rows + keys - 1, rounded up.
inline constexpr std::uint32_t prefill_block_window = 128;
inline constexpr std::uint32_t prefill_no_key = 0xffffffffu;

static_assert(prefill_block_threads == prefill_block_tx * (prefill_block_rows / prefill_block_tm));
static_assert(prefill_block_keys == prefill_block_tx * prefill_block_tn);
static_assert(prefill_block_window >= prefill_block_rows + prefill_block_keys - 1);
static_assert(prefill_block_threads >= prefill_block_keys + prefill_block_window);

/// Shared memory of one CTA for head_dim template D, in floats / words.
template <std::uint32_t D>
struct prefill_block_layout {
    static_assert(D == 64 || D == 128 || D == 256);
    /// q and K/V rows: a multiple of 4 (float4) that is 4 mod 32, so eight
    /// threads reading rows tx .. tx + 7 at one channel hit distinct banks.
    static constexpr std::uint32_t row_stride = D + 4;
    static constexpr std::uint32_t p_stride = prefill_block_keys + 4;
    static constexpr std::size_t q_floats = std::size_t{prefill_block_rows} * row_stride;
    static constexpr std::size_t kv_floats = std::size_t{prefill_block_keys} * row_stride;
    static constexpr std::size_t p_floats = std::size_t{prefill_block_rows} * p_stride;
    static constexpr std::size_t red_floats = std::size_t{prefill_block_rows} * prefill_block_tx;
    static constexpr std::size_t words = 2 * std::size_t{prefill_block_keys} + prefill_block_window;
    static constexpr std::size_t bytes = 4 * (q_floats + kv_floats + p_floats + red_floats + words);
};

/// Pointers into one CTA's shared memory.
struct prefill_block_shared {
    float* q = nullptr;                 ///< [rows][row_stride] the block's queries
    float* kv = nullptr;                ///< [keys][row_stride] the tile's K rows, then its V rows
    float* p = nullptr;                 ///< [rows][p_stride] probabilities of the tile
    float* red = nullptr;               ///< [rows][16] per-thread row maxima, then denominators
    std::uint32_t* keys = nullptr;      ///< [keys] token of each slot, prefill_no_key if void
    std::uint32_t* col_kept = nullptr;  ///< [keys] slash tiles: slot's key is a kept column
    std::uint32_t* off_kept = nullptr;  ///< [window] slash tiles: offset base + x is kept
};

/// Carves `base` (16-byte aligned, prefill_block_layout<D>::bytes) into the parts.
template <std::uint32_t D>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline prefill_block_shared prefill_block_carve(float* base) noexcept {
    using L = prefill_block_layout<D>;
    prefill_block_shared s;
    s.q = base;
    s.kv = s.q + L::q_floats;
    s.p = s.kv + L::kv_floats;
    s.red = s.p + L::p_floats;
    s.keys = reinterpret_cast<std::uint32_t*>(s.red + L::red_floats);
    s.col_kept = s.keys + prefill_block_keys;
    s.off_kept = s.col_kept + prefill_block_keys;
    return s;
}

/// One thread's registers: its 4 x 4 scores, its rows' running max and
/// partial denominators, its 4 x D/16 output accumulators.
template <std::uint32_t D>
struct prefill_block_thread {
    static constexpr std::uint32_t cols = D / 16;
    float s[prefill_block_tm][prefill_block_tn];
    float acc[prefill_block_tm][cols];
    float m[prefill_block_tm];
    float l[prefill_block_tm];  ///< over this thread's columns only; summed at the end
};

/// Where one CTA reads and writes: the head's arguments, its block, and for
/// vertical-slash attention the head's kept lists (ascending).
struct prefill_block_ctx {
    prefill_head_args a{};
    std::uint32_t n = 0;    ///< tokens
    std::uint32_t h = 0;    ///< query head
    std::uint32_t kvh = 0;  ///< its KV head
    std::uint32_t i0 = 0;   ///< first query of the block
    std::uint32_t i1 = 0;   ///< one past its last (<= n)
    bool vec = false;       ///< q, k, v 16-byte aligned: float4 loads from global memory
    const std::uint32_t* verticals = nullptr;
    std::uint32_t vertical_count = 0;
    const std::uint32_t* slashes = nullptr;
    std::uint32_t slash_count = 0;
};

[[nodiscard]] KVPOLICY_HOST_DEVICE inline prefill_block_ctx prefill_block_context(
    const prefill_head_args& a, std::uint32_t n, std::uint32_t h, std::uint32_t block, bool vec,
    const std::uint32_t* verticals = nullptr, std::uint32_t vertical_count = 0, const std::uint32_t* slashes = nullptr,
    std::uint32_t slash_count = 0) noexcept {
    prefill_block_ctx c;
    c.a = a;
    c.n = n;
    c.h = h;
    c.kvh = h / (a.num_q_heads / a.num_kv_heads);
    c.i0 = block * prefill_block_rows;
    c.i1 = n - c.i0 < prefill_block_rows ? n : c.i0 + prefill_block_rows;
    c.vec = vec;
    c.verticals = verticals;
    c.vertical_count = vertical_count;
    c.slashes = slashes;
    c.slash_count = slash_count;
    return c;
}

[[nodiscard]] KVPOLICY_HOST_DEVICE inline std::uint32_t prefill_blocks(std::uint32_t n) noexcept {
    return (n + prefill_block_rows - 1) / prefill_block_rows;
}
/// The head_dim template a runtime head_dim (a multiple of 32, <= 256) runs on.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline std::uint32_t prefill_block_dim(std::uint32_t head_dim) noexcept {
    return head_dim <= 64 ? 64u : head_dim <= 128 ? 128u : 256u;
}

}  // namespace kvpolicy
