// any_batch_selector (eviction/select_victims.hpp) chooses exactly as the
// victim_batch_selector of the rule it names: for every rule of
// batch_rules, the same victims, freed blocks, shortfall and metrics over
// random batches of candidates and accesses; an unknown rule is refused
// listing the rules.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/select_victims.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace kvpolicy;

TEMPLATE_LIST_TEST_CASE("any_batch_selector chooses as the selector of its rule", "[eviction]", batch_rules) {
    const auto any = any_batch_selector::make(TestType::name);
    victim_batch_selector<TestType> alone;
    REQUIRE(any->rule() == TestType::name);
    std::mt19937_64 rng(11);
    const std::vector<block_id> blocks(8);
    for (int round = 0; round < 500; ++round) {
        std::vector<eviction_candidate> c(rng() % 12);
        for (std::size_t i = 0; i < c.size(); ++i) {
            c[i].sequence_id = 100 * static_cast<std::uint64_t>(round) + i;
            c[i].block_ids = std::span(blocks).first(1 + rng() % 8);
            c[i].last_access_time = rng() % 1000;
            c[i].access_count = rng() % 5;
            c[i].priority = static_cast<std::int32_t>(rng() % 3);
            c[i].pinned = rng() % 5 == 0;
            c[i].sequence_length = rng() % 100;
            c[i].max_length = rng() % 2 ? 0 : 100 + rng() % 100;
        }
        const std::size_t required = rng() % 20;
        const victim_batch a = any->select_victims(c, required), b = alone.select_victims(c, required);
        REQUIRE(a.evicted == b.evicted);
        REQUIRE(a.freed_blocks == b.freed_blocks);
        REQUIRE(a.shortfall == b.shortfall);
        const std::vector<std::uint64_t> ids(a.evicted.begin(), a.evicted.end());
        const std::vector<timestamp> now(ids.size(), 1000 + static_cast<timestamp>(round));
        any->update_access(ids, now);
        for (std::uint64_t id : ids) alone.update_access(id, 1000 + static_cast<timestamp>(round));
        if (round % 7 == 0) {
            any->forget(ids);
            for (std::uint64_t id : ids) alone.forget(id);
        }
    }
    REQUIRE(any->metrics().total_evictions == alone.metrics().total_evictions);
    REQUIRE(any->metrics().re_prefills == alone.metrics().re_prefills);
}

TEST_CASE("any_batch_selector refuses an unknown rule, listing the rules", "[eviction][errors]") {
    REQUIRE_THROWS_AS(any_batch_selector::make("arc"), unknown_name_error);
    REQUIRE_THROWS_WITH(any_batch_selector::make("arc"), Catch::Contains("batch rule") && Catch::Contains("qos_aware"));
}

TEST_CASE("any_batch_selector over columns chooses as over candidates", "[eviction]") {
    std::mt19937_64 rng(23);
    for (const std::string_view rule : {"lru", "lfu", "fifo", "qos_aware", "predictive"}) {
        const auto by_columns = any_batch_selector::make(rule), by_candidates = any_batch_selector::make(rule);
        const std::vector<block_id> blocks(40);
        for (int round = 0; round < 300; ++round) {
            const std::size_t n = rng() % 12;
            std::vector<std::uint64_t> ids(n), num(n), last(n), count(n), length(n), max(n);
            std::vector<std::int32_t> prio(n);
            std::vector<std::uint8_t> pin(n);
            std::vector<double> life(n);
            std::vector<eviction_candidate> c(n);
            const unsigned given = static_cast<unsigned>(rng());  // which optional columns are given
            const auto has = [&](int bit) { return (given >> bit & 1U) != 0; };
            for (std::size_t i = 0; i < n; ++i) {
                ids[i] = c[i].sequence_id = 50 * static_cast<std::uint64_t>(round) + i;
                num[i] = rng() % 40;
                c[i].block_ids = std::span(blocks).first(num[i]);
                last[i] = rng() % 1000, count[i] = rng() % 5, prio[i] = static_cast<std::int32_t>(rng() % 3);
                pin[i] = rng() % 5 == 0, life[i] = rng() % 4 == 0 ? 0.5 * static_cast<double>(rng() % 9) : NAN;
                length[i] = rng() % 100, max[i] = rng() % 2 ? 0 : 100 + rng() % 100;
                if (has(0)) c[i].last_access_time = last[i];
                if (has(1)) c[i].access_count = count[i];
                if (has(2)) c[i].priority = prio[i];
                if (has(3)) c[i].pinned = pin[i] != 0;
                if (has(4)) c[i].estimated_lifetime = life[i];
                if (has(5)) c[i].sequence_length = length[i];
                if (has(6)) c[i].max_length = max[i];
            }
            candidate_columns cols{.sequence_ids = ids, .num_blocks = num};
            if (has(0)) cols.last_access = std::span<const timestamp>(last);
            if (has(1)) cols.access_count = std::span<const std::uint64_t>(count);
            if (has(2)) cols.priority = std::span<const std::int32_t>(prio);
            if (has(3)) cols.pinned = std::span<const std::uint8_t>(pin);
            if (has(4)) cols.estimated_lifetime = std::span<const double>(life);
            if (has(5)) cols.sequence_length = std::span<const std::uint64_t>(length);
            if (has(6)) cols.max_length = std::span<const std::uint64_t>(max);
            const std::size_t required = rng() % 60;
            const victim_batch a = by_columns->select_victims(cols, required);
            const victim_batch b = by_candidates->select_victims(std::span<const eviction_candidate>(c), required);
            REQUIRE(a.evicted == b.evicted);
            REQUIRE(a.freed_blocks == b.freed_blocks);
            REQUIRE(a.shortfall == b.shortfall);
            // One time for every id, as one time per id.
            const timestamp now = 2000 + static_cast<timestamp>(round);
            by_columns->update_access(a.evicted, std::vector<timestamp>{now});
            by_candidates->update_access(b.evicted, std::vector<timestamp>(b.evicted.size(), now));
        }
        REQUIRE(by_columns->metrics().re_prefills == by_candidates->metrics().re_prefills);
        REQUIRE(by_columns->metrics().total_evictions == by_candidates->metrics().total_evictions);
    }
}

TEST_CASE("any_batch_selector refuses a column or a time count that does not match the ids", "[eviction][errors]") {
    const auto s = any_batch_selector::make("lru");
    const std::vector<std::uint64_t> ids{1, 2, 3}, two{4, 4};
    REQUIRE_THROWS_WITH(s->select_victims(candidate_columns{.sequence_ids = ids, .num_blocks = two}, 1),
                        "select_victims: num_blocks: 2 values for 3 sequences; give one per sequence");
    const std::vector<std::uint64_t> blocks{1, 1, 1}, none{};
    REQUIRE_THROWS_WITH(s->select_victims(candidate_columns{.sequence_ids = ids,
                                                            .num_blocks = blocks,
                                                            .access_count = std::span<const std::uint64_t>(none)},
                                          1),
                        "select_victims: access_count: 0 values for 3 sequences; give one per sequence");
    REQUIRE(s->metrics().selections == 0);
    REQUIRE_THROWS_WITH(s->update_access(ids, std::vector<timestamp>{1, 2}),
                        "update_access: 2 times for 3 sequences; give one time, or one per sequence");
    REQUIRE(s->metrics().re_prefills == 0);
    REQUIRE(s->select_victims(candidate_columns{.sequence_ids = ids, .num_blocks = blocks}, 2).evicted ==
            std::vector<std::uint64_t>{1, 2});
}
