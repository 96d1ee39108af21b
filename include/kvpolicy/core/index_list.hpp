// Doubly linked lists threaded through flat arrays indexed by dense id.
//
// `index_links` owns one (prev, next) pair of uint32 per id, side by side; any number of
// `index_list` heads can thread through it, as long as each id is in at most
// one list at a time (ARC's T1 and T2, SLRU's segments, ...). No node is ever
// allocated: linking is a few array writes, and a list costs 8 bytes per item.
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
    explicit index_links(std::size_t n) : links_(n) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return links_.size(); }
    [[nodiscard]] bool is_linked(std::uint32_t id) const noexcept { return links_[id].next != unlinked; }
    [[nodiscard]] std::uint32_t next(std::uint32_t id) const noexcept {
        return is_linked(id) ? links_[id].next : no_index;
    }
    [[nodiscard]] std::uint32_t prev(std::uint32_t id) const noexcept {
        return is_linked(id) ? links_[id].prev : no_index;
    }

    /// Complexity: O(1). Precondition: `id` is in no list.
    void push_back(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !is_linked(id));
        links_[id] = {l.back, no_index};
        if (l.back != no_index)
            links_[l.back].next = id;
        else
            l.front = id;
        l.back = id;
        ++l.size;
    }

    /// Complexity: O(1). Precondition: `id` is in no list.
    void push_front(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !is_linked(id));
        links_[id] = {no_index, l.front};
        if (l.front != no_index)
            links_[l.front].prev = id;
        else
            l.back = id;
        l.front = id;
        ++l.size;
    }

    /// Links `id` right after `pos` (which is in `l`). Complexity: O(1).
    void insert_after(index_list& l, std::uint32_t pos, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(is_linked(pos) && !is_linked(id));
        const std::uint32_t n = links_[pos].next;
        links_[id] = {pos, n};
        links_[pos].next = id;
        if (n != no_index)
            links_[n].prev = id;
        else
            l.back = id;
        ++l.size;
    }

    /// Complexity: O(1). Precondition: `id` is in `l`.
    void remove(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && is_linked(id) && l.size > 0);
        const std::uint32_t p = links_[id].prev;
        const std::uint32_t n = links_[id].next;
        if (p != no_index)
            links_[p].next = n;
        else
            l.front = n;
        if (n != no_index)
            links_[n].prev = p;
        else
            l.back = p;
        links_[id] = {};
        --l.size;
    }

    /// Removes and returns the front, or `no_index` if `l` is empty.
    std::uint32_t pop_front(index_list& l) noexcept {
        const std::uint32_t id = l.front;
        if (id != no_index) remove(l, id);
        return id;
    }

    /// Moves `id` (in `from`) to the back of `to`; `from` may be `to`.
    void move_to_back(index_list& from, index_list& to, std::uint32_t id) noexcept {
        if (&from == &to) {
            move_to_back(to, id);
            return;
        }
        remove(from, id);
        push_back(to, id);
    }

    /// Moves `id` to the back of its own list `l`: an LRU hit, the hottest
    /// path of a replay, so it touches only the links that change.
    void move_to_back(index_list& l, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && is_linked(id) && l.size > 0);
        if (l.back == id) return;
        // Two 4-byte loads, not one 8-byte copy: the previous move often
        // just stored one half of this node (it was that item's neighbour),
        // and a wide load over a narrow store stalls store forwarding.
        const std::uint32_t p = links_[id].prev;
        const std::uint32_t n = links_[id].next;  // valid: id is not the back
        if (p != no_index)
            links_[p].next = n;
        else
            l.front = n;
        links_[n].prev = p;
        links_[l.back].next = id;
        links_[id] = {l.back, no_index};
        l.back = id;
    }

private:
    // `next == unlinked` marks an id in no list (no_index already means
    // "no neighbour" at either end of a list).
    static constexpr std::uint32_t unlinked = no_index - 1;
    struct link {
        std::uint32_t prev = unlinked;
        std::uint32_t next = unlinked;
    };
    std::vector<link> links_;  // [capacity]: one cache line holds both ends of a node
};

}  // namespace kvpolicy
