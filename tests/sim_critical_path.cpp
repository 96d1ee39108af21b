// The ready time (sim/critical_path.hpp): the pipeline's recurrence against
// the longest path through its dependency graph, a tiered replay worked by
// hand, replay_requests against a replay that reads each item's tier from
// the cache before every admit (layer-chunk items, random chat workloads),
// and the report's ready gap.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/checkerboard.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/retention_value.hpp>
#include <kvpolicy/sim/critical_path.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/workload.hpp>

#include "support/hand_made_requests.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

using namespace kvpolicy;
using namespace kvpolicy::sim;

namespace {

// The step as a graph: copy k after copy k-1, compute k after compute k-1
// and after copy k. Its longest path enters the compute chain at some stage
// k (after every copy up to k) or at the start, so
//   ready = max(sum of computes, max over k of (copies 0..k + computes k..end)).
double longest_path(const std::vector<stage_work>& s) {
    double best = 0;
    for (const stage_work& w : s) best += w.compute_s;
    for (std::size_t k = 0; k < s.size(); ++k) {
        double path = 0;
        for (std::size_t j = 0; j <= k; ++j) path += s[j].load_s;
        for (std::size_t j = k; j < s.size(); ++j) path += s[j].compute_s;
        best = std::max(best, path);
    }
    return best;
}

}  // namespace

TEST_CASE("ready time: the pipeline's recurrence is the longest path of its graph", "[sim][ready]") {
    SECTION("worked by hand") {
        // Copies 3 then 1, computes 1 and 1: layer 0 waits for its copy (3),
        // computes to 4; layer 1's copy is in at 4, it computes to 5.
        const std::vector<stage_work> s{{.load_s = 3, .compute_s = 1}, {.load_s = 1, .compute_s = 1}};
        REQUIRE(pipelined_ready_time(s) == 5.0);
        // A back layer's copy hides behind the front layers' compute.
        const std::vector<stage_work> back{{0, 2}, {0, 2}, {3, 2}};
        REQUIRE(pipelined_ready_time(back) == 6.0);
        const std::vector<stage_work> front{{3, 2}, {0, 2}, {0, 2}};
        REQUIRE(pipelined_ready_time(front) == 9.0);
        REQUIRE(pipelined_ready_time(std::vector<stage_work>{}) == 0.0);
    }
    SECTION("random stages") {
        std::mt19937_64 rng(7);
        std::uniform_real_distribution<double> u(0, 1);
        for (int trial = 0; trial < 20000; ++trial) {
            std::vector<stage_work> s(1 + rng() % 48);
            for (stage_work& w : s) {
                // Zeros often: whole-hit and no-copy requests are common.
                w.load_s = rng() % 3 == 0 ? 0.0 : u(rng);
                w.compute_s = rng() % 3 == 0 ? 0.0 : u(rng);
            }
            REQUIRE(pipelined_ready_time(s) == Approx(longest_path(s)).epsilon(1e-12));
        }
    }
}

TEST_CASE("ready time: quantiles are nearest-rank", "[sim][ready]") {
    ready_time_stats st;
    REQUIRE(st.quantile(0.99) == 0.0);
    for (int i = 100; i >= 1; --i) st.add(i);
    REQUIRE(st.total() == 5050.0);
    REQUIRE(st.mean() == 50.5);
    REQUIRE(st.quantile(0.99) == 99.0);
    REQUIRE(st.quantile(0.5) == 50.0);
    REQUIRE(st.quantile(1.0) == 100.0);
    REQUIRE(st.quantile(0.0) == 1.0);
}

using kvpolicy::testing::add_request;

