// Items ordered by the time they were placed, earliest first, ties by
// placement order: an LRU order that takes a time with each item.
//
// Why not a list. An engine's clock only goes forward, so nearly every
// placement is the newest and a list would do; but a caller may place an
// item at an earlier time than the newest (best_of_shadows rebuilds a leader
// by replaying each cached item at its own last reference's time, a queue
// letting go of a block passes its last access's time), and the order must
// still be by time. Why not only an indexed heap (what session_aware_lru
// kept before): every access is an erase and a push, O(log n) with a cache
// miss per level at 10^5 items and more, though the push lands at the end.
//
// How. Items placed at or after the newest listed item's time are appended
// to a list (O(1), and the list stays sorted by (time, placement)); the rest
// go to an indexed heap of the same order. The front is the earlier of the
// list's front and the heap's top. So the order is exactly the heap's, at a
// list's price while times come in order; the heap holds only the items
// placed out of order (none under an engine's clock, every replayed item in
// a rebuild).
//
// Cost: 48 bytes per item (its time, placement stamp and list links, and a
// heap slot: key, position, entry); O(1) per operation for items placed in
// order, O(log m) for the m placed out of order.
#pragma once

#include <cstdint>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"

namespace kvpolicy {

class time_queue {
public:
    time_queue() = default;
    explicit time_queue(std::size_t capacity)
            : time_(capacity, 0), stamp_(capacity, 0), links_(capacity), late_(capacity) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return time_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return in_order_.size + late_.size(); }
    [[nodiscard]] bool empty() const noexcept { return size() == 0; }
    [[nodiscard]] bool contains(std::uint32_t id) const noexcept { return links_.is_linked(id) || late_.contains(id); }
    /// The time `id` was placed at. Precondition: contains(id).
    [[nodiscard]] timestamp time(std::uint32_t id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return time_[id];
    }
    /// Items placed out of order, kept in the heap (tests).
    [[nodiscard]] std::size_t placed_out_of_order() const noexcept { return late_.size(); }

    /// Places `id` at time `t`, after every item placed before at `t` or
    /// earlier. O(1) when `t` is at least the newest listed item's time, else
    /// O(log m). Precondition: `id` below capacity() and not present.
    void push(std::uint32_t id, timestamp t) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !contains(id));
        time_[id] = t;
        stamp_[id] = next_stamp_++;
        if (in_order_.empty() || t >= time_[in_order_.back])
            links_.push_back(in_order_, id);
        else
            late_.push(id, rank_of(id));
    }
    /// Precondition: contains(id).
    void erase(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        if (late_.contains(id))
            late_.erase(id);
        else
            links_.remove(in_order_, id);
    }
    /// The earliest placed item (by time, then placement). Precondition: not empty.
    [[nodiscard]] std::uint32_t front() const noexcept {
        KVPOLICY_ASSERT(!empty());
        if (late_.empty()) return in_order_.front;
        const std::uint32_t h = late_.top();
        if (in_order_.empty()) return h;
        const std::uint32_t l = in_order_.front;
        return earliest_first{}(rank_of(h), h, rank_of(l), l) ? h : l;
    }
    void clear() noexcept {
        while (!in_order_.empty()) links_.pop_front(in_order_);
        late_.clear();
    }

private:
    struct rank {
        timestamp time;
        std::uint64_t stamp;
    };
    struct earliest_first {
        bool operator()(const rank& a, std::uint32_t, const rank& b, std::uint32_t) const noexcept {
            return a.time < b.time || (a.time == b.time && a.stamp < b.stamp);
        }
    };
    [[nodiscard]] rank rank_of(std::uint32_t id) const noexcept { return {time_[id], stamp_[id]}; }

    std::vector<timestamp> time_;              // [capacity] placement time
    std::vector<std::uint64_t> stamp_;         // [capacity] placement order
    index_links links_;                        // the in-order list's links
    index_list in_order_;                      // placed at or after the newest listed time: sorted
    indexed_heap<rank, earliest_first> late_;  // placed before it
    std::uint64_t next_stamp_ = 0;
};

}  // namespace kvpolicy
