// What CLOCK and SIEVE have in common, so that each header holds only how its
// hand moves: every tracked item on one index-linked queue, held ones
// included, with one reference bit each. An insert enters at the back with
// the bit clear, a hit sets the bit and moves nothing, a hold or a release
// changes nothing but evictability (a release is not a new reference, and
// the item keeps its place: the zoo-wide rule of concepts.hpp). To find a
// victim the hand gives each item it looks at a second chance: a held item
// is passed over, its bit untouched; a set bit is cleared and the item passed
// over; the first evictable item with a clear bit is the victim.
//
// `second_chance_policy<Derived>` (CRTP, over tracked_policy) gives the
// `on_*` members and `pop_victim`; Derived gives how its hand walks:
// `find_victim()`, which moves the hand with `second_chance(x)` until that
// says stop and returns the victim, and `leave(x)`, which takes an item off
// the queue (evicted or erased) and keeps the hand where it belongs.
// CLOCK's hand stays at the front and the queue rotates under it; SIEVE's
// walks from the front (oldest) toward the back and wraps, the queue still.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

// static_between_accesses: the queue and the bits change only at the hooks.
template <class Derived>
class second_chance_policy : public tracked_policy<Derived, eviction_order::static_between_accesses> {
    using tracked = tracked_policy<Derived, eviction_order::static_between_accesses>;

public:
    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        bits_[id.value] = 0;
        links_.push_back(queue_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        bits_[id.value] = 1;
    }
    void on_hold(item_id id) noexcept { tracking_.mark_held(id); }  // keeps its place
    /// Not a new reference: the bit stays as the accesses left it, the place too.
    void on_release(item_id id, const access_context&) noexcept { tracking_.mark_released(id); }
    void on_erase(item_id id) noexcept {
        tracking_.mark_erased(id);
        derived().leave(id.value);
    }

    /// Complexity: O(1 + held/evictable) amortised; O(size()) worst case.
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        const item_id v{derived().find_victim()};
        derived().leave(v.value);
        tracking_.mark_evicted(v);
        return v;
    }

protected:
    /// Throws: config_error naming Derived::name if `capacity` is 0 or does
    /// not fit 32-bit ids.
    explicit second_chance_policy(std::size_t capacity) : tracked(capacity), links_(capacity), bits_(capacity, 0) {}

    /// The hand looks at `x`: true if it passes over it (held, bit
    /// untouched; or its bit set, now cleared), false if `x` is the victim.
    [[nodiscard]] bool second_chance(std::uint32_t x) noexcept {
        if (tracking_.is_held(item_id{x})) return true;
        if (bits_[x] == 0) return false;
        bits_[x] = 0;
        return true;
    }
    /// The reference bit. Precondition: contains(id).
    [[nodiscard]] bool bit(item_id id) const noexcept {
        KVPOLICY_ASSERT(this->contains(id));
        return bits_[id.value] != 0;
    }

    using tracked::tracking_;
    index_links links_;               // [capacity] queue links
    index_list queue_;                // tracked items, held ones included; front = oldest, back = newest
    std::vector<std::uint8_t> bits_;  // [capacity] reference bits

private:
    [[nodiscard]] Derived& derived() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace kvpolicy
