// Keyword options of a policy by name: `EvictionPolicy("s3fifo", 1000,
// small_fraction=0.2)` and `TieredCache(..., gpu_policy_options={...})`.
//
// C++20 cannot list an aggregate's fields, so each policy with options names
// them here, once; a policy without options takes none, and an unknown
// option is a config_error that lists the accepted ones. The policy's own
// constructor still validates the values (a fraction outside [0, 1]).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kvpolicy/eviction/registry.hpp>

namespace kvpolicy::python {

struct policy_option {
    std::string name;
    double value = 0;
};
using policy_options = std::vector<policy_option>;

template <class Config>
struct config_field {
    std::string_view name;
    void (*set)(Config&, std::string_view policy, double value);
};

namespace detail {
// An integer option given as a Python number: refused unless whole and in range.
template <class Int>
Int whole(std::string_view policy, std::string_view option, double v) {
    if (!std::isfinite(v) || v < 0 || v != std::floor(v) || v > static_cast<double>(std::numeric_limits<Int>::max()))
        throw config_error(std::string(policy) + ": option " + std::string(option) + " = " + std::to_string(v) +
                           " is not a whole number >= 0; give an integer");
    return static_cast<Int>(v);
}
}  // namespace detail

// The options of each policy that has any; the names are the C++ config fields'.
inline std::vector<config_field<s3fifo::config_type>> fields_of(std::type_identity<s3fifo>) {
    using C = s3fifo::config_type;
    return {{"small_fraction", [](C& c, std::string_view, double v) { c.small_fraction = v; }},
            {"ghost_fraction", [](C& c, std::string_view, double v) { c.ghost_fraction = v; }},
            {"move_to_main_threshold",
             [](C& c, std::string_view p, double v) {
                 c.move_to_main_threshold = detail::whole<std::uint32_t>(p, "move_to_main_threshold", v);
             }},
            {"fill_main_before_first_eviction",
             [](C& c, std::string_view, double v) { c.fill_main_before_first_eviction = v != 0; }}};
}
inline std::vector<config_field<lirs::config_type>> fields_of(std::type_identity<lirs>) {
    using C = lirs::config_type;
    return {{"hir_fraction", [](C& c, std::string_view, double v) { c.hir_fraction = v; }},
            {"max_nonresident", [](C& c, std::string_view p, double v) {
                 c.max_nonresident = detail::whole<std::size_t>(p, "max_nonresident", v);
             }}};
}
inline std::vector<config_field<w_tinylfu::config_type>> fields_of(std::type_identity<w_tinylfu>) {
    using C = w_tinylfu::config_type;
    return {{"window_fraction", [](C& c, std::string_view, double v) { c.window_fraction = v; }},
            {"protected_fraction", [](C& c, std::string_view, double v) { c.protected_fraction = v; }},
            {"sample_factor", [](C& c, std::string_view p, double v) {
                 c.sample_factor = detail::whole<std::uint32_t>(p, "sample_factor", v);
             }}};
}
inline std::vector<config_field<slru::config_type>> fields_of(std::type_identity<slru>) {
    using C = slru::config_type;
    return {{"segments", [](C& c, std::string_view p, double v) { c.segments = detail::whole<std::size_t>(p, "segments", v); }}};
}
inline std::vector<config_field<session_aware_lru::config_type>> fields_of(std::type_identity<session_aware_lru>) {
    using C = session_aware_lru::config_type;
    return {{"far_factor", [](C& c, std::string_view, double v) { c.far_factor = v; }},
            {"gap_weight", [](C& c, std::string_view, double v) { c.gap_weight = v; }},
            {"max_sessions",
             [](C& c, std::string_view p, double v) { c.max_sessions = detail::whole<std::size_t>(p, "max_sessions", v); }},
            // 0 keeps far_factor fixed; otherwise the margin is learned from it.
            {"tune_margin", [](C& c, std::string_view, double v) { c.tuner.enabled = v != 0; }},
            // 0 ignores the output tokens releases carry (mean gaps only).
            {"predict_gaps", [](C& c, std::string_view, double v) { c.gaps.enabled = v != 0; }},
            {"gap_min_samples", [](C& c, std::string_view p, double v) {
                 c.gaps.min_samples = detail::whole<std::uint64_t>(p, "gap_min_samples", v);
             }}};
}
inline std::vector<config_field<lrfu::config_type>> fields_of(std::type_identity<lrfu>) {
    using C = lrfu::config_type;
    return {{"half_life", [](C& c, std::string_view, double v) { c.half_life = v; }},
            {"ghost_factor", [](C& c, std::string_view, double v) { c.ghost_factor = v; }}};
}
// The experts keep their preset half-lives; the options tune the choice.
inline std::vector<config_field<adaptive_kv::config_type>> fields_of(std::type_identity<adaptive_kv>) {
    using C = adaptive_kv::config_type;
    return {{"shadow_items",
             [](C& c, std::string_view p, double v) { c.shadow_items = detail::whole<std::size_t>(p, "shadow_items", v); }},
            {"window", [](C& c, std::string_view, double v) { c.window = v; }},
            {"switch_sigmas", [](C& c, std::string_view, double v) { c.switch_sigmas = v; }},
            {"switch_gain", [](C& c, std::string_view, double v) { c.switch_gain = v; }},
            {"large_capacity",
             [](C& c, std::string_view p, double v) {
                 c.large_capacity = detail::whole<std::size_t>(p, "large_capacity", v);
             }},
            {"large_shadow_items", [](C& c, std::string_view p, double v) {
                 c.large_shadow_items = detail::whole<std::size_t>(p, "large_shadow_items", v);
             }}};
}
inline std::vector<config_field<two_q::config_type>> fields_of(std::type_identity<two_q>) {
    using C = two_q::config_type;
    return {{"kin", [](C& c, std::string_view, double v) { c.kin = v; }},
            {"kout", [](C& c, std::string_view, double v) { c.kout = v; }}};
}
// retention_value's cost model (pensieve_linear): seconds per context token,
// per block, and outside attention.
namespace detail {
template <class Change>
void change_cost(retention_value<>::config_type& c, Change change) {
    pensieve_linear::config_type p{.alpha = c.cost.alpha(), .beta = c.cost.beta(),
                                   .const_non_attention = c.cost.const_non_attention()};
    change(p);
    c.cost = pensieve_linear(p);  // validates: a NaN or negative value is a config_error
}
}  // namespace detail
inline std::vector<config_field<retention_value<>::config_type>> fields_of(std::type_identity<retention_value<>>) {
    using C = retention_value<>::config_type;
    return {{"alpha", [](C& c, std::string_view, double v) { detail::change_cost(c, [&](auto& p) { p.alpha = v; }); }},
            {"beta", [](C& c, std::string_view, double v) { detail::change_cost(c, [&](auto& p) { p.beta = v; }); }},
            {"const_non_attention", [](C& c, std::string_view, double v) {
                 detail::change_cost(c, [&](auto& p) { p.const_non_attention = v; });
             }}};
}

/// queue_aware<Base> takes Base's options (its config is Base's).
template <class Base>
auto fields_of(std::type_identity<queue_aware<Base>>) -> decltype(fields_of(std::type_identity<Base>{})) {
    return fields_of(std::type_identity<Base>{});
}

template <class P>
concept has_options = requires { fields_of(std::type_identity<P>{}); };

/// The options policy `P` accepts, by name, in declaration order.
template <class P>
std::vector<std::string> option_names() {
    std::vector<std::string> out;
    if constexpr (has_options<P>)
        for (const auto& f : fields_of(std::type_identity<P>{})) out.emplace_back(f.name);
    return out;
}

/// `P`'s config from keyword options. Throws: config_error naming an unknown
/// option and the accepted ones (or that the policy takes none).
template <class P>
typename P::config_type make_config(std::span<const policy_option> options) {
    typename P::config_type config{};
    if (options.empty()) return config;
    if constexpr (!has_options<P>) {
        throw config_error(std::string(P::name) + ": takes no options, got '" + options.front().name +
                           "'; policies with options: lirs, retention_value, s3fifo, slru, two_q, w_tinylfu");
    } else {
        const auto fields = fields_of(std::type_identity<P>{});
        for (const policy_option& o : options) {
            bool found = false;
            for (const auto& f : fields)
                if (f.name == o.name) {
                    f.set(config, P::name, o.value);
                    found = true;
                }
            if (!found) {
                std::string names;
                for (const auto& f : fields) names += (names.empty() ? "" : ", ") + std::string(f.name);
                throw config_error(std::string(P::name) + ": unknown option '" + o.name + "'; accepted: " + names);
            }
        }
    }
    return config;
}

}  // namespace kvpolicy::python
