// session_aware_lru against its naive reference model on long random
// operation sequences (holds, releases, erasures, batch pops; sessions with
// gaps from the driver's contexts; rule 2 rare and frequent; a small session
// table that forgets), worked traces of its rules, its equality with
// tail_aware_lru when no session shows a gap, and its configuration errors.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/pairwise_margin_tuner.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>
#include <kvpolicy/eviction/tail_aware_lru.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEST_CASE("session_aware_lru chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    // far_factor 0 takes the session rule whenever a session is expected
    // back later than now, 0.5 sometimes, 8 rarely; max_sessions 3 with 61
    // sessions in the driver makes sessions be forgotten and relearned. One
    // access in 8 comes from another session, so blocks become shared.
    const double far_factor = GENERATE(8.0, 0.5, 0.0);
    const std::size_t max_sessions = GENERATE(std::size_t{0}, std::size_t{3});
    // The tuner on (scoring pairs and moving the margin; small samples so
    // that it does within the run) and off (the margin stays far_factor).
    const bool tune = GENERATE(true, false);
    // Releases name their requests' output (one in four does not): the gap
    // fit learns from the first 8 samples on and moves within the run.
    const return_gap_model::config_type gaps{.window = 64.0, .min_samples = 8};
    session_aware_lru policy(
        capacity, {.far_factor = far_factor,
                   .max_sessions = max_sessions,
                   .tuner = {.enabled = tune, .sample_every = 2, .pending = 64, .min_samples = 4, .window = 64},
                   .gaps = gaps});
    ref_session_aware_lru reference(capacity, far_factor, 0.25, max_sessions, tune, gaps);
    reference.tuner.sample_every = 2;
    reference.tuner.pending = 64;
    reference.tuner.min_samples = 4;
    reference.tuner.window = 64;
    const auto victims = drive(policy,
                               {.capacity = capacity,
                                .operations = 100'000,
                                .seed = seed,
                                .key_universe = 4 * capacity + 8,
                                .sessions = max_sessions == 0 ? 7u : 61u,
                                .foreign_every = 8},
                               &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
    // The table forgets what the reference forgets.
    REQUIRE(policy.sessions() == reference.sessions.size());
    if (max_sessions == 3) REQUIRE(reference.forgotten > 0);
    REQUIRE(policy.far_factor() == reference.tuner.margin);
    // The tuner scored pairs and re-derived the margin, so the comparison covered it.
    if (tune && capacity > 1) REQUIRE(reference.tuner.scored > 0.0);
    // Predictions from output lengths were made, so the comparison covered them.
    REQUIRE(reference.gaps.ready());
}

