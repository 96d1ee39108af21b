// A policy's options, declared once beside its config_type: name, type,
// range, one line of help; the default is read from `config_type{}`, never
// restated. Every front end (kvpolicy-sim's --help, Python's
// `EvictionPolicy(name, capacity, **options)` and `policy_options(name)`,
// the engine adapters, the docs' policy table) reads this list.
//
//     struct config_type { double small_fraction = 0.10; std::uint32_t threshold = 2; };
//     static constexpr auto options = std::tuple{
//         option{"small_fraction", &config_type::small_fraction, {0.0, 1.0}, "share of the small FIFO"},
//         option{"threshold", &config_type::threshold, {1, 3}, "hits that promote"}};
//
// An option that is not a plain member of the config (a nested switch, a
// value a model validates when it is rebuilt) is an `option_fn`: the same
// fields with a getter and a setter. `make_config<P>(values)` builds P's
// config from (name, number) pairs as a command line or Python gives them,
// checking each against its declaration: an integer must be whole, every
// value inside its range; `describe_options<P>()` lists them for help texts.
// The policy's constructor still checks what involves several options.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// The values an option accepts, both ends included.
struct option_range {
    double min = -std::numeric_limits<double>::infinity();
    double max = std::numeric_limits<double>::infinity();
};

/// From `lo` to infinity (for an integer: to the most its type holds).
[[nodiscard]] constexpr option_range at_least(double lo) noexcept {
    return {lo, std::numeric_limits<double>::infinity()};
}
/// From 0 to infinity: a share, a time, a cost.
inline constexpr option_range non_negative = at_least(0.0);

/// An option that is a plain member of `Config`.
template <class Config, class T>
struct option {
    using config_type = Config;
    using value_type = T;
    using member_pointer = T Config::*;
    std::string_view name;
    member_pointer member;
    option_range range;
    std::string_view help;

    [[nodiscard]] T get(const Config& c) const { return c.*member; }
    void set(Config& c, T v) const { c.*member = v; }
};
template <class Config, class T>
option(std::string_view, T Config::*, option_range, std::string_view) -> option<Config, T>;

/// An option read and written through functions (a nested member, a model
/// rebuilt and validated when one of its parameters changes).
template <class Config, class T>
struct option_fn {
    using config_type = Config;
    using value_type = T;
    std::string_view name;
    T (*getter)(const Config&);
    void (*setter)(Config&, T);
    option_range range;
    std::string_view help;

    [[nodiscard]] T get(const Config& c) const { return getter(c); }
    void set(Config& c, T v) const { setter(c, v); }
};

/// Whether P declares its options (`static constexpr auto options`).
template <class P>
concept declares_options = requires {
    P::options;
};

/// P's options: its declared tuple, or an empty one.
template <class P>
[[nodiscard]] constexpr auto options_of() noexcept {
    if constexpr (declares_options<P>)
        return P::options;
    else
        return std::tuple<>{};
}

namespace detail {
template <class Outer, class M>
Outer owner_of(M Outer::*);

template <auto Member, class Inner, std::size_t I>
constexpr auto lifted_option() {
    constexpr const auto& o = std::get<I>(Inner::options);
    using Outer = decltype(owner_of(Member));
    using T = typename std::remove_cvref_t<decltype(o)>::value_type;
    return option_fn<Outer, T>{
        o.name, [](const Outer& c) -> T { return std::get<I>(Inner::options).get((c.*Member).config()); },
        [](Outer& c, T v) {
            auto inner = (c.*Member).config();
            std::get<I>(Inner::options).set(inner, v);
            c.*Member = Inner(inner);  // Inner validates its parameters together
        },
        o.range, o.help};
}
}  // namespace detail

/// The options of `Inner` (a model with `config()` and a constructor from its
/// config_type) held at `Member` of an outer config, as the outer config's:
/// retention_value offers its cost model's parameters so.
template <auto Member, class Inner>
[[nodiscard]] constexpr auto options_through() {
    return []<std::size_t... I>(std::index_sequence<I...>) {
        return std::tuple{detail::lifted_option<Member, Inner, I>()...};
    }
    (std::make_index_sequence<std::tuple_size_v<decltype(options_of<Inner>())>>{});
}

/// One option as a command line or Python gives it: a name and a number
/// (a flag is 0 or not 0).
struct option_value {
    std::string name;
    double value = 0;
};

/// One option as help texts and Python show it.
struct option_description {
    std::string_view name;
    std::string_view type;  ///< "float", "int" or "bool"
    double default_value = 0;
    option_range range;
    std::string_view help;
};

