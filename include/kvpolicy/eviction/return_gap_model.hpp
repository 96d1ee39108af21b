// return_gap_model: predicts how long a session stays away after a request
// finishes, from what an engine knows then: how many tokens the request
// generated and the session's past gaps. Learned online over every session.
//
// Model: log(gap) = w . x with
//   x = (1, log(1 + output tokens), log(latest gap), log(mean gap), no gap yet)
// (the two gap features 0 and the last one 1 for a session on its first
// request), fitted by ridge least squares over exponentially decayed
// samples: A = sum lambda^age x x^T, b = sum lambda^age x y, and
// w = (A + ridge I)^-1 b, solved after each sample (5x5, Gaussian
// elimination with partial pivoting).
//
// Why these features. The time to a session's next request is the time its
// user reads the answer, or its agent runs the tool the answer called, plus
// the decode of the answer itself: all grow with the answer's length. On the
// agentic trace the output length of the request before a gap is the best
// single predictor found (rank correlation 0.46 with the gap; the previous
// gap 0.35, the session's mean gap 0.23). Gaps are heavy-tailed and scale
// with the clock, so the fit is in logs: the intercept absorbs the unit and
// a workload whose gaps do not depend on output length learns a zero weight
// for it and falls back to the session's own history.
//
// Why decayed sums rather than recursive least squares: RLS with forgetting
// divides its covariance by lambda every step, which overflows along a
// feature that stops varying (every session has a gap after warm-up, so the
// "no gap yet" column goes constant); the decayed sums stay bounded and the
// constant ridge keeps the solve well posed.
//
// Cost: O(1) per sample and per prediction (25 multiply-adds to update, a
// 5x5 solve per sample), 280 bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

class return_gap_model {
public:
    static constexpr std::size_t features = 5;
    using vector_type = std::array<double, features>;

    struct config_type {
        /// Use the model's predictions; false: callers fall back to their own.
        bool enabled = true;
        /// Samples are forgotten with weight (1 - 1/window) per new sample.
        double window = 4096.0;
        /// Samples before predictions are made.
        std::uint64_t min_samples = 64;
        /// Ridge added to the normal equations' diagonal.
        double ridge = 1.0;
    };

    return_gap_model() = default;

    /// Throws: config_error naming `policy` if `window` is below 2 or not
    /// finite, `ridge` is not positive and finite, or `min_samples` is 0.
    return_gap_model(const config_type& config, const char* policy) : config_(validated(config, policy)) {}

    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
    [[nodiscard]] const vector_type& weights() const noexcept { return w_; }
    /// Whether predict() answers.
    [[nodiscard]] bool ready() const noexcept { return config_.enabled && samples_ >= config_.min_samples; }

    /// The features of a session whose latest request generated
    /// `output_tokens`, after gaps with latest `latest_gap` and running mean
    /// `mean_gap` (`has_gap` false: none yet; both ignored). Gaps in clock
    /// ticks, > 0.
    [[nodiscard]] static vector_type features_of(std::uint64_t output_tokens, bool has_gap, double latest_gap,
                                                 double mean_gap) noexcept {
        const double out = std::log1p(static_cast<double>(output_tokens));
        if (!has_gap) return {1.0, out, 0.0, 0.0, 1.0};
        return {1.0, out, std::log(latest_gap), std::log(mean_gap), 0.0};
    }

    /// A gap of `gap` ticks (> 0) observed after features `x`.
    void observe(const vector_type& x, double gap) noexcept {
        if (!(gap > 0.0) || !std::isfinite(gap)) return;
        const double y = std::log(gap);
        const double keep = 1.0 - 1.0 / config_.window;
        for (std::size_t i = 0; i < features; ++i) {
            b_[i] = keep * b_[i] + x[i] * y;
            for (std::size_t j = 0; j < features; ++j) a_[i][j] = keep * a_[i][j] + x[i] * x[j];
        }
        ++samples_;
        solve();
    }

    /// The predicted gap in ticks after features `x`; only when ready().
    [[nodiscard]] double predict(const vector_type& x) const noexcept {
        double log_gap = 0.0;
        for (std::size_t i = 0; i < features; ++i) log_gap += w_[i] * x[i];
        return std::exp(std::min(log_gap, 43.0));  // e^43 ticks: beyond any trace, finite as a timestamp
    }

private:
    static config_type validated(const config_type& c, const char* policy) {
        if (!(c.window >= 2.0) || !std::isfinite(c.window))
            throw config_error(std::string(policy) + ": return gap window " + std::to_string(c.window) +
                               " must be finite and >= 2 (samples a gap fit remembers; 4096 is the default)");
        if (!(c.ridge > 0.0) || !std::isfinite(c.ridge))
            throw config_error(std::string(policy) + ": return gap ridge " + std::to_string(c.ridge) +
                               " must be finite and > 0 (1 is the default)");
        if (c.min_samples == 0)
            throw config_error(std::string(policy) + ": return gap min_samples must be >= 1 (64 is the default)");
        return c;
    }

    // w = (A + ridge I)^-1 b by Gaussian elimination with partial pivoting;
    // A + ridge I is symmetric positive definite, so no pivot vanishes.
    void solve() noexcept {
        std::array<std::array<double, features + 1>, features> m{};
        for (std::size_t i = 0; i < features; ++i) {
            for (std::size_t j = 0; j < features; ++j) m[i][j] = a_[i][j] + (i == j ? config_.ridge : 0.0);
            m[i][features] = b_[i];
        }
        for (std::size_t c = 0; c < features; ++c) {
            std::size_t p = c;
            for (std::size_t r = c + 1; r < features; ++r)
                if (std::abs(m[r][c]) > std::abs(m[p][c])) p = r;
            std::swap(m[c], m[p]);
            for (std::size_t r = c + 1; r < features; ++r) {
                const double f = m[r][c] / m[c][c];
                for (std::size_t k = c; k <= features; ++k) m[r][k] -= f * m[c][k];
            }
        }
        for (std::size_t c = features; c-- > 0;) {
            double s = m[c][features];
            for (std::size_t k = c + 1; k < features; ++k) s -= m[c][k] * w_[k];
            w_[c] = s / m[c][c];
        }
    }

    config_type config_{};
    std::array<std::array<double, features>, features> a_{};
    vector_type b_{};
    vector_type w_{};
    std::uint64_t samples_ = 0;
};

}  // namespace kvpolicy