TEST_CASE("session_aware_lru: the session rule changes the driver's victims, so the test above checks it",
          "[eviction][session_aware_lru]") {
    // Same random operations; tail_aware_lru is session_aware_lru without
    // the session rule (same tail rule, same LRU order).
    session_aware_lru with_rule(16, {.far_factor = 0.0});
    tail_aware_lru without_rule(16);
    const auto a = drive(with_rule, {.capacity = 16, .operations = 20'000, .seed = 1});
    const auto b = drive(without_rule, {.capacity = 16, .operations = 20'000, .seed = 1});
    REQUIRE(a != b);
}

TEST_CASE("session_aware_lru: output lengths change the driver's victims, so the test above checks them",
          "[eviction][session_aware_lru]") {
    session_aware_lru with_fit(16, {.far_factor = 0.0, .gaps = {.window = 64.0, .min_samples = 8}});
    session_aware_lru without_fit(16, {.far_factor = 0.0, .gaps = {.enabled = false}});
    const auto a = drive(with_fit, {.capacity = 16, .operations = 20'000, .seed = 1});
    const auto b = drive(without_fit, {.capacity = 16, .operations = 20'000, .seed = 1});
    REQUIRE(a != b);
}

namespace {
access_context at(timestamp now, std::uint64_t session, std::uint64_t key) {
    access_context c{};
    c.now = now;
    c.session = session_id{session};
    c.key = key;
    return c;  // chunk 0 of 1: every item a tail, inner never sampled: no demotion
}
}  // namespace

TEST_CASE("session_aware_lru: the session expected back last goes first when its wait dwarfs LRU's idle time",
          "[eviction][session_aware_lru]") {
    // Session 2 comes every 1000 ticks, session 1 has come once after 980.
    //   10 s2 inserts B (slot 1); 20 s1 inserts A (slot 0)
    //   1000 s1 hits A: gap 980, A placed at 1000, predicted back at 1980
    //   1010 s2 hits B: gap 1000, B placed at 1010, predicted back at 2010
    // pop at 1020: LRU's victim A has idled 20; B is predicted back in 990.
    //   far_factor 8: 990 > 160, B goes although A is older.
    //   far_factor 100: 990 < 2000, LRU's A goes.
    auto run = [](double k) {
        session_aware_lru p(2, {.far_factor = k});
        p.on_insert(item_id{1}, at(10, 2, 'B'));
        p.on_insert(item_id{0}, at(20, 1, 'A'));
        p.on_access(item_id{0}, at(1000, 1, 'A'));
        p.on_access(item_id{1}, at(1010, 2, 'B'));
        REQUIRE(p.mean_gap(session_id{1}) == 980.0);
        REQUIRE(p.mean_gap(session_id{2}) == 1000.0);
        return p.pop_victim(1020);
    };
    REQUIRE(run(8.0) == item_id{1});
    REQUIRE(run(100.0) == item_id{0});
}

TEST_CASE("session_aware_lru: a session's older branch goes before the blocks its later request read again",
          "[eviction][session_aware_lru][prefix]") {
    // Session 1 reads A -> B -> C at 0, then A -> B -> D at 1000 (gap 1000:
    // expected back at 2000). Each request holds its blocks and releases them
    // tail first, as the cache does. Session 2's E (placed first) is LRU's
    // victim. Margin 0: session 1 goes ahead of LRU from its first block on,
    // the branch C it left (placed at 0), then D, B, A: never an inner block
    // while a block below it is cached. E goes last.
    session_aware_lru p(5, {.far_factor = 0.0, .tuner = {.enabled = false}});
    const item_id A{0}, B{1}, C{2}, D{3}, E{4};
    p.on_insert(E, at(0, 2, 'E'));
    for (const auto& [x, k] : {std::pair{A, 'A'}, {B, 'B'}, {C, 'C'}}) {
        p.on_insert(x, at(0, 1, static_cast<std::uint64_t>(k)));
        p.on_hold(x);
    }
    for (const item_id x : {C, B, A}) p.on_release(x, at(0, 1, 0));
    for (const auto& [x, k] : {std::pair{A, 'A'}, {B, 'B'}}) {
        p.on_access(x, at(1000, 1, static_cast<std::uint64_t>(k)));
        p.on_hold(x);
    }
    p.on_insert(D, at(1000, 1, 'D'));
    p.on_hold(D);
    for (const item_id x : {D, B, A}) p.on_release(x, at(1000, 1, 0));
    REQUIRE(p.mean_gap(session_id{1}) == 1000.0);
    std::vector<item_id> victims;
    while (const auto v = p.pop_victim(1100)) victims.push_back(*v);
    REQUIRE(victims == std::vector<item_id>{C, D, B, A, E});
}

TEST_CASE("session_aware_lru: a prediction that has passed is dropped, the running mean weighs the newest gap 1/4",
          "[eviction][session_aware_lru]") {
    session_aware_lru p(3, {});
    p.on_insert(item_id{0}, at(0, 1, 'A'));
    p.on_access(item_id{0}, at(100, 1, 'A'));  // gap 100
    p.on_access(item_id{0}, at(600, 1, 'A'));  // gap 500: 100 + (500 - 100) / 4 = 200
    REQUIRE(p.mean_gap(session_id{1}) == 200.0);
    // A placed at 600, predicted back at 800. B (no gap) placed at 700.
    p.on_insert(item_id{1}, at(700, 2, 'B'));
    // pop at 701: LRU's A idled 101; A's wait 99 < 16 x 101: LRU's victim, A.
    REQUIRE(p.pop_victim(701) == item_id{0});
    p.on_insert(item_id{0}, at(702, 1, 'C'));  // session 1 again: gap 102, mean 175.5; C back at 877
    p.on_insert(item_id{2}, at(702, 3, 'D'));
    // pop at 900: C's prediction (877) has passed: plain LRU, B (700) first.
    REQUIRE(p.pop_victim(900) == item_id{1});
    REQUIRE(p.pop_victim(900) == item_id{0});  // C (702, placed before D)
    REQUIRE(p.pop_victim(900) == item_id{2});
    REQUIRE_FALSE(p.pop_victim(900).has_value());
}

TEST_CASE("session_aware_lru: a block a second session uses is a shared prefix and gets no prediction",
          "[eviction][session_aware_lru]") {
    // far_factor 0: any prediction ahead beats LRU's victim. C (session 3,
    // never back) is LRU's victim throughout.
    //   5 s3 inserts C (slot 2); 10 s1 inserts A (slot 0); 400 s2 inserts B (slot 1)
    //   700 s1 hits A: gap 690, A predicted back at 1390
    //   [shared] 705 s2 hits A: A is shared, no prediction; s2's gap 305
    //   710 s2 hits B: B predicted back at 710 + 310 (private) or 710 + 230 (shared run)
    // pop at 720: private run: A (1390) is farthest; shared run: B is the only prediction.
    auto run = [](bool shared) {
        session_aware_lru p(3, {.far_factor = 0.0});
        p.on_insert(item_id{2}, at(5, 3, 'C'));
        p.on_insert(item_id{0}, at(10, 1, 'A'));
        p.on_insert(item_id{1}, at(400, 2, 'B'));
        p.on_access(item_id{0}, at(700, 1, 'A'));
        if (shared) p.on_access(item_id{0}, at(705, 2, 'A'));
        p.on_access(item_id{1}, at(710, 2, 'B'));
        return p.pop_victim(720);
    };
    REQUIRE(run(false) == item_id{0});
    REQUIRE(run(true) == item_id{1});
}

namespace {
// Mooncake-like conversations through the composed cache; `own_sessions`
// gives every request its own session (no session ever shows a gap).
template <class Policy>
std::vector<std::size_t> hits_per_request(std::size_t capacity, bool own_sessions) {
    tiered_cache<Policy, lru> cache({.gpu_capacity = capacity, .cpu_capacity = 0, .block_size = 16});
    std::vector<std::size_t> hits;
    std::uint64_t request = 0;
    for (std::uint64_t turn = 0; turn < 24; ++turn)
        for (std::uint64_t c = 0; c < 8; ++c) {
            std::vector<block_hash> hashes{1};
            for (std::uint64_t j = 1; j <= 2 + turn; ++j) hashes.push_back((c + 1) * 1000 + j);
            hashes.push_back((c + 1) * 1000 + 500 + turn);
            const session_id s{own_sessions ? 100 + request : c};
            cache.clock().set(1000 * (++request) + 7 * c * (turn % 3));  // uneven gaps per conversation
            cache.begin_step();
            hits.push_back(cache.admit(s, hashes).match.run);
            (void)cache.end_step();
            cache.release(s);
        }
    return hits;
}
}  // namespace

TEST_CASE("session_aware_lru without sessions that return is tail_aware_lru", "[eviction][session_aware_lru][cache]") {
    for (const std::size_t capacity : {60u, 100u, 150u})
        REQUIRE(hits_per_request<session_aware_lru>(capacity, true) ==
                hits_per_request<tail_aware_lru>(capacity, true));
}

TEST_CASE("session_aware_lru configurations that cannot work are refused with the reason", "[eviction][config]") {
    REQUIRE_THROWS_AS(session_aware_lru(0), config_error);
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.far_factor = -1.0}), Catch::Contains("far_factor"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.far_factor = std::numeric_limits<double>::infinity()}),
                        Catch::Contains("far_factor"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.gap_weight = 0.0}), Catch::Contains("gap_weight"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.gap_weight = 1.5}), Catch::Contains("gap_weight"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.tails = {.min_samples = 100, .window = 150}}),
                        Catch::Contains("window"));
}

TEST_CASE("session_aware_lru refuses tuner settings that cannot work", "[eviction][config]") {
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.tuner = {.sample_every = 0}}), Catch::Contains("sample_every"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.tuner = {.pending = 0}}), Catch::Contains("pending"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.tuner = {.min_samples = 16, .window = 20}}), Catch::Contains("window"));
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.tuner = {.min_samples = 0}}), Catch::Contains("min_samples"));
}

