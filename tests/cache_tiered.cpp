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

#include <cstring>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/fault_injecting_engine.hpp"
#include "support/reference_cache.hpp"

using namespace kvpolicy;
using kvpolicy::testing::fault_injecting_engine;
using kvpolicy::testing::ref_rule;
using kvpolicy::testing::reference_cache;

namespace {

std::vector<block_hash> chain(std::initializer_list<block_hash> h) { return h; }

// Everything observable, for "unchanged by a failed call" checks.
template <class Cache>
std::string snapshot(const Cache& c, const std::vector<block_hash>& universe, const std::vector<session_id>& sessions) {
    std::string s;
    for (block_hash h : universe) s += std::string(to_string(c.where(h))) + ",";
    for (session_id id : sessions) s += std::to_string(c.held_by(id).size()) + ";";
    const cache_metrics m = c.metrics();
    s += std::to_string(m.requests) + "/" + std::to_string(m.gpu.evictions) + "/" + std::to_string(m.gpu.used);
    s += "/" + std::to_string(c.gpu().num_free_blocks()) + "/" + std::to_string(c.gpu().num_evictable_blocks());
    return s;
}

std::uint64_t content_of(std::uint64_t key) { return mix64(key ^ 0xabcdef); }

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
    const std::vector<block_hash> universe{1, 2, 3, 4, 5, 6, 7, 8, 9};
    const std::vector<session_id> sessions{session_id{1}, session_id{2}};
    REQUIRE_THROWS_WITH(cache.admit(session_id{1}, chain({1})), Catch::Contains("begin_step() first"));
    cache.begin_step();
    cache.admit(session_id{1}, chain({1, 2, 3}));
    const std::string before = snapshot(cache, universe, sessions);

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
        const std::string after_release = snapshot(cache, universe, sessions);
        REQUIRE_THROWS_WITH(cache.release(session_id{1}), Catch::Contains("released twice"));
        REQUIRE_THROWS_AS(cache.release(session_id{2}, block_id{0}), usage_error);
        REQUIRE(snapshot(cache, universe, sessions) == after_release);
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
    SECTION("steps out of order") {
        REQUIRE_THROWS_WITH(cache.begin_step(), Catch::Contains("already open"));
    }
    REQUIRE(snapshot(cache, universe, sessions) == before);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("impossible configurations are refused with the fix", "[cache][errors]") {
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>({.gpu_capacity = 0})), Catch::Contains("at least one block"));
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>({.gpu_capacity = 4, .block_size = 0})), Catch::Contains("block_size 0"));
    REQUIRE_THROWS_WITH((tiered_cache<lru, lru>({.gpu_capacity = 4, .cpu_capacity = 8, .num_layers = 8, .items = granularity::per_layer})),
                        Catch::Contains("at least num_layers items per tier"));
}

