// What every eviction policy over item_tracking has in common, so that a
// policy's header holds only what it decides: its ordering structures, its
// `on_*` members and `pop_victim`.
//
// `tracked_policy<Derived, Order>` (CRTP) owns the item_tracking, built with
// the policy's own `name` (Derived::name) for its capacity errors, and gives
// the read side of `eviction_policy` (capacity, size, evictable_size,
// contains, counters), `order` (Order, named at the policy's first line
// rather than restated in its body), `pop_victims` as `pop_victim` one at a
// time, and an empty `on_miss` for the policies that learn nothing from a
// miss (the insert that follows says all). A policy that learns from a miss,
// or has a batch victim order of its own, declares that member itself, and
// its declaration is the one `eviction_policy` sees. The policy still writes
// `name` beside its `config_type` (STYLE 16), and
// `static_assert(eviction_policy<...>)` after itself.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

template <class Derived, eviction_order Order>
class tracked_policy {
public:
    static constexpr eviction_order order = Order;

    /// Learns nothing from a miss: the insert that follows says all.
    void on_miss(const access_context&) noexcept {}

    /// Victims one at a time from Derived::pop_victim, until `out` is full
    /// or nothing is evictable. Returns: how many were written.
    std::size_t pop_victims(std::span<item_id> out,
                            timestamp now) noexcept(noexcept(std::declval<Derived&>().pop_victim(now))) {
        return pop_victims_one_by_one(static_cast<Derived&>(*this), out, now);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

protected:
    /// Throws: config_error naming Derived::name if `capacity` is 0 or does
    /// not fit 32-bit ids.
    explicit tracked_policy(std::size_t capacity) : tracking_(capacity, Derived::name) {}
    /// The same, naming `policy_name` (a family of presets that share one
    /// validator: best_of_shadows).
    tracked_policy(std::size_t capacity, std::string_view policy_name) : tracking_(capacity, policy_name) {}

    item_tracking tracking_;
};

}  // namespace kvpolicy
