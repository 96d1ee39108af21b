// kvpolicy-sim's capacity list (blocks and percentages), and the figures
// that judge a policy at one capacity (share of the LRU -> Belady gap
// closed, capacity needed to reach LRU's hit ratio, Jain's fairness over
// sessions, re-prefill share, derived sessions), against hand computations.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <kvpolicy/eviction/belady.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/sim/capacity.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/run_options.hpp>

using namespace kvpolicy;

namespace {

const std::string fix =
    "; give positive block counts or percentages of the trace's distinct blocks in (0%, 100%], "
    "comma-separated (e.g. --capacity 1%,5%,10% or --capacity 1000,20000)";

void require_config_error(const std::string& list, const std::string& message) {
    try {
        (void)sim::parse_capacity_list(list);
        FAIL("'" << list << "' was accepted");
    } catch (const config_error& e) {
        REQUIRE(std::string(e.what()) == message);
    }
}

sim::request_record request(std::uint64_t ms, std::vector<std::uint64_t> ids, std::uint64_t input_length) {
    sim::request_record r;
    r.timestamp_ms = ms;
    r.hash_ids = std::move(ids);
    r.input_length = input_length;
    return r;
}

}  // namespace

TEST_CASE("capacity list (--capacity): blocks and percentages, mixed, fractions of the distinct blocks, floored") {
    const auto specs = sim::parse_capacity_list("1%,5%,10%,2000,0.5%,100%");
    REQUIRE(specs.size() == 6);
    // The Mooncake conversation trace has 182790 distinct blocks (issue #15's table).
    REQUIRE(specs[0].resolve(182790) == 1827);
    REQUIRE(specs[1].resolve(182790) == 9139);
    REQUIRE(specs[2].resolve(182790) == 18279);
    REQUIRE(specs[3].resolve(182790) == 2000);
    REQUIRE_FALSE(specs[3].relative());
    REQUIRE(specs[4].resolve(182790) == 913);
    REQUIRE(specs[5].resolve(182790) == 182790);
    REQUIRE(specs[0].resolve(50) == 1);  // never 0 blocks
}

TEST_CASE("capacity list (--capacity): bad entries name the entry and the fix") {
    require_config_error("0%", "--capacity: '0%' is outside (0%, 100%]" + fix);
    require_config_error("150%", "--capacity: '150%' is outside (0%, 100%]" + fix);
    require_config_error("abc", "--capacity: 'abc' is neither a number of blocks nor a percentage" + fix);
    require_config_error("1%,abc%", "--capacity: 'abc%' is not a percentage" + fix);
    require_config_error("0", "--capacity: '0' blocks cannot hold anything" + fix);
    require_config_error("-5", "--capacity: '-5' is neither a number of blocks nor a percentage" + fix);
    require_config_error("10,,20", "--capacity: empty entry in '10,,20'" + fix);
    require_config_error("nan%", "--capacity: 'nan%' is not a percentage" + fix);
}

TEST_CASE("share of the LRU -> Belady gap closed") {
    REQUIRE(sim::gap_closed(0.30, 0.20, 0.40) == Approx(0.5));
    REQUIRE(sim::gap_closed(0.20, 0.20, 0.40) == Approx(0.0));
    REQUIRE(sim::gap_closed(0.40, 0.20, 0.40) == Approx(1.0));
    REQUIRE(sim::gap_closed(0.15, 0.20, 0.40) == Approx(-0.25));
    REQUIRE(std::isnan(sim::gap_closed(0.3, 0.4, 0.4)));  // no gap to close

    std::vector<sim::replay_result> rs(5);
    const std::pair<const char*, std::uint64_t> rows[] = {
        {"lru", 20}, {"belady", 40}, {"arc", 25}, {"lru", 50}, {"arc", 60}};
    for (std::size_t i = 0; i < 5; ++i) {
        rs[i].policy = rows[i].first;
        rs[i].capacity = i < 3 ? 10 : 100;
        rs[i].accesses = 100;
        rs[i].hits = rows[i].second;
    }
    sim::fill_gap_closed(rs);
    REQUIRE(rs[0].gap_closed == Approx(0.0));
    REQUIRE(rs[1].gap_closed == Approx(1.0));
    REQUIRE(rs[2].gap_closed == Approx(0.25));  // (0.25 - 0.20) / (0.40 - 0.20)
    REQUIRE(std::isnan(rs[3].gap_closed));      // no Belady at 100
    REQUIRE(std::isnan(rs[4].gap_closed));
    std::ostringstream csv;
    sim::write_csv(csv, rs);
    REQUIRE(csv.str().find(",0.250000,,,,,\n") != std::string::npos);  // arc at 10; flat: no session columns
}

