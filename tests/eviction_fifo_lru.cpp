// FIFO and LRU against their naive reference models (tests/support), on long
// random operation sequences with holds, releases, erasures and batch pops.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEMPLATE_TEST_CASE("same victims as the reference model", "[eviction][differential]", (std::pair<fifo, ref_fifo>),
                   (std::pair<lru, ref_lru>)) {
    using policy_t = typename TestType::first_type;
    using reference_t = typename TestType::second_type;
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    policy_t policy(capacity, {});
    reference_t reference;
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);  // the sequence really exercised eviction
}

TEST_CASE("lru: a worked example", "[eviction][lru]") {
    lru p(3, {});
    const access_context ctx{};
    p.on_insert(item_id{0}, ctx);
    p.on_insert(item_id{1}, ctx);
    p.on_insert(item_id{2}, ctx);
    p.on_access(item_id{0}, ctx);  // order: 1 2 0
    p.on_hold(item_id{1});         // 1 is in use: order 2 0
    REQUIRE(p.pop_victim(0) == item_id{2});
    p.on_release(item_id{1}, ctx);  // order: 0 1
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE_FALSE(p.pop_victim(0).has_value());
    REQUIRE(p.counters() ==
            policy_counters{.insertions = 3, .hits = 1, .evictions = 3, .erasures = 0, .ghost_hits = 0});
}

TEST_CASE("fifo: neither hits nor holds reorder", "[eviction][fifo]") {
    fifo p(3, {});
    const access_context ctx{};
    p.on_insert(item_id{0}, ctx);
    p.on_insert(item_id{1}, ctx);
    p.on_insert(item_id{2}, ctx);
    p.on_access(item_id{0}, ctx);
    p.on_hold(item_id{1});
    REQUIRE(p.pop_victim(0) == item_id{0});
    p.on_release(item_id{1}, ctx);  // back to its place, ahead of 2
    item_id out[3];
    REQUIRE(p.pop_victims(out, 0) == 2);
    REQUIRE(out[0] == item_id{1});
    REQUIRE(out[1] == item_id{2});
}

TEST_CASE("a held item is never a victim, even when it is the only one", "[eviction]") {
    lru p(2, {});
    p.on_insert(item_id{1}, {});
    p.on_hold(item_id{1});
    REQUIRE_FALSE(p.pop_victim(0).has_value());
    REQUIRE(p.size() == 1);
    REQUIRE(p.evictable_size() == 0);
    p.on_erase(item_id{1});
    REQUIRE_FALSE(p.contains(item_id{1}));
    REQUIRE(p.size() == 0);
}
