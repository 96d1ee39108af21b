// Seed 002's batch API against a naive reference that sorts every unpinned
// candidate and takes the shortest prefix that frees enough blocks, on
// random candidate lists with ties, pinned sequences and shortfalls; plus
// duplicates, empty input, the metrics' definitions, and agreement with the
// incremental policy whose order a rule reuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <kvpolicy/eviction/select_victims.hpp>
#include <kvpolicy/eviction/sieve.hpp>

#include "support/naive_select_victims.hpp"

using namespace kvpolicy;
using kvpolicy::testing::naive_result;
using kvpolicy::testing::naive_select;

namespace {

std::vector<block_id> block_table(std::size_t n) {
    std::vector<block_id> b;
    for (std::uint32_t i = 0; i < n; ++i) b.push_back(block_id{i});
    return b;
}

// Random candidates over a shared block table, with many ties in every
// field a rule reads.
struct candidate_set {
    std::vector<block_id> blocks;
    std::vector<eviction_candidate> candidates;
};

candidate_set random_candidates(std::mt19937_64& rng, std::size_t n) {
    candidate_set s;
    s.blocks = block_table(16 * n + 1);
    std::vector<std::uint64_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = 1000 + 3 * i + rng() % 3;
    std::shuffle(ids.begin(), ids.end(), rng);
    std::size_t next_block = 0;
    for (std::size_t i = 0; i < n; ++i) {
        eviction_candidate c;
        c.sequence_id = ids[i];
        const std::size_t nb = rng() % 13;  // 0..12 blocks
        c.block_ids = std::span<const block_id>(s.blocks.data() + next_block, nb);
        next_block += nb;
        c.last_access_time = rng() % 20;
        c.access_count = rng() % 5;
        c.priority = static_cast<std::int32_t>(rng() % 3) - 1;
        c.pinned = rng() % 5 == 0;
        if (rng() % 2 == 0) c.estimated_lifetime = static_cast<double>(rng() % 10);
        if (rng() % 2 == 0) {
            c.max_length = 10 + rng() % 3;
            c.sequence_length = rng() % (c.max_length + 1);
        }
        s.candidates.push_back(c);
    }
    return s;
}

std::size_t unpinned_blocks(const std::vector<eviction_candidate>& cs) {
    std::size_t n = 0;
    for (const auto& c : cs)
        if (!c.pinned) n += c.block_ids.size();
    return n;
}

}  // namespace

TEMPLATE_TEST_CASE("select_victims agrees with sorting everything", "[select_victims]", lru, lfu, fifo, qos_aware,
                   predictive) {
    std::mt19937_64 rng(GENERATE(7u, 8u, 9u));
    victim_batch_selector<TestType> selector;
    std::uint64_t expected_evictions = 0;
    for (int trial = 0; trial < 500; ++trial) {
        const std::size_t n = trial % 50 == 0 ? 0 : 1 + rng() % 200;
        const candidate_set s = random_candidates(rng, n);
        const std::size_t total = unpinned_blocks(s.candidates);
        // Mostly satisfiable, sometimes exactly all, sometimes short.
        const std::size_t required = rng() % 8 == 0 ? total + 1 + rng() % 10 : rng() % (total + 2);
        const victim_batch got = selector.select_victims(s.candidates, required);
        const naive_result want = naive_select<TestType>(s.candidates, required);
        INFO("trial " << trial << ", " << n << " candidates, " << required << " blocks required of " << total);
        REQUIRE(got.evicted == want.evicted);
        REQUIRE(got.freed_blocks == want.freed);
        REQUIRE(got.shortfall == (want.freed < required ? required - want.freed : 0));
        if (got.shortfall > 0) REQUIRE(got.freed_blocks == total);
        expected_evictions += got.evicted.size();
    }
    REQUIRE(selector.metrics().total_evictions == expected_evictions);
    REQUIRE(selector.metrics().selections == 500);
}

TEST_CASE("select_victims: pinned sequences are never chosen, even when short", "[select_victims]") {
    const auto blocks = block_table(10);
    const std::span<const block_id> all(blocks);
    std::vector<eviction_candidate> cs{
        {.sequence_id = 1, .block_ids = all.subspan(0, 4), .last_access_time = 1, .pinned = true},
        {.sequence_id = 2, .block_ids = all.subspan(4, 2), .last_access_time = 5},
        {.sequence_id = 3, .block_ids = all.subspan(6, 3), .last_access_time = 3},
    };
    victim_batch_selector<lru> s;
    const auto r = s.select_victims(cs, 4);
    REQUIRE(r.evicted == std::vector<std::uint64_t>{3, 2});
    REQUIRE(r.freed_blocks == 5);
    REQUIRE(r.shortfall == 0);
    const auto short_of = s.select_victims(cs, 8);
    REQUIRE(short_of.evicted == std::vector<std::uint64_t>{3, 2});  // every unpinned one
    REQUIRE(short_of.freed_blocks == 5);
    REQUIRE(short_of.shortfall == 3);
}