TEST_CASE("a held or pinned block is never a victim; a shared prefix only when nobody holds it", "[cache]") {
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

namespace {

struct composition {
    const char* name;
    ref_rule gpu_rule, cpu_rule;
    bool inclusive;
};

// Drives a real cache and the reference with the same random steps; checks
// decisions, residency, invariants and the bytes in the arenas. With
// `fail_rate` > 0, copies fail at random (scribbling over their output) and
// requests are now and then cancelled while their copies are in flight; the
// completion reports must match the reference's, and every cached item must
// still have its bytes.
template <class Cache>
cache_metrics run_differential(const composition& comp, std::uint64_t seed, std::size_t steps, double fail_rate = 0.0) {
    INFO("composition " << comp.name << " seed " << seed << " fail rate " << fail_rate);
    std::mt19937_64 rng(seed);
    const std::size_t gpu_cap = 8 + rng() % 24;
    const bool no_cpu = rng() % 3 == 0 && fail_rate == 0;  // faults need copies to fail
    const std::size_t cpu_cap = no_cpu ? 0 : 4 + rng() % 24;
    Cache cache({.gpu_capacity = gpu_cap, .cpu_capacity = cpu_cap, .block_size = 16, .item_bytes = 64,
                 .inclusive = comp.inclusive});
    reference_cache ref(gpu_cap, cpu_cap, comp.gpu_rule, comp.cpu_rule, comp.inclusive);
    block_arena gpu_bytes(gpu_cap, 64), cpu_bytes(std::max<std::size_t>(cpu_cap, 1), 64);
    fault_injecting_engine engine(gpu_bytes, cpu_bytes, fail_rate, seed);
    std::vector<transfer_status> status;

    // Sessions grow chains; a shared system prompt (keys 1..3) starts some.
    constexpr std::size_t n_sessions = 6;
    std::vector<std::vector<block_hash>> chains(n_sessions);
    std::vector<bool> busy(n_sessions, false);
    std::uint64_t next_key = 100;
    std::vector<block_hash> universe{1, 2, 3};  // every key ever used
    for (std::size_t s = 0; s < n_sessions; ++s)
        if (rng() % 2) chains[s] = {1, 2, 3};

    auto read = [](block_arena& a, block_id b) {
        std::uint64_t v;
        std::memcpy(&v, a.block(b).data(), sizeof v);
        return v;
    };
    auto write = [](block_arena& a, block_id b, std::uint64_t v) { std::memcpy(a.block(b).data(), &v, sizeof v); };

    for (std::size_t step = 0; step < steps; ++step) {
        cache.clock().advance(1);
        cache.begin_step();
        ref.begin_step();
        std::vector<std::pair<std::vector<block_hash>, std::size_t>> computed;  // chain, run
        std::vector<std::size_t> computed_session;
        const std::size_t admits = 1 + rng() % 3;
        for (std::size_t r = 0; r < admits; ++r) {
            const std::size_t s = rng() % n_sessions;
            if (busy[s]) continue;
            if (chains[s].size() > gpu_cap / 2) chains[s].resize(rng() % 2 ? 3 : 0);  // a new conversation
            const std::size_t grow = rng() % 3;
            for (std::size_t g = 0; g < grow; ++g) {
                chains[s].push_back(next_key);
                universe.push_back(next_key++);
            }
            if (chains[s].empty()) continue;
            // Sometimes a request reads only a prefix (a branch point).
            std::vector<block_hash> req(chains[s].begin(),
                                        chains[s].begin() + static_cast<std::ptrdiff_t>(1 + rng() % chains[s].size()));
            const std::string before = snapshot(cache, {1, 2, 3}, {});
            bool ref_refused = false;
            std::pair<reference_cache::match_t, std::size_t> expected;
            try {
                expected = ref.admit(s, req);
            } catch (const std::length_error&) {
                ref_refused = true;
            }
            if (ref_refused) {
                REQUIRE_THROWS_AS(cache.admit(session_id{s}, req), capacity_error);
                REQUIRE(snapshot(cache, {1, 2, 3}, {}) == before);
                continue;
            }
            const admission got = cache.admit(session_id{s}, req);
            REQUIRE(got.match.run == expected.first.run);
            REQUIRE(got.match.gpu_blocks == expected.first.gpu);
            REQUIRE(got.match.cpu_blocks == expected.first.cpu);
            REQUIRE(got.gpu_evictions == expected.second);
            busy[s] = true;
            computed.emplace_back(req, got.match.run);
            computed_session.push_back(s);
        }
        const swap_plan& plan = cache.end_step();
        std::vector<std::uint64_t> drops;
        for (const dropped_item& d : plan.drops) drops.push_back(d.key);
        REQUIRE(drops == ref.drops);
        const std::size_t failed = execute_plan(plan, engine, status);
        if (fail_rate == 0) REQUIRE(failed == 0);
        // Now and then a request is cancelled while its copies are in flight
        // (one whose new items nobody else holds: nobody else computes them).
        std::vector<bool> cancelled(n_sessions, false);
        if (fail_rate > 0 && rng() % 4 == 0 && !computed.empty()) {
            const std::size_t pick = rng() % computed.size();
            const auto& [req, run] = computed[pick];
            const std::size_t s = computed_session[pick];
            bool alone = true;
            for (std::size_t i = run; i < req.size(); ++i) alone = alone && cache.gpu().ref_count(*cache.gpu().cached_block(req[i])) == 1;
            if (alone) {
                cache.free_session(session_id{s}, /*forget_blocks=*/true);
                ref.forget(s);
                busy[s] = false;
                cancelled[pick] = true;
            }
        }
        std::vector<bool> failed_ops(status.size());
        for (std::size_t i = 0; i < status.size(); ++i) failed_ops[i] = status[i] == transfer_status::failed;
        const transfer_report report = cache.complete_transfers(plan, status);
        const reference_cache::completion expected_loss = ref.complete(failed_ops);
        std::vector<std::uint64_t> lost;
        for (const dropped_item& d : report.drops) lost.push_back(d.key);
        std::sort(lost.begin(), lost.end());
        REQUIRE(lost == expected_loss.drops);
        std::vector<std::pair<std::uint64_t, std::uint64_t>> recompute;
        for (const recompute_item& r : report.recompute) recompute.emplace_back(r.key, r.session.value);
        std::sort(recompute.begin(), recompute.end());
        REQUIRE(recompute == expected_loss.recompute);
        if (failed == 0) REQUIRE(report.clean());
        // The forward pass: the miss tails (of the requests not cancelled)
        // and the failed swap-ins are computed into their GPU slots.
        for (std::size_t r = 0; r < computed.size(); ++r)
            if (!cancelled[r])
                for (std::size_t i = computed[r].second; i < computed[r].first.size(); ++i) {
                    const block_hash h = computed[r].first[i];
                    write(gpu_bytes, *cache.gpu().cached_block(h), content_of(h));
                }
        for (const recompute_item& r : report.recompute) write(gpu_bytes, r.block, content_of(r.key));
        // Residency and data: the same number cached per tier, and every key
        // the reference caches is cached in the same tier with its bytes.
        REQUIRE(cache.gpu().num_cached_blocks() == ref.gpu.size());
        REQUIRE((cache.has_cpu_tier() ? cache.cpu().num_cached_blocks() : 0) == ref.cpu.size());
        for (const auto& [h, e] : ref.gpu) {
            const auto g = cache.gpu().cached_block(h);
            REQUIRE(g.has_value());
            REQUIRE(read(gpu_bytes, *g) == content_of(h));
        }
        for (const auto& [h, e] : ref.cpu) {
            const auto c = cache.cpu().cached_block(h);
            REQUIRE(c.has_value());
            REQUIRE(read(cpu_bytes, *c) == content_of(h));
        }
        REQUIRE(cache.check_invariants().empty());
        // Finish some requests; pin or unpin now and then.
        for (std::size_t s = 0; s < n_sessions; ++s)
            if (busy[s] && rng() % 2) {
                cache.release(session_id{s});
                ref.release(s);
                busy[s] = false;
            }
        if (rng() % 10 == 0) {
            const block_hash h = universe[rng() % universe.size()];
            if (ref.gpu.contains(h)) {
                if (ref.gpu.at(h).pinned) {
                    cache.unpin(h);
                    ref.unpin(h);
                } else {
                    cache.pin(h);
                    ref.pin(h);
                }
            }
        }
    }
    const cache_metrics m = cache.metrics();
    REQUIRE(m.requests > steps / 2);
    REQUIRE(m.gpu.evictions > 0);
    REQUIRE(m.failed_transfers >= engine.failures);
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
    const cache_metrics m[] = {
        run_differential<tiered_cache<lru, lru>>({"lru/lru exclusive", ref_rule::lru, ref_rule::lru, false}, seed, 1500, rate),
        run_differential<tiered_cache<lru, lru>>({"lru/lru inclusive", ref_rule::lru, ref_rule::lru, true}, seed, 1500, rate),
        run_differential<tiered_cache<lru, fifo>>({"lru/fifo exclusive", ref_rule::lru, ref_rule::fifo, false}, seed, 1500, rate),
        run_differential<tiered_cache<fifo, lru>>({"fifo/lru inclusive", ref_rule::fifo, ref_rule::lru, true}, seed, 1500, rate)};
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
        std::vector<block_hash> req(chain_.begin(), chain_.begin() + static_cast<std::ptrdiff_t>(1 + rng() % chain_.size()));
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

TEST_CASE("per-layer items: a block hits only whole, a chunk with a dropped layer is recovered whole", "[cache][per_layer]") {
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

TEST_CASE("block hashes are chained: equal prefixes, equal hashes; any change, a different one", "[cache][hash]") {
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