TEST_CASE("kvpolicy-sim runs what was asked: the bounds with --bounds, LRU hidden as --match-lru's target") {
    using names = std::vector<std::string>;
    // A one-policy replay replays one policy, whatever it is.
    for (const char* p : {"lru", "belady", "s3fifo"}) {
        const sim::run_plan plan = sim::plan_runs({p}, false, false);
        REQUIRE(plan.policies == names{p});
        REQUIRE(plan.added_for_bounds.empty());
        REQUIRE_FALSE(plan.lru_hidden);
    }
    REQUIRE(sim::plan_runs({"arc", "s3fifo", "arc"}, false, false).policies == names{"arc", "s3fifo"});
    // --bounds adds what is missing of lru and belady, after the requested ones.
    sim::run_plan b = sim::plan_runs({"arc", "belady"}, true, false);
    REQUIRE(b.policies == names{"arc", "belady", "lru"});
    REQUIRE(b.added_for_bounds == names{"lru"});
    REQUIRE(sim::plan_runs({"lru", "belady"}, true, true).added_for_bounds.empty());
    // --match-lru needs LRU's hit ratios: run, then dropped unless asked for.
    sim::run_plan m = sim::plan_runs({"arc"}, false, true);
    REQUIRE(m.policies == names{"arc", "lru"});
    REQUIRE(m.lru_hidden);
    REQUIRE_FALSE(sim::plan_runs({"arc", "lru"}, false, true).lru_hidden);
    REQUIRE_FALSE(sim::plan_runs({"arc"}, true, true).lru_hidden);  // --bounds shows it

    std::vector<sim::replay_result> rs(4);
    const char* policies[] = {"arc", "lru", "arc", "lru"};
    for (std::size_t i = 0; i < rs.size(); ++i) {
        rs[i].policy = policies[i];
        rs[i].capacity = i < 2 ? 10 : 100;
    }
    std::vector<sim::replay_result> kept = rs;
    sim::keep_shown(kept, sim::plan_runs({"arc", "lru"}, false, true));
    REQUIRE(kept.size() == 4);
    sim::keep_shown(kept, m);
    REQUIRE(kept.size() == 2);
    REQUIRE((kept[0].policy == "arc" && kept[0].capacity == 10 && kept[1].policy == "arc" && kept[1].capacity == 100));
}

TEST_CASE("capacity needed to reach a hit ratio: bisection to the given precision") {
    // A hit ratio of c / 1000 (saturating at 1): 0.25 is first reached at 250.
    const auto hr = [](std::size_t c) { return std::min(1.0, static_cast<double>(c) / 1000.0); };
    const auto exact = sim::smallest_capacity_reaching(0.25, 400, 5000, 1, hr);
    REQUIRE(exact.capacity == 250);
    const auto coarse = sim::smallest_capacity_reaching(0.25, 400, 5000, 10, hr);
    REQUIRE(coarse.capacity >= 250);
    REQUIRE(coarse.capacity <= 260);
    REQUIRE(hr(coarse.capacity) >= 0.25);
    // Above the guess: doubling, then bisection.
    REQUIRE(sim::smallest_capacity_reaching(0.9, 100, 5000, 1, hr).capacity == 900);
    // Never reached below hi.
    REQUIRE(sim::smallest_capacity_reaching(0.9, 100, 800, 1, hr).capacity == 0);
    // A target of 0 is reached by one block.
    REQUIRE(sim::smallest_capacity_reaching(0.0, 100, 800, 1, hr).capacity == 1);
    // Replays: 1 (the guess) + ~log2(400) bisection steps.
    REQUIRE(exact.replays <= 1 + 10);
}

