// calibrate: fit Pensieve's linear cost model to timings from your GPU.
//
// Ordinary least squares of seconds against context length over measured
// (context_length, seconds) pairs, returning the slope (alpha), the
// intercept, and every residual, so a bad fit is visible rather than silent.
//
// In `alpha * context_length + beta + const_non_attention` the two constants
// are not separately identifiable from end-to-end timings: any split of the
// intercept fits equally well. So `calibrate` returns their sum as
// `intercept`, and `to_pensieve_linear(const_non_attention)` splits it when
// you know the non-attention constant from a separate measurement (time the
// layer with attention disabled); by default the whole intercept goes to beta.
// Departures from Pensieve (Yu et al., "Stateful Large Language Model Serving
// with Pensieve", EuroSys'25, §4.3.1): none in the model; the fit is a plain
// centred least squares, with no weighting or outlier rejection (inspect
// `residuals` and drop outliers yourself).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/cost/measurement.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"

namespace kvpolicy {

struct calibration_result {
    /// Seconds per token of context.
    double alpha = 0.0;
    /// beta + const_non_attention, in seconds (see the header paragraph).
    double intercept = 0.0;
    /// [samples] measured minus fitted seconds, in the order of the input.
    std::vector<double> residuals;
    /// sqrt(mean(residual^2)), in seconds.
    double rms_residual = 0.0;

    /// Fitted seconds at `context_length`.
    [[nodiscard]] double predict(std::uint64_t context_length) const noexcept {
        return alpha * static_cast<double>(context_length) + intercept;
    }

    /// The fitted model, with `const_non_attention` taken as known and
    /// beta = intercept - const_non_attention.
    /// Throws: config_error if that leaves a negative or non-finite parameter
    /// (a negative slope or intercept means the timings do not follow the
    /// linear model: look at the residuals, or use measured_table).
    [[nodiscard]] pensieve_linear to_pensieve_linear(double const_non_attention = 0.0) const {
        return pensieve_linear(
            {.alpha = alpha, .beta = intercept - const_non_attention, .const_non_attention = const_non_attention});
    }
};

/// Least-squares fit of seconds = alpha * context_length + intercept.
/// Complexity: O(samples), two passes.
/// Throws: config_error if a time is NaN, infinite or negative, or fewer than
/// two distinct context lengths are given (a slope needs two).
[[nodiscard]] inline calibration_result calibrate(std::span<const cost_measurement> samples) {
    for (std::size_t i = 0; i < samples.size(); ++i) {
        const double s = samples[i].seconds;
        if (std::isnan(s) || std::isinf(s) || s < 0.0)
            throw config_error("calibrate: sample " + std::to_string(i) + " (context_length " +
                               std::to_string(samples[i].context_length) + ") has seconds = " + std::to_string(s) +
                               "; give finite times >= 0");
    }
    bool distinct = false;
    for (const auto& s : samples) distinct = distinct || s.context_length != samples.front().context_length;
    if (!distinct)
        throw config_error("calibrate: " + std::to_string(samples.size()) +
                           " samples with fewer than 2 distinct context lengths; time at least two lengths "
                           "(a spread across the serving range fits best)");

    // Centred sums: subtracting the means first keeps the normal equations
    // well conditioned when lengths are large and close together.
    const double n = static_cast<double>(samples.size());
    double mean_x = 0.0, mean_y = 0.0;
    for (const auto& s : samples) {
        mean_x += static_cast<double>(s.context_length);
        mean_y += s.seconds;
    }
    mean_x /= n;
    mean_y /= n;
    double sxx = 0.0, sxy = 0.0;
    for (const auto& s : samples) {
        const double dx = static_cast<double>(s.context_length) - mean_x;
        sxx += dx * dx;
        sxy += dx * (s.seconds - mean_y);
    }
    if (!(sxx > 0.0))
        throw config_error(
            "calibrate: the context lengths are too large and close to tell apart in double "
            "precision; time lengths that differ by more");
    calibration_result r;
    r.alpha = sxy / sxx;
    r.intercept = mean_y - r.alpha * mean_x;
    r.residuals.reserve(samples.size());
    double ss = 0.0;
    for (const auto& s : samples) {
        const double e = s.seconds - r.predict(s.context_length);
        r.residuals.push_back(e);
        ss += e * e;
    }
    r.rms_residual = std::sqrt(ss / n);
    return r;
}

}  // namespace kvpolicy
