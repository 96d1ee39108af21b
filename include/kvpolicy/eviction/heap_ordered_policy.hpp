// What every policy that orders its evictable items by a rank kept in an
// indexed heap has in common (lfu, gdsf, predictive, belady, checkerboard),
// so that each header holds only what it decides: the rank, and when it
// changes (its on_insert, on_access and on_release).
//
// `heap_ordered_policy<Derived, Rank>` (CRTP, over tracked_policy) keeps the
// evictable items in `heap_`, least Rank first (then the lower id), and
// gives `on_hold` (out of the heap, its rank kept there for the release to
// read: indexed_heap::key), `on_erase` and `pop_victim` (the least rank,
// O(log n)). Derived pushes an item on insert and release and updates it on
// an access while evictable. A policy that learns from its victim (gdsf's
// inflation) declares pop_victim itself, and its declaration is the one
// `eviction_policy` sees.
#pragma once

#include <cstddef>
#include <optional>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

// static_between_accesses: the heap is ordered only when a rank changes at
// a hook; a rank that moved with the clock alone would leave it unordered.
template <class Derived, class Rank>
class heap_ordered_policy : public tracked_policy<Derived, eviction_order::static_between_accesses> {
    using tracked = tracked_policy<Derived, eviction_order::static_between_accesses>;

public:
    /// Out of the order until released; the heap keeps its rank.
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        heap_.erase(id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) heap_.erase(id.value);
    }
    /// The evictable item of least rank. Complexity: O(log n).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (heap_.empty()) return std::nullopt;
        const item_id v{heap_.pop()};
        tracking_.mark_evicted(v);
        return v;
    }

protected:
    /// Throws: config_error naming Derived::name if `capacity` is 0 or does
    /// not fit 32-bit ids.
    explicit heap_ordered_policy(std::size_t capacity) : tracked(capacity), heap_(capacity) {}

    using tracked::tracking_;
    indexed_heap<Rank> heap_;  // [capacity] evictable items, least rank (then id) on top
};

}  // namespace kvpolicy
