// The Thrust victim selector on Thrust's CPP system (no GPU needed) against
// the host nth_element_selector: same ids, same order, same errors; and
// retention_value running on it picks the same victims.
//
// Built by the host compiler with THRUST_DEVICE_SYSTEM=CPP (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <kvpolicy/cuda/thrust_selector.cuh>
#include <kvpolicy/eviction/retention_value.hpp>
#include <kvpolicy/select/nth_element_selector.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace kvpolicy;
using cpp_selector = kvpolicy::cuda::thrust_selector<thrust::cpp::tag>;

static_assert(victim_selector<cpp_selector>);
static_assert(std::is_same_v<thrust::device_system_tag, thrust::cpp::tag>,
              "this test must be built with THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP");

namespace {

template <class Score>
void check_against_host(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    cpp_selector thrust_sel;
    nth_element_selector host_sel;
    for (int round = 0; round < 200; ++round) {
        const std::size_t n = rng() % 400;
        std::vector<Score> scores(n);
        std::vector<item_id> ids(n);
        for (std::size_t i = 0; i < n; ++i) {
            const auto r = rng() % 100;
            scores[i] = static_cast<Score>(static_cast<int>(rng() % 21) - 10) / Score{4};  // many ties, negatives
            if (r < 5) scores[i] = std::numeric_limits<Score>::infinity();
            if (r >= 5 && r < 8) scores[i] = -std::numeric_limits<Score>::infinity();
            if (r >= 8 && r < 12) scores[i] = (r % 2 == 0) ? Score{0} : -Score{0};  // -0 ties +0
            ids[i] = item_id{static_cast<std::uint32_t>(rng() % 5000)};             // duplicates possible
        }
        const std::size_t k = n == 0 ? rng() % 3 : rng() % (n + 3);  // k = 0, k = n and k > n included
        std::vector<item_id> got(k, item_id{999999}), want(k, item_id{999999});
        const std::size_t g = thrust_sel.select_lowest<Score>(scores, ids, got);
        const std::size_t w = host_sel.select_lowest<Score>(scores, ids, want);
        REQUIRE(g == w);
        REQUIRE(got == want);

        // The same on arrays in the system's memory: on the CPP system those
        // are host spans (system_span), with ids or with the identity ids.
        std::vector<std::uint32_t> raw_ids(n), in_system(std::min(k, n), 999999u);
        for (std::size_t i = 0; i < n; ++i) raw_ids[i] = ids[i].value;
        REQUIRE(thrust_sel.select_lowest_in_system<Score>(scores, raw_ids, in_system) == w);
        for (std::size_t i = 0; i < w; ++i) REQUIRE(in_system[i] == want[i].value);
        std::vector<item_id> index_ids(n);
        for (std::size_t i = 0; i < n; ++i) index_ids[i] = item_id{static_cast<std::uint32_t>(i)};
        host_sel.select_lowest<Score>(scores, index_ids, want);
        REQUIRE(thrust_sel.select_lowest_in_system<Score>(scores, {}, in_system) == w);
        for (std::size_t i = 0; i < w; ++i) REQUIRE(in_system[i] == want[i].value);
    }
    STATIC_REQUIRE(
        std::is_same_v<kvpolicy::cuda::system_span<const float, thrust::cpp::tag>, kvpolicy::host_span<const float>>);
}

}  // namespace

TEST_CASE("thrust_selector on the CPP system equals nth_element_selector", "[select][thrust]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    check_against_host<double>(seed);
    check_against_host<float>(seed + 100);
}

TEST_CASE("thrust_selector: k = 0, k = n, k > n, and NaN rejected with nothing written", "[select][thrust]") {
    cpp_selector sel;
    const std::vector<double> scores{3, 1, 2, 1};
    const std::vector<item_id> ids{item_id{7}, item_id{5}, item_id{6}, item_id{4}};
    std::vector<item_id> none;
    REQUIRE(sel.select_lowest<double>(scores, ids, none) == 0);
    std::vector<item_id> all(4);
    REQUIRE(sel.select_lowest<double>(scores, ids, all) == 4);
    REQUIRE(all == std::vector<item_id>{item_id{4}, item_id{5}, item_id{6}, item_id{7}});
    std::vector<item_id> more(6, item_id{77});
    REQUIRE(sel.select_lowest<double>(scores, ids, more) == 4);
    REQUIRE(more[4] == item_id{77});

    const std::vector<double> with_nan{3, std::nan(""), 2, 1};
    std::vector<item_id> out(2, item_id{77});
    REQUIRE_THROWS_WITH(sel.select_lowest<double>(with_nan, ids, out), Catch::Contains("item 5 is NaN"));
    REQUIRE(out == std::vector<item_id>(2, item_id{77}));
    // NaN is rejected even when nothing is asked for, as the host selector does.
    REQUIRE_THROWS_AS(sel.select_lowest<double>(with_nan, ids, none), usage_error);
    const std::vector<double> short_scores{1};
    REQUIRE_THROWS_AS(sel.select_lowest<double>(short_scores, ids, out), usage_error);
}

