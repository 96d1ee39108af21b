// superseded_lru against its naive reference model on long random operation
// sequences, and on hand-worked requests: the branch a session abandons goes
// first, shared blocks are never superseded, the blocks a request reads
// again come back to LRU order.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/superseded_lru.hpp>

#include <cstdint>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEST_CASE("superseded_lru chooses the same victims as its reference model", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    superseded_lru policy(capacity);
    ref_superseded_lru reference;
    const auto victims =
        drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed, .key_universe = 4 * capacity + 8},
              &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
}

namespace {

// A request as the cache makes it: each block referenced (inserted if not
// tracked) and held, then all released, the last block first.
void request(superseded_lru& p, std::uint64_t session, timestamp now, const std::vector<std::uint32_t>& blocks) {
    access_context ctx;
    ctx.session = session_id{session};
    ctx.now = now;
    for (std::uint32_t b : blocks) {
        ctx.key = 100 + b;
        if (p.contains(item_id{b}))
            p.on_access(item_id{b}, ctx);
        else
            p.on_insert(item_id{b}, ctx);
        p.on_hold(item_id{b});
    }
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
        ctx.key = 100 + *b;
        p.on_release(item_id{*b}, ctx);
    }
}

std::vector<std::uint32_t> drain(superseded_lru& p, timestamp now) {
    std::vector<std::uint32_t> out;
    while (auto v = p.pop_victim(now)) out.push_back(v->value);
    return out;
}

}  // namespace

TEST_CASE("superseded_lru evicts the branch a session left first, deepest first", "[eviction][superseded_lru]") {
    superseded_lru p(16);
    request(p, 1, 1, {0, 1, 2, 3});  // session 1: 0 -> 1 -> 2 -> 3
    request(p, 2, 2, {8, 9});        // session 2
    request(p, 1, 3, {0, 1, 4});     // session 1 branches at 1: 2 -> 3 left behind
    REQUIRE(p.superseded_size() == 2);
    // Superseded first (placed tail first: 3, then 2), then LRU: session 2's
    // request (tail first), then session 1's latest (tail first).
    REQUIRE(drain(p, 4) == std::vector<std::uint32_t>{3, 2, 9, 8, 4, 1, 0});
}

TEST_CASE("superseded_lru never supersedes a block two sessions used", "[eviction][superseded_lru]") {
    superseded_lru p(16);
    request(p, 1, 1, {0, 1});
    request(p, 2, 2, {0, 5});  // block 0 is shared from now on
    request(p, 2, 3, {6});     // session 2 moves on: 5 is superseded, 0 is not
    request(p, 1, 4, {7});     // session 1 moves on: 1 is superseded, 0 is not
    REQUIRE(drain(p, 5) == std::vector<std::uint32_t>{5, 1, 0, 6, 7});
    REQUIRE(p.sessions() == 0);
}

TEST_CASE("superseded_lru: a session's next request takes back what it reads", "[eviction][superseded_lru]") {
    // A conversation's turns repeat its history: nothing but the previous
    // turn's partial last block (3) is superseded, and the order is LRU's.
    superseded_lru p(16);
    request(p, 1, 1, {0, 1, 3});
    request(p, 1, 2, {0, 1, 2, 5});
    REQUIRE(p.superseded_size() == 1);
    REQUIRE(drain(p, 3) == std::vector<std::uint32_t>{3, 5, 2, 1, 0});
}
