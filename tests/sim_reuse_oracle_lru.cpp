// reuse_oracle_lru against its naive reference model on long random
// operation sequences (holds, releases, erasures, batch pops; the driver
// marks one access in five as never used again), LRU when every block comes
// back, and a hand-worked prefix replay where knowing which block is dead
// turns LRU's miss into a hit, between LRU and Belady.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/belady.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/reuse_oracle_lru.hpp>
#include <kvpolicy/sim/replay.hpp>

#include <cstdint>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEST_CASE("reuse_oracle_lru chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    reuse_oracle_lru policy(capacity);
    ref_reuse_oracle_lru reference;
    const auto victims =
        drive(policy, {.capacity = capacity, .operations = 120'000, .seed = seed, .key_universe = 4 * capacity + 8},
              &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
}

TEST_CASE("reuse_oracle_lru is LRU when every item is used again", "[eviction][reuse_oracle_lru]") {
    reuse_oracle_lru oracle(8);
    lru plain(8);
    access_context c{};
    for (std::uint64_t k = 0; k < 500; ++k) {
        c.now = k;
        c.key = k;
        c.next_use = k + 1;  // always used again
        std::uint32_t slot = static_cast<std::uint32_t>(k);
        if (k >= 8) {
            const auto a = oracle.pop_victim(k);
            const auto b = plain.pop_victim(k);
            REQUIRE(a.has_value());
            REQUIRE(a == b);
            slot = a->value;
        }
        oracle.on_insert(item_id{slot}, c);
        plain.on_insert(item_id{slot}, c);
        if (k % 3 == 0) {  // touch an older item: both reorder alike
            const item_id old{static_cast<std::uint32_t>((k + 5) % 8)};
            if (oracle.contains(old)) {
                oracle.on_access(old, c);
                plain.on_access(old, c);
            }
        }
    }
    REQUIRE(oracle.dead_size() == 0);
}

TEST_CASE("reuse_oracle_lru: a block never used again is evicted before older live ones",
          "[eviction][reuse_oracle_lru]") {
    // Capacity 2, prefix mode, one block per request:
    //   a, b, c, a.  b is never used again.
    // LRU evicts a (the oldest) for c, so the second a misses: 0 hits.
    // The oracle evicts dead b instead, so the second a hits: 1 hit, which is
    // also Belady's (a is the only block used twice).
    using namespace kvpolicy::sim;
    std::vector<request_record> reqs;
    for (std::uint64_t h : {1u, 2u, 3u, 1u}) {
        request_record r;
        r.timestamp_ms = reqs.size();
        r.input_length = 16;
        r.hash_ids = {h};
        r.line = reqs.size() + 1;
        reqs.push_back(r);
    }
    const request_replay_config cfg{.capacity = 2, .block_size = 16, .trace_name = "hand-made"};
    const request_times times = compute_request_times(reqs, cfg.capacity);
    auto hits = [&]<class P>() {
        vector_request_source src(reqs);
        return replay_requests<P, lru>(src, cfg, replay_mode::prefix, uses_future<P> ? &times : nullptr).hits;
    };
    REQUIRE(hits.operator()<lru>() == 0);
    REQUIRE(hits.operator()<reuse_oracle_lru>() == 1);
    REQUIRE(hits.operator()<belady>() == 1);
    STATIC_REQUIRE(uses_future<reuse_oracle_lru>);
    STATIC_REQUIRE(uses_future<belady>);
    STATIC_REQUIRE_FALSE(uses_future<lru>);
}
