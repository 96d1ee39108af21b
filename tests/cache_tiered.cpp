// The composed multi-tier cache: seed 003's flow, the naive reference model
// on long random step sequences (with the data moved through real arenas),
// the G + C LRU property, per-layer items, and every error leaving the cache
// exactly as it was.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/block_hasher.hpp>
#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/presets.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/cache_snapshot.hpp"
#include "support/differential_driver.hpp"

using namespace kvpolicy;
using kvpolicy::testing::cache_snapshot;
using kvpolicy::testing::ref_rule;

namespace {

std::vector<block_hash> chain(std::initializer_list<block_hash> h) { return h; }

}  // namespace

TEST_CASE("seed 003's flow: computed blocks, allocate, end of step, swap plan", "[cache]") {
    // GPU of 4 blocks, CPU of 2, LRU on the GPU, FIFO on the CPU.
    tiered_cache<lru, fifo> cache({.gpu_capacity = 4, .cpu_capacity = 2, .block_size = 16, .item_bytes = 1024});
    const session_id a{1}, b{2};

    cache.begin_step();
    const admission first = cache.admit(a, chain({10, 11, 12}));  // a computes 3 blocks
    REQUIRE(first.match == prefix_match{0, 0, 0});
    REQUIRE(first.computed_blocks == 3);
    REQUIRE(cache.end_step().empty());  // room enough: no copies
    cache.release(a);
    cache.clock().advance(1);

    cache.begin_step();
    // a's blocks were released tail first: 12 is the least recent, then 11.
    const admission second = cache.admit(b, chain({20, 21, 22}));  // b needs 3: 1 free + 2 victims (12, 11)
    REQUIRE(second.gpu_evictions == 2);
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.swap_outs() == 2);  // the two LRU victims are sheltered on the CPU
    REQUIRE(plan.transfers.size() == 2);
    REQUIRE(plan.transfers[0].from == tier::gpu);
    REQUIRE(plan.transfers[0].to == tier::cpu);
    REQUIRE(plan.swap_ins() == 0);
    REQUIRE(plan.drops.empty());
    REQUIRE(cache.where(12) == item_state::in_cpu);
    REQUIRE(cache.where(11) == item_state::in_cpu);
    REQUIRE(cache.where(10) == item_state::in_gpu);
    cache.release(b);
    cache.clock().advance(1);

    // a comes back: 10 is a GPU hit (held first), 11 and 12 CPU hits. The
    // GPU is full, so each CPU hit is exchanged with a GPU victim: b's tail
    // blocks 22 and 21, the least recently released.
    cache.begin_step();
    REQUIRE(cache.lookup(chain({10, 11, 12})) == prefix_match{3, 1, 2});
    const admission third = cache.admit(a, chain({10, 11, 12}));
    REQUIRE(third.match == prefix_match{3, 1, 2});
    const swap_plan& p3 = cache.end_step();
    REQUIRE(p3.exchanges() == 2);
    REQUIRE(p3.swap_outs() == 0);
    REQUIRE(p3.swap_ins() == 0);
    REQUIRE(cache.where(22) == item_state::in_cpu);
    REQUIRE(cache.where(21) == item_state::in_cpu);
    REQUIRE(cache.where(20) == item_state::in_gpu);
    REQUIRE(cache.where(12) == item_state::in_gpu);
    const cache_metrics m = cache.metrics();
    REQUIRE(m.swap_in_items == 2);
    REQUIRE(m.swap_out_items == 4);
    REQUIRE(m.swap_out_bytes == 4 * 1024);
    REQUIRE(m.gpu.hit_blocks == 1);
    REQUIRE(m.cpu.hit_blocks == 2);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("a full CPU drops its victim and the recovery plan names the tokens", "[cache]") {
    tiered_cache<lru, lru> cache({.gpu_capacity = 2, .cpu_capacity = 1, .block_size = 32});
    cache.begin_step();
    cache.admit(session_id{7}, chain({1, 2}));
    (void)cache.end_step();
    cache.release(session_id{7});
    cache.begin_step();
    // Released tail first, so the victims come 2 then 1; the CPU has room
    // for one, and the newer victim (1) pushes the older (2) out.
    cache.admit(session_id{8}, chain({5, 6}));
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.drops.size() == 1);
    REQUIRE(plan.drops[0].key == 2);
    REQUIRE(plan.drops[0].owner == session_id{7});
    REQUIRE(plan.recovery == std::vector<recovery_range>{{session_id{7}, 32, 64}});
    REQUIRE(cache.where(2) == item_state::free);
    REQUIRE(cache.where(1) == item_state::in_cpu);
    REQUIRE(cache.metrics().dropped_tokens == 32);
}

