// A binary min-heap of dense ids with a position map, so a priority can be
// changed or an id removed in O(log n). Used where priorities change between
// pops (GDSF, Belady, predictive, LFU-style orders).
//
// `Less(a_key, a_id, b_key, b_id)` orders entries; ties should be broken
// inside it (for example by id) so victim order is deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"

namespace kvpolicy {

template <class Key>
struct key_then_id_less {
    constexpr bool operator()(const Key& a, std::uint32_t ia, const Key& b, std::uint32_t ib) const noexcept {
        if (a < b) return true;
        if (b < a) return false;
        return ia < ib;
    }
};

template <class Key, class Less = key_then_id_less<Key>>
class indexed_heap {
public:
    indexed_heap() = default;
    explicit indexed_heap(std::size_t capacity, Less less = {})
            : keys_(capacity), pos_(capacity, no_index), less_(less) {
        heap_.reserve(capacity);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return pos_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return heap_.size(); }
    [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
    [[nodiscard]] bool contains(std::uint32_t id) const noexcept { return pos_[id] != no_index; }
    [[nodiscard]] const Key& key(std::uint32_t id) const noexcept { return keys_[id]; }

    /// The id with the smallest key. Precondition: not empty.
    [[nodiscard]] std::uint32_t top() const noexcept {
        KVPOLICY_ASSERT(!empty());
        return heap_.front();
    }

    /// Calls `descend(id)` on entries top first, and on an entry's children
    /// only where it returned true. With `descend` "ranks before x", it
    /// visits the entries ranked before x and the edge just past them,
    /// O(visited) with no allocation past `stack`'s (the caller's, reused).
    template <class F>
    void visit_top_down(F descend, std::vector<std::uint32_t>& stack) const {
        stack.clear();
        if (!heap_.empty()) stack.push_back(0);
        while (!stack.empty()) {
            const std::uint32_t p = stack.back();
            stack.pop_back();
            if (!descend(heap_[p])) continue;
            for (std::uint32_t c = 2 * p + 1; c <= 2 * p + 2 && c < heap_.size(); ++c) stack.push_back(c);
        }
    }

    /// Complexity: O(log n). Precondition: `id` not present.
    void push(std::uint32_t id, const Key& k) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !contains(id));
        keys_[id] = k;
        pos_[id] = static_cast<std::uint32_t>(heap_.size());
        heap_.push_back(id);  // capacity reserved: never reallocates
        sift_up(pos_[id]);
    }

    /// Complexity: O(log n). Precondition: `id` present.
    void update(std::uint32_t id, const Key& k) noexcept {
        KVPOLICY_ASSERT(contains(id));
        // Sift only the way the key moved: a raised key (LRFU, LFU and GDSF
        // on an access) never climbs, so its parent, a cache miss in a large
        // heap, is not read.
        const bool lowered = less_(k, id, keys_[id], id);
        keys_[id] = k;
        if (lowered) {
            sift_up(pos_[id]);
        } else {
            sift_down(pos_[id]);
        }
    }

    /// Complexity: O(log n). Precondition: `id` present.
    void erase(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        const std::uint32_t p = pos_[id];
        const std::uint32_t last = heap_.back();
        heap_.pop_back();
        pos_[id] = no_index;
        if (last != id) {
            heap_[p] = last;
            pos_[last] = p;
            sift_up(p);
            sift_down(pos_[last]);
        }
    }

    /// Removes and returns the top. Precondition: not empty.
    std::uint32_t pop() noexcept {
        const std::uint32_t id = top();
        erase(id);
        return id;
    }

    /// Empties the heap. Complexity: O(n).
    void clear() noexcept {
        for (const std::uint32_t id : heap_) pos_[id] = no_index;
        heap_.clear();
    }

    /// Replaces the contents with `ids`, each keyed by `key_of(id)`, in one
    /// O(n) heapify instead of n pushes: for an owner that stopped keeping
    /// its order and needs it back. Where `Less` is a strict total order the
    /// pops that follow are the same as after pushing the ids one by one.
    /// Precondition: `ids` distinct and below capacity().
    template <class KeyOf>
    void assign(std::span<const std::uint32_t> ids, KeyOf key_of) {
        clear();
        for (const std::uint32_t id : ids) {
            KVPOLICY_ASSERT(id < capacity() && !contains(id));
            keys_[id] = key_of(id);
            pos_[id] = static_cast<std::uint32_t>(heap_.size());
            heap_.push_back(id);
        }
        for (std::size_t p = heap_.size() / 2; p-- > 0;) sift_down(static_cast<std::uint32_t>(p));
    }

private:
    [[nodiscard]] bool less(std::uint32_t a, std::uint32_t b) const noexcept { return less_(keys_[a], a, keys_[b], b); }
    void place(std::uint32_t p, std::uint32_t id) noexcept {
        heap_[p] = id;
        pos_[id] = p;
    }
    void sift_up(std::uint32_t p) noexcept {
        const std::uint32_t id = heap_[p];
        while (p > 0) {
            const std::uint32_t parent = (p - 1) / 2;
            if (!less(id, heap_[parent])) break;
            place(p, heap_[parent]);
            p = parent;
        }
        place(p, id);
    }
    void sift_down(std::uint32_t p) noexcept {
        const std::uint32_t n = static_cast<std::uint32_t>(heap_.size());
        const std::uint32_t id = heap_[p];
        for (;;) {
            std::uint32_t c = 2 * p + 1;
            if (c >= n) break;
            if (c + 1 < n && less(heap_[c + 1], heap_[c])) ++c;
            if (!less(heap_[c], id)) break;
            place(p, heap_[c]);
            p = c;
        }
        place(p, id);
    }

    std::vector<Key> keys_;            // [capacity] priority of each id
    std::vector<std::uint32_t> pos_;   // [capacity] index in heap_, or no_index
    std::vector<std::uint32_t> heap_;  // ids in heap order
    [[no_unique_address]] Less less_;
};

}  // namespace kvpolicy