TEST_CASE("ready time: a tiered replay worked by hand", "[sim][ready]") {
    // support/hand_made_requests.hpp's tiered trace (GPU 2, CPU 2, LRU on
    // both): every block costs 1 s to compute, a block's copy 0.5 s, two
    // pipeline stages (half of each per stage).
    //  r1 [1 2]: computed: 1 + 1 per stage                 -> 2
    //  r2 [3 4]: computed                                   -> 2
    //  r3 [1 2]: two CPU hits, nothing computed: copies 0.5 per stage,
    //            each stage ready when its copy is in        -> 1
    //  r4 [5]:   computed                                   -> 1
    //  r5 [3 9]: 3 a CPU hit (0.25 per stage), 9 computed (0.5 per stage):
    //            stage 0 ready at 0.25 + 0.5, stage 1's copy in at 0.5,
    //            it computes from 0.75                        -> 1.25
    const std::vector<request_record> reqs = testing::hand_made_tiered_trace();
    vector_request_source src(reqs);
    request_replay_config cfg{.capacity = 2,
                              .cpu_capacity = 2,
                              .block_size = 16,
                              .cost = pensieve_linear({.alpha = 0, .beta = 0, .const_non_attention = 1}),
                              .bandwidth_bytes_per_s = 32,  // 16 tokens x 1 B in 0.5 s
                              .kv_bytes_per_token = 1,
                              .pipeline_layers = 2,
                              .trace_name = "hand-made"};
    const replay_result r = replay_requests<lru, lru>(src, cfg, replay_mode::tiered);
    REQUIRE(r.cpu_hits == 3);
    REQUIRE(r.ready_s_total == Approx(7.25));
    REQUIRE(r.ready_s_mean == Approx(7.25 / 5));
    REQUIRE(r.ready_s_p99 == Approx(2.0));

    SECTION("a request longer than the GPU tier is computed whole") {
        std::vector<request_record> long_one;
        add_request(long_one, 0, {1, 2, 3});
        vector_request_source s(long_one);
        const replay_result b = replay_requests<lru, lru>(s, cfg, replay_mode::tiered);
        REQUIRE(b.bypassed_requests == 1);
        REQUIRE(b.ready_s_total == Approx(3.0));
    }
    SECTION("zero model layers is refused, naming the fix") {
        request_replay_config bad = cfg;
        bad.pipeline_layers = 0;
        vector_request_source s(reqs);
        REQUIRE_THROWS_WITH((replay_requests<lru, lru>(s, bad, replay_mode::tiered)),
                            Catch::Contains("give the model's layer count"));
    }
}

namespace {

// The reference: the same cache driven as replay_requests drives it, each
// request's work read from the cache before its admit (lookup for the run,
// where() for every item of it), the time by the longest path.
template <class Gpu, class Cpu>
ready_time_stats reference_ready(const std::vector<request_record>& reqs, const request_replay_config& cfg) {
    const std::uint32_t layers = cfg.num_layers;
    tiered_cache<Gpu, Cpu> cache(
        {.gpu_capacity = cfg.capacity * layers,
         .cpu_capacity = cfg.cpu_capacity * layers,
         .block_size = cfg.block_size,
         .num_layers = layers,
         .items = layers > 1 ? granularity::per_layer : granularity::whole_block,
         .item_bytes = static_cast<std::size_t>(cfg.kv_bytes_per_token) * cfg.block_size / layers});
    const double block_copy_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.bandwidth_bytes_per_s;
    ready_time_stats out;
    timestamp now = 0;
    for (const request_record& req : reqs) {
        now = request_time(now, req.timestamp_ms);
        cache.clock().set(now);
        const std::size_t n = req.hash_ids.size();
        const bool fits = cache.gpu_room_for(req.hash_ids);
        const std::size_t run = fits ? cache.lookup(req.hash_ids).run : 0;
        std::vector<stage_work> s(layers);
        double compute = 0;
        for (std::size_t i = run; i < n; ++i) compute += cfg.cost.cost(i * cfg.block_size);
        for (std::uint32_t l = 0; l < layers; ++l) {
            std::size_t copies = 0;
            for (std::size_t i = 0; i < run; ++i)
                copies += cache.where(req.hash_ids[i], l) == item_state::in_cpu ? 1 : 0;
            s[l] = {.load_s = static_cast<double>(copies) * block_copy_s / layers, .compute_s = compute / layers};
        }
        out.add(longest_path(s));
        cache.begin_step();
        if (fits) (void)cache.admit(session_id{req.session}, req.hash_ids);
        (void)cache.end_step();
        if (fits && n > 0) cache.release(session_id{req.session}, req.output_length, 0);
    }
    return out;
}

template <class Gpu, class Cpu>
void check_against_reference(std::uint64_t seed, std::size_t gpu, std::size_t cpu) {
    std::vector<request_record> reqs = generate_chat_workload({.sessions = 60,
                                                               .session_rate_per_s = 2,
                                                               .mean_think_time_s = 5,
                                                               .system_prompt_tokens = 256,
                                                               .system_prompts = 3,
                                                               .block_size = 16,
                                                               .seed = seed});
    for (request_record& r : reqs) r.has_session = true;  // the generator's sessions, as the reference uses them
    const request_replay_config cfg{
        .capacity = gpu, .cpu_capacity = cpu, .block_size = 16, .num_layers = 4, .trace_name = "chat"};
    vector_request_source src(reqs);
    const replay_result r = replay_requests<Gpu, Cpu>(src, cfg, replay_mode::tiered);
    ready_time_stats ref = reference_ready<Gpu, Cpu>(reqs, cfg);
    INFO("seed " << seed << ", gpu " << gpu << ", cpu " << cpu);
    REQUIRE(r.cpu_hits > 0);  // copies are on the path being checked
    REQUIRE(r.ready_s_total == Approx(ref.total()).epsilon(1e-9));
    REQUIRE(r.ready_s_mean == Approx(ref.mean()).epsilon(1e-9));
    REQUIRE(r.ready_s_p99 == Approx(ref.quantile(0.99)).epsilon(1e-9));
}

}  // namespace

