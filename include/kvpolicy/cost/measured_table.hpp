// measured_table: recompute cost interpolated from measured timings.
//
// A piecewise-linear curve through (context_length, seconds) points measured
// on the target GPU. Use it where `pensieve_linear` fits badly (kernels that
// switch algorithm at some length, padding steps, a flat region before the
// attention term dominates); `calibrate` reports the linear fit's residuals
// so you can tell.
//
// Between two points the cost is interpolated linearly; at a point it is that
// point's value. Outside the measured range:
// - below the first point: the first point's value (flat), because extending
//   the first segment downwards could reach negative costs;
// - above the last point: the last segment extended, with its slope clamped
//   at 0 (attention keeps growing with context, but a noisy downward last
//   segment must not turn into negative costs). With one point the cost is
//   that value everywhere.
// Departure from Pensieve (Yu et al., "Stateful Large Language Model Serving
// with Pensieve", EuroSys'25, §4.3.1), which uses a linear model: the table
// is an alternative model of the same seam, not the paper's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/cost/measurement.hpp"

namespace kvpolicy {

class measured_table {
public:
    static constexpr std::string_view name = "measured_table";

    /// Effects: keeps the points sorted by context length (any input order).
    /// Throws: config_error if there is no point, a time is NaN, infinite or
    /// negative, or two points share a context length (average them first).
    explicit measured_table(std::span<const cost_measurement> points) : points_(validated(points)) {}
    measured_table(std::initializer_list<cost_measurement> points)
            : points_(validated(std::span<const cost_measurement>(points.begin(), points.size()))) {}

    /// Complexity: O(log points).
    [[nodiscard]] double cost(std::uint64_t context_length) const noexcept {
        const auto after =
            std::upper_bound(points_.begin(), points_.end(), context_length,
                             [](std::uint64_t len, const cost_measurement& p) { return len < p.context_length; });
        if (after == points_.begin()) return points_.front().seconds;  // below the range: flat
        const auto at = after - 1;
        if (at->context_length == context_length) return at->seconds;
        if (after == points_.end()) {
            if (points_.size() == 1) return at->seconds;
            const auto prev = at - 1;
            const double slope = std::max(
                0.0, (at->seconds - prev->seconds) / static_cast<double>(at->context_length - prev->context_length));
            return at->seconds + slope * static_cast<double>(context_length - at->context_length);
        }
        // Differences of lengths are taken in integers, so the fraction is
        // exact for lengths beyond 2^53 too.
        const double t = static_cast<double>(context_length - at->context_length) /
                         static_cast<double>(after->context_length - at->context_length);
        return at->seconds + t * (after->seconds - at->seconds);
    }

    /// The points, sorted by context length.
    [[nodiscard]] std::span<const cost_measurement> points() const noexcept { return points_; }

    friend bool operator==(const measured_table&, const measured_table&) = default;

private:
    static std::vector<cost_measurement> validated(std::span<const cost_measurement> in) {
        if (in.empty())
            throw config_error("measured_table: no measurements; give at least one (context_length, seconds) point");
        for (std::size_t i = 0; i < in.size(); ++i) {
            const double s = in[i].seconds;
            if (std::isnan(s) || std::isinf(s) || s < 0.0)
                throw config_error("measured_table: point " + std::to_string(i) + " (context_length " +
                                   std::to_string(in[i].context_length) + ") has seconds = " + std::to_string(s) +
                                   "; give a finite time >= 0");
        }
        std::vector<cost_measurement> pts(in.begin(), in.end());
        std::stable_sort(pts.begin(), pts.end(), [](const cost_measurement& a, const cost_measurement& b) {
            return a.context_length < b.context_length;
        });
        for (std::size_t i = 1; i < pts.size(); ++i)
            if (pts[i].context_length == pts[i - 1].context_length)
                throw config_error("measured_table: two points at context_length " +
                                   std::to_string(pts[i].context_length) + "; give one per length (average repeats)");
        return pts;
    }

    std::vector<cost_measurement> points_;  // [points] sorted by context_length, lengths distinct
};

static_assert(cost_model<measured_table>);

}  // namespace kvpolicy
