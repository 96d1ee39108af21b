// Doubly linked lists threaded through flat arrays indexed by dense id.
//
// `index_links` owns one (prev, next) pair of uint32 per id; any number of
// `index_list` heads can thread through it, as long as each id is in at most
// one list at a time (ARC's T1 and T2, SLRU's segments, ...). No node is ever
// allocated: linking is two array writes, and a list costs 8 bytes per item.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

inline constexpr std::uint32_t no_index = std::numeric_limits<std::uint32_t>::max();

/// Head of one list: oldest at `front`, newest at `back`.
struct index_list {
    std::uint32_t front = no_index;
    std::uint32_t back = no_index;
    std::uint32_t size = 0;

    [[nodiscard]] constexpr bool empty() const noexcept { return size == 0; }
};

class index_links {
public:
    index_links() = default;
    explicit index_links(std::size_t n) : prev_(n, no_index), next_(n, no_index), linked_(n, 0) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return prev_.size(); }
    [[nodiscard]] bool is_linked(std::uint32_t id) const noexcept { return linked_[id] != 0; }
    [[nodiscard]] std::uint32_t next(std::uint32_t id) const noexcept { return next_[id]; }
    [[nodiscard]] std::uint32_t prev(std::uint32_t id) const noexcept { return prev_[id]; }

    /// Complexity: O(1). Precondition: `id` is in no list.
    void push_back(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !is_linked(id));
        prev_[id] = l.back;
        next_[id] = no_index;
        if (l.back != no_index) next_[l.back] = id; else l.front = id;
        l.back = id;
        ++l.size;
        linked_[id] = 1;
    }

    /// Complexity: O(1). Precondition: `id` is in no list.
    void push_front(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !is_linked(id));
        next_[id] = l.front;
        prev_[id] = no_index;
        if (l.front != no_index) prev_[l.front] = id; else l.back = id;
        l.front = id;
        ++l.size;
        linked_[id] = 1;
    }

    /// Links `id` right after `pos` (which is in `l`). Complexity: O(1).
    void insert_after(index_list& l, std::uint32_t pos, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(is_linked(pos) && !is_linked(id));
        const std::uint32_t n = next_[pos];
        prev_[id] = pos;
        next_[id] = n;
        next_[pos] = id;
        if (n != no_index) prev_[n] = id; else l.back = id;
        ++l.size;
        linked_[id] = 1;
    }

    /// Complexity: O(1). Precondition: `id` is in `l`.
    void remove(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && is_linked(id) && l.size > 0);
        const std::uint32_t p = prev_[id];
        const std::uint32_t n = next_[id];
        if (p != no_index) next_[p] = n; else l.front = n;
        if (n != no_index) prev_[n] = p; else l.back = p;
        prev_[id] = next_[id] = no_index;
        --l.size;
        linked_[id] = 0;
    }

    /// Removes and returns the front, or `no_index` if `l` is empty.
    std::uint32_t pop_front(index_list& l) noexcept {
        const std::uint32_t id = l.front;
        if (id != no_index) remove(l, id);
        return id;
    }

    /// Moves `id` (in `from`) to the back of `to`; `from` may be `to`.
    void move_to_back(index_list& from, index_list& to, std::uint32_t id) noexcept {
        remove(from, id);
        push_back(to, id);
    }

private:
    std::vector<std::uint32_t> prev_;
    std::vector<std::uint32_t> next_;
    std::vector<std::uint8_t> linked_;
};

}  // namespace kvpolicy