TEST_CASE("ready time: replay_requests equals a replay that asks each item's tier", "[sim][ready]") {
    for (std::uint64_t seed : {1, 2, 3}) {
        check_against_reference<lru, lru>(seed, 200, 400);
        check_against_reference<retention_value<>, lexicographic_checkerboard>(seed, 200, 400);
        check_against_reference<retention_value<>, lru>(seed, 120, 800);
    }
}

TEST_CASE("ready gap: the share of LRU's -> Belady's total ready time closed, in tiered mode", "[sim][ready]") {
    std::vector<replay_result> rs(4);
    const std::pair<const char*, double> rows[] = {
        {"lru", 10.0}, {"belady", 6.0}, {"retention_value", 8.0}, {"checkerboard", 11.0}};
    for (std::size_t i = 0; i < 4; ++i) {
        rs[i].policy = rows[i].first;
        rs[i].capacity = 100;
        rs[i].cpu_capacity = 400;
        rs[i].mode = replay_mode::tiered;
        rs[i].accesses = 100;
        rs[i].hits = 50;
        rs[i].ready_s_total = rows[i].second;
    }
    rs[3].built_for = "the CPU tier of layer-chunk items";
    fill_gap_closed(rs);
    REQUIRE(rs[0].ready_gap_closed == Approx(0.0));
    REQUIRE(rs[1].ready_gap_closed == Approx(1.0));
    REQUIRE(rs[2].ready_gap_closed == Approx(0.5));    // (10 - 8) / (10 - 6)
    REQUIRE(rs[3].ready_gap_closed == Approx(-0.25));  // slower than LRU
    std::ostringstream table;
    write_table(table, rs, "t");
    REQUIRE_THAT(table.str(), Catch::Contains("ready gap %"));
    REQUIRE_THAT(table.str(), Catch::Contains("50.0"));
    REQUIRE_THAT(table.str(), Catch::Contains("checkerboard is built for the CPU tier of layer-chunk items"));
    std::ostringstream json;
    write_json_lines(json, rs);
    REQUIRE_THAT(json.str(), Catch::Contains("\"ready_s_total\": 8, \"ready_s_mean\": 0, \"ready_s_p99\": 0, "
                                             "\"ready_gap_closed\": 0.5"));

    SECTION("prefix mode has no ready gap") {
        for (replay_result& r : rs) r.mode = replay_mode::prefix;
        fill_gap_closed(rs);
        for (const replay_result& r : rs) REQUIRE(std::isnan(r.ready_gap_closed));
    }
    SECTION("no gap when Belady is not faster than LRU") {
        rs[1].ready_s_total = 10.0;
        fill_gap_closed(rs);
        REQUIRE(std::isnan(rs[2].ready_gap_closed));
    }
}
