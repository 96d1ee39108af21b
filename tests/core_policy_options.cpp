// The registry's options: each policy's declared options (name, type, range,
// help, the default read from config_type{}), make_config's checks and
// messages, and the names of both lists (eviction_policies, vLLM's orders).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/engine/vllm_orders.hpp"
#include "kvpolicy/eviction/registry.hpp"

using namespace kvpolicy;

namespace {

template <class P>
std::vector<option_value> one(std::string name, double v) {
    return {{std::move(name), v}};
}

/// A value inside the option's range that is not its default.
double other_value(const option_description& d) {
    if (d.type == "bool") return d.default_value != 0 ? 0.0 : 1.0;
    const double hi = std::isfinite(d.range.max) ? d.range.max : d.range.min + 8;
    double v = d.type == "int" ? std::floor((d.range.min + std::min(hi, d.range.min + 8)) / 2) : (d.range.min + hi) / 2;
    if (v == d.default_value) v = d.type == "int" ? v + 1 : (v + hi) / 2;
    return v;
}

}  // namespace

TEST_CASE("every registered name is unique across eviction_policies and vLLM's orders", "[registry]") {
    std::set<std::string_view> seen;
    std::size_t count = 0;
    const auto add = [&](const auto& names) {
        for (std::string_view n : names) {
            INFO(n);
            CHECK(seen.insert(n).second);
            ++count;
        }
    };
    add(names_of<eviction_policies>());
    add(names_of<engine::vllm_cache_policies>());
    add(names_of<engine::vllm_0_11_orders>());
    CHECK(seen.size() == count);
    CHECK(names_of<engine::vllm_cache_policies>() == std::array<std::string_view, 2>{"vllm_lru", "vllm_arc"});
    CHECK(names_of<engine::vllm_0_11_orders>() == std::array<std::string_view, 2>{"vllm_0_11_lru", "vllm_0_11_arc"});
    // The 0.11-0.20 OffloadingManager's users name its orders as vLLM does.
    CHECK(engine::vllm_0_11_name("vllm_lru") == "vllm_0_11_lru");
    CHECK(engine::vllm_0_11_name("vllm_arc") == "vllm_0_11_arc");
    CHECK(engine::vllm_0_11_name("s3fifo") == "s3fifo");
}

TEST_CASE("each option's default is config_type{}'s, and a value in range lands in the config", "[registry]") {
    std::size_t options = 0;
    for_each_type<eviction_policies>([&]<class P>() {
        const auto described = describe_options<P>();
        const typename P::config_type defaults{};
        std::size_t i = 0;
        std::apply(
            [&](const auto&... o) {
                (
                    [&] {
                        const option_description& d = described[i++];
                        INFO(std::string(P::name) + "." + std::string(o.name));
                        CHECK(d.name == o.name);
                        CHECK(d.default_value == static_cast<double>(o.get(defaults)));
                        CHECK(d.range.min <= d.default_value);
                        CHECK(d.default_value <= d.range.max);
                        CHECK(!d.help.empty());
                        const double v = other_value(d);
                        REQUIRE(v != d.default_value);
                        const auto config = make_config<P>(one<P>(std::string(o.name), v));
                        CHECK(static_cast<double>(o.get(config)) == v);
                        ++options;
                    }(),
                    ...);
            },
            options_of<P>());
        CHECK(i == described.size());
    });
    CHECK(options >= 30);  // s3fifo 4, lirs 2, w_tinylfu 3, slru 1, ...
}