TEST_CASE("select_victims: the shortest prefix, ties broken by sequence id", "[select_victims]") {
    const auto blocks = block_table(20);
    const std::span<const block_id> all(blocks);
    std::vector<eviction_candidate> cs{
        {.sequence_id = 9, .block_ids = all.subspan(0, 3), .last_access_time = 2},
        {.sequence_id = 4, .block_ids = all.subspan(3, 0), .last_access_time = 2},  // holds nothing
        {.sequence_id = 7, .block_ids = all.subspan(3, 3), .last_access_time = 2},
        {.sequence_id = 5, .block_ids = all.subspan(6, 5), .last_access_time = 1},
    };
    victim_batch_selector<lru> s;
    REQUIRE(s.select_victims(cs, 5).evicted == std::vector<std::uint64_t>{5});
    // Then 4 (no blocks, but before 7 and 9 in the order), then 7.
    REQUIRE(s.select_victims(cs, 6).evicted == std::vector<std::uint64_t>{5, 4, 7});
    REQUIRE(s.select_victims(cs, 0).evicted.empty());
    const auto everything = s.select_victims(cs, 11);
    REQUIRE(everything.evicted == std::vector<std::uint64_t>{5, 4, 7, 9});
    REQUIRE(everything.shortfall == 0);
}

TEST_CASE("select_victims: empty input frees nothing and says how much is missing", "[select_victims]") {
    victim_batch_selector<predictive> s;
    const auto r = s.select_victims({}, 12);
    REQUIRE(r.evicted.empty());
    REQUIRE(r.freed_blocks == 0);
    REQUIRE(r.shortfall == 12);
    REQUIRE(s.select_victims({}, 0).shortfall == 0);
}

TEST_CASE("select_victims: a duplicate sequence id is rejected by name, and nothing is recorded", "[select_victims]") {
    const auto blocks = block_table(4);
    const std::span<const block_id> all(blocks);
    std::vector<eviction_candidate> cs{
        {.sequence_id = 11, .block_ids = all.subspan(0, 1)},
        {.sequence_id = 12, .block_ids = all.subspan(1, 1)},
        {.sequence_id = 13, .block_ids = all.subspan(2, 1), .pinned = true},
        {.sequence_id = 13, .block_ids = all.subspan(3, 1)},
    };
    victim_batch_selector<lfu> s;
    REQUIRE_THROWS_WITH(s.select_victims(cs, 1),
                        Catch::Contains("sequence 13 appears twice") && Catch::Contains("(at 2 and 3)"));
    REQUIRE_THROWS_AS(s.select_victims(cs, 1), usage_error);
    const auto m = s.metrics();
    REQUIRE(m.selections == 0);
    REQUIRE(m.total_evictions == 0);
    cs[3].sequence_id = 14;
    REQUIRE(s.select_victims(cs, 1).evicted == std::vector<std::uint64_t>{11});
}

TEST_CASE("select_victims: re-prefill rate and Jain's fairness over per-sequence service", "[select_victims]") {
    const auto blocks = block_table(4);
    const std::span<const block_id> all(blocks);
    std::vector<eviction_candidate> cs{
        {.sequence_id = 1, .block_ids = all.subspan(0, 2), .last_access_time = 1},
        {.sequence_id = 2, .block_ids = all.subspan(2, 2), .last_access_time = 2},
    };
    victim_batch_selector<lru> s;
    REQUIRE(s.metrics().fairness == 1.0);  // nobody requested yet
    REQUIRE(s.metrics().re_prefill_rate == 0.0);
    s.update_access(1, 10);
    s.update_access(2, 11);
    REQUIRE(s.select_victims(cs, 2).evicted == std::vector<std::uint64_t>{1});
    REQUIRE(s.select_victims(cs, 2).evicted == std::vector<std::uint64_t>{1});  // the engine evicted it twice
    s.update_access(1, 12);  // 1 comes back: its KV must be prefilled again
    s.update_access(2, 13);
    s.update_access(1, 14);
    auto m = s.metrics();
    REQUIRE(m.total_evictions == 2);
    REQUIRE(m.re_prefills == 1);
    REQUIRE(m.re_prefill_rate == Approx(0.5));
    // Service: seq 1 had 3 requests, 1 a re-prefill -> 2/3; seq 2: 2/2 = 1.
    // Jain = (2/3 + 1)^2 / (2 * (4/9 + 1)) = (25/9) / (26/9) = 25/26.
    REQUIRE(m.fairness == Approx(25.0 / 26.0));
    REQUIRE(s.last_access(1) == timestamp{14});
    REQUIRE(s.access_count(1) == 3);
    REQUIRE_FALSE(s.last_access(99).has_value());
    // A finished sequence's record goes, its service stays in the index.
    s.forget(2);
    REQUIRE(s.access_count(2) == 0);
    REQUIRE(s.metrics().fairness == Approx(25.0 / 26.0));
    // One sequence served, one starved: Jain = 1/2.
    victim_batch_selector<lru> t;
    t.update_access(1, 1);
    t.update_access(2, 1);
    REQUIRE(t.select_victims(cs, 4).evicted.size() == 2);
    t.update_access(2, 2);
    t.forget(1);
    t.forget(1);  // forgetting twice is harmless
    // seq 1: 1/1 = 1, seq 2: 1/2 -> (1.5)^2 / (2 * 1.25) = 0.9
    REQUIRE(t.metrics().fairness == Approx(0.9));
    REQUIRE(t.metrics().re_prefill_rate == Approx(0.5));
}

