// LFU: evict the item used the fewest times while cached; among equal counts,
// the least recently used.
//
// Seed 002's second strategy. Use it where popularity is stable (shared
// system prompts, few-shot templates): a block used often stays however long
// ago its last use was. Its weakness is the other side of that: an item that
// was hot once keeps its count after the burst ends (W-TinyLFU ages counts;
// this LFU deliberately does not).
//
// Counting, exactly: on_insert starts at 1 (a re-inserted item starts again
// at 1: counts live only while cached, as in the O(1) LFU paper); every
// on_access adds 1, whether the item is evictable or held. A hold keeps the
// count and a release adds nothing (the zoo-wide rule of concepts.hpp: a
// release is not a new reference; counting it would count every
// request-level hit twice): the released item goes back among its equal
// counts by its last use, the latest on_insert or on_access. So the count is
// exactly the number of insert + access calls since the insert.
//
// Structure: one indexed heap of the evictable items keyed by (count, last
// use number), O(log n) per operation, about 41 bytes per item. (The O(1)
// bucket chain of Shah, Mitra and Matani cannot put a released item back in
// the middle of its bucket without a search.)
#pragma once

#include <compare>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/heap_ordered_policy.hpp"

namespace kvpolicy {

/// LFU's order as a value: fewer uses first, then the older last use.
/// `victim_batch_selector<lfu>` sorts candidates by it.
struct lfu_rank {
    std::uint64_t count = 0;
    timestamp last_use = 0;

    friend constexpr auto operator<=>(const lfu_rank&, const lfu_rank&) noexcept = default;
};

class lfu : public heap_ordered_policy<lfu, lfu_rank> {
public:
    struct config_type {};

    static constexpr std::string_view name = "lfu";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit lfu(std::size_t capacity, const config_type& = {})
            : heap_ordered_policy(capacity), count_(capacity, 0), last_use_(capacity, 0) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        count_[id.value] = 1;
        last_use_[id.value] = next_use_++;
        heap_.push(id.value, key_of(id.value));
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        ++count_[id.value];
        last_use_[id.value] = next_use_++;
        if (tracking_.is_evictable(id)) heap_.update(id.value, key_of(id.value));
    }

    /// Not a new reference: count and last use stay as the accesses left them.
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        heap_.push(id.value, key_of(id.value));
    }

    /// Uses counted since the item was inserted. Precondition: contains(id).
    [[nodiscard]] std::uint64_t count(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return count_[id.value];
    }

private:
    [[nodiscard]] lfu_rank key_of(std::uint32_t id) const noexcept { return {count_[id], last_use_[id]}; }

    std::vector<std::uint64_t> count_;     // [capacity] uses since insert
    std::vector<std::uint64_t> last_use_;  // [capacity] number of the latest insert / access
    std::uint64_t next_use_ = 0;
};

static_assert(eviction_policy<lfu>);

}  // namespace kvpolicy
