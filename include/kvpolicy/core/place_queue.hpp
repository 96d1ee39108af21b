// FIFO queues that remember places: items leave in the order they entered
// (their *place*), a held item keeps its place and is passed over, and a
// released item is the next to leave again if it is the oldest. This is the
// hold rule of concepts.hpp for the FIFO family (fifo, s3fifo's S and M,
// 2Q's A1in), without an indexed heap.
//
// Each queue is an index_list of all its items, held ones included, in place
// order, plus a cursor `first` on the oldest evictable item: every item before
// it is held. A push appends; a hold of `first` or a pop moves the cursor
// forward past held items; a release moves it back to the released item when
// that one is older (places compare as numbers), so the released item
// re-enters exactly where it was. Every call is O(1) except the cursor's
// walk, which passes only held items: an item is passed again only after a
// release of an older item moved the cursor back before it, so under an
// engine's hold-use-release pattern (a request's blocks held for a step) a
// walk is a few items. The indexed heap this replaces paid O(log n) on every
// push, pop and release, 17 bytes per item in fifo and about 50 in s3fifo.
//
// `place_links` owns the per-item state (two uint32 links and a 32-bit place
// whose top bit says "held", side by side: 12 bytes per item); any number of
// `place_queue` heads thread through it, each id in at most one queue at a
// time (s3fifo's S and M). A queue numbers its places itself; when its
// counter reaches `PlaceLimit` it renumbers its items 0, 1, ... in order
// (O(size), once per 2^31 pushes by default), so places never wrap.
#pragma once

#include <cstdint>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"

namespace kvpolicy {

/// Head of one queue (see place_links).
struct place_queue {
    index_list items;                // all its items, held ones too: oldest place at front
    std::uint32_t first = no_index;  // the oldest evictable item; every item before it is held
    std::uint32_t evictable = 0;     // items not held
    std::uint32_t next_place = 0;

    /// True when no item can leave (the queue may still hold held items).
    [[nodiscard]] constexpr bool empty() const noexcept { return evictable == 0; }
    /// Items in the queue, held ones included.
    [[nodiscard]] constexpr std::uint32_t size() const noexcept { return items.size; }
};

/// `PlaceLimit`: the place at which a queue renumbers (at most 2^31 - 1:
/// the top bit of a place word is the held flag); tests make it small.
template <std::uint32_t PlaceLimit = (std::uint32_t{1} << 31) - 1>
class basic_place_links {
    static_assert(PlaceLimit >= 1 && PlaceLimit < (std::uint32_t{1} << 31),
                  "basic_place_links: PlaceLimit must be in [1, 2^31): the place word's top bit is the held flag");

public:
    basic_place_links() = default;
    explicit basic_place_links(std::size_t n) : nodes_(n) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return nodes_.size(); }
    [[nodiscard]] bool is_linked(std::uint32_t id) const noexcept { return nodes_[id].next != unlinked; }
    [[nodiscard]] bool is_held(std::uint32_t id) const noexcept { return (nodes_[id].place & held_bit) != 0; }
    /// The item's place in its queue (larger: newer). Renumbering keeps the order.
    [[nodiscard]] std::uint32_t place(std::uint32_t id) const noexcept { return nodes_[id].place & ~held_bit; }
    /// The next item of `id`'s queue, held or not, or no_index.
    [[nodiscard]] std::uint32_t next(std::uint32_t id) const noexcept {
        return is_linked(id) ? nodes_[id].next : no_index;
    }