TEST_CASE("a trace's format and mode when none is named: a CSV by its name replays flat") {
    REQUIRE(sim::format_of("accesses.csv") == sim::trace_format::csv);
    REQUIRE(sim::format_of("conversation_trace.jsonl") == sim::trace_format::mooncake);
    REQUIRE(sim::format_of("") == sim::trace_format::mooncake);  // the built-in workload: requests
    REQUIRE(sim::default_mode(sim::trace_format::csv) == sim::replay_mode::flat);
    REQUIRE(sim::default_mode(sim::trace_format::mooncake) == sim::replay_mode::prefix);
}

TEST_CASE("set_format_and_mode: names or the defaults, another name refused naming the accepted ones") {
    sim::run_options o;
    o.trace = "accesses.csv";
    sim::set_format_and_mode(o, "", "");
    REQUIRE((o.format == sim::trace_format::csv && o.mode == sim::replay_mode::flat));
    sim::set_format_and_mode(o, "mooncake", "");
    REQUIRE((o.format == sim::trace_format::mooncake && o.mode == sim::replay_mode::prefix));
    for (const auto m :
         {sim::replay_mode::flat, sim::replay_mode::prefix, sim::replay_mode::tiered, sim::replay_mode::offload}) {
        sim::set_format_and_mode(o, "csv", sim::to_string(m));
        REQUIRE((o.format == sim::trace_format::csv && o.mode == m));
    }
    const sim::run_options before = o;
    REQUIRE_THROWS_MATCHES(sim::set_format_and_mode(o, "xml", ""), config_error,
                           Catch::Message("--format xml: give mooncake or csv"));
    REQUIRE_THROWS_MATCHES(sim::set_format_and_mode(o, "mooncake", "fast"), config_error,
                           Catch::Message("--mode fast: give flat, prefix, tiered or offload"));
    REQUIRE((o.format == before.format && o.mode == before.mode));  // both names checked before either is set
}

TEST_CASE("capacity_spec::check: 0 blocks refused naming the entry, a share or a block count passes") {
    REQUIRE_THROWS_MATCHES((sim::capacity_spec{.blocks = 0, .text = "0"}.check()), config_error,
                           Catch::Message(std::string("--capacity: '0' blocks cannot hold anything") + fix));
    REQUIRE_NOTHROW(sim::capacity_spec{.blocks = 1, .text = "1"}.check());
    REQUIRE_NOTHROW(sim::parse_capacity_list("5%")[0].check());
}

