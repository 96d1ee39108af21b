// tail_aware_lru against its naive reference model on long random operation
// sequences (holds, releases, erasures, batch pops; demotion sensitive and
// default), plain LRU when it never demotes, a hand-worked trace of the
// learned demotion, and its configuration errors.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/tail_aware_lru.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEST_CASE("tail_aware_lru chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    // ratio 1 with few samples flips the demotion often on random keys; the
    // defaults exercise the shipped rule.
    const double ratio = GENERATE(0.5, 1.0);
    const std::uint32_t min_samples = ratio == 1.0 ? 2 : 64;
    const std::uint32_t window = ratio == 1.0 ? 64 : 4096;
    tail_aware_lru policy(capacity, {.demote_ratio = ratio, .min_samples = min_samples, .window = window});
    ref_tail_aware_lru reference(capacity, ratio, min_samples, window);
    // Tails are keys = 12 mod 13 in the driver's contexts; a key universe of
    // 4x the capacity makes ghosts hit and misses evict.
    const auto victims =
        drive(policy, {.capacity = capacity, .operations = 120'000, .seed = seed, .key_universe = 4 * capacity + 8},
              &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
}

TEST_CASE("tail_aware_lru with demote_ratio 0 is LRU", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    tail_aware_lru policy(64, {.demote_ratio = 0.0});
    ref_lru reference;
    const auto victims = drive(policy, {.capacity = 64, .seed = seed}, &reference);
    REQUIRE(victims.size() > 100);
    REQUIRE(policy.demoted_size() == 0);
}

TEST_CASE("tail_aware_lru learns to demote tails that are never reused", "[eviction][tail_aware_lru]") {
    // Inner blocks are hit once each, tails never. After min_samples of each
    // class the tails' rate (0) is under half the inner rate (1): each new
    // tail waits in the demoted FIFO and is the next victim, so at most one
    // tail stays cached, where LRU (demote_ratio 0) keeps half the cache.
    auto resident_tails = [](double ratio) {
        tail_aware_lru p(16, {.demote_ratio = ratio, .min_samples = 8, .window = 64});
        access_context inner{}, tail{};
        inner.session_total_chunks = tail.session_total_chunks = 2;
        tail.chunk = chunk_index{1};
        std::vector<bool> is_tail(16, false);
        for (std::uint64_t k = 0; k < 400; ++k) {
            if (p.size() == p.capacity()) REQUIRE(p.pop_victim(k).has_value());
            std::uint32_t slot = 0;
            while (p.contains(item_id{slot})) ++slot;
            access_context c = (k % 2 == 0) ? inner : tail;
            c.key = 1000 + k;
            c.now = k;
            p.on_insert(item_id{slot}, c);
            is_tail[slot] = k % 2 == 1;
            if (k % 2 == 0) p.on_access(item_id{slot}, c);
        }
        REQUIRE(p.demoting() == (ratio > 0));
        std::size_t n = 0;
        for (std::uint32_t s = 0; s < 16; ++s) n += is_tail[s] && p.contains(item_id{s}) ? 1 : 0;
        return n;
    };
    REQUIRE(resident_tails(0.5) <= 1);
    REQUIRE(resident_tails(0.0) == 8);
}

TEST_CASE("tail_aware_lru: unreused tails are demoted once tails are reused at under half the inner rate",
          "[eviction][tail_aware_lru]") {
    // capacity 4, min_samples 1. Keys: A, B inner (chunk 0 of 2); T1, T2 tails (chunk 1 of 2).
    //  1 insert A (slot 0), T1 (slot 1): no reuse yet, rates 0 and 0: no demotion.
    //  2 hit A: inner reused 1/1, tails 0/1 < half: demoting.
    //  3 insert T2 (slot 2): a fresh tail, into the demoted FIFO; insert B (slot 3).
    //  4 pop: T2 (demoted) goes first although T1 is the least recent      -> slot 2
    //  5 pop: nothing demoted; LRU order T1, A, B                            -> slot 1
    //  6 insert T2 again (slot 1): its key is in the tail ghost, a reuse:
    //    tails 1/3, inner 1/2; 1/3 is not under half of 1/2: no demotion.
    tail_aware_lru p(4, {.demote_ratio = 0.5, .min_samples = 1, .window = 1000});
    auto ctx = [](std::uint64_t key, std::uint32_t chunk) {
        access_context c{};
        c.key = key;
        c.chunk = chunk_index{chunk};
        c.session_total_chunks = 2;
        return c;
    };
    p.on_insert(item_id{0}, ctx('A', 0));
    p.on_insert(item_id{1}, ctx('1', 1));
    REQUIRE_FALSE(p.demoting());
    p.on_access(item_id{0}, ctx('A', 0));
    REQUIRE(p.demoting());
    p.on_insert(item_id{2}, ctx('2', 1));
    p.on_insert(item_id{3}, ctx('B', 0));
    REQUIRE(p.demoted_size() == 1);
    REQUIRE(p.pop_victim(0) == item_id{2});
    REQUIRE(p.pop_victim(0) == item_id{1});
    p.on_insert(item_id{1}, ctx('2', 1));
    REQUIRE_FALSE(p.demoting());
    REQUIRE(p.demoted_size() == 0);
    // LRU order now A, B, T2.
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE(p.pop_victim(0) == item_id{3});
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE_FALSE(p.pop_victim(0).has_value());
}

TEST_CASE("tail_aware_lru: a demoted tail that is hit leaves the FIFO for the LRU list, a held one is never a victim",
          "[eviction][tail_aware_lru]") {
    tail_aware_lru p(3, {.demote_ratio = 0.5, .min_samples = 1, .window = 1000});
    access_context inner{}, tail{};
    inner.session_total_chunks = tail.session_total_chunks = 2;
    tail.chunk = chunk_index{1};
    inner.key = 10;
    p.on_insert(item_id{0}, inner);
    p.on_access(item_id{0}, inner);  // inner 1/1
    tail.key = 20;
    p.on_insert(item_id{1}, tail);  // tails 0/1: demoted
    REQUIRE(p.demoted_size() == 1);
    tail.key = 30;
    p.on_insert(item_id{2}, tail);  // demoted behind slot 1
    REQUIRE(p.demoted_size() == 2);
    p.on_access(item_id{1}, tail);  // reused: to the LRU list's recent end
    REQUIRE(p.demoted_size() == 1);
    p.on_hold(item_id{2});
    REQUIRE(p.demoted_size() == 0);
    REQUIRE(p.pop_victim(0) == item_id{0});  // LRU: slot 0, then slot 1
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE_FALSE(p.pop_victim(0).has_value());  // slot 2 is held
    p.on_release(item_id{2}, tail);              // tails 1/2, inner 1/1: 1/2 is not under 1/2
    REQUIRE(p.demoted_size() == 0);
    REQUIRE(p.pop_victim(0) == item_id{2});
}

TEST_CASE("tail_aware_lru configurations that cannot work are refused with the reason", "[eviction][config]") {
    REQUIRE_THROWS_AS(tail_aware_lru(0), config_error);
    REQUIRE_THROWS_WITH(tail_aware_lru(8, {.demote_ratio = -1.0}), Catch::Contains("demote_ratio"));
    REQUIRE_THROWS_WITH(tail_aware_lru(8, {.demote_ratio = std::numeric_limits<double>::quiet_NaN()}),
                        Catch::Contains("demote_ratio"));
    REQUIRE_THROWS_WITH(tail_aware_lru(8, {.min_samples = 100, .window = 150}), Catch::Contains("window"));
    REQUIRE_THROWS_WITH(tail_aware_lru(8, {.min_samples = 0, .window = 1}), Catch::Contains("window"));
}

namespace {
// Conversations whose turns extend a chain by one block and end in a block
// that no later request matches (a partial last block hashed with the
// turn's own tokens), as in Mooncake's traces; served round robin through
// the composed cache, GPU only. Returns the prefix-hit blocks.
template <class Policy>
std::size_t conversation_hits(std::size_t capacity) {
    tiered_cache<Policy, lru> cache({.gpu_capacity = capacity, .cpu_capacity = 0, .block_size = 16});
    std::size_t hits = 0;
    for (std::uint64_t turn = 0; turn < 24; ++turn)
        for (std::uint64_t c = 0; c < 8; ++c) {
            std::vector<block_hash> hashes{1};  // a system prompt every conversation shares
            for (std::uint64_t j = 1; j <= 2 + turn; ++j) hashes.push_back((c + 1) * 1000 + j);
            hashes.push_back((c + 1) * 1000 + 500 + turn);  // this turn's partial last block
            cache.begin_step();
            hits += cache.admit(session_id{c}, hashes).match.run;
            (void)cache.end_step();
            cache.release(session_id{c});
        }
    return hits;
}
}  // namespace

TEST_CASE("tail_aware_lru in the composed cache: the cache tells it each block's place in its request",
          "[eviction][tail_aware_lru][cache]") {
    // tiered_cache fills chunk and session_total_chunks per block, so the
    // unique last blocks are learned to be dead and leave first: the chains
    // they displaced under LRU stay and hit. With room for everything the
    // two are equal.
    for (const std::size_t capacity : {100u, 150u, 200u}) {
        const std::size_t lru_hits = conversation_hits<lru>(capacity);
        const std::size_t tail_hits = conversation_hits<tail_aware_lru>(capacity);
        INFO("capacity " << capacity << ": lru " << lru_hits << ", tail_aware_lru " << tail_hits);
        CHECK(tail_hits > lru_hits);
    }
    CHECK(conversation_hits<tail_aware_lru>(500) == conversation_hits<lru>(500));
}