    /// Appends `id` as the newest item of `q`, evictable. Complexity: O(1)
    /// (amortized over renumbering). Precondition: `id` is in no queue.
    void push_back(place_queue& q, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && !is_linked(id));
        if (q.next_place >= PlaceLimit) [[unlikely]]
            renumber(q);
        nodes_[id] = {q.items.back, no_index, q.next_place++};
        if (q.items.back != no_index)
            nodes_[q.items.back].next = id;
        else
            q.items.front = id;
        q.items.back = id;
        ++q.items.size;
        ++q.evictable;
        if (q.first == no_index) q.first = id;  // every item before it is held
    }

    /// `id` stays at its place but cannot leave. Precondition: in `q`, not held.
    void hold(place_queue& q, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(is_linked(id) && !is_held(id) && q.evictable > 0);
        nodes_[id].place |= held_bit;
        --q.evictable;
        if (q.first == id) q.first = first_evictable_from(nodes_[id].next);
    }

    /// `id` can leave again, from its place. Complexity: O(1).
    /// Precondition: in `q`, held.
    void release(place_queue& q, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(is_linked(id) && is_held(id));
        nodes_[id].place &= ~held_bit;
        ++q.evictable;
        if (q.first == no_index || nodes_[id].place < nodes_[q.first].place) q.first = id;
    }

    /// Takes `id` (held or not) out of `q`. Precondition: in `q`.
    void remove(place_queue& q, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(id < capacity() && is_linked(id) && q.items.size > 0);
        // Field by field, not one 12-byte copy: a wide load over the narrow
        // stores of a neighbour's last update would stall store forwarding.
        const std::uint32_t prev = nodes_[id].prev;
        const std::uint32_t next = nodes_[id].next;
        if ((nodes_[id].place & held_bit) == 0) {
            --q.evictable;
            if (q.first == id) q.first = first_evictable_from(next);
        }
        if (prev != no_index)
            nodes_[prev].next = next;
        else
            q.items.front = next;
        if (next != no_index)
            nodes_[next].prev = prev;
        else
            q.items.back = prev;
        nodes_[id] = {};
        --q.items.size;
    }

    /// The oldest evictable item of `q`, or no_index. Complexity: O(1).
    [[nodiscard]] static std::uint32_t front(const place_queue& q) noexcept { return q.first; }

    /// Removes and returns the oldest evictable item, or no_index.
    std::uint32_t pop_front(place_queue& q) noexcept {
        const std::uint32_t id = q.first;
        if (id != no_index) remove(q, id);
        return id;
    }

    /// Moves evictable `id` (in `from`) to the newest place of `to`; `from`
    /// may be `to` (a reinsertion, as s3fifo's M does for a used item).
    void move_to_back(place_queue& from, place_queue& to, std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(is_linked(id) && !is_held(id));
        remove(from, id);
        push_back(to, id);
    }

private:
    static constexpr std::uint32_t held_bit = std::uint32_t{1} << 31;
    // `next == unlinked` marks an id in no queue (no_index already means "no
    // neighbour" at either end).
    static constexpr std::uint32_t unlinked = no_index - 1;

    // One node per id, its links and its place side by side: a queue
    // operation touches one node where separate arrays would touch two
    // cache lines.
    struct node {
        std::uint32_t prev = unlinked;
        std::uint32_t next = unlinked;
        std::uint32_t place = 0;  // bit 31: held; bits 0..30: place in its queue
    };

    // The first item at or after `id` that is not held, or no_index.
    [[nodiscard]] std::uint32_t first_evictable_from(std::uint32_t id) const noexcept {
        while (id != no_index && (nodes_[id].place & held_bit) != 0) id = nodes_[id].next;
        return id;
    }

    // Places 0, 1, ... in queue order, held flags kept: the order, and so
    // every comparison, is unchanged.
    void renumber(place_queue& q) noexcept {
        std::uint32_t p = 0;
        for (std::uint32_t id = q.items.front; id != no_index; id = nodes_[id].next)
            nodes_[id].place = (nodes_[id].place & held_bit) | p++;
        q.next_place = p;
    }

    std::vector<node> nodes_;  // [capacity]
};

/// Queues with the default limit (renumbering once per 2^31 pushes).
using place_links = basic_place_links<>;

}  // namespace kvpolicy