TEST_CASE("pairwise_margin_tuner: bins are powers of two around a ratio of 1", "[eviction][pairwise_margin_tuner]") {
    using t = pairwise_margin_tuner;
    REQUIRE(t::bin_of(1.0) == 4);
    REQUIRE(t::bin_of(std::nextafter(1.0, 0.0)) == 3);
    REQUIRE(t::bin_of(8.0) == 7);
    REQUIRE(t::bin_of(0.0) == 0);
    REQUIRE(t::bin_of(1e-9) == 0);
    REQUIRE(t::bin_of(1e9) == t::bins - 1);
    REQUIRE(t::bin_of(std::numeric_limits<double>::infinity()) == t::bins - 1);
    for (int b = 0; b < t::bins; ++b) REQUIRE(t::bin_of(t::bin_floor(b)) == b);
    // The reference model walks the powers of two instead.
    for (double r = 1.0 / 64; r < 8192.0; r *= 1.37) REQUIRE(t::bin_of(r) == ref_margin_tuner::bin_of(r));
}

TEST_CASE("pairwise_margin_tuner: the margin settles at the lowest bin from which decisions win",
          "[eviction][pairwise_margin_tuner]") {
    // Every decision is sampled; a bin counts from 4 scored pairs.
    pairwise_margin_tuner t(16.0, {.sample_every = 1, .pending = 64, .min_samples = 4, .window = 1000}, "test");
    std::uint64_t key = 0;
    auto pair_scored = [&](double ratio, bool lru_back_first) {
        const std::uint64_t far = ++key, victim = ++key;
        t.decision(far, victim, ratio);
        t.requested(lru_back_first ? victim : far);
    };
    for (int i = 0; i < 3; ++i) pair_scored(0.5, false);
    REQUIRE(t.margin() == 16.0);  // no bin judged yet: the initial margin
    pair_scored(0.5, false);      // bin 3 (ratios in [1/2, 1)) loses 4-0
    REQUIRE(t.losses()[3] == 4.0);
    REQUIRE(std::isinf(t.margin()));                     // the only judged bin loses: never override LRU
    for (int i = 0; i < 4; ++i) pair_scored(8.0, true);  // bin 7 wins 4-0
    REQUIRE(t.wins()[7] == 4.0);
    REQUIRE(t.margin() == 8.0);                           // from bin 7 up; bin 3 below still loses
    for (int i = 0; i < 4; ++i) pair_scored(0.75, true);  // bin 3 now 4-4: not losing
    REQUIRE(t.margin() == 0.5);
    pair_scored(2.0, false);  // bin 5 has 1 pair: too few to judge, skipped
    REQUIRE(t.margin() == 0.5);
    for (int i = 0; i < 3; ++i) pair_scored(2.0, false);  // bin 5 loses 0-4 above bin 3
    REQUIRE(t.margin() == 8.0);
}