TEST_CASE("every error leaves the cache exactly as it was", "[cache][errors]") {
    tiered_cache<lru, lru> cache({.gpu_capacity = 4, .cpu_capacity = 2});
    const std::vector<session_id> sessions{session_id{1}, session_id{2}};
    REQUIRE_THROWS_WITH(cache.admit(session_id{1}, chain({1})), Catch::Contains("begin_step() first"));
    cache.begin_step();
    cache.admit(session_id{1}, chain({1, 2, 3}));
    const std::string before = cache_snapshot(cache, sessions);

    SECTION("more blocks than free or evictable") {
        REQUIRE_THROWS_AS(cache.admit(session_id{2}, chain({4, 5})), capacity_error);
        REQUIRE_THROWS_WITH(cache.admit(session_id{2}, chain({4, 5})),
                            Catch::Contains("needs 2 GPU items but only 1 are free or evictable"));
    }
    SECTION("a hash twice in one request") {
        REQUIRE_THROWS_WITH(cache.admit(session_id{2}, chain({4, 4})), Catch::Contains("appears twice"));
    }
    SECTION("a cached block under another parent") {
        REQUIRE_THROWS_WITH(cache.admit(session_id{2}, chain({9, 2})), Catch::Contains("malformed hash chain"));
    }
    SECTION("double release and release of an unknown block") {
        (void)cache.end_step();
        cache.release(session_id{1});
        const std::string after_release = cache_snapshot(cache, sessions);
        REQUIRE_THROWS_WITH(cache.release(session_id{1}), Catch::Contains("released twice"));
        REQUIRE_THROWS_AS(cache.release(session_id{2}, block_id{0}), usage_error);
        REQUIRE(cache_snapshot(cache, sessions) == after_release);
        cache.begin_step();
        return;
    }
    SECTION("pin of a block that is not on the GPU, unpin of one not pinned") {
        REQUIRE_THROWS_WITH(cache.pin(8), Catch::Contains("is free, not on the gpu"));
        REQUIRE_THROWS_WITH(cache.unpin(1), Catch::Contains("is not pinned"));
        cache.pin(1);
        REQUIRE_THROWS_WITH(cache.pin(1), Catch::Contains("already pinned"));
        cache.unpin(1);
    }
    SECTION("steps out of order") { REQUIRE_THROWS_WITH(cache.begin_step(), Catch::Contains("already open")); }
    REQUIRE(cache_snapshot(cache, sessions) == before);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("impossible configurations are refused with the fix", "[cache][errors]") {
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>({.gpu_capacity = 0})), Catch::Contains("at least one block"));
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>({.gpu_capacity = 4, .block_size = 0})),
                        Catch::Contains("block_size 0"));
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>(
                            {.gpu_capacity = 4, .cpu_capacity = 8, .num_layers = 8, .items = granularity::per_layer})),
                        Catch::Contains("at least num_layers items per tier"));
}

