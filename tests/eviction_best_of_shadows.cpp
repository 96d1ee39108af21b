// best_of_shadows against its naive reference model (reference experts, a
// vector per shadow) on long random operation sequences, with every key in
// the shadows and with a sample; on hand-made workloads it follows LRFU
// where a scan flushes LRU's hot set and LRU where the working set moves on;
// the key sample's rate and size; the configuration errors.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lrfu.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

using lru_or_lrfu = best_of_shadows<lru, lrfu>;

auto shadows_reference(std::size_t capacity, const lru_or_lrfu::config_type& c) {
    auto make = [](std::size_t n) { return std::tuple<ref_lru, ref_lrfu>{ref_lru{}, ref_lrfu(n, 2.0, 4.0)}; };
    return ref_best_of_shadows<ref_lru, ref_lrfu>(capacity, c.shadow_items, c.window, c.switch_sigmas, make,
                                                  c.switch_gain);
}

}  // namespace

TEST_CASE("best_of_shadows chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    // Every key in the shadows (4096 >= capacity), and a quarter of them.
    const std::size_t shadow_items = GENERATE(4096u, 24u);
    const std::size_t capacity = 97;
    // Short windows and low thresholds make the choice move often.
    const double sigmas = GENERATE(0.0, 1.0);
    // A least lead of 2% of the window's references holds some switches back.
    const double gain = GENERATE(0.0, 0.02);
    const lru_or_lrfu::config_type config{
        .shadow_items = shadow_items, .window = 1.0, .switch_sigmas = sigmas, .switch_gain = gain};
    lru_or_lrfu policy(capacity, config);
    auto reference = shadows_reference(capacity, config);
    const auto victims =
        drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed, .key_universe = 4 * capacity + 8},
              &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 1000);
    REQUIRE(policy.switches() > 0);
    REQUIRE(policy.followed() == reference.followed);
}

TEST_CASE(
    "best_of_shadows over lru and session_aware_lru: same victims as the reference, session ends heard by "
    "the expert and its shadow",
    "[eviction][differential]") {
    // The session rule on whenever a session is expected back (margin 0),
    // the gap fit learning within the run; releases carry output tokens and
    // return hints, and the driver ends sessions (policy_driver.hpp).
    using lru_or_sessions = best_of_shadows<lru, session_aware_lru>;
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t shadow_items = GENERATE(4096u, 24u);
    // Random sessions make the two about equally good: low thresholds so
    // that the choice moves.
    const double sigmas = GENERATE(0.0, 0.5);
    const std::size_t capacity = 97;
    const return_gap_model::config_type gaps{.window = 64.0, .min_samples = 8};
    lru_or_sessions::config_type config{.shadow_items = shadow_items, .window = 1.0, .switch_sigmas = sigmas};
    std::get<1>(config.experts) = {.far_factor = 0.0, .tuner = {.enabled = false}, .gaps = gaps};
    lru_or_sessions policy(capacity, config);
    auto make = [&](std::size_t n) {
        return std::tuple<ref_lru, ref_session_aware_lru>{ref_lru{},
                                                          ref_session_aware_lru(n, 0.0, 0.25, 0, false, gaps)};
    };
    ref_best_of_shadows<ref_lru, ref_session_aware_lru> reference(capacity, shadow_items, 1.0, sigmas, make);
    const auto victims = drive(policy,
                               {.capacity = capacity,
                                .operations = 100'000,
                                .seed = seed,
                                .key_universe = 4 * capacity + 8,
                                .sessions = 7,
                                .foreign_every = 8},
                               &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 1000);
    INFO("seed " << seed << " shadow_items " << shadow_items << " sigmas " << sigmas);
    REQUIRE(policy.switches() > 0);
    REQUIRE(policy.followed() == reference.followed);
}