TEST_CASE("pairwise_margin_tuner: pairs that never come back are dropped unscored, one pair per key",
          "[eviction][pairwise_margin_tuner]") {
    pairwise_margin_tuner t(16.0, {.sample_every = 1, .pending = 2, .min_samples = 1, .window = 1000}, "test");
    t.decision(1, 2, 4.0);
    t.decision(1, 3, 4.0);  // key 1 is already in a pair: not recorded
    t.requested(3);
    REQUIRE(t.wins()[6] + t.losses()[6] == 0.0);
    t.decision(4, 5, 4.0);
    t.decision(6, 7, 4.0);  // the third sample with 2 pending: pair (1, 2) is dropped
    t.requested(2);
    REQUIRE(t.wins()[6] + t.losses()[6] == 0.0);
    t.requested(5);  // LRU's victim back first: a win
    REQUIRE(t.wins()[6] == 1.0);
    REQUIRE(t.margin() == 4.0);
    // sample_every 3: only every third decision is recorded.
    pairwise_margin_tuner every3(16.0, {.sample_every = 3, .pending = 8, .min_samples = 1, .window = 1000}, "test");
    for (std::uint64_t k = 0; k < 6; ++k) every3.decision(100 + k, 200 + k, 1.0);
    for (std::uint64_t k = 0; k < 6; ++k) every3.requested(200 + k);
    REQUIRE(every3.wins()[4] == 2.0);
    // Disabled: nothing is recorded, the margin stays.
    pairwise_margin_tuner off(3.0, {.enabled = false, .sample_every = 1, .min_samples = 1}, "test");
    off.decision(1, 2, 100.0);
    off.requested(2);
    REQUIRE(off.wins()[pairwise_margin_tuner::bin_of(100.0)] == 0.0);
    REQUIRE(off.margin() == 3.0);
}

