// dyn_policy (eviction/dyn_policy.hpp) decides exactly as the registered
// policy it holds: for every policy of the registry, the same victims in the
// same order as the policy itself over long random sequences of every hook
// (tests/support/policy_driver.hpp), the batch calls the same as the hooks
// item by item, request and session ends and the waiting queue heard where
// the policy hears them; `holding<P>` builds P with the whole config given
// (one over no named policy takes only those); an unknown name is refused
// listing every policy.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <kvpolicy/eviction/dyn_policy.hpp>

#include "support/policy_driver.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEMPLATE_LIST_TEST_CASE("dyn_policy decides exactly as the policy it holds", "[eviction]", eviction_policies) {
    constexpr std::size_t capacity = 64;
    const std::uint64_t seed = GENERATE(1u, 2u);
    TestType alone(capacity, {});
    dyn_policy dyn(capacity, {.policy = std::string(TestType::name)});
    REQUIRE(dyn.policy_name() == TestType::name);
    REQUIRE(dyn.hears_queue() == hears_waiting_queue<TestType>);
    // The driver checks each of alone's victims against dyn's.
    drive(alone, {.capacity = capacity, .operations = 20'000, .seed = seed, .key_universe = 2 * capacity + 8}, &dyn);
    REQUIRE(dyn.counters() == alone.counters());
    REQUIRE(dyn.size() == alone.size());
    REQUIRE(dyn.evictable_size() == alone.evictable_size());
    REQUIRE(dyn.capacity() == capacity);
}

TEMPLATE_LIST_TEST_CASE("dyn_policy's batch calls are its hooks item by item", "[eviction]", eviction_policies) {
    constexpr std::size_t capacity = 32;
    TestType alone(capacity, {});
    dyn_policy dyn(capacity, {.policy = std::string(TestType::name)});
    std::mt19937_64 rng(GENERATE(3u, 4u));
    std::vector<int> state(capacity, 0);  // 0 absent, 1 evictable, 2 held
    timestamp now = 0;
    for (int round = 0; round < 3000; ++round) {
        // A batch of distinct ids in one state, with their fields.
        const int want = static_cast<int>(rng() % 3);
        std::vector<item_id> ids;
        std::vector<std::uint64_t> keys, next;
        std::vector<std::int32_t> prio;
        for (std::size_t i = rng() % capacity, n = 0; n < capacity; ++n, ++i)
            if (state[i % capacity] == want && ids.size() < 1 + rng() % 5) {
                ids.push_back(item_id{static_cast<std::uint32_t>(i % capacity)});
                keys.push_back(rng() % 100);
                next.push_back(now + 1 + rng() % 500);
                prio.push_back(static_cast<std::int32_t>(rng() % 3));
            }
        item_batch b{.ids = ids, .keys = keys, .priorities = prio, .next_use = next, .now = ++now};
        if (rng() % 2 == 0) b.keys = {};  // the default: key = id
        switch (want) {
            case 0: {  // new items: misses, then inserts
                const item_batch m{.keys = b.keys, .now = now};
                dyn.miss_batch(m);
                for (std::size_t i = 0; i < m.keys.size(); ++i) alone.on_miss(m.context(i));
                dyn.insert_batch(b);
                for (std::size_t i = 0; i < ids.size(); ++i) alone.on_insert(ids[i], b.context(i));
                for (item_id id : ids) state[id.index()] = 1;
                break;
            }
            case 1:
                if (rng() % 2 == 0) {
                    dyn.access_batch(b);
                    for (std::size_t i = 0; i < ids.size(); ++i) alone.on_access(ids[i], b.context(i));
                } else {
                    dyn.hold_batch(ids);
                    for (item_id id : ids) alone.on_hold(id);
                    for (item_id id : ids) state[id.index()] = 2;
                }
                break;
            default:
                if (rng() % 3 != 0) {
                    dyn.release_batch(b);
                    for (std::size_t i = 0; i < ids.size(); ++i) alone.on_release(ids[i], b.context(i));
                    for (item_id id : ids) state[id.index()] = 1;
                } else {
                    dyn.erase_batch(ids);
                    for (item_id id : ids) alone.on_erase(id);
                    for (item_id id : ids) state[id.index()] = 0;
                }
        }
        if (rng() % 8 == 0) {  // a request ends, or a session: heard where the policy hears it
            const session_id ended{rng() % 5};
            dyn.on_request_end(ended, now);
            if constexpr (hears_request_ends<TestType>) alone.on_request_end(ended, now);
            if (rng() % 4 == 0) {
                dyn.on_session_end(ended, now);
                if constexpr (hears_session_ends<TestType>) alone.on_session_end(ended, now);
            }
        }
        if (rng() % 4 == 0) {
            std::vector<item_id> a(rng() % 4), c(a.size());
            const std::size_t na = dyn.pop_victims(a, now), nc = alone.pop_victims(c, now);
            REQUIRE(na == nc);
            a.resize(na);
            c.resize(nc);
            REQUIRE(a == c);
            for (item_id id : a) state[id.index()] = 0;
        }
        REQUIRE(dyn.size() == alone.size());
        REQUIRE(dyn.evictable_size() == alone.evictable_size());
    }
    REQUIRE(dyn.counters() == alone.counters());
}

TEST_CASE("dyn_policy passes the waiting queue to a policy that hears it, and only then", "[eviction]") {
    for (const char* name : {"queue_aware_lru", "lru"}) {
        dyn_policy p(4, {.policy = name});
        access_context c;
        for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, c);
        p.on_queued(item_id{0}, 7);  // read by a queued request: last, where the queue is heard
        std::vector<item_id> out(4);
        REQUIRE(p.pop_victims(out, 1) == 4);
        REQUIRE((out.back() == item_id{0}) == p.hears_queue());
    }
}

