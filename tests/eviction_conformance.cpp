// The eviction_policy protocol, checked for every policy in the registry:
// a policy added to `eviction_policies` is covered here without an edit.
// Each policy is driven through long random operation sequences (inserts,
// hits, holds, releases, erases, batch pops) at several capacities with the
// invariants checked after every operation; the rest checks the rules a
// cache relies on: nothing evictable means no victim, a held item is never a
// victim, and the counters add up. Victim order is each policy's own
// business (its differential test against a reference model checks it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include <kvpolicy/eviction/registry.hpp>

#include "support/policy_driver.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

template <class P>
P make_policy(std::size_t capacity) {
    return P(capacity, typename P::config_type{});
}

access_context context_for(std::uint32_t i) {
    access_context ctx;
    ctx.now = i + 1;
    ctx.key = 1000 + i;
    return ctx;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("conformance: random operations keep the protocol's invariants", "[eviction][conformance]",
                        eviction_policies) {
    // Keys come from twice the capacity, so the tier is full and misses evict
    // all the time. 100k operations per (seed, capacity), except 30k at
    // capacity 1000, where the driver's own O(capacity) hit lookup would
    // dominate the run time (the whole registry must stay well under 20 s
    // under ASan).
    const std::size_t capacity = GENERATE(1u, 16u, 97u, 1000u);
    const std::uint64_t seed = GENERATE(101u, 202u);
    auto policy = make_policy<TestType>(capacity);
    const auto victims = drive(policy, {.capacity = capacity,
                                        .operations = capacity >= 1000 ? 30'000u : 100'000u,
                                        .seed = seed,
                                        .key_universe = 2 * capacity + 8});
    const policy_counters& c = policy.counters();
    REQUIRE(c.evictions == victims.size());
    REQUIRE(c.insertions == c.evictions + c.erasures + policy.size());
    REQUIRE(victims.size() > 1000);
}

TEMPLATE_LIST_TEST_CASE("conformance: no victim when nothing is evictable", "[eviction][conformance]",
                        eviction_policies) {
    const std::size_t capacity = GENERATE(1u, 16u);
    auto p = make_policy<TestType>(capacity);
    REQUIRE_FALSE(p.pop_victim(1).has_value());
    std::vector<item_id> out(4);
    REQUIRE(p.pop_victims(out, 1) == 0);

    for (std::uint32_t i = 0; i < capacity; ++i) p.on_insert(item_id{i}, context_for(i));
    for (std::uint32_t i = 0; i < capacity; ++i) p.on_hold(item_id{i});
    REQUIRE(p.size() == capacity);
    REQUIRE(p.evictable_size() == 0);
    REQUIRE_FALSE(p.pop_victim(100).has_value());
    REQUIRE(p.pop_victims(out, 100) == 0);
    REQUIRE(p.counters().evictions == 0);

    // The one released item is the only possible victim.
    const std::uint32_t last = static_cast<std::uint32_t>(capacity - 1);
    p.on_release(item_id{last}, context_for(last));
    REQUIRE(p.pop_victim(200) == item_id{last});
    REQUIRE_FALSE(p.pop_victim(200).has_value());
    REQUIRE(p.counters().evictions == 1);
}

TEMPLATE_LIST_TEST_CASE("conformance: a held item is never a victim", "[eviction][conformance]", eviction_policies) {
    const std::size_t capacity = 48;
    auto p = make_policy<TestType>(capacity);
    for (std::uint32_t i = 0; i < capacity; ++i) p.on_insert(item_id{i}, context_for(i));
    for (std::uint32_t i = 0; i < capacity; i += 2) p.on_access(item_id{i}, context_for(i + 50));
    std::vector<bool> held(capacity, false);
    for (std::uint32_t i = 0; i < capacity; i += 3) {
        p.on_hold(item_id{i});
        held[i] = true;
    }
    // Held items get hits too: a hit must not make them evictable.
    for (std::uint32_t i = 0; i < capacity; i += 6) p.on_access(item_id{i}, context_for(i + 100));
    const auto held_count = static_cast<std::size_t>(std::count(held.begin(), held.end(), true));
    REQUIRE(p.evictable_size() == capacity - held_count);

    std::vector<bool> seen(capacity, false);
    std::vector<item_id> batch(5);
    std::size_t popped = 0;
    for (;;) {
        const std::size_t n = p.pop_victims(batch, 1000);
        for (std::size_t k = 0; k < n; ++k) {
            const auto v = batch[k].value;
            REQUIRE(v < capacity);
            REQUIRE_FALSE(held[v]);
            REQUIRE_FALSE(seen[v]);  // never the same item twice
            seen[v] = true;
            REQUIRE_FALSE(p.contains(batch[k]));
        }
        popped += n;
        if (n < batch.size()) break;
    }
    REQUIRE(popped == capacity - held_count);
    REQUIRE(p.counters().evictions == popped);
    REQUIRE(p.size() == held_count);
    for (std::uint32_t i = 0; i < capacity; ++i) REQUIRE(p.contains(item_id{i}) == held[i]);

    // Released, they are victims again; erased ones are not.
    for (std::uint32_t i = 0; i < capacity; i += 3) {
        if (i % 2 == 0)
            p.on_release(item_id{i}, context_for(i + 200));
        else
            p.on_erase(item_id{i});
    }
    std::size_t rest = 0;
    while (auto v = p.pop_victim(2000)) {
        REQUIRE(v->value % 6 == 0);
        ++rest;
    }
    REQUIRE(rest == (capacity + 5) / 6);
    REQUIRE(p.size() == 0);
    const policy_counters& c = p.counters();
    REQUIRE(c.insertions == capacity);
    REQUIRE(c.evictions == popped + rest);
    REQUIRE(c.erasures == held_count - rest);
    REQUIRE(c.hits == capacity / 2 + capacity / 6);
}
