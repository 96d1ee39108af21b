// Capacities for the simulator and the figures that judge a policy against
// LRU and Belady at one capacity.
//
// - `parse_capacity_list("1%,5%,10%,2000")`: absolute block counts and
//   fractions of the trace's distinct blocks, mixed; `resolve` turns a
//   fraction into blocks (floor, at least 1), so that 1% of the Mooncake
//   conversation trace's 182,790 distinct blocks is 1827.
// - `gap_closed(policy, lru, belady)`: the share of the LRU -> Belady gap a
//   policy closes, (p - lru) / (belady - lru); undefined (NaN) where Belady
//   does not beat LRU.
// - `smallest_capacity_reaching(target, ...)`: the learned-prefix-caching
//   figure (NeurIPS'25: "capacity needed for LRU's hit ratio"): the least
//   capacity at which a policy's hit ratio reaches `target`, by bisection
//   over replays. Bisection assumes the hit ratio grows with capacity; where
//   a policy breaks that (FIFO's anomaly), the answer is a capacity that
//   reaches the target whose lower neighbour, within the precision, does not.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::sim {

/// One `--capacity` entry: blocks, or a fraction of the distinct blocks.
struct capacity_spec {
    std::size_t blocks = 0;  ///< absolute, when `fraction` is 0
    double fraction = 0;     ///< in (0, 1]: of the trace's distinct blocks
    std::string text;        ///< as given, for messages

    [[nodiscard]] bool relative() const noexcept { return fraction > 0; }
    /// Throws: config_error naming the entry and the fix, for 0 blocks.
    void check() const {
        if (!relative() && blocks == 0)
            throw config_error("--capacity: '" + text + "' blocks cannot hold anything" + fix);
    }
    static constexpr const char* fix =
        "; give positive block counts or percentages of the trace's distinct blocks "
        "in (0%, 100%], comma-separated (e.g. --capacity 1%,5%,10% or --capacity 1000,20000)";
    /// Blocks for a trace with `distinct` distinct blocks (floor, >= 1).
    [[nodiscard]] std::size_t resolve(std::size_t distinct) const noexcept {
        if (!relative()) return blocks;
        const auto v = static_cast<std::size_t>(std::floor(fraction * static_cast<double>(distinct) + 1e-9));
        return v == 0 ? 1 : v;
    }
};

/// Parses a comma-separated list ("1%,5%,10%,2000"). Throws: config_error
/// naming the entry and the fix for an empty entry, text that is not a
/// number, a zero block count, or a percentage outside (0%, 100%].
inline std::vector<capacity_spec> parse_capacity_list(std::string_view list) {
    std::vector<capacity_spec> out;
    const std::string fix = capacity_spec::fix;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = list.find(',', start);
        const std::string_view item =
            list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        capacity_spec c;
        c.text = std::string(item);
        if (item.empty()) throw config_error("--capacity: empty entry in '" + std::string(list) + "'" + fix);
        if (item.back() == '%') {
            const std::string_view num = item.substr(0, item.size() - 1);
            double pct = 0;
            const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), pct);
            if (num.empty() || ec != std::errc{} || ptr != num.data() + num.size() || !std::isfinite(pct))
                throw config_error("--capacity: '" + c.text + "' is not a percentage" + fix);
            if (!(pct > 0) || pct > 100) throw config_error("--capacity: '" + c.text + "' is outside (0%, 100%]" + fix);
            c.fraction = pct / 100;
        } else {
            std::size_t v = 0;
            const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
            if (ec != std::errc{} || ptr != item.data() + item.size())
                throw config_error("--capacity: '" + c.text + "' is neither a number of blocks nor a percentage" + fix);
            c.blocks = v;
            c.check();
        }
        out.push_back(std::move(c));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return out;
}

/// Share of the LRU -> Belady gap closed: 0 = LRU, 1 = Belady, negative =
/// below LRU. NaN where Belady is not above LRU (no gap to close).
[[nodiscard]] inline double gap_closed(double policy, double lru, double belady) noexcept {
    const double gap = belady - lru;
    if (!(gap > 0)) return std::numeric_limits<double>::quiet_NaN();
    return (policy - lru) / gap;
}

/// What a bisection found.
struct capacity_search {
    std::size_t capacity = 0;  ///< least capacity found reaching the target; 0 = none up to `hi`
    std::size_t replays = 0;   ///< hit-ratio evaluations it took
};

/// Least capacity in [1, hi] whose `hit_ratio(capacity)` is >= `target`,
/// to within `precision` blocks: the answer c reaches the target and
/// c - precision does not (or c = 1). `guess`, the caller's best starting
/// point (the capacity LRU ran at), is tried first. 0 if even `hi` does not
/// reach it.
inline capacity_search smallest_capacity_reaching(double target, std::size_t guess, std::size_t hi,
                                                  std::size_t precision,
                                                  const std::function<double(std::size_t)>& hit_ratio) {
    capacity_search s;
    if (precision == 0) precision = 1;
    auto reaches = [&](std::size_t c) {
        ++s.replays;
        return hit_ratio(c) >= target;
    };
    std::size_t lo = 0;  // known not to reach (0 = nothing cached: reaches only a target of 0, see below)
    std::size_t up = 0;  // known to reach
    guess = std::clamp<std::size_t>(guess, 1, std::max<std::size_t>(hi, 1));
    if (reaches(guess)) {
        up = guess;
    } else {
        lo = guess;
        for (std::size_t c = guess; up == 0;) {  // double up to hi
            if (c >= hi) return s;
            c = std::min(hi, 2 * c);
            if (reaches(c))
                up = c;
            else
                lo = c;
        }
    }
    while (up - lo > precision) {
        const std::size_t mid = lo + (up - lo) / 2;
        if (mid == 0) break;
        if (reaches(mid))
            up = mid;
        else
            lo = mid;
    }
    s.capacity = up;
    return s;
}

}  // namespace kvpolicy::sim