TEST_CASE("options that are not plain members reach their place in the config", "[registry]") {
    SECTION("retention_value: pensieve_linear's parameters, rebuilt and validated") {
        const auto c =
            make_config<retention_value<>>(std::vector<option_value>{{"alpha", 0.5}, {"const_non_attention", 0}});
        CHECK(c.cost.alpha() == 0.5);
        CHECK(c.cost.beta() == pensieve_linear_config{}.beta);
        CHECK(c.cost.const_non_attention() == 0);
        CHECK_THROWS_WITH(make_config<retention_value<>>(
                              std::vector<option_value>{{"alpha", 0}, {"beta", 0}, {"const_non_attention", 0}}),
                          Catch::StartsWith("pensieve_linear: alpha, beta and const_non_attention are all 0"));
    }
    SECTION("session_aware_lru: the tuner's and the gap model's switches") {
        const auto c = make_config<session_aware_lru>(
            std::vector<option_value>{{"tune_margin", 0}, {"predict_gaps", 0}, {"gap_min_samples", 7}});
        CHECK(!c.tuner.enabled);
        CHECK(!c.gaps.enabled);
        CHECK(c.gaps.min_samples == 7);
        CHECK(make_config<session_aware_lru>(one<session_aware_lru>("tune_margin", 2)).tuner.enabled);  // a flag: not 0
    }
    SECTION("queue_aware<Base> takes Base's options") {
        CHECK(describe_options<queue_aware<adaptive_kv>>().size() == describe_options<adaptive_kv>().size());
        CHECK(make_config<queue_aware<adaptive_kv>>(one<adaptive_kv>("shadow_items", 99)).shadow_items == 99);
        CHECK(describe_options<queue_aware<lru>>().empty());
    }
    SECTION("a preset's defaults are its own") {
        CHECK(describe_options<adaptive_kv_fast>()[0].default_value == 1024);
        CHECK(describe_options<adaptive_kv>()[0].default_value == 4096);
    }
}

TEST_CASE("make_config refuses a bad option with a message naming it", "[registry]") {
    CHECK_THROWS_WITH(make_config<s3fifo>(one<s3fifo>("small_fraction", 1.5)),
                      "s3fifo: option small_fraction = 1.5 is outside [0, 1]");
    CHECK_THROWS_WITH(make_config<s3fifo>(one<s3fifo>("small_fraction", std::nan(""))),
                      "s3fifo: option small_fraction = nan is outside [0, 1]");
    CHECK_THROWS_WITH(make_config<s3fifo>(one<s3fifo>("move_to_main_threshold", 4)),
                      "s3fifo: option move_to_main_threshold = 4 is outside [1, 3]");
    CHECK_THROWS_WITH(make_config<slru>(one<slru>("segments", 2.5)),
                      "slru: option segments = 2.5 is not a whole number; give an integer in [1, 255]");
    CHECK_THROWS_WITH(make_config<lirs>(one<lirs>("max_nonresident", -1)),
                      "lirs: option max_nonresident = -1 is outside [0, 1073741823]");
    CHECK_THROWS_WITH(make_config<session_aware_lru>(one<session_aware_lru>("max_sessions", 1e300)),
                      "session_aware_lru: option max_sessions = 1e+300 is outside [0, 18446744073709549568]");
    CHECK_THROWS_WITH(make_config<retention_value<>>(one<retention_value<>>("alpha", -1)),
                      "retention_value: option alpha = -1 is outside [0, inf]");
    CHECK_THROWS_WITH(make_config<s3fifo>(one<s3fifo>("smal_fraction", 0.1)),
                      "s3fifo: unknown option 'smal_fraction'; accepted: small_fraction, ghost_fraction, "
                      "move_to_main_threshold, fill_main_before_first_eviction");
    CHECK_THROWS_WITH(make_config<lru>(one<lru>("x", 1)), "lru: takes no options, got 'x'");
    CHECK_THROWS_WITH(make_config<engine::vllm_legacy_arc_order>(one<lru>("small_fraction", 0.1)),
                      "vllm_0_11_arc: takes no options, got 'small_fraction'");
    CHECK_THROWS_WITH(visit_by_name<eviction_policies>(
                          "lru2", []<class P>() {}, "eviction policy"),
                      "unknown eviction policy 'lru2'; accepted: " + joined_names<eviction_policies>());
    CHECK_THROWS_AS(make_config<slru>(one<slru>("segments", 2.5)), config_error);
}
