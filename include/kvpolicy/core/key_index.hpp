// A fixed-capacity map from 64-bit keys to 32-bit slots.
//
// Open addressing with linear probing in a power-of-two table at least twice
// the capacity (so probe chains stay short), backward-shift deletion (so
// there are no tombstones and lookups never degrade), keys scattered by
// `mix64` (so dense ids such as trace hash ids do not cluster). Nothing
// allocates after construction. A block pool maps block hashes to block ids
// with it; a ghost list maps remembered keys to its slots.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/item_key.hpp"

namespace kvpolicy {

class key_index {
public:
    key_index() = default;

    /// Throws: config_error if `capacity` is 2^30 or more.
    explicit key_index(std::size_t capacity) : capacity_(capacity), table_(table_size_for(capacity)) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

    /// The slot stored for `key`, or `no_index`.
    [[nodiscard]] std::uint32_t find(std::uint64_t key) const noexcept {
        if (table_.empty()) return no_index;
        const std::size_t mask = table_.size() - 1;
        for (std::size_t i = home(key);; i = (i + 1) & mask) {
            const entry& e = table_[i];
            if (e.slot == no_index) return no_index;
            if (e.key == key) return e.slot;
        }
    }

    /// Asks the cache for `key`'s home entry: a loop over many keys calls
    /// it some keys ahead, so that their probes' cache misses overlap.
    /// Always inlined: g++ 12 finds an out-of-line call of it free of side
    /// effects (a prefetch is none) and deletes every call, so no prefetch
    /// was ever issued (seen in the disassembly of the offloading manager).
    [[gnu::always_inline]] void prefetch(std::uint64_t key) const noexcept {
        if (!table_.empty()) __builtin_prefetch(&table_[home(key)]);
    }

    /// Precondition: `key` absent, size() < capacity(), slot != no_index.
    void insert(std::uint64_t key, std::uint32_t slot) noexcept {
        KVPOLICY_ASSERT(size_ < capacity_ && slot != no_index && find(key) == no_index);
        const std::size_t mask = table_.size() - 1;
        std::size_t i = home(key);
        while (table_[i].slot != no_index) i = (i + 1) & mask;
        table_[i] = {key, slot};
        ++size_;
    }

    /// Removes `key`; returns its slot, or `no_index` if it was absent.
    std::uint32_t erase(std::uint64_t key) noexcept {
        if (table_.empty()) return no_index;
        const std::size_t mask = table_.size() - 1;
        std::size_t i = home(key);
        for (;; i = (i + 1) & mask) {
            if (table_[i].slot == no_index) return no_index;
            if (table_[i].key == key) break;
        }
        const std::uint32_t slot = table_[i].slot;
        // Backward shift: pull later entries of the chain into the hole unless
        // their home lies cyclically in (hole, j], where they already belong.
        for (std::size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
            const entry& e = table_[j];
            if (e.slot == no_index) break;
            const std::size_t h = home(e.key);
            const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
            if (!stays) {
                table_[i] = e;
                i = j;
            }
        }
        table_[i] = {};
        --size_;
        return slot;
    }

    void clear() noexcept {
        std::fill(table_.begin(), table_.end(), entry{});
        size_ = 0;
    }

private:
    struct entry {
        std::uint64_t key = 0;
        std::uint32_t slot = no_index;  // no_index = empty
    };

    static std::size_t table_size_for(std::size_t capacity) {
        if (capacity >= (std::size_t{1} << 30)) throw config_error("key_index: capacity must be below 2^30 keys");
        return std::bit_ceil(std::max<std::size_t>(2 * capacity, 4));
    }
    [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
        return static_cast<std::size_t>(mix64(key)) & (table_.size() - 1);
    }

    std::size_t capacity_ = 0;
    std::size_t size_ = 0;
    std::vector<entry> table_;  // [pow2 >= 2*capacity]
};

}  // namespace kvpolicy
