// any_batch_selector (eviction/select_victims.hpp) chooses exactly as the
// victim_batch_selector of the rule it names: for every rule of
// batch_rules, the same victims, freed blocks, shortfall and metrics over
// random batches of candidates and accesses; an unknown rule is refused
// listing the rules.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/select_victims.hpp>

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
