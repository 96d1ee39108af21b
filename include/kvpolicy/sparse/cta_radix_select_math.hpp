// cta_radix_select_math: one CTA's top-K of a few thousand 32-bit keys by
// radix select, the per-thread and per-lane steps the device kernel runs
// (cuda/quest.cuh, `select_top_paged`: one CTA per request of a batch) and
// the CPU test runs thread by thread and lane by lane
// (tests/sparse_cta_radix_select.cpp, against a sort; STYLE.md 13).
//
// Why not a sort: the one-CTA block radix sort of 64-bit (score, position)
// keys that select_lowest runs for up to 4096 scores makes 16 passes over
// every key, and on an H200 Quest's score + top-K of 2048 candidates took
// 60 us with it (docs/gpu.md), as long as FlashInfer's dense decode of the
// whole 32K context. A radix *select* needs only the k-th key: four passes
// of an 8-bit digit, each a shared-memory histogram of the keys that agree
// with the digits decided so far and one warp finding the bin that holds
// rank k; then one compaction pass writes every key below that threshold
// and, of the keys equal to it, the lowest positions first, in position
// order (the order FlashInfer's page indices want). No key is moved.
//
// Keys are the scores' ordered bits (cuda/select_key.cuh's ordered_bits:
// ascending keys are ascending scores), so "the k lowest keys, ties to the
// lower position" is select_lowest's rule on the same scores.
#pragma once

#include <cstdint>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy {

inline constexpr int cta_radix_passes = 4;                                 // 8-bit digits of a 32-bit key
inline constexpr std::uint32_t cta_radix_bins = 256;                       // one per digit value
inline constexpr std::uint32_t cta_radix_lane_bins = cta_radix_bins / 32;  // bins each lane of the picking warp sums

/// Pass p's digit of a key: bits [24 - 8p, 32 - 8p), most significant first.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr std::uint32_t cta_radix_digit(std::uint32_t key, int pass) noexcept {
    return (key >> (24 - 8 * pass)) & 0xffu;
}

/// Whether a key agrees with `prefix` on the digits passes 0 .. pass - 1
/// decided (every key does in pass 0): the keys pass p counts.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool cta_radix_in_prefix(std::uint32_t key, std::uint32_t prefix,
                                                                      int pass) noexcept {
    return pass == 0 || (key >> (32 - 8 * pass)) == (prefix >> (32 - 8 * pass));
}

/// The bin holding the rank-th (1-based) counted key, and how many counted
/// keys the bins before it hold.
struct cta_radix_pick {
    std::uint32_t digit = 0;
    std::uint32_t below = 0;
};

/// Lane `lane` of the picking warp: its bins are [8 lane, 8 lane + 8), and
/// `before_lane` keys lie in the bins of the lanes below it (the warp's
/// exclusive scan of each lane's sum). Returns true, and sets `pick`, for
/// the one lane whose bins hold the rank-th key (1 <= rank <= the counted
/// keys); false for every other lane.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool cta_radix_pick_in_lane(const std::uint32_t* hist, std::uint32_t lane,
                                                                         std::uint32_t before_lane, std::uint32_t rank,
                                                                         cta_radix_pick& pick) noexcept {
    std::uint32_t below = before_lane;
    for (std::uint32_t b = lane * cta_radix_lane_bins; b < (lane + 1) * cta_radix_lane_bins; ++b) {
        if (below < rank && rank <= below + hist[b]) {
            pick = {b, below};
            return true;
        }
        below += hist[b];
    }
    return false;
}

/// A lane's sum of its bins (what the warp scans before the pick).
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr std::uint32_t cta_radix_lane_sum(const std::uint32_t* hist,
                                                                              std::uint32_t lane) noexcept {
    std::uint32_t sum = 0;
    for (std::uint32_t b = lane * cta_radix_lane_bins; b < (lane + 1) * cta_radix_lane_bins; ++b) sum += hist[b];
    return sum;
}

/// The selection of the k lowest of n keys. During the passes: the digits
/// decided so far (the rest 0) and the rank of the k-th key among the keys
/// that agree with them. After the last pass: every key below `threshold`
/// is taken, and of the keys equal to it, the `rank` at the lowest
/// positions. k = 0 takes nothing; k >= n takes every key (a threshold
/// above every key: ordered_bits gives 0xffffffff to no non-NaN score).
struct cta_radix_cut {
    std::uint32_t threshold = 0;
    std::uint32_t rank = 0;
};

/// The cut before any pass, for k of n keys: exact when k is 0 or covers
/// every key (no pass runs then), else the start of the passes (prefix 0,
/// rank k).
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr cta_radix_cut cta_radix_start(std::uint32_t n, std::uint32_t k) noexcept {
    if (k == 0) return {0, 0};
    if (k >= n) return {0xffffffffu, 0};
    return {0, k};
}

/// Whether passes run (the selection is neither empty nor everything).
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool cta_radix_needs_passes(std::uint32_t n, std::uint32_t k) noexcept {
    return k != 0 && k < n;
}

/// One pass's step: the digit picked narrows the prefix, and the keys of
/// the bins below it are taken, so the rank left counts within the bin.
/// After the last pass the prefix is the k-th key and the rank left is how
/// many keys equal to it are taken.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr cta_radix_cut cta_radix_narrow(cta_radix_cut cut, int pass,
                                                                            cta_radix_pick pick) noexcept {
    return {cut.threshold | (pick.digit << (24 - 8 * pass)), cut.rank - pick.below};
}

/// Whether the key at a position is taken, with `tied_before` keys equal to
/// the threshold at lower positions.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool cta_radix_takes(std::uint32_t key, cta_radix_cut cut,
                                                                  std::uint32_t tied_before) noexcept {
    return key < cut.threshold || (key == cut.threshold && tied_before < cut.rank);
}

}  // namespace kvpolicy
