// SIEVE: a FIFO queue, a visited bit and a hand that does not go back.
//
// New items enter at the head with the bit clear; a hit only sets the bit.
// To evict, the hand starts where it last stopped (at the tail, the oldest
// item, the first time) and moves toward the head: a visited item has its
// bit cleared and stays where it is; the first unvisited item is the victim,
// and the hand rests on the item after it (toward the head). Passing the
// head wraps to the tail. Unlike CLOCK, survivors are never moved to the
// head, so new items that are not reused quickly are evicted quickly ("lazy
// promotion, quick demotion"). Use it where most items are used once or
// twice (many distinct prompts): it beats LRU there at FIFO's cost, one byte
// per hit.
//
// Paper: Y. Zhang, J. Yang, Y. Yue, Y. Vigfusson, K. V. Rashmi, "SIEVE is
// Simpler than LRU: an Efficient Turn-Key Eviction Algorithm for Web Caches",
// NSDI 2024. Departures, for held items only (the zoo-wide rule of
// concepts.hpp: a release is not a new reference, and position-based
// policies put a released item back where it was): a held item keeps its
// place in the queue but is no candidate; the hand passes over it without
// looking at its bit, which the access that preceded the hold set and hits
// during the hold still set. Its release changes nothing but evictability,
// so under a serving engine's hold-use-release pattern SIEVE stays SIEVE
// (re-entering at the head would make it LRU). pop_victim is
// O(1 + held/evictable) amortised: each step either clears a bit that one
// access set or passes a held item, once per sweep; the worst case, one
// evictable item among n held ones, is O(n) per pop. Every other operation
// is O(1).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/second_chance.hpp"

namespace kvpolicy {

// The queue is second_chance_policy's (second_chance.hpp): front = tail
// (oldest), back = head (newest).
class sieve : public second_chance_policy<sieve> {
public:
    struct config_type {};

    static constexpr std::string_view name = "sieve";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit sieve(std::size_t capacity, const config_type& = {}) : second_chance_policy(capacity) {}

    /// The visited bit. Precondition: contains(id).
    [[nodiscard]] bool visited(item_id id) const noexcept { return bit(id); }
    /// The item the next eviction looks at first, or nullopt for the tail.
    [[nodiscard]] std::optional<item_id> hand() const noexcept {
        if (hand_ == no_index) return std::nullopt;
        return item_id{hand_};
    }

private:
    friend second_chance_policy<sieve>;

    // The hand starts where it stopped and walks toward the head, wrapping
    // to the tail; it rests on the victim, whose leaving moves it on.
    std::uint32_t find_victim() noexcept {
        std::uint32_t o = hand_ != no_index ? hand_ : queue_.front;
        while (second_chance(o)) {
            o = links_.next(o);
            if (o == no_index) o = queue_.front;
        }
        hand_ = o;
        return o;
    }
    // Leaving the queue moves a hand resting on the item one step toward the
    // head; past the head it falls back to "start at the tail".
    void leave(std::uint32_t x) noexcept {
        if (hand_ == x) hand_ = links_.next(x);
        links_.remove(queue_, x);
    }

    std::uint32_t hand_ = no_index;  // next item to examine; no_index = the tail
};

static_assert(eviction_policy<sieve>);

}  // namespace kvpolicy
