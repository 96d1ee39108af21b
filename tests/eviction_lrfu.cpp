// lrfu against its naive reference model on long random operation sequences
// (half-lives from near-LRU to near-LFU, with and without ghosts), the step
// rule, the recency-frequency spectrum and the ghosts on hand-worked
// sequences, and the configuration errors (prefix closure through the cache:
// eviction_prefix_closure.cpp).
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/lrfu.hpp>
#include <kvpolicy/core/indexed_heap.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEST_CASE("lrfu chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    const double half_life = GENERATE(0.25, 2.0, 32.0);
    // Without ghosts once per capacity: the rest of the rule is the same.
    const double ghost_factor = seed == 1 && half_life == 2.0 ? 0.0 : 4.0;
    lrfu policy(capacity, {.half_life = half_life, .ghost_factor = ghost_factor});
    ref_lrfu reference(capacity, half_life, ghost_factor);
    // A key universe of 4x the capacity brings victims back while their
    // ghosts remember them.
    const auto victims =
        drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed, .key_universe = 4 * capacity + 8},
              &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
}

namespace {

// lrfu that, when `Toggle`, stops and resumes keeping its order at random
// (best_of_shadows suspends the experts it does not follow; a pop while
// suspended rebuilds the order first), and sees time in steps of `step`
// driver ticks, so that many references share a step and tie on value.
template <bool Toggle>
struct toggling_lrfu : lrfu {
    std::mt19937_64 rng;
    std::uint64_t step = 1;
    std::uint64_t toggles = 0;
    toggling_lrfu(std::size_t capacity, const config_type& c, std::uint64_t seed = 1, std::uint64_t step_ticks = 1)
            : lrfu(capacity, c), rng(seed), step(step_ticks) {}
    void toggle() {
        if (!Toggle || rng() % 16 != 0) return;
        ++toggles;
        if (keeps_order())
            suspend_order();
        else
            resume_order();
    }
    access_context stepped(access_context ctx) const {
        ctx.now /= step;
        return ctx;
    }
    void on_miss(const access_context& ctx) {
        toggle();
        lrfu::on_miss(stepped(ctx));
    }
    void on_insert(item_id id, const access_context& ctx) {
        toggle();
        lrfu::on_insert(id, stepped(ctx));
    }
    void on_access(item_id id, const access_context& ctx) {
        toggle();
        lrfu::on_access(id, stepped(ctx));
    }
    void on_hold(item_id id) {
        toggle();
        lrfu::on_hold(id);
    }
    void on_release(item_id id, const access_context& ctx) {
        toggle();
        lrfu::on_release(id, stepped(ctx));
    }
    void on_erase(item_id id) {
        toggle();
        lrfu::on_erase(id);
    }
};

}  // namespace

TEST_CASE("lrfu: suspending and resuming its order leaves every victim the same", "[eviction][differential]") {
    STATIC_REQUIRE(orders_on_demand<lrfu>);
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    const double half_life = GENERATE(0.25, 2.0, 32.0);
    SECTION("against the reference model") {
        toggling_lrfu<true> policy(capacity, {.half_life = half_life}, seed + 100);
        ref_lrfu reference(capacity, half_life, 4.0);
        const auto victims =
            drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed, .key_universe = 4 * capacity + 8},
                  &reference);
        REQUIRE(policy.counters().evictions == victims.size());
        REQUIRE(victims.size() > 100);
        REQUIRE(policy.toggles > 1000);
    }
    SECTION("against lrfu that keeps its order, with 8 operations per step: equal values, ranked by placement") {
        toggling_lrfu<true> policy(capacity, {.half_life = half_life}, seed + 100, 8);
        toggling_lrfu<false> reference(capacity, {.half_life = half_life}, seed + 100, 8);
        const auto victims =
            drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed, .key_universe = 4 * capacity + 8},
                  &reference);
        REQUIRE(victims.size() > 100);
        REQUIRE(policy.toggles > 1000);
    }
}

TEST_CASE("indexed_heap: assign heapifies, and pops come out as after pushes one by one", "[core][indexed_heap]") {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; ++round) {
        const std::size_t n = 1 + rng() % 300;
        indexed_heap<std::uint64_t> pushed(n), assigned(n);
        std::vector<std::uint64_t> key(n);
        std::vector<std::uint32_t> ids;
        for (std::uint32_t id = 0; id < n; ++id) {
            key[id] = rng() % 50;  // repeats: ties broken by id
            if (rng() % 3 != 0) ids.push_back(id);
        }
        for (const std::uint32_t id : ids) pushed.push(id, key[id]);
        assigned.push(0, 1000);  // replaced by assign
        assigned.assign(ids, [&](std::uint32_t id) { return key[id]; });
        REQUIRE(assigned.size() == ids.size());
        REQUIRE(!assigned.contains(0) == (ids.empty() || ids.front() != 0));
        while (!pushed.empty()) REQUIRE(assigned.pop() == pushed.pop());
        REQUIRE(assigned.empty());
    }
}

