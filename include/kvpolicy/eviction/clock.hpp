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
// stays CLOCK (re-entering behind the hand would make it LRU). The face is an
// index-linked queue whose front is under the hand: "advance the hand past an
// item" is moving the front to the back. pop_victim is O(1 + held/evictable)
// amortised: each step either clears a bit that one access set or passes a
// held item, and the hand passes each held item once per sweep; the worst
// case, one evictable item among n held ones, is O(n) per pop. Every other
// operation is O(1).
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

class clock : public tracked_policy<clock> {
public:
    struct config_type {};

    static constexpr std::string_view name = "clock";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit clock(std::size_t capacity, const config_type& = {})
        : tracked_policy(capacity), links_(capacity), referenced_(capacity, 0) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        referenced_[id.value] = 0;
        links_.push_back(face_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        referenced_[id.value] = 1;
    }
    void on_hold(item_id id) noexcept { tracking_.mark_held(id); }  // stays on the face
    /// Not a new reference: the bit stays as the accesses left it, the place too.
    void on_release(item_id id, const access_context&) noexcept { tracking_.mark_released(id); }
    void on_erase(item_id id) noexcept {
        tracking_.mark_erased(id);
        links_.remove(face_, id.value);
    }

    /// Complexity: O(1 + held/evictable) amortised; O(size()) worst case.
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        for (;;) {
            const std::uint32_t f = face_.front;
            if (tracking_.is_held(item_id{f})) {
                links_.move_to_back(face_, face_, f);  // passed over, bit untouched
            } else if (referenced_[f] != 0) {
                referenced_[f] = 0;
                links_.move_to_back(face_, face_, f);
            } else {
                break;
            }
        }
        const item_id v{links_.pop_front(face_)};
        tracking_.mark_evicted(v);
        return v;
    }

    /// The reference bit. Precondition: contains(id).
    [[nodiscard]] bool referenced(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return referenced_[id.value] != 0;
    }

private:
    index_links links_;                     // [capacity] face links
    index_list face_;                       // tracked items, held ones included; front is under the hand
    std::vector<std::uint8_t> referenced_;  // [capacity] reference bits
};

static_assert(eviction_policy<clock>);

}  // namespace kvpolicy