TEST_CASE("a held or pinned block is never a victim, a shared prefix only when nobody holds it", "[cache]") {
    tiered_cache<lru, lru> cache({.gpu_capacity = 3, .cpu_capacity = 0});
    cache.begin_step();
    cache.admit(session_id{1}, chain({1, 2}));  // shared prefix 1
    cache.admit(session_id{2}, chain({1}));
    (void)cache.end_step();
    cache.release(session_id{1});
    cache.begin_step();
    cache.admit(session_id{3}, chain({7, 8}));  // 1 free + victim 2; 1 is still held by session 2
    (void)cache.end_step();
    REQUIRE(cache.where(1) == item_state::in_gpu);
    REQUIRE(cache.where(2) == item_state::free);
    cache.release(session_id{3});
    cache.pin(7);
    cache.begin_step();
    REQUIRE_THROWS_AS(cache.admit(session_id{4}, chain({20, 21})), capacity_error);  // 1 held, 7 pinned: only 8
    cache.admit(session_id{4}, chain({20}));
    (void)cache.end_step();
    REQUIRE(cache.where(7) == item_state::in_gpu);
    REQUIRE(cache.where(8) == item_state::free);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("inclusive: the stale CPU copy of a block being recomputed is not reported dropped when it makes room",
          "[cache][inclusive]") {
    // Found by fuzz/cache_ops.cpp. A request whose prefix misses at A
    // recomputes its tail B on the GPU although B still has a CPU copy
    // (inclusive tiers keep it). If making room for the request evicts that
    // copy, nothing is lost: B is on the GPU by the end of the admit. It used
    // to be reported dropped (a recovery range for tokens being computed in
    // this very step, and a dropped item counted).
    tiered_cache<lru, lru> cache({.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16, .inclusive = true});
    const block_hash a = 1, b = 2, c = 3, d = 4, e = 5;
    cache.begin_step();
    cache.admit(session_id{1}, chain({a, b}));
    (void)cache.end_step();
    cache.release(session_id{1});  // tail first: b is the GPU's LRU item, then a
    cache.begin_step();
    cache.admit(session_id{2}, chain({c, d}));  // victims b, a: both sheltered in the CPU
    const swap_plan& sheltered = cache.end_step();
    REQUIRE(sheltered.swap_outs() == 2);
    const std::vector<transfer_status> a_lost{transfer_status::done, transfer_status::failed};
    REQUIRE(cache.complete_transfers(sheltered, a_lost).drops.size() == 1);  // a's copy never arrived
    REQUIRE(cache.where(a) == item_state::free);
    REQUIRE(cache.where(b) == item_state::in_cpu);
    cache.release(session_id{2});  // d, then c
    cache.begin_step();
    cache.admit(session_id{3}, chain({e}));  // victim d fills the CPU: {b, d}
    (void)cache.end_step();
    cache.release(session_id{3});
    const std::uint64_t dropped_before = cache.metrics().dropped_items;

    cache.begin_step();
    // a misses, so b is recomputed; the GPU victims c and e need the whole
    // CPU, whose victims are b's stale copy (the older) and d.
    const admission r = cache.admit(session_id{4}, chain({a, b}));
    REQUIRE(r.match == prefix_match{0, 0, 0});
    REQUIRE(r.gpu_evictions == 2);
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.drops.size() == 1);
    REQUIRE(plan.drops[0].key == d);
    REQUIRE(plan.recovery == std::vector<recovery_range>{{session_id{2}, 16, 32}});  // d's tokens, not b's
    REQUIRE(cache.metrics().dropped_items == dropped_before + 1);
    REQUIRE(cache.where(b) == item_state::in_gpu);
    REQUIRE(cache.where(c) == item_state::in_cpu);
    REQUIRE(cache.where(e) == item_state::in_cpu);
    REQUIRE(cache.check_invariants().empty());
}

namespace {

using kvpolicy::testing::composition;
using kvpolicy::testing::differential_params;
using kvpolicy::testing::random_choices;

// The differential driver's checks as Catch assertions: FAIL names the
// check that failed (and throws, so the driver stops there); REQUIRE counts
// the ones that pass.
struct catch_checker {
    void require(bool ok, std::string_view what) {
        if (!ok) FAIL(std::string(what));
        REQUIRE(ok);
    }
};

// Drives a real cache and the reference with the same random steps
// (tests/support/differential_driver.hpp; fuzz/cache_ops.cpp drives the same
// code from fuzz bytes). With `fail_rate` > 0, copies fail at random
// (scribbling over their output) and requests are now and then cancelled
// while their copies are in flight.
template <class Cache>
cache_metrics run_differential(const composition& comp, std::uint64_t seed, std::size_t steps, double fail_rate = 0.0) {
    INFO("composition " << comp.name << " seed " << seed << " fail rate " << fail_rate);
    random_choices choices(seed);
    const std::size_t gpu_cap = 8 + choices.choose(24);
    const bool no_cpu = choices.choose(3) == 0 && fail_rate == 0;  // faults need copies to fail
    const std::size_t cpu_cap = no_cpu ? 0 : 4 + choices.choose(24);
    catch_checker check;
    const differential_params params{.gpu_capacity = gpu_cap,
                                     .cpu_capacity = cpu_cap,
                                     .steps = steps,
                                     .fail_rate = fail_rate,
                                     .seed = seed,
                                     .cancellations = fail_rate > 0};
    const cache_metrics m = kvpolicy::testing::run_differential<Cache>(comp, params, choices, check);
    // The run exercised what it is meant to: most steps admitted, and the
    // GPU tier was full often enough to evict.
    REQUIRE(m.requests > steps / 2);
    REQUIRE(m.gpu.evictions > 0);
    return m;
}

}  // namespace