TEST_CASE("thrust_selector: arrays already in the system's memory, ids implied by position", "[select][thrust]") {
    cpp_selector sel;
    std::mt19937_64 rng(9);
    std::vector<float> scores(1000);
    for (float& s : scores) s = static_cast<float>(rng() % 50);
    std::vector<std::uint32_t> out(37, 0xffffffffu);
    REQUIRE(sel.select_lowest_in_system<float>(scores, {}, out) == 37);

    std::vector<item_id> ids(scores.size()), want(37);
    for (std::uint32_t i = 0; i < ids.size(); ++i) ids[i] = item_id{i};
    nth_element_selector host;
    host.select_lowest<float>(scores, ids, want);
    for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == want[i].value);

    scores[400] = std::nanf("");
    std::vector<std::uint32_t> id_values(scores.size());
    for (std::uint32_t i = 0; i < id_values.size(); ++i) id_values[i] = 10000 + i;
    REQUIRE_THROWS_WITH(
        sel.select_lowest_in_system<float>(scores, id_values, kvpolicy::host_span<std::uint32_t>(out).first(3)),
        Catch::Contains("item 10400 is NaN"));
}

TEST_CASE("retention_value on thrust_selector<cpp> picks the victims it picks on nth_element_selector",
          "[select][thrust][retention_value]") {
    using on_host = retention_value<pensieve_linear, pipelined_depth, session_relative, nth_element_selector>;
    using on_thrust = retention_value<pensieve_linear, pipelined_depth, session_relative, cpp_selector>;
    STATIC_REQUIRE(eviction_policy<on_thrust>);

    const std::uint64_t seed = GENERATE(11u, 12u, 13u);
    std::mt19937_64 rng(seed);
    constexpr std::size_t capacity = 300;
    on_host a(capacity);
    on_thrust b(capacity);
    std::vector<int> state(capacity, 0);  // 0 absent, 1 evictable, 2 held
    timestamp now = 1;
    const auto context = [&](std::uint32_t id) {
        access_context c;
        c.now = now;
        c.num_layers = 8;
        c.layer = layer_index{id % 8};
        c.session_total_chunks = 1 + static_cast<std::uint32_t>(rng() % 20);
        c.chunk = chunk_index{static_cast<std::uint32_t>(rng() % c.session_total_chunks)};
        c.context_length = rng() % 4096;
        return c;
    };
    for (int step = 0; step < 5000; ++step) {
        now += rng() % 3;  // equal timestamps happen: just-used items score +inf
        const auto id = static_cast<std::uint32_t>(rng() % capacity);
        const auto op = rng() % 10;
        if (state[id] == 0 && op < 6) {
            const access_context c = context(id);
            a.on_insert(item_id{id}, c);
            b.on_insert(item_id{id}, c);
            state[id] = 1;
        } else if (state[id] == 1 && op < 3) {
            const access_context c = context(id);
            a.on_access(item_id{id}, c);
            b.on_access(item_id{id}, c);
        } else if (state[id] == 1 && op == 3) {
            a.on_hold(item_id{id});
            b.on_hold(item_id{id});
            state[id] = 2;
        } else if (state[id] == 2 && op < 5) {
            const access_context c = context(id);
            a.on_release(item_id{id}, c);
            b.on_release(item_id{id}, c);
            state[id] = 1;
        } else if (op >= 8) {
            std::vector<item_id> va(1 + rng() % 12), vb(va.size());
            const std::size_t na = a.pop_victims(va, now);
            const std::size_t nb = b.pop_victims(vb, now);
            REQUIRE(na == nb);
            va.resize(na);
            vb.resize(nb);
            REQUIRE(va == vb);
            for (item_id v : va) state[v.index()] = 0;
        }
        REQUIRE(a.evictable_size() == b.evictable_size());
    }
}
