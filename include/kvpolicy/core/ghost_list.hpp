// A bounded, ordered set of 64-bit keys: the "ghost" history of evicted items.
//
// ARC's B1/B2, 2Q's A1out, S3-FIFO's ghost FIFO and LIRS's non-resident HIR
// entries all remember keys of items that are no longer resident, in arrival
// order, with removal from the middle on a ghost hit. Slots are dense ids into
// a fixed key array threaded by `index_links`; lookup goes through a
// `key_index`, and nothing allocates after construction. Cost: about 50 bytes
// per ghost (key, links, free slot, two index entries).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"

namespace kvpolicy {

class ghost_list {
public:
    ghost_list() = default;

    /// Throws: config_error if `capacity` is 2^30 or more.
    explicit ghost_list(std::size_t capacity) : keys_(capacity), links_(capacity), index_(capacity) {
        free_.reserve(capacity);
        for (std::size_t i = capacity; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return keys_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return order_.size; }
    [[nodiscard]] bool empty() const noexcept { return order_.size == 0; }
    [[nodiscard]] bool full() const noexcept { return order_.size == keys_.size(); }

    [[nodiscard]] bool contains(std::uint64_t key) const noexcept { return index_.find(key) != no_index; }

    /// The slot (0 .. capacity-1) holding `key`, or `no_index`: an owner keeps
    /// what it remembers of each ghost (lrfu's decayed count) in an array
    /// indexed by it.
    [[nodiscard]] std::uint32_t slot_of(std::uint64_t key) const noexcept { return index_.find(key); }

    /// The slot of the newest key. Precondition: not empty.
    [[nodiscard]] std::uint32_t back_slot() const noexcept {
        KVPOLICY_ASSERT(!empty());
        return order_.back;
    }

    /// The oldest key. Precondition: not empty.
    [[nodiscard]] std::uint64_t front() const noexcept {
        KVPOLICY_ASSERT(!empty());
        return keys_[order_.front];
    }

    /// Appends `key` as the newest. If the list is full the oldest key is
    /// dropped first and returned. Precondition: `key` is not present and
    /// capacity() > 0.
    std::optional<std::uint64_t> push_back(std::uint64_t key) {
        KVPOLICY_ASSERT(capacity() > 0 && !contains(key));
        std::optional<std::uint64_t> dropped;
        if (full()) dropped = pop_front();
        const std::uint32_t slot = free_.back();
        free_.pop_back();
        keys_[slot] = key;
        links_.push_back(order_, slot);
        index_.insert(key, slot);
        return dropped;
    }

    /// Removes and returns the oldest key. Precondition: not empty.
    std::uint64_t pop_front() noexcept {
        KVPOLICY_ASSERT(!empty());
        const std::uint32_t slot = links_.pop_front(order_);
        const std::uint64_t key = keys_[slot];
        index_.erase(key);
        free_.push_back(slot);
        return key;
    }

    /// Removes `key` if present; returns whether it was.
    bool erase(std::uint64_t key) noexcept {
        const std::uint32_t slot = index_.erase(key);
        if (slot == no_index) return false;
        links_.remove(order_, slot);
        free_.push_back(slot);
        return true;
    }

    void clear() noexcept {
        while (!empty()) pop_front();
    }

private:
    std::vector<std::uint64_t> keys_;  // [capacity] key held by each slot
    index_links links_;                // arrival order over slots
    index_list order_;
    std::vector<std::uint32_t> free_;  // unused slots
    key_index index_;                  // key -> slot
};

}  // namespace kvpolicy