TEST_CASE("session_aware_lru: a session whose request wrote a long answer is expected back later",
          "[eviction][session_aware_lru][return_gap]") {
    // Session 9 teaches the fit that gaps follow output lengths (each gap is
    // the previous request's output, in ticks: 10, 100, 1000 or 5000).
    // Then, with margin 0 (the session expected back last goes first):
    //   s2: B inserted at T+10, read again at T+1010 (gap 1000), wrote 10 tokens
    //   s1: A inserted at T+920, read again at T+1020 (gap 100), wrote 5000
    // By mean gaps s2 is back last (T+2010 against T+1120): B goes first.
    // By output, s1 is back last (about T+1020+5000): A goes first.
    auto run = [](bool fit) {
        session_aware_lru p(
            4, {.far_factor = 0.0, .tuner = {.enabled = false}, .gaps = {.enabled = fit, .min_samples = 16}});
        const item_id S{0}, A{1}, B{2};
        const std::uint64_t outputs[] = {10, 100, 1000, 5000, 100, 5000, 10, 1000};
        timestamp t = 0;
        p.on_insert(S, at(t, 9, 'S'));
        for (int i = 0; i < 200; ++i) {
            if (i > 0) p.on_access(S, at(t, 9, 'S'));
            p.on_hold(S);
            access_context done = at(t, 9, 0);
            done.output_tokens = outputs[i % 8];
            p.on_release(S, done);
            t += outputs[i % 8];
        }
        const timestamp T = t;
        p.on_insert(B, at(T + 10, 2, 'B'));
        p.on_insert(A, at(T + 920, 1, 'A'));
        p.on_access(B, at(T + 1010, 2, 'B'));
        p.on_hold(B);
        access_context b_done = at(T + 1010, 2, 0);
        b_done.output_tokens = 10;
        p.on_release(B, b_done);
        p.on_access(A, at(T + 1020, 1, 'A'));
        p.on_hold(A);
        access_context a_done = at(T + 1020, 1, 0);
        a_done.output_tokens = 5000;
        p.on_release(A, a_done);
        if (fit) {
            REQUIRE(*p.expected_back(session_id{1}) > T + 1020 + 2500);
            REQUIRE(*p.expected_back(session_id{2}) < T + 1010 + 100);
        } else {
            REQUIRE(*p.expected_back(session_id{1}) == T + 1120);
            REQUIRE(*p.expected_back(session_id{2}) == T + 2010);
        }
        return p.pop_victim(T + 1030);
    };
    REQUIRE(run(true) == item_id{1});
    REQUIRE(run(false) == item_id{2});
}