TEST_CASE("dyn_policy::holding builds the policy with the whole config it is given", "[eviction]") {
    constexpr std::size_t capacity = 48;
    const driver_options opt{.capacity = capacity, .operations = 20'000, .seed = 5, .key_universe = 2 * capacity + 8};
    // A half-life far from the default: LRFU then decides as an LFU would.
    const lrfu::config_type config{.half_life = 50.0, .ghost_factor = 1.0};
    lrfu alone(capacity, config);
    dyn_policy held(capacity, dyn_policy::holding<lrfu>(config));
    REQUIRE(held.policy_name() == lrfu::name);
    drive(alone, opt, &held);
    REQUIRE(held.counters() == alone.counters());
    // ...and not as the default one does: the config reached the policy.
    lrfu with_default(capacity, {});
    dyn_policy held_again(capacity, dyn_policy::holding<lrfu>(config));
    REQUIRE(drive(with_default, opt) != drive(held_again, opt));
}

TEST_CASE("a dyn_policy over no named policy holds what it is given, and refuses a name", "[eviction][errors]") {
    using held_only = basic_dyn_policy<type_list<>>;
    static_assert(eviction_policy<held_only>);
    held_only held(8, held_only::holding<lru>({}));
    REQUIRE(held.policy_name() == lru::name);
    REQUIRE_THROWS_AS(held_only(8, {.policy = "lru"}), config_error);
    REQUIRE_THROWS_WITH(held_only(8, {.policy = "lru"}), Catch::Contains("'lru'") && Catch::Contains("holding"));
}

TEST_CASE("dyn_policy refuses an unknown name, listing every policy", "[eviction][errors]") {
    REQUIRE_THROWS_AS(dyn_policy(4, {.policy = "nope"}), unknown_name_error);
    REQUIRE_THROWS_WITH(dyn_policy(4, {.policy = "nope"}),
                        Catch::Contains("nope") && Catch::Contains("lru") && Catch::Contains("belady"));
}
