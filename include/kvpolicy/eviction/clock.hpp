// CLOCK: second-chance FIFO with one reference bit per item.
//
// Items sit on a circular list (the clock face) swept by a hand. A hit sets
// the item's reference bit and moves nothing. To find a victim the hand looks
// at the item under it: a set bit is cleared and the hand moves on (the item
// got its second chance); a clear bit makes that item the victim. New items
// are placed just behind the hand, so they are looked at last, and enter with
// the bit CLEAR: an item must be hit once after insertion to survive the
// next sweep. Use it where LRU's per-hit list move is too costly (a hit here
// is one byte written) and LRU-like quality is wanted.
//
// Paper: F. J. Corbató, "A paging experiment with the Multics system" (1968).
// Departures, for held items only (the zoo-wide rule of concepts.hpp: a
// release is not a new reference, and position-based policies put a
// released item back where it was): a held item stays at its place on the
// face but is no candidate; the hand passes over it without looking at its
// bit, which the access that preceded the hold set and hits during the hold
// still set. Its release changes nothing but evictability: no bit is set and
// nothing moves, so under a serving engine's hold-use-release pattern CLOCK
// stays CLOCK (re-entering behind the hand would make it LRU). The face is
// second_chance_policy's queue (second_chance.hpp), whose front is under the
// hand: "advance the hand past an item" is moving the front to the back. pop_victim is O(1 + held/evictable)
// amortised: each step either clears a bit that one access set or passes a
// held item, and the hand passes each held item once per sweep; the worst
// case, one evictable item among n held ones, is O(n) per pop. Every other
// operation is O(1).
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/second_chance.hpp"

namespace kvpolicy {

class clock : public second_chance_policy<clock> {
public:
    struct config_type {};

    static constexpr std::string_view name = "clock";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit clock(std::size_t capacity, const config_type& = {}) : second_chance_policy(capacity) {}

    /// The reference bit. Precondition: contains(id).
    [[nodiscard]] bool referenced(item_id id) const noexcept { return bit(id); }

private:
    friend second_chance_policy<clock>;

    // The hand stays at the front; each item it passes over goes to the back.
    std::uint32_t find_victim() noexcept {
        while (second_chance(queue_.front)) links_.move_to_back(queue_, queue_.front);
        return queue_.front;
    }
    void leave(std::uint32_t x) noexcept { links_.remove(queue_, x); }
};

static_assert(eviction_policy<clock>);

}  // namespace kvpolicy