TEST_CASE("best_of_shadows: a session end reaches the session expert while LRU is followed",
          "[eviction][best_of_shadows]") {
    STATIC_REQUIRE(hears_session_ends<best_of_shadows<lru, session_aware_lru>>);
    STATIC_REQUIRE(!hears_session_ends<best_of_shadows<lru, lrfu>>);
    best_of_shadows<lru, session_aware_lru>::config_type config;
    std::get<1>(config.experts) = {.far_factor = 0.0, .tuner = {.enabled = false}, .gaps = {.enabled = false}};
    best_of_shadows<lru, session_aware_lru> p(4, config);
    auto at = [](timestamp now, std::uint64_t session, std::uint64_t key) {
        access_context c;
        c.now = now;
        c.session = session_id{session};
        c.key = key;
        return c;
    };
    // Session 1 makes requests at 10 and 110: a mean gap of 100.
    p.on_insert(item_id{0}, at(10, 1, 'A'));
    p.on_access(item_id{0}, at(110, 1, 'A'));
    REQUIRE(p.expert<1>().expected_back(session_id{1}) == timestamp{210});
    p.on_session_end(session_id{1}, 120);
    REQUIRE(p.followed() == 0);
    REQUIRE(p.expert<1>().expected_back(session_id{1}) == never - 1);
    // Its next request makes it a live session again: gap 190, running mean
    // 0.75 x 100 + 0.25 x 190 = 122.5, back at 300 + 122.
    p.on_access(item_id{0}, at(300, 1, 'A'));
    REQUIRE(p.expert<1>().expected_back(session_id{1}) == timestamp{300 + 122});
}

namespace {

// A flat cache in front of `Policy`: a reference hits if the key is cached,
// else evicts one victim when full and inserts. Returns the hits.
template <class Policy>
std::uint64_t replay_flat(Policy& p, const std::vector<std::uint64_t>& keys) {
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(p.capacity());
    std::uint32_t used = 0;
    std::uint64_t hits = 0;
    timestamp now = 0;
    for (std::uint64_t k : keys) {
        access_context ctx;
        ctx.now = ++now;
        ctx.key = k;
        if (auto it = where.find(k); it != where.end()) {
            ++hits;
            p.on_access(item_id{it->second}, ctx);
            continue;
        }
        p.on_miss(ctx);
        std::uint32_t slot;
        if (used < p.capacity()) {
            slot = used++;
        } else {
            slot = p.pop_victim(now)->value;
            where.erase(key_of[slot]);
        }
        where[k] = slot;
        key_of[slot] = k;
        p.on_insert(item_id{slot}, ctx);
    }
    return hits;
}

// 50 hot keys in turn, each followed by two keys never seen again: a hot
// key comes back after 150 distinct keys, beyond LRU's 100.
std::vector<std::uint64_t> hot_set_with_scan(std::size_t references) {
    std::vector<std::uint64_t> keys;
    std::uint64_t fresh = 1'000'000;
    for (std::size_t i = 0; keys.size() < references; ++i) {
        keys.push_back(i % 50);
        keys.push_back(fresh++);
        keys.push_back(fresh++);
    }
    return keys;
}

// 80 keys used over and over, then another 80, then another: each phase's
// keys are frequent while they last.
std::vector<std::uint64_t> moving_working_set(std::size_t phases, std::size_t per_phase) {
    std::vector<std::uint64_t> keys;
    for (std::size_t ph = 0; ph < phases; ++ph)
        for (std::size_t i = 0; i < per_phase; ++i) keys.push_back(ph * 1000 + i % 80);
    return keys;
}

// The same keys through LRU alone, LRFU (32 capacities) alone and the two
// under best_of_shadows, 100 items each.
struct three_replays {
    std::uint64_t lru_hits, lrfu_hits, hits;
    std::size_t followed;
};
three_replays replay_three(const std::vector<std::uint64_t>& keys) {
    lru alone_lru(100);
    basic_lrfu<32> alone_lrfu(100);
    best_of_shadows<lru, basic_lrfu<32>> both(100);
    const std::uint64_t lru_hits = replay_flat(alone_lru, keys);
    const std::uint64_t lrfu_hits = replay_flat(alone_lrfu, keys);
    const std::uint64_t hits = replay_flat(both, keys);
    return {lru_hits, lrfu_hits, hits, both.followed()};
}

}  // namespace