namespace detail {

template <class T>
[[nodiscard]] constexpr std::string_view option_type_name() noexcept {
    if constexpr (std::same_as<T, bool>)
        return "bool";
    else if constexpr (std::integral<T>)
        return "int";
    else
        return "float";
}

/// The declared range, narrowed to what T holds.
template <class T>
[[nodiscard]] inline option_range effective_range(option_range r) noexcept {
    if constexpr (std::same_as<T, bool>) {
        return {0.0, 1.0};
    } else if constexpr (std::integral<T>) {
        // The largest double T holds: 2^64 - 1 rounds up to 2^64, one past uint64_t.
        constexpr int digits = std::numeric_limits<T>::digits;
        const double lo = static_cast<double>(std::numeric_limits<T>::min());
        const double hi = digits <= std::numeric_limits<double>::digits
                              ? static_cast<double>(std::numeric_limits<T>::max())
                              : std::ldexp(1.0, digits) - std::ldexp(1.0, digits - std::numeric_limits<double>::digits);
        return {r.min < lo ? lo : r.min, r.max > hi ? hi : r.max};
    } else {
        return r;
    }
}

}  // namespace detail

/// A number as messages show it: the shortest text that reads back the same
/// ("0.25", "1e+20", "inf", "nan").
[[nodiscard]] inline std::string option_number(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

/// "[0, 1]", "[1, 255]", "[0, inf]".
[[nodiscard]] inline std::string option_range_text(option_range r) {
    return "[" + option_number(r.min) + ", " + option_number(r.max) + "]";
}

/// "a, b, c": the names P accepts, in declaration order.
template <class P>
[[nodiscard]] std::string option_names_text() {
    std::string out;
    std::apply([&](const auto&... o) { ((out += (out.empty() ? "" : ", ") + std::string(o.name)), ...); },
               options_of<P>());
    return out;
}

/// P's options, in declaration order, each default read from `config_type{}`
/// (none for a type that declares none, such as vLLM's own orders).
template <class P>
[[nodiscard]] std::vector<option_description> describe_options() {
    std::vector<option_description> out;
    if constexpr (declares_options<P>) {
        const typename P::config_type defaults{};
        std::apply(
            [&](const auto&... o) {
                [[maybe_unused]] const auto add = [&](const auto& opt) {
                    using T = typename std::remove_cvref_t<decltype(opt)>::value_type;
                    out.push_back({opt.name, detail::option_type_name<T>(), static_cast<double>(opt.get(defaults)),
                                   detail::effective_range<T>(opt.range), opt.help});
                };
                (add(o), ...);
            },
            P::options);
    }
    return out;
}

/// Sets option `opt` of `config` to `v`, as policy `policy` names it.
/// Throws: config_error "POLICY: option NAME = V is not a whole number; give
/// an integer in [MIN, MAX]" for an integer option given a fraction (or a
/// NaN / infinity), "POLICY: option NAME = V is outside [MIN, MAX]" for a
/// value outside the range; `config` is unchanged then.
template <class Option>
void set_option(const Option& opt, typename Option::config_type& config, std::string_view policy, double v) {
    using T = typename Option::value_type;
    const option_range r = detail::effective_range<T>(opt.range);
    const auto where = [&] {
        return std::string(policy) + ": option " + std::string(opt.name) + " = " + option_number(v);
    };
    if constexpr (std::same_as<T, bool>) {
        if (std::isnan(v)) throw config_error(where() + " is not a flag; give 0 (false) or 1 (true)");
        opt.set(config, v != 0);  // as a flag always read: any number but 0 is true
    } else {
        if constexpr (std::integral<T>) {
            if (!std::isfinite(v) || v != std::floor(v))
                throw config_error(where() + " is not a whole number; give an integer in " + option_range_text(r));
        }
        if (!(v >= r.min && v <= r.max)) throw config_error(where() + " is outside " + option_range_text(r));
        opt.set(config, static_cast<T>(v));
    }
}

/// Sets option `name` of P's `config`. Throws: config_error naming P and the
/// option (see set_option), or for a name P does not declare: "POLICY:
/// unknown option 'NAME'; accepted: A, B" or "POLICY: takes no options, got
/// 'NAME'".
template <class P>
void set_option(typename P::config_type& config, std::string_view name, double value) {
    bool found = false;
    std::apply(
        [&](const auto&... o) {
            ((!found && o.name == name ? (set_option(o, config, P::name, value), found = true) : false), ...);
        },
        options_of<P>());
    if (found) return;
    if constexpr (std::tuple_size_v<decltype(options_of<P>())> == 0)
        throw config_error(std::string(P::name) + ": takes no options, got '" + std::string(name) + "'");
    else
        throw config_error(std::string(P::name) + ": unknown option '" + std::string(name) +
                           "'; accepted: " + option_names_text<P>());
}

/// P's config from `config_type{}` with `values` set, in order. Throws: what
/// set_option throws, for the first bad value.
template <class P>
[[nodiscard]] typename P::config_type make_config(std::span<const option_value> values) {
    typename P::config_type config{};
    for (const option_value& v : values) set_option<P>(config, v.name, v.value);
    return config;
}

}  // namespace kvpolicy
