// SLRU: segmented LRU. Items climb one segment per hit; victims come from
// the lowest segment.
//
// The cache is split into `segments` LRU lists of equal size, 0 (probation)
// to segments-1 (most protected). A new item enters segment 0 at its
// most-recent end. A hit moves the item to the most-recent end of the next
// segment up (the top segment keeps it, as a plain LRU hit). When a segment
// holds more than its share, its least recent item is demoted to the
// most-recent end of the segment below, which may cascade down to segment 0.
// The victim is the least recent item of the lowest non-empty segment. An
// item must be hit once to leave probation, so a scan of one-time blocks
// (a long prompt read once) cannot flush the blocks that were reused. Use it
// as a cheap, scan-resistant LRU.
//
// Paper: R. Karedla, J. S. Love, B. G. Wherry, "Caching Strategies to Improve
// Disk System Performance", IEEE Computer 27(3), 1994 (two segments:
// probationary and protected). Departures: any number of segments, 4 by
// default, each upper segment holding capacity/segments items (at least one)
// and segment 0 the rest, as in libCacheSim's SLRU; segment shares count
// evictable items only — a held item leaves its segment, remembers it (hits
// during the hold still promote it). SLRU is recency-ordered (LRU family):
// a release is not a new reference (the zoo-wide rule of concepts.hpp), so
// it climbs no segment; it re-enters at the most-recent end of the segment
// the item belongs to, as vLLM releases blocks, which may demote that
// segment's least recent item. Every operation is O(segments): O(1) for a
// fixed configuration.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

struct slru_config {
    /// Number of LRU segments, 1 (plain LRU) to 255.
    std::size_t segments = 4;
};

class slru : public tracked_policy<slru, eviction_order::static_between_accesses> {
public:
    using config_type = slru_config;
    static constexpr auto options =
        std::tuple{option{"segments", &config_type::segments, {1, 255}, "LRU segments; 1 is plain LRU"}};

    static constexpr std::string_view name = "slru";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids, or
    /// if `config.segments` is outside 1..255.
    explicit slru(std::size_t capacity, const config_type& config = {})
            : tracked_policy(capacity),
              links_(capacity),
              segments_(checked_segments(config.segments)),
              segment_of_(capacity, 0),
              upper_share_(std::max<std::size_t>(1, capacity / config.segments)) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        segment_of_[id.value] = 0;
        links_.push_back(segments_[0], id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        const std::size_t s = segment_of_[id.value];
        const std::size_t up = promoted(s);
        if (!tracking_.is_evictable(id)) {
            segment_of_[id.value] = static_cast<std::uint8_t>(up);
            return;
        }
        links_.move_to_back(segments_[s], segments_[up], id.value);
        segment_of_[id.value] = static_cast<std::uint8_t>(up);
        demote_overflow(up);
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.remove(segments_[segment_of_[id.value]], id.value);
    }
    /// Not a new reference: the most-recent end of its own segment, no climb.
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        const std::size_t s = segment_of_[id.value];
        links_.push_back(segments_[s], id.value);
        demote_overflow(s);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(segments_[segment_of_[id.value]], id.value);
    }

    /// Complexity: O(segments).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        for (index_list& seg : segments_) {
            if (seg.empty()) continue;
            const item_id v{links_.pop_front(seg)};
            tracking_.mark_evicted(v);
            return v;
        }
        return std::nullopt;
    }

    /// The segment an item is in (or, if held, returns to). Precondition: contains(id).
    [[nodiscard]] std::size_t segment_of(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return segment_of_[id.value];
    }
    /// Evictable items in segment `s`.
    [[nodiscard]] std::size_t segment_size(std::size_t s) const noexcept { return segments_[s].size; }
    [[nodiscard]] std::size_t segment_count() const noexcept { return segments_.size(); }

private:
    static std::vector<index_list> checked_segments(std::size_t n) {
        if (n == 0 || n > 255)
            throw config_error("slru: segments = " + std::to_string(n) + " is outside 1..255; 4 is the default");
        return std::vector<index_list>(n);
    }

    [[nodiscard]] std::size_t promoted(std::size_t s) const noexcept { return std::min(s + 1, segments_.size() - 1); }

    // Only segment `s` can be over its share (by one item), so demotion
    // cascades one item at a time toward segment 0, which has no share.
    void demote_overflow(std::size_t s) noexcept {
        for (; s > 0 && segments_[s].size > upper_share_; --s) {
            const std::uint32_t lru = segments_[s].front;
            links_.move_to_back(segments_[s], segments_[s - 1], lru);
            segment_of_[lru] = static_cast<std::uint8_t>(s - 1);
        }
    }

    index_links links_;                     // [capacity] segment links
    std::vector<index_list> segments_;      // [segments] evictable items, least recent first
    std::vector<std::uint8_t> segment_of_;  // [capacity]
    std::size_t upper_share_;               // most evictable items in segments 1..
};

static_assert(eviction_policy<slru>);

}  // namespace kvpolicy