TEST_CASE("lrfu: a long half-life keeps the frequent item, a short one the recent", "[eviction][lrfu]") {
    // A is referenced at steps 1, 2, 3; B once at step 4. With a half-life
    // of 32 capacities (128 references) A's value at step 4 is
    // 2^-(3/128) + 2^-(2/128) + 2^-(1/128) ~ 2.95 against B's 1: B goes.
    // With 0.25 capacities (one reference) A's weights have decayed to
    // 2^-3 + 2^-2 + 2^-1 = 0.875 < 1: A goes, as under LRU.
    auto victim = [](double half_life) {
        lrfu p(4, {.half_life = half_life});
        p.on_insert(item_id{0}, at(1, 100));
        p.on_access(item_id{0}, at(2, 100));
        p.on_access(item_id{0}, at(3, 100));
        p.on_insert(item_id{1}, at(4, 200));
        return p.pop_victim(5)->value;
    };
    REQUIRE(victim(32.0) == 1u);
    REQUIRE(victim(0.25) == 0u);
}

TEST_CASE("lrfu: references at one now share a time, and equal values go to the first placed", "[eviction][lrfu]") {
    // One request of three blocks at now = 7: each is referenced at the same
    // T, so their values are equal whatever the half-life; released tail
    // first (as the cache releases a finished request), the tail goes first.
    lrfu p(8, {.half_life = 0.25});
    for (std::uint32_t b = 0; b < 3; ++b) {
        p.on_insert(item_id{b}, at(7, 10 + b));
        p.on_hold(item_id{b});
    }
    REQUIRE(p.value(item_id{0}) == p.value(item_id{2}));
    for (std::uint32_t b = 3; b-- > 0;) p.on_release(item_id{b}, at(7, 10 + b));
    REQUIRE(p.pop_victim(8)->value == 2u);
    REQUIRE(p.pop_victim(8)->value == 1u);
    REQUIRE(p.pop_victim(8)->value == 0u);
}

TEST_CASE("lrfu: a victim that comes back keeps its history through the ghosts", "[eviction][lrfu]") {
    // Key 100 is referenced four times and evicted; when it comes back its
    // value is 1 plus the decayed history, above a fresh key's 1. Without
    // ghosts it starts again at 1.
    auto value_back = [](double ghost_factor) {
        lrfu p(2, {.half_life = 32.0, .ghost_factor = ghost_factor});
        p.on_insert(item_id{0}, at(1, 100));
        for (timestamp t = 2; t <= 4; ++t) p.on_access(item_id{0}, at(t, 100));
        REQUIRE(p.pop_victim(5)->value == 0u);
        p.on_insert(item_id{1}, at(6, 100));
        return p.value(item_id{1});
    };
    REQUIRE(value_back(4.0) > 4.5);
    REQUIRE(value_back(0.0) == 1.0);
}

TEST_CASE("lrfu refuses bad configurations, naming the setting and the fix", "[eviction][lrfu][errors]") {
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_AS(lrfu(0), config_error);
    REQUIRE_THROWS_WITH(lrfu(8, {.half_life = 0.0}), Contains("lrfu: half_life 0.000000 must be finite and > 0"));
    REQUIRE_THROWS_WITH(lrfu(8, {.half_life = -1.0}), Contains("half_life -1.000000 must be finite and > 0"));
    REQUIRE_THROWS_WITH(lrfu(8, {.half_life = std::numeric_limits<double>::infinity()}), Contains("half_life inf"));
    REQUIRE_THROWS_WITH(lrfu(8, {.half_life = std::nan("")}), Contains("0.25 is close to LRU"));
    REQUIRE_THROWS_WITH(lrfu(8, {.ghost_factor = -0.5}), Contains("lrfu: ghost_factor -0.500000 must be finite, >= 0"));
    REQUIRE_THROWS_WITH(lrfu(8, {.ghost_factor = std::nan("")}), Contains("ghost_factor"));
    REQUIRE_THROWS_WITH(lrfu(1u << 20, {.ghost_factor = 2048.0}), Contains("below 2^30 / capacity"));
    REQUIRE_THROWS_AS(lrfu(1u << 20, {.ghost_factor = 2048.0}), config_error);
}
