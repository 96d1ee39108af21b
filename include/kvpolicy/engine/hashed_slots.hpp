// hashed_slots: the slots of keys an engine knows by a 64-bit hash that two
// keys may share (Python's hash of vLLM's OffloadKeys or of LMCache's
// ObjectKeys: distinct keys, equal hashes, by chance or on purpose).
//
// The keys themselves stay with the caller, which says whether a slot holds
// the key it looks for (`same`); this keeps each slot's hash and the slots
// of one hash in a chain (a key_index from the hash to the chain's first
// slot, and per slot the next), so a key is found with one index probe and
// one comparison per key of its hash, and two keys of one hash stay two
// slots. Which slots are free is the caller's (a free list, or an order's
// ids). Python's kvpolicy.vllm cache policies and kvpolicy.lmcache's key
// order keep their keys' slots here (python/src/vllm_policy.cpp,
// lmcache_policy.cpp); tests/engine_hashed_slots.cpp checks it against a
// multimap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"

namespace kvpolicy::engine {

class hashed_slots {
public:
    /// Slots 0 .. capacity-1. Throws: config_error as key_index.
    explicit hashed_slots(std::size_t capacity) : index_(capacity), hash_(capacity, 0), next_(capacity, unused) {}

    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// The hash slot `s` holds. Precondition: s in use.
    [[nodiscard]] std::uint64_t hash(std::uint32_t s) const noexcept { return hash_[s]; }

    /// The slot of hash `h` for which `same(slot)` is true, or no_index.
    /// What `same` throws passes through, nothing changed.
    template <class Same>
    [[nodiscard]] std::uint32_t find(std::uint64_t h, Same&& same) const {
        for (std::uint32_t s = index_.find(h); s != no_index; s = next_[s])
            if (same(s)) return s;
        return no_index;
    }

    /// Slot `s` now holds a key of hash `h`. Precondition: s not in use.
    void insert(std::uint32_t s, std::uint64_t h) {
        KVPOLICY_ASSERT(s < next_.size() && next_[s] == unused);
        hash_[s] = h;
        if (const std::uint32_t head = index_.find(h); head != no_index) {
            next_[s] = next_[head];  // second in its hash's chain
            next_[head] = s;
        } else {
            next_[s] = no_index;
            index_.insert(h, s);
        }
        ++size_;
    }

    /// Slot `s` is free again. Precondition: s in use.
    void erase(std::uint32_t s) {
        KVPOLICY_ASSERT(s < next_.size() && next_[s] != unused);
        const std::uint64_t h = hash_[s];
        const std::uint32_t head = index_.find(h);
        if (head == s) {
            index_.erase(h);
            if (next_[s] != no_index) index_.insert(h, next_[s]);
        } else {
            std::uint32_t before = head;
            while (next_[before] != s) before = next_[before];
            next_[before] = next_[s];
        }
        next_[s] = unused;
        --size_;
    }

    /// Every slot free.
    void clear() {
        index_.clear();
        std::fill(next_.begin(), next_.end(), unused);
        size_ = 0;
    }

private:
    static constexpr std::uint32_t unused = no_index - 1;  // next_ of a free slot
    key_index index_;                                      // hash -> the first slot of its chain
    std::vector<std::uint64_t> hash_;                      // [slot] its key's hash
    std::vector<std::uint32_t> next_;  // [slot] the next slot of its hash's chain, no_index at the end; unused if free
    std::size_t size_ = 0;
};

}  // namespace kvpolicy::engine