TEST_CASE("sessions derived from the prefix when the trace names none, fairness and re-prefill by hand") {
    // Block size 4. A: [1 2 3] with 10 tokens: full blocks 1, 2 -> its last
    // full block 2 is registered. B: [1 2 5 6] (14 tokens) continues A (it
    // contains 2). C: [1 7] with 5 tokens: its last full block is 1, which
    // A computed first, so C registers nothing and is a new session.
    // D: [1 7 8] (10 tokens) holds no registered block (2 is A's, 5 is B's:
    // 14 / 4 = 3 full blocks 1 2 5): a new session (a short first turn is
    // where the rule splits a conversation). E: [1 2 5 6 9] joins B's.
    sim::session_deriver d;
    REQUIRE(d.session_of(request(0, {1, 2, 3}, 10), 4) == 0);
    REQUIRE(d.session_of(request(1, {1, 2, 5, 6}, 14), 4) == 0);
    REQUIRE(d.session_of(request(2, {1, 7}, 5), 4) == 1);
    REQUIRE(d.session_of(request(3, {1, 7, 8}, 10), 4) == 2);
    REQUIRE(d.session_of(request(4, {1, 2, 5, 6, 9}, 18), 4) == 0);  // deepest owner: 5 (B's, session 0)
    // derive_sessions: the same, for lists of requests (kvpolicy.derive_sessions).
    REQUIRE(sim::derive_sessions({{1, 2, 3}, {1, 2, 5, 6}, {1, 7}, {1, 7, 8}, {1, 2, 5, 6, 9}}, {10, 14, 5, 10, 18},
                                 4) == std::vector<std::uint64_t>{0, 0, 1, 2, 0});
    REQUIRE_THROWS_WITH(sim::derive_sessions({{1}}, {}, 4),
                        "derive_sessions: 1 hash lists and 0 input lengths; give "
                        "one of each per request");
    REQUIRE_THROWS_AS(sim::derive_sessions({{1}}, {4}, 0), config_error);

    // Replay at capacity 8 blocks (nothing evicted, block size 4): hits per
    // request 0, 2, 1, 2, 4 of 3, 4, 2, 3, 5 blocks.
    // Sessions: 0 = {A, B, E}: (0 + 2 + 4) / 12 = 0.5; 1 = {C}: 1/2; 2 = {D}: 2/3.
    std::vector<sim::request_record> reqs = {request(0, {1, 2, 3}, 10), request(1, {1, 2, 5, 6}, 14),
                                             request(2, {1, 7}, 5), request(3, {1, 7, 8}, 10),
                                             request(4, {1, 2, 5, 6, 9}, 18)};
    sim::vector_request_source src(reqs);
    sim::request_replay_config cfg;
    cfg.capacity = 8;
    cfg.block_size = 4;
    const sim::replay_result r = sim::replay_requests<lru, lru>(src, cfg, sim::replay_mode::prefix);
    REQUIRE(r.hits == 9);
    REQUIRE(r.sessions == 3);
    const double x[] = {0.5, 0.5, 2.0 / 3.0};
    const double sum = x[0] + x[1] + x[2], sum_sq = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
    REQUIRE(r.fairness == Approx(sum * sum / (3 * sum_sq)));
    REQUIRE(r.re_prefill_share() == 0.0);  // every miss is a block's first appearance

    // Capacity 3, by hand with LRU: A [1 2 3] -> {1 2 3}; B [1 2 5 6] is 4 > 3 blocks: served uncached;
    // C [1 7]: hit 1, 7 evicts 3 (LRU; tail released first) -> {1 2 7};
    // D [1 7 8]: hits 1 7, 8 evicts 2 -> {1 7 8}; E: 5 > 3, uncached.
    // Computed again: B's 1 2 and E's 1 2 5 6 (served uncached): 6 of 17.
    sim::vector_request_source src3(reqs);
    cfg.capacity = 3;
    const sim::replay_result r3 = sim::replay_requests<lru, lru>(src3, cfg, sim::replay_mode::prefix);
    REQUIRE(r3.bypassed_requests == 2);
    REQUIRE(r3.hits == 3);
    REQUIRE(r3.reprefill_blocks == 6);
    REQUIRE(r3.re_prefill_share() == Approx(6.0 / 17.0));
}

TEST_CASE("re-prefill share: missed blocks an earlier request had computed, over all block accesses") {
    // Capacity 2, block size 4, LRU: [1] [2] [3] [1]: 1 is dropped at [3]
    // and computed again at the last [1]: 4 of 16 tokens.
    std::vector<sim::request_record> reqs = {request(0, {1}, 4), request(1, {2}, 4), request(2, {3}, 4),
                                             request(3, {1}, 4)};
    sim::vector_request_source src(reqs);
    sim::request_replay_config cfg;
    cfg.capacity = 2;
    cfg.block_size = 4;
    const sim::replay_result r = sim::replay_requests<lru, lru>(src, cfg, sim::replay_mode::prefix);
    REQUIRE(r.hits == 0);
    REQUIRE(r.accesses == 4);
    REQUIRE(r.reprefill_blocks == 1);
    REQUIRE(r.re_prefill_share() == Approx(0.25));
    // Belady keeps 1 (next use at [1]) over 2 (never): a hit, nothing recomputed.
    const sim::request_times times = sim::compute_request_times(reqs, cfg.capacity);
    sim::vector_request_source again(reqs);
    const sim::replay_result b = sim::replay_requests<belady, lru>(again, cfg, sim::replay_mode::prefix, &times);
    REQUIRE(b.hits == 1);
    REQUIRE(b.re_prefill_share() == 0.0);
}