TEST_CASE("best_of_shadows follows LRFU where a scan flushes LRU's hot set", "[eviction][best_of_shadows]") {
    const auto keys = hot_set_with_scan(30'000);
    const three_replays r = replay_three(keys);
    REQUIRE(r.lru_hits == 0);
    REQUIRE(r.lrfu_hits > keys.size() / 4);  // the hot third, after warming up
    REQUIRE(r.followed == 1);
    REQUIRE(static_cast<double>(r.hits) > 0.9 * static_cast<double>(r.lrfu_hits));
}

TEST_CASE("best_of_shadows follows LRU where frequent keys go out of use", "[eviction][best_of_shadows]") {
    // Each phase's 80 keys fit in 100 items; LRFU's long memory keeps the
    // last phase's keys, frequent until just now, and thrashes on the rest.
    const three_replays r = replay_three(moving_working_set(6, 8000));
    REQUIRE(r.lru_hits > r.lrfu_hits);
    REQUIRE(r.followed == 0);
    REQUIRE(r.hits >= r.lrfu_hits);
    REQUIRE(static_cast<double>(r.hits) > 0.98 * static_cast<double>(r.lru_hits));
}

TEST_CASE(
    "best_of_shadows: switch_gain keeps the choice still between experts that hit alike, and lets a real "
    "lead through",
    "[eviction][best_of_shadows]") {
    // Uniform random keys over twice the capacity: LRU and FIFO both hit
    // half the references (neither can tell keys apart), so every lead is
    // noise; with many references some of it passes two sigmas.
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<std::uint64_t> key(0, 399);
    std::vector<std::uint64_t> keys(400'000);
    for (auto& k : keys) k = key(rng);
    using lru_or_fifo = best_of_shadows<lru, fifo>;
    // The window: about 1,600 sampled references, of which about a third
    // are discordant, so a lead's noise is about 23 references (1.5% of
    // them); a gain of 10% of the window is seven times that.
    lru_or_fifo by_significance(200, {.window = 4.0, .switch_sigmas = 2.0});
    lru_or_fifo with_gain(200, {.window = 4.0, .switch_sigmas = 2.0, .switch_gain = 0.1});
    const std::uint64_t hits_significance = replay_flat(by_significance, keys);
    const std::uint64_t hits_gain = replay_flat(with_gain, keys);
    REQUIRE(by_significance.switches() > 0);
    REQUIRE(with_gain.switches() == 0);
    // Nothing was to be gained by switching, and nothing is lost by not.
    REQUIRE(static_cast<double>(hits_gain) == Approx(static_cast<double>(hits_significance)).epsilon(0.01));

    // A lead far above the gain (LRFU keeping a hot set a scan flushes from
    // LRU) still makes it switch.
    const auto scan = hot_set_with_scan(30'000);
    best_of_shadows<lru, basic_lrfu<32>> both(100, {.switch_gain = 0.1});
    const std::uint64_t hits = replay_flat(both, scan);
    REQUIRE(both.followed() == 1);
    REQUIRE(hits > scan.size() / 4);
}

TEST_CASE("best_of_shadows samples keys at shadow_items / capacity", "[eviction][best_of_shadows]") {
    const lru_or_lrfu small(1000);
    REQUIRE(small.sample_rate() == 1.0);
    REQUIRE(small.shadow_capacity() == 1000);
    const lru_or_lrfu large(100'000);
    REQUIRE(large.sample_rate() == Approx(0.04096));
    REQUIRE(large.shadow_capacity() == 4096);
    // The sample is a fixed share of any key set: dense trace ids included.
    std::uint64_t in = 0;
    for (std::uint64_t k = 0; k < 200'000; ++k) in += mix64(k) < static_cast<std::uint64_t>(std::ldexp(0.04096, 64));
    REQUIRE(static_cast<double>(in) / 200'000.0 == Approx(0.04096).epsilon(0.05));
    // Above large_capacity the smaller sample, at and below it the usual one.
    const lru_or_lrfu::config_type step{.shadow_items = 4096, .large_capacity = 32'768, .large_shadow_items = 1024};
    REQUIRE(lru_or_lrfu(32'768, step).shadow_capacity() == 4096);
    REQUIRE(lru_or_lrfu(32'769, step).shadow_capacity() == 1024);
    REQUIRE(lru_or_lrfu(100'000, step).sample_rate() == Approx(0.01024));
    REQUIRE(
        lru_or_lrfu(1000, {.shadow_items = 4096, .large_capacity = 10, .large_shadow_items = 100}).shadow_capacity() ==
        100);
}

TEST_CASE(
    "adaptive_kv's shadows hold 4096 items up to 32,768 cached items and 1024 above, adaptive_kv_fast's "
    "at most 5% and 1024",
    "[eviction][best_of_shadows]") {
    REQUIRE(adaptive_kv(1000).shadow_capacity() == 1000);
    REQUIRE(adaptive_kv(1000).sample_rate() == 1.0);
    REQUIRE(adaptive_kv(18'279).shadow_capacity() == 4096);
    REQUIRE(adaptive_kv(32'768).shadow_capacity() == 4096);
    REQUIRE(adaptive_kv(32'769).shadow_capacity() == 1024);
    REQUIRE(adaptive_kv(100'000).shadow_capacity() == 1024);
    REQUIRE(adaptive_kv_fast(1000).shadow_capacity() == 50);
    REQUIRE(adaptive_kv_fast(100'000).shadow_capacity() == 1024);
    // the generic default keeps one size at every capacity
    REQUIRE(lru_or_lrfu(1'000'000).shadow_capacity() == 4096);
}

TEST_CASE(
    "adaptive_kv is best_of_shadows over lru, lrfu at 2, 8 and 32 capacities, superseded_lru and "
    "session_aware_lru",
    "[eviction][best_of_shadows]") {
    const adaptive_kv p(64);
    STATIC_REQUIRE(adaptive_kv::expert_count == 6);
    STATIC_REQUIRE(hears_session_ends<adaptive_kv>);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(p.expert<5>())>, session_aware_lru>);
    REQUIRE(p.expert<1>().config().half_life == 2.0);
    REQUIRE(p.expert<2>().config().half_life == 8.0);
    REQUIRE(p.expert<3>().config().half_life == 32.0);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(p.expert<4>())>, superseded_lru>);
    REQUIRE(p.followed() == 0);  // LRU until a shadow leads
}

TEST_CASE("best_of_shadows refuses bad configurations, naming the setting and the fix",
          "[eviction][best_of_shadows][errors]") {
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_AS(lru_or_lrfu(0), config_error);
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.shadow_items = 0}), Contains("best_of_shadows: shadow_items 0 leaves"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.large_shadow_items = 0}),
                        Contains("best_of_shadows: large_shadow_items 0 leaves") && Contains("adaptive_kv: 1024"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.window = 0.0}),
                        Contains("best_of_shadows: window 0.000000 must be in (0, 1e9]"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.window = std::nan("")}), Contains("window"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.window = 1e300}), Contains("must be in (0, 1e9]"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.switch_sigmas = -0.1}),
                        Contains("switch_sigmas -0.100000 must be finite and >= 0"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.switch_sigmas = std::numeric_limits<double>::infinity()}),
                        Contains("switch_sigmas"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.switch_gain = -0.01}), Contains("switch_gain -0.010000 must be in [0, 1)"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.switch_gain = 1.0}), Contains("switch_gain 1.000000 must be in [0, 1)"));
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, {.switch_gain = std::nan("")}), Contains("switch_gain"));
    // An expert's own configuration is checked by the expert.
    lru_or_lrfu::config_type bad;
    std::get<1>(bad.experts).half_life = -2.0;
    REQUIRE_THROWS_WITH(lru_or_lrfu(8, bad), Contains("lrfu: half_life -2.000000"));
}