TEST_CASE("select_victims: each rule's order is its incremental policy's order", "[select_victims]") {
    // Items used in the same sequence on both sides: the incremental policy
    // pops them in the order the batch selector ranks them.
    std::mt19937_64 rng(42);
    const std::size_t n = 64;
    const auto blocks = block_table(n);
    std::vector<eviction_candidate> cs(n);
    std::vector<access_context> ctx(n);
    for (std::uint32_t i = 0; i < n; ++i) {
        auto& c = cs[i];
        c.sequence_id = i;
        c.block_ids = std::span<const block_id>(blocks).subspan(i, 1);
        c.last_access_time = i + 1;  // item i inserted i-th
        c.priority = static_cast<std::int32_t>(rng() % 4) - 1;
        if (rng() % 3 == 0) c.estimated_lifetime = static_cast<double>(rng() % 6);
        if (rng() % 2 == 0) {
            c.max_length = 8;
            c.sequence_length = rng() % 9;
        }
        ctx[i].now = c.last_access_time;
        ctx[i].priority = c.priority;
        ctx[i].estimated_lifetime = c.estimated_lifetime;
        ctx[i].sequence_length = c.sequence_length;
        ctx[i].max_length = c.max_length;
    }
    auto incremental_order = [&]<class P>(P p) {
        for (std::uint32_t i = 0; i < n; ++i) p.on_insert(item_id{i}, ctx[i]);
        std::vector<std::uint64_t> order;
        while (auto v = p.pop_victim(0)) order.push_back(v->value);
        return order;
    };
    auto batch_order = [&]<class P>(victim_batch_selector<P> s) { return s.select_victims(cs, n).evicted; };
    REQUIRE(incremental_order(predictive(n, {})) == batch_order(victim_batch_selector<predictive>{}));
    REQUIRE(incremental_order(qos_aware(n, {})) == batch_order(victim_batch_selector<qos_aware>{}));
    REQUIRE(incremental_order(lru(n, {})) == batch_order(victim_batch_selector<lru>{}));
    REQUIRE(incremental_order(fifo(n, {})) == batch_order(victim_batch_selector<fifo>{}));

    // LFU: counts from accesses; the last use is the later of insert and
    // last access on both sides.
    lfu p(n, {});
    for (std::uint32_t i = 0; i < n; ++i) p.on_insert(item_id{i}, ctx[i]);
    timestamp t = n + 1;
    for (int k = 0; k < 200; ++k) {
        const auto i = static_cast<std::uint32_t>(rng() % n);
        p.on_access(item_id{i}, {});
        ++cs[i].access_count;
        cs[i].last_access_time = t++;
    }
    for (auto& c : cs) c.access_count += 1;  // the insert counts as one
    std::vector<std::uint64_t> order;
    while (auto v = p.pop_victim(0)) order.push_back(v->value);
    victim_batch_selector<lfu> s;
    REQUIRE(order == s.select_victims(cs, n).evicted);
}

TEST_CASE("select_victims: the rules on offer", "[select_victims]") {
    STATIC_REQUIRE(has_batch_rule<lru>);
    STATIC_REQUIRE(has_batch_rule<lfu>);
    STATIC_REQUIRE(has_batch_rule<fifo>);
    STATIC_REQUIRE(has_batch_rule<qos_aware>);
    STATIC_REQUIRE(has_batch_rule<predictive>);
    STATIC_REQUIRE_FALSE(has_batch_rule<sieve>);  // no batch meaning: its order lives in the hand
    STATIC_REQUIRE(victim_batch_selector<qos_aware>::name == "qos_aware");
}
