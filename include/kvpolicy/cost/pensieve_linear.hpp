// pensieve_linear: Pensieve's recompute-cost model, linear in context length.
//
//     cost(context_length) = alpha * context_length + beta + const_non_attention
//
// alpha * context_length + beta is the attention part (attention over an item
// reads every token before it), const_non_attention the rest of the layer
// (projections, MLP), which does not depend on the context. Use it with
// `retention_value` (its default cost model); fit the parameters to your GPU
// with `calibrate` (cost/calibrate.hpp), or use `measured_table` where the
// measured curve is visibly not linear.
//
// From Yu et al., "Stateful Large Language Model Serving with Pensieve"
// (EuroSys'25), §4.3.1, in seed 000's form (the non-attention constant as a
// separate term). Departures: parameters that cannot be a cost (NaN,
// infinite, negative, or all zero, which would make every item free and
// eviction blind to recency) are rejected at construction; the defaults are
// seed 000's illustrative numbers (alpha = 0.001 s/token, beta = 0.01 s,
// const_non_attention = 0.005 s), not measurements: calibrate before drawing
// conclusions.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// Parameters of `pensieve_linear`, in seconds (alpha: seconds per token).
struct pensieve_linear_config {
    double alpha = 0.001;
    double beta = 0.01;
    double const_non_attention = 0.005;

    friend constexpr bool operator==(const pensieve_linear_config&, const pensieve_linear_config&) noexcept = default;
};

class pensieve_linear {
public:
    using config_type = pensieve_linear_config;
    static constexpr auto options =
        std::tuple{option{"alpha", &config_type::alpha, non_negative, "seconds of prefill per token of context"},
                   option{"beta", &config_type::beta, non_negative, "seconds of prefill per item"},
                   option{"const_non_attention", &config_type::const_non_attention, non_negative,
                          "seconds per item outside attention"}};

    static constexpr std::string_view name = "pensieve_linear";

    /// The seed's illustrative parameters (see the header paragraph).
    pensieve_linear() : pensieve_linear(config_type{}) {}

    /// Throws: config_error naming the parameter if any is NaN, infinite or
    /// negative, or if all three are zero.
    explicit pensieve_linear(const config_type& c) : config_(validated(c)) {}

    /// Seconds to recompute one item with `context_length` tokens before it:
    /// (alpha * context_length + beta) + const_non_attention, in that order
    /// (reference models repeat the order to get bit-identical scores).
    [[nodiscard]] double cost(std::uint64_t context_length) const noexcept {
        return (config_.alpha * static_cast<double>(context_length) + config_.beta) + config_.const_non_attention;
    }

    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    [[nodiscard]] double alpha() const noexcept { return config_.alpha; }
    [[nodiscard]] double beta() const noexcept { return config_.beta; }
    [[nodiscard]] double const_non_attention() const noexcept { return config_.const_non_attention; }

    friend bool operator==(const pensieve_linear&, const pensieve_linear&) noexcept = default;

private:
    static void check(double v, const char* param) {
        if (std::isnan(v) || std::isinf(v) || v < 0.0)
            throw config_error(std::string("pensieve_linear: ") + param + " = " + std::to_string(v) +
                               " is not a cost; give a finite value >= 0 (seconds" +
                               (std::string_view(param) == "alpha" ? " per token" : "") +
                               "), e.g. from kvpolicy::calibrate");
    }
    static config_type validated(const config_type& c) {
        check(c.alpha, "alpha");
        check(c.beta, "beta");
        check(c.const_non_attention, "const_non_attention");
        if (c.alpha == 0.0 && c.beta == 0.0 && c.const_non_attention == 0.0)
            throw config_error(
                "pensieve_linear: alpha, beta and const_non_attention are all 0, so every item would cost nothing "
                "and eviction would ignore recency; give at least one positive parameter (or use unit_cost)");
        return c;
    }

    config_type config_;
};

static_assert(cost_model<pensieve_linear>);

}  // namespace kvpolicy
