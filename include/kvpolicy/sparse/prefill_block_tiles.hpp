// prefill_block_tiles: which key tiles one block of queries of CTA-tiled
// prefill attention (sparse/prefill_block.hpp) walks, and in what order; the
// same in every thread of the CTA.
//
// Dense causal attention walks the tiles [0, 64), [64, 128), ... below i1;
// only tiles that reach past i0 are masked (j <= i).
//
// Vertical-slash attention (sparse/minference.hpp: query i reads the kept
// columns j <= i and i - o for the kept offsets o <= i, each key once) walks,
// for the block, first the union of the intervals [max(0, i0 - o), i1 - 1 - o]
// of the kept offsets o < i1, merged, as contiguous tiles masked with
// j <= i && (offset i - j kept || column j kept); then the kept columns < i1
// outside that union, gathered 64 list entries at a time, masked j <= i. No
// rounding to 64-key blocks: the masks are exact. Membership tests are
// binary searches over the head's sorted lists (sorted_contains,
// sorted_holds_in), one per key slot and one per offset of the tile's window
// (at most 127 offsets i - j), done in the load phase by separate threads.
#pragma once

#include <cstdint>

#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/prefill_block_layout.hpp"
#include "kvpolicy/sparse/prefill_tile.hpp"

namespace kvpolicy {

enum class prefill_tile_kind : std::uint32_t {
    dense,   ///< keys first .. first + count - 1, admitted when j <= i
    slash,   ///< keys first .., admitted when j <= i and (offset or column kept)
    column,  ///< list entries first .. of the kept columns, admitted when j <= i
};

/// One key tile of a block (the same in every thread of the CTA).
struct prefill_key_tile {
    prefill_tile_kind kind = prefill_tile_kind::dense;
    std::uint32_t first = 0;  ///< first key (dense, slash) or first column list entry
    std::uint32_t count = 0;  ///< slots used, 1 .. prefill_block_keys
    bool masked = true;       ///< false: every slot admitted for every row
};

/// Whether the sorted list holds x.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline bool sorted_contains(const std::uint32_t* sorted, std::uint32_t n,
                                                               std::uint32_t x) noexcept {
    const std::uint32_t at = upper_bound_index(sorted, n, x);
    return at > 0 && sorted[at - 1] == x;
}

/// Whether the sorted list holds a value in [lo, hi].
[[nodiscard]] KVPOLICY_HOST_DEVICE inline bool sorted_holds_in(const std::uint32_t* sorted, std::uint32_t n,
                                                               std::uint32_t lo, std::uint32_t hi) noexcept {
    const std::uint32_t at = lo == 0 ? 0 : upper_bound_index(sorted, n, lo - 1);  // first >= lo
    return at < n && sorted[at] <= hi;
}

namespace detail {

/// The next tile of `kind`: entries [next, end), at most prefill_block_keys
/// of them, masked; `next` moves past them. Precondition: next < end.
KVPOLICY_HOST_DEVICE inline void take_tile(prefill_key_tile& tile, prefill_tile_kind kind, std::uint32_t& next,
                                           std::uint32_t end) noexcept {
    const std::uint32_t count = end - next < prefill_block_keys ? end - next : prefill_block_keys;
    tile.kind = kind;
    tile.first = next;
    tile.count = count;
    tile.masked = true;
    next += count;
}

}  // namespace detail

/// Dense causal key tiles of a block: [0, 64), [64, 128), ... below i1.
struct dense_block_tiles {
    std::uint32_t i0 = 0, i1 = 0, next = 0;

    [[nodiscard]] KVPOLICY_HOST_DEVICE static dense_block_tiles make(const prefill_block_ctx& c) noexcept {
        return {c.i0, c.i1, 0};
    }
    KVPOLICY_HOST_DEVICE bool next_tile(prefill_key_tile& tile) noexcept {
        if (next >= i1) return false;
        detail::take_tile(tile, prefill_tile_kind::dense, next, i1);
        tile.masked = tile.count < prefill_block_keys || tile.first + tile.count - 1 > i0;  // only the diagonal tile
        return true;
    }
};

/// Vertical-slash key tiles of a block: the merged union of the kept
/// offsets' key intervals, 64 keys at a time, then the kept column list
/// entries below i1, 64 at a time (those inside the union are voided by the
/// load phase). Offsets are walked from the largest below i1 down, so the
/// intervals come in ascending order of start and end. Whatever the lists
/// hold (an index left unfinished on the device), every key is below i1.
struct vertical_slash_block_tiles {
    const std::uint32_t* slashes = nullptr;
    std::uint32_t i0 = 0, i1 = 0;
    std::uint32_t next_slash = 0;     ///< offsets [0, next_slash) not merged yet
    std::uint32_t pos = 0, stop = 0;  ///< keys [pos, stop) of the current range not tiled yet
    std::uint32_t next_col = 0, col_end = 0;

    [[nodiscard]] KVPOLICY_HOST_DEVICE static vertical_slash_block_tiles make(const prefill_block_ctx& c) noexcept {
        vertical_slash_block_tiles s;
        s.slashes = c.slashes;
        s.i0 = c.i0;
        s.i1 = c.i1;
        s.next_slash = upper_bound_index(c.slashes, c.slash_count, c.i1 - 1);
        s.col_end = upper_bound_index(c.verticals, c.vertical_count, c.i1 - 1);
        return s;
    }
    [[nodiscard]] KVPOLICY_HOST_DEVICE std::uint32_t start_of(std::uint32_t o) const noexcept {
        return o >= i0 ? 0u : i0 - o;
    }
    KVPOLICY_HOST_DEVICE bool next_tile(prefill_key_tile& tile) noexcept {
        while (pos >= stop && next_slash > 0) {  // open the next merged range
            const std::uint32_t o = slashes[--next_slash];
            if (o >= i1) continue;  // only from unsorted lists
            pos = start_of(o);
            stop = i1 - o;
            while (next_slash > 0) {
                const std::uint32_t o2 = slashes[next_slash - 1];
                if (o2 < i1) {
                    if (start_of(o2) > stop) break;  // a gap: the next range
                    if (i1 - o2 > stop) stop = i1 - o2;
                }
                --next_slash;
            }
        }
        if (pos < stop) {
            detail::take_tile(tile, prefill_tile_kind::slash, pos, stop);
            return true;
        }
        if (next_col < col_end) {
            detail::take_tile(tile, prefill_tile_kind::column, next_col, col_end);
            return true;
        }
        return false;
    }
};

}  // namespace kvpolicy
