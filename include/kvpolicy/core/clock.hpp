// Clocks.
//
// Policies never read a clock themselves: the caller stamps every operation
// with `access_context::now` (or passes `now` to `pop_victim`). That keeps
// policies deterministic and lets a simulation replay a trace at trace time.
// The cache reads its clock once per call through one of these.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// Ticks of some clock. The unit is the clock's (nanoseconds for
/// `steady_clock_source`, whatever the driver chooses for `manual_clock`);
/// policies only compare and subtract timestamps, and retention values are
/// ratios, so the unit never matters for the order of victims.
using timestamp = std::uint64_t;

/// "No time": an unknown next use, a priority that never expires.
inline constexpr timestamp never = std::numeric_limits<timestamp>::max();

template <class C>
concept clock_source = requires(const C& c) {
    { c.now() } -> std::same_as<timestamp>;
};

/// Wall time: nanoseconds of `std::chrono::steady_clock`.
class steady_clock_source {
public:
    [[nodiscard]] timestamp now() const noexcept {
        auto d = std::chrono::steady_clock::now().time_since_epoch();
        return static_cast<timestamp>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    }
};

/// A logical clock that tests and simulations drive. Time only moves forward.
class manual_clock {
public:
    constexpr manual_clock() noexcept = default;
    constexpr explicit manual_clock(timestamp start) noexcept : now_(start) {}

    [[nodiscard]] constexpr timestamp now() const noexcept { return now_; }

    /// Effects: moves time forward by `ticks`. Throws: config_error on overflow.
    constexpr void advance(timestamp ticks) {
        if (ticks > never - 1 - now_) throw config_error("manual_clock::advance: time would overflow; advance by less");
        now_ += ticks;
    }

    /// Effects: sets the time to `t`. Throws: usage_error if `t` is in the past
    /// (replaying a trace whose timestamps go backwards: sort it first).
    constexpr void set(timestamp t) {
        if (t < now_) throw usage_error("manual_clock::set: time cannot go backwards; sort the input by time");
        now_ = t;
    }

private:
    timestamp now_ = 0;
};

static_assert(clock_source<steady_clock_source>);
static_assert(clock_source<manual_clock>);

}  // namespace kvpolicy