TEST_CASE("the cache makes the reference model's decisions, and the data survives", "[cache][differential]") {
    const std::uint64_t seed = GENERATE(range(1u, 9u));
    run_differential<tiered_cache<lru, lru>>({"lru/lru exclusive", ref_rule::lru, ref_rule::lru, false}, seed, 3000);
    run_differential<tiered_cache<lru, lru>>({"lru/lru inclusive", ref_rule::lru, ref_rule::lru, true}, seed, 3000);
    run_differential<tiered_cache<lru, fifo>>({"lru/fifo exclusive", ref_rule::lru, ref_rule::fifo, false}, seed, 3000);
    run_differential<tiered_cache<fifo, lru>>({"fifo/lru inclusive", ref_rule::fifo, ref_rule::lru, true}, seed, 3000);
}

TEST_CASE("after any pattern of failed copies and cancellations, the data and the reference still agree",
          "[cache][differential][faults]") {
    const std::uint64_t seed = GENERATE(range(1u, 5u));
    const double rate = GENERATE(0.05, 0.3);
    const cache_metrics m[] = {run_differential<tiered_cache<lru, lru>>(
                                   {"lru/lru exclusive", ref_rule::lru, ref_rule::lru, false}, seed, 1500, rate),
                               run_differential<tiered_cache<lru, lru>>(
                                   {"lru/lru inclusive", ref_rule::lru, ref_rule::lru, true}, seed, 1500, rate),
                               run_differential<tiered_cache<lru, fifo>>(
                                   {"lru/fifo exclusive", ref_rule::lru, ref_rule::fifo, false}, seed, 1500, rate),
                               run_differential<tiered_cache<fifo, lru>>(
                                   {"fifo/lru inclusive", ref_rule::fifo, ref_rule::lru, true}, seed, 1500, rate)};
    std::uint64_t failed = 0, recomputed = 0;
    for (const cache_metrics& x : m) {
        failed += x.failed_transfers;
        recomputed += x.recompute_items;
    }
    REQUIRE(failed > 0);      // the faults really happened
    REQUIRE(recomputed > 0);  // and some failed swap-ins were still held
}

TEST_CASE("LRU on G + C exclusive tiers serves exactly the hits of one LRU tier of G + C", "[cache][property]") {
    const std::uint64_t seed = GENERATE(range(1u, 11u));
    std::mt19937_64 rng(seed);
    const std::size_t g = 4 + rng() % 20, c = 1 + rng() % 30;
    tiered_cache<lru, lru> two({.gpu_capacity = g, .cpu_capacity = c});
    tiered_cache<lru, lru> one({.gpu_capacity = g + c, .cpu_capacity = 0});
    // Requests of up to g blocks from a prefix forest; one request per step,
    // finished before the next (each tier must hold the request it serves).
    std::vector<std::vector<block_hash>> roots(8);
    std::uint64_t next = 1;
    std::uint64_t hits_two = 0, hits_one = 0;
    for (int step = 0; step < 4000; ++step) {
        auto& chain_ = roots[rng() % roots.size()];
        if (chain_.size() < g && rng() % 3 == 0) chain_.push_back(next++);
        if (chain_.empty()) chain_.push_back(next++);
        std::vector<block_hash> req(chain_.begin(),
                                    chain_.begin() + static_cast<std::ptrdiff_t>(1 + rng() % chain_.size()));
        if (rng() % 7 == 0) roots[rng() % roots.size()].clear();  // a session ends; its blocks age out
        for (auto* cache : {&two, &one}) {
            cache->begin_step();
            const admission a = cache->admit(session_id{1}, req);
            (void)cache->end_step();
            cache->release(session_id{1});
            (cache == &two ? hits_two : hits_one) += a.match.run;
        }
        REQUIRE(hits_two == hits_one);
        REQUIRE(two.gpu().num_cached_blocks() + two.cpu().num_cached_blocks() == one.gpu().num_cached_blocks());
        if (step % 50 == 0)
            for (block_hash h = 1; h < next; ++h) {
                const bool cached_two = two.where(h) != item_state::free;
                REQUIRE(cached_two == (one.where(h) != item_state::free));
            }
    }
    REQUIRE(hits_two > 0);
    REQUIRE(two.metrics().cpu.hit_blocks > 0);  // the CPU tier really served hits
}

