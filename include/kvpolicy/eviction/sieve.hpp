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
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class sieve : public tracked_policy<sieve> {
public:
    struct config_type {};

    static constexpr std::string_view name = "sieve";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit sieve(std::size_t capacity, const config_type& = {})
        : tracked_policy(capacity), links_(capacity), visited_(capacity, 0) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        visited_[id.value] = 0;
        links_.push_back(queue_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        visited_[id.value] = 1;
    }
    void on_hold(item_id id) noexcept { tracking_.mark_held(id); }  // stays in the queue
    /// Not a new reference: the bit stays as the accesses left it, the place too.
    void on_release(item_id id, const access_context&) noexcept { tracking_.mark_released(id); }
    void on_erase(item_id id) noexcept {
        tracking_.mark_erased(id);
        unlink(id.value);
    }

    /// Complexity: O(1 + held/evictable) amortised; O(size()) worst case.
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        std::uint32_t o = hand_ != no_index ? hand_ : queue_.front;
        while (tracking_.is_held(item_id{o}) || visited_[o] != 0) {
            if (!tracking_.is_held(item_id{o})) visited_[o] = 0;  // a held item is passed over, bit untouched
            o = links_.next(o);
            if (o == no_index) o = queue_.front;
        }
        const item_id v{o};
        hand_ = o;
        unlink(o);  // the hand moves on to the next item toward the head
        tracking_.mark_evicted(v);
        return v;
    }

    /// The visited bit. Precondition: contains(id).
    [[nodiscard]] bool visited(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return visited_[id.value] != 0;
    }
    /// The item the next eviction looks at first, or nullopt for the tail.
    [[nodiscard]] std::optional<item_id> hand() const noexcept {
        if (hand_ == no_index) return std::nullopt;
        return item_id{hand_};
    }

private:
    // Leaving the queue moves a hand resting on the item one step toward the
    // head; past the head it falls back to "start at the tail".
    void unlink(std::uint32_t id) noexcept {
        if (hand_ == id) hand_ = links_.next(id);
        links_.remove(queue_, id);
    }

    index_links links_;                  // [capacity] queue links
    index_list queue_;                   // tracked items, held ones included; front = tail (oldest), back = head (newest)
    std::vector<std::uint8_t> visited_;  // [capacity] visited bits
    std::uint32_t hand_ = no_index;      // next item to examine; no_index = the tail
};

static_assert(eviction_policy<sieve>);

}  // namespace kvpolicy