TEST_CASE("tiered_cache::release tells the policy the releasing session and its output tokens",
          "[cache][session_aware_lru][return_gap]") {
    // Through the cache: the same story as above, with the fit learning
    // from session 9's requests and the cache's release carrying the counts.
    // Deferred releases (blocks filled in the open step) carry them too.
    using cache_type = tiered_cache<session_aware_lru, lru>;
    cache_type cache(cache_config{.gpu_capacity = 8, .cpu_capacity = 0, .block_size = 16});
    const std::uint64_t outputs[] = {10, 100, 1000, 5000, 100, 5000, 10, 1000};
    timestamp t = 1;
    const std::vector<block_hash> s_chain{0x51};
    for (int i = 0; i < 200; ++i) {
        cache.clock().set(t);
        cache.begin_step();
        (void)cache.admit(session_id{9}, s_chain);
        if (i % 2 == 0) REQUIRE(cache.release(session_id{9}, outputs[i % 8]) == 1);  // deferred: filled this step
        (void)cache.end_step();
        if (i % 2 == 1) REQUIRE(cache.release(session_id{9}, outputs[i % 8]) == 1);
        t += outputs[i % 8];
    }
    const timestamp T = t;
    const auto request = [&](timestamp at_time, std::uint64_t session, block_hash h, std::uint64_t output) {
        cache.clock().set(at_time);
        cache.begin_step();
        (void)cache.admit(session_id{session}, std::vector<block_hash>{h});
        (void)cache.end_step();
        if (output != 0) (void)cache.release(session_id{session}, output);
    };
    request(T + 10, 2, 0xB, 0);
    (void)cache.release(session_id{2});  // unknown output: the mean gap only
    request(T + 920, 1, 0xA, 0);
    (void)cache.release(session_id{1});
    request(T + 1010, 2, 0xB, 10);
    request(T + 1020, 1, 0xA, 5000);
    const session_aware_lru& policy = cache.gpu().policy();
    REQUIRE(*policy.expected_back(session_id{1}) > T + 1020 + 2500);
    REQUIRE(*policy.expected_back(session_id{2}) < T + 1010 + 100);
}

TEST_CASE("session_aware_lru: the engine's expected return overrides the session's own prediction",
          "[eviction][session_aware_lru][return_hint]") {
    // s1 and s2 each make two requests 100 ticks apart (mean gap 100), so
    // both are expected back 100 ticks after their latest request. The
    // release of s1's second request says it is back at t = 5000 (an agent's
    // long tool call), s2's says t = 400: s1 is back last and goes first with
    // margin 0. A `never` hint (a closed conversation) ranks a session past
    // every other; the next request of a session drops its hint.
    auto story = [](timestamp s1_back, timestamp s2_back) {
        session_aware_lru p(4, {.far_factor = 0.0, .tuner = {.enabled = false}, .gaps = {.enabled = false}});
        const item_id A{0}, B{1};
        p.on_insert(A, at(10, 1, 'A'));
        p.on_insert(B, at(20, 2, 'B'));
        p.on_access(A, at(110, 1, 'A'));
        p.on_hold(A);
        access_context a_done = at(110, 1, 0);
        a_done.expected_return = s1_back;
        p.on_release(A, a_done);
        p.on_access(B, at(120, 2, 'B'));
        p.on_hold(B);
        access_context b_done = at(120, 2, 0);
        b_done.expected_return = s2_back;
        p.on_release(B, b_done);
        return p;
    };
    {
        session_aware_lru p = story(0, 0);  // no hints: mean gaps, s2 back last (220 against 210)
        REQUIRE(*p.expected_back(session_id{1}) == 210);
        REQUIRE(*p.expected_back(session_id{2}) == 220);
        REQUIRE(p.pop_victim(130) == item_id{1});
    }
    {
        session_aware_lru p = story(5000, 400);
        REQUIRE(*p.expected_back(session_id{1}) == 5000);
        REQUIRE(*p.expected_back(session_id{2}) == 400);
        REQUIRE(p.pop_victim(130) == item_id{0});
    }
    {
        session_aware_lru p = story(0, never);
        REQUIRE(*p.expected_back(session_id{2}) == never - 1);
        REQUIRE(p.pop_victim(130) == item_id{1});
    }
    {
        // A hint at or before the session's latest request: back at once.
        session_aware_lru p = story(50, 0);
        REQUIRE(*p.expected_back(session_id{1}) == 111);
    }
    {
        // s1's next request ends its hint: the mean gap again.
        session_aware_lru p = story(5000, 400);
        p.on_access(item_id{0}, at(300, 1, 'A'));
        REQUIRE(*p.expected_back(session_id{1}) == 422);  // 300 + the mean gap, 100 + 0.25 x (190 - 100)
    }
}