TEST_CASE("per-layer items: a block hits only whole, a chunk with a dropped layer is recovered whole",
          "[cache][per_layer]") {
    // 2 layers per block; GPU 4 items (2 blocks), CPU 2 items (1 block).
    tiered_cache<lru, lru> cache(
        {.gpu_capacity = 4, .cpu_capacity = 2, .block_size = 32, .num_layers = 2, .items = granularity::per_layer});
    cache.begin_step();
    cache.admit(session_id{1}, chain({1, 2}));
    (void)cache.end_step();
    REQUIRE(cache.gpu().num_free_blocks() == 0);
    cache.release(session_id{1});
    cache.begin_step();
    cache.admit(session_id{2}, chain({5}));  // 2 victims: block 2's layers (released first), sheltered
    (void)cache.end_step();
    REQUIRE(cache.where(2, 0) == item_state::in_cpu);
    REQUIRE(cache.where(2, 1) == item_state::in_cpu);
    REQUIRE(cache.lookup(chain({1, 2})) == prefix_match{2, 1, 1});
    cache.release(session_id{2});
    cache.begin_step();
    cache.admit(session_id{3}, chain({6}));  // victims: block 1's layers; CPU full: block 2's layers dropped
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.drops.size() == 2);
    REQUIRE(plan.recovery == std::vector<recovery_range>{{session_id{1}, 32, 64}});  // chunk 1, reported once, whole
    REQUIRE(cache.lookup(chain({1, 2})) == prefix_match{1, 0, 1});
    REQUIRE(cache.lookup(chain({2})) == prefix_match{0, 0, 0});
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("metrics: Prometheus exposition with conventional names", "[cache][metrics]") {
    tiered_cache<lru, lru> cache({.gpu_capacity = 2, .cpu_capacity = 2});
    cache.begin_step();
    cache.admit(session_id{1}, chain({1, 2}));
    (void)cache.end_step();
    cache.release(session_id{1});
    cache.begin_step();
    cache.admit(session_id{2}, chain({1, 3}));
    (void)cache.end_step();
    const std::string text = cache.metrics().to_prometheus();
    REQUIRE_THAT(text, Catch::Contains("# TYPE kvpolicy_hit_blocks_total counter"));
    REQUIRE_THAT(text, Catch::Contains("kvpolicy_hit_blocks_total{tier=\"gpu\"} 1"));
    REQUIRE_THAT(text, Catch::Contains("kvpolicy_miss_blocks_total 3"));
    REQUIRE_THAT(text, Catch::Contains("kvpolicy_evictions_total{tier=\"gpu\"} 1"));
    REQUIRE_THAT(text, Catch::Contains("kvpolicy_eviction_latency_seconds_count 1"));
    REQUIRE_THAT(text, Catch::Contains("kvpolicy_occupancy_ratio{tier=\"gpu\"} 1"));
    const cache_metrics m = cache.metrics();
    // Two sessions with hit rates 0 and 1/2: Jain = (sum)^2 / (n * sum of squares).
    REQUIRE(m.fairness == Approx((0.0 + 0.5) * (0.0 + 0.5) / (2 * (0.0 + 0.25))));
}

