// A bounded, ordered set of 64-bit keys: the "ghost" history of evicted items.
//
// ARC's B1/B2, 2Q's A1out, S3-FIFO's ghost FIFO and LIRS's non-resident HIR
// entries all remember keys of items that are no longer resident, in arrival
// order, with removal from the middle on a ghost hit. Slots are dense ids into
// a fixed key array threaded by `index_links`; lookup is an open-addressing
// table (linear probing, backward-shift deletion) sized to a power of two at
// least twice the capacity, so probes stay short and nothing allocates after
// construction. Cost: about 28 bytes per ghost.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/item_key.hpp"

namespace kvpolicy {

class ghost_list {
public:
    ghost_list() = default;

    /// Throws: config_error if `capacity` does not fit 32-bit slot ids.
    explicit ghost_list(std::size_t capacity)
        : keys_(capacity), links_(capacity), table_(table_size_for(capacity), empty_) {
        free_.reserve(capacity);
        for (std::size_t i = capacity; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return keys_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return order_.size; }
    [[nodiscard]] bool empty() const noexcept { return order_.size == 0; }
    [[nodiscard]] bool full() const noexcept { return order_.size == keys_.size(); }

    [[nodiscard]] bool contains(std::uint64_t key) const noexcept { return find_slot(key) != no_index; }

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
        table_insert(key, slot);
        return dropped;
    }

    /// Removes and returns the oldest key. Precondition: not empty.
    std::uint64_t pop_front() noexcept {
        KVPOLICY_ASSERT(!empty());
        const std::uint32_t slot = links_.pop_front(order_);
        const std::uint64_t key = keys_[slot];
        table_erase(key);
        free_.push_back(slot);
        return key;
    }

    /// Removes `key` if present; returns whether it was.
    bool erase(std::uint64_t key) noexcept {
        const std::uint32_t slot = find_slot(key);
        if (slot == no_index) return false;
        links_.remove(order_, slot);
        table_erase(key);
        free_.push_back(slot);
        return true;
    }

    void clear() noexcept {
        while (!empty()) pop_front();
    }

private:
    static constexpr std::uint32_t empty_ = no_index;

    static std::size_t table_size_for(std::size_t capacity) {
        if (capacity >= (std::size_t{1} << 30)) throw config_error("ghost_list: capacity must be below 2^30 keys");
        return std::bit_ceil(std::max<std::size_t>(2 * capacity, 4));
    }

    [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
        return static_cast<std::size_t>(mix64(key)) & (table_.size() - 1);
    }

    [[nodiscard]] std::uint32_t find_slot(std::uint64_t key) const noexcept {
        if (keys_.empty()) return no_index;
        const std::size_t mask = table_.size() - 1;
        for (std::size_t i = home(key);; i = (i + 1) & mask) {
            const std::uint32_t s = table_[i];
            if (s == empty_) return no_index;
            if (keys_[s] == key) return s;
        }
    }

    void table_insert(std::uint64_t key, std::uint32_t slot) noexcept {
        const std::size_t mask = table_.size() - 1;
        std::size_t i = home(key);
        while (table_[i] != empty_) i = (i + 1) & mask;
        table_[i] = slot;
    }

    // Backward-shift deletion keeps every probe chain unbroken without tombstones.
    void table_erase(std::uint64_t key) noexcept {
        const std::size_t mask = table_.size() - 1;
        std::size_t i = home(key);
        while (keys_[table_[i]] != key) i = (i + 1) & mask;
        for (std::size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
            const std::uint32_t s = table_[j];
            if (s == empty_) break;
            const std::size_t h = home(keys_[s]);
            // Move entry j into hole i unless its home lies cyclically in (i, j].
            const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
            if (!stays) {
                table_[i] = s;
                i = j;
            }
        }
        table_[i] = empty_;
    }

    std::vector<std::uint64_t> keys_;   // [capacity] key held by each slot
    index_links links_;                 // arrival order over slots
    index_list order_;
    std::vector<std::uint32_t> free_;   // unused slots
    std::vector<std::uint32_t> table_;  // [pow2 >= 2*capacity] slot or empty_
};

}  // namespace kvpolicy