TEST_CASE("tiered_cache::release carries the engine's expected return, and refuses one in the past",
          "[cache][session_aware_lru][return_hint]") {
    using cache_type = tiered_cache<session_aware_lru, lru>;
    cache_type cache(cache_config{.gpu_capacity = 8, .cpu_capacity = 0, .block_size = 16});
    const auto request = [&](timestamp at_time, std::uint64_t session, block_hash h) {
        cache.clock().set(at_time);
        cache.begin_step();
        (void)cache.admit(session_id{session}, std::vector<block_hash>{h});
    };
    request(100, 1, 0xA);
    REQUIRE(cache.release(session_id{1}, 0, 900) == 1);  // deferred: filled in the open step
    (void)cache.end_step();
    request(110, 2, 0xB);
    (void)cache.end_step();
    REQUIRE_THROWS_WITH(cache.release(session_id{2}, 7, 110), Catch::Contains("not after now"));
    REQUIRE_THROWS_WITH(cache.release(session_id{2}, 7, 50), Catch::Contains("expected back at 50"));
    REQUIRE(cache.release(session_id{2}, 7, never) == 1);  // the refused calls released nothing
    const session_aware_lru& policy = cache.gpu().policy();
    REQUIRE(*policy.expected_back(session_id{1}) == 900);
    REQUIRE(*policy.expected_back(session_id{2}) == never - 1);
}

TEST_CASE("session_aware_lru hears a session end through tiered_cache::free_session",
          "[cache][session_aware_lru][return_hint]") {
    // s1 and s2 each make two requests 100 ticks apart, s2 10 ticks after s1:
    // by mean gaps s2 is back last. The engine then closes s1, long after its
    // last release: s1 is expected back never and its block goes first (margin
    // 0). When s1 makes another request, its end is forgotten.
    using cache_type = tiered_cache<session_aware_lru, lru>;
    STATIC_REQUIRE(hears_session_ends<session_aware_lru>);
    STATIC_REQUIRE(!hears_session_ends<lru>);
    auto story = [](bool close_s1) {
        auto cache = std::make_unique<cache_type>(
            cache_config{.gpu_capacity = 2, .cpu_capacity = 0, .block_size = 16},
            session_aware_lru::config_type{.far_factor = 0.0, .tuner = {.enabled = false}, .gaps = {.enabled = false}});
        const auto request = [&](timestamp at_time, std::uint64_t session, block_hash h) {
            cache->clock().set(at_time);
            cache->begin_step();
            (void)cache->admit(session_id{session}, std::vector<block_hash>{h});
            (void)cache->end_step();
            (void)cache->release(session_id{session});
        };
        request(10, 1, 0xA);
        request(20, 2, 0xB);
        request(110, 1, 0xA);
        request(120, 2, 0xB);
        cache->clock().set(125);
        if (close_s1) REQUIRE(cache->free_session(session_id{1}) == 0);  // nothing forgotten: blocks stay
        return cache;
    };
    {
        auto cache = story(false);
        REQUIRE(*cache->gpu().policy().expected_back(session_id{1}) == 210);
        cache->clock().set(130);
        cache->begin_step();
        (void)cache->admit(session_id{3}, std::vector<block_hash>{0xC});  // one victim: s2's block
        (void)cache->end_step();
        REQUIRE(cache->where(0xA) == item_state::in_gpu);
        REQUIRE(cache->where(0xB) != item_state::in_gpu);
    }
    {
        auto cache = story(true);
        REQUIRE(*cache->gpu().policy().expected_back(session_id{1}) == never - 1);
        cache->clock().set(130);
        cache->begin_step();
        (void)cache->admit(session_id{3}, std::vector<block_hash>{0xC});
        (void)cache->end_step();
        REQUIRE(cache->where(0xA) != item_state::in_gpu);
        REQUIRE(cache->where(0xB) == item_state::in_gpu);
    }
    {
        // Back after all: its next request drops the end.
        auto cache = story(true);
        cache->clock().set(300);
        cache->begin_step();
        (void)cache->admit(session_id{1}, std::vector<block_hash>{0xA});
        (void)cache->end_step();
        REQUIRE(*cache->gpu().policy().expected_back(session_id{1}) == 300 + 122);
    }
}