TEST_CASE("metrics: for_each_field names every figure by its field, each with its own value", "[cache][metrics]") {
    cache_metrics m;
    m.gpu = {.hit_blocks = 1, .hit_tokens = 2, .evictions = 3, .capacity = 4, .used = 5};
    m.cpu = {.hit_blocks = 6, .hit_tokens = 7, .evictions = 8, .capacity = 9, .used = 10};
    m.requests = 11, m.lookup_blocks = 12, m.miss_blocks = 13, m.miss_tokens = 14, m.swap_in_items = 15;
    m.swap_in_bytes = 16, m.swap_out_items = 17, m.swap_out_bytes = 18, m.dropped_items = 19;
    m.failed_transfers = 20, m.recompute_items = 21, m.dropped_tokens = 22, m.recomputed_blocks = 23;
    m.recomputed_tokens = 24, m.remote_staged_blocks = 25, m.remote_write_backs = 26, m.re_prefill_rate = 0.25;
    m.fairness = 0.5;
    m.eviction_latency.record(29);
    std::vector<std::pair<std::string, double>> seen;
    for_each_field(m, [&](const char* name, const auto& v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, tier_metrics>)
            for_each_field(v, [&](const char* f, auto x) { seen.emplace_back(name + std::string(".") + f, x); });
        else
            seen.emplace_back(name, static_cast<double>(v));
    });
    const std::vector<std::pair<std::string, double>> want = {{"gpu.hit_blocks", 1},
                                                              {"gpu.hit_tokens", 2},
                                                              {"gpu.evictions", 3},
                                                              {"gpu.capacity", 4},
                                                              {"gpu.used", 5},
                                                              {"cpu.hit_blocks", 6},
                                                              {"cpu.hit_tokens", 7},
                                                              {"cpu.evictions", 8},
                                                              {"cpu.capacity", 9},
                                                              {"cpu.used", 10},
                                                              {"requests", 11},
                                                              {"lookup_blocks", 12},
                                                              {"miss_blocks", 13},
                                                              {"miss_tokens", 14},
                                                              {"swap_in_items", 15},
                                                              {"swap_in_bytes", 16},
                                                              {"swap_out_items", 17},
                                                              {"swap_out_bytes", 18},
                                                              {"dropped_items", 19},
                                                              {"failed_transfers", 20},
                                                              {"recompute_items", 21},
                                                              {"dropped_tokens", 22},
                                                              {"recomputed_blocks", 23},
                                                              {"recomputed_tokens", 24},
                                                              {"remote_staged_blocks", 25},
                                                              {"remote_write_backs", 26},
                                                              {"re_prefill_rate", 0.25},
                                                              {"fairness", 0.5},
                                                              {"eviction_latency_samples", 1},
                                                              {"eviction_latency_total_ns", 29}};
    REQUIRE(seen == want);
}

TEST_CASE("block hashes are chained: equal prefixes, equal hashes, any change, a different one", "[cache][hash]") {
    std::vector<std::int32_t> tokens(100);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 7);
    std::vector<block_hash> a(10), b(10), salted(10);
    REQUIRE(hash_blocks(tokens, 16, a) == 6);  // only full blocks
    auto changed = tokens;
    changed[40] += 1;  // block 2
    REQUIRE(hash_blocks(changed, 16, b) == 6);
    REQUIRE(a[0] == b[0]);
    REQUIRE(a[1] == b[1]);
    for (std::size_t i = 2; i < 6; ++i) REQUIRE(a[i] != b[i]);  // the change propagates down the chain
    REQUIRE(hash_blocks(tokens, 16, salted, /*extra_key=*/42) == 6);
    for (std::size_t i = 0; i < 6; ++i) REQUIRE(salted[i] != a[i]);
    REQUIRE(hash_blocks(tokens, 0, a) == 0);
}

namespace {

// lru that records the request ends it hears (hears_request_ends).
std::vector<std::pair<std::uint64_t, std::string>> heard_ends;

template <const char* Tier>
class ends_recording_lru : public lru {
public:
    using lru::lru;
    void on_request_end(session_id session, timestamp) { heard_ends.emplace_back(session.value, Tier); }
};
constexpr char gpu_tier[] = "gpu", cpu_tier[] = "cpu";

}  // namespace

TEST_CASE("release ends a request: each tier's policy that hears request ends is told", "[cache]") {
    static_assert(hears_request_ends<ends_recording_lru<gpu_tier>>);
    heard_ends.clear();
    tiered_cache<ends_recording_lru<gpu_tier>, ends_recording_lru<cpu_tier>> cache(
        {.gpu_capacity = 4, .cpu_capacity = 2, .block_size = 16, .item_bytes = 1024});
    cache.begin_step();
    (void)cache.admit(session_id{7}, chain({1, 2}));
    (void)cache.end_step();
    REQUIRE(heard_ends.empty());
    cache.release(session_id{7});
    REQUIRE(heard_ends == std::vector<std::pair<std::uint64_t, std::string>>{{7, "gpu"}, {7, "cpu"}});
    // A release that fails (nothing held) tells nobody.
    REQUIRE_THROWS_AS(cache.release(session_id{7}), usage_error);
    REQUIRE(heard_ends.size() == 2);
}
