// round_robin, lfu, clock, sieve, slru, two_q, qos_aware and predictive
// against their naive reference models (tests/support) on long random
// operation sequences, plus worked examples of the behaviour that is easy to
// get subtly wrong: the clock bit, the SIEVE hand, SLRU's cascade, 2Q's
// ghosts, QoS expiry and the predictive tiers.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <kvpolicy/eviction/clock.hpp>
#include <kvpolicy/eviction/lfu.hpp>
#include <kvpolicy/eviction/predictive.hpp>
#include <kvpolicy/eviction/qos_aware.hpp>
#include <kvpolicy/eviction/round_robin.hpp>
#include <kvpolicy/eviction/sieve.hpp>
#include <kvpolicy/eviction/slru.hpp>
#include <kvpolicy/eviction/two_q.hpp>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

std::vector<std::uint32_t> pop_all(auto& p, timestamp now = 0) {
    std::vector<std::uint32_t> out;
    while (auto v = p.pop_victim(now)) out.push_back(v->value);
    return out;
}

}  // namespace

TEMPLATE_TEST_CASE("part A policies choose the same victims as their reference models", "[eviction][differential]",
                   round_robin, lfu, kvpolicy::clock, sieve, slru, two_q, qos_aware, predictive) {
    using reference_t = typename reference_for<TestType>::type;
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    TestType policy(capacity, {});
    reference_t reference(capacity);
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);  // the sequence really exercised eviction
    if constexpr (std::is_same_v<TestType, two_q>) {
        REQUIRE(policy.counters().ghost_hits == reference.ghost_hits);
        if (capacity > 1) REQUIRE(reference.ghost_hits > 100);  // A1out really mattered
    }
}

TEST_CASE("slru and two_q with other configurations match their references", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(4u, 5u);
    const std::size_t capacity = GENERATE(2u, 16u, 97u);
    SECTION("slru, 1, 2 and 7 segments") {
        const std::size_t segments = GENERATE(1u, 2u, 7u);
        slru policy(capacity, {.segments = segments});
        ref_slru reference(capacity, segments);
        const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
        REQUIRE(victims.size() > 100);
    }
    SECTION("two_q, Kin 50% / Kout 100%, and Kin 0 / Kout 0") {
        const bool wide = GENERATE(true, false);
        two_q policy(capacity,
                     wide ? two_q::config_type{.kin = 0.5, .kout = 1.0} : two_q::config_type{.kin = 0.0, .kout = 0.0});
        ref_two_q reference(wide ? capacity / 2 : 0, wide ? capacity : 0);
        const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
        REQUIRE(victims.size() > 100);
        REQUIRE(policy.counters().ghost_hits == reference.ghost_hits);
        if (!wide) REQUIRE(reference.ghost_hits == 0);
    }
}

TEST_CASE("round_robin: the hand sweeps slot ids, skipping held and free slots", "[eviction][round_robin]") {
    round_robin p(6, {});
    for (std::uint32_t s : {4u, 1u, 3u, 5u}) p.on_insert(item_id{s}, {});
    p.on_access(item_id{1}, {});  // accesses change nothing
    p.on_hold(item_id{3});
    REQUIRE(p.pop_victim(0) == item_id{1});  // hand 0: slot 0 free, slot 1 evictable
    REQUIRE(p.hand() == 2);
    REQUIRE(p.pop_victim(0) == item_id{4});  // 2 free, 3 held
    p.on_insert(item_id{0}, {});
    p.on_insert(item_id{2}, {});
    REQUIRE(p.pop_victim(0) == item_id{5});
    REQUIRE(p.hand() == 0);  // wrapped
    p.on_release(item_id{3}, {});
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{0, 2, 3});
}

TEST_CASE("round_robin: large capacities search across summary words", "[eviction][round_robin]") {
    const std::uint32_t n = 3 * 4096 + 17;
    round_robin p(n, {});
    for (std::uint32_t s : {n - 1, 5u, 4096u * 2 + 63, 64u, 4095u}) p.on_insert(item_id{s}, {});
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{5, 64, 4095, 4096 * 2 + 63, n - 1});
    p.on_insert(item_id{7}, {});
    p.on_insert(item_id{n - 2}, {});
    REQUIRE(p.pop_victim(0) == item_id{7});  // hand had wrapped to 0
    REQUIRE(p.pop_victim(0) == item_id{n - 2});
}

TEST_CASE("lfu: counts, recency among equal counts, a release is no use, re-insert from 1", "[eviction][lfu]") {
    lfu p(4, {});
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, {});
    p.on_access(item_id{0}, {});
    p.on_access(item_id{0}, {});  // 0: 3
    p.on_access(item_id{2}, {});  // 2: 2
    p.on_access(item_id{1}, {});  // 1: 2, more recent than 2
    p.on_hold(item_id{3});
    p.on_access(item_id{3}, {});  // held hits count: 3 -> 2
    REQUIRE(p.count(item_id{3}) == 2);
    p.on_release(item_id{3}, {});  // not a use: still 2, last used at its held hit
    REQUIRE(p.count(item_id{3}) == 2);
    REQUIRE(p.pop_victim(0) == item_id{2});  // count 2, oldest last use
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE(p.pop_victim(0) == item_id{3});  // count 2, the most recent use
    p.on_insert(item_id{3}, {});             // back, at count 1 again
    REQUIRE(p.count(item_id{3}) == 1);
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{3, 0});
}

TEST_CASE("lfu: in-use items at low counts do not block victims above them", "[eviction][lfu]") {
    lfu p(5, {});
    for (std::uint32_t i = 0; i < 5; ++i) p.on_insert(item_id{i}, {});
    for (std::uint32_t i = 0; i < 5; ++i)
        for (std::uint32_t k = 0; k < i; ++k) p.on_access(item_id{i}, {});  // item i has count i+1
    p.on_hold(item_id{0});
    p.on_hold(item_id{2});
    REQUIRE(p.pop_victim(0) == item_id{1});
    p.on_release(item_id{2}, {});  // still count 3: a release is no use
    p.on_release(item_id{0}, {});  // count 1: the lowest
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{0, 2, 3, 4});
}

TEST_CASE("clock: new items enter with the bit clear, a hit buys one more sweep", "[eviction][clock]") {
    kvpolicy::clock p(4, {});
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, {});
    REQUIRE_FALSE(p.referenced(item_id{0}));
    p.on_access(item_id{0}, {});
    p.on_access(item_id{1}, {});
    REQUIRE(p.referenced(item_id{0}));
    // The hand clears 0 and 1, then evicts 2, the first clear bit.
    REQUIRE(p.pop_victim(0) == item_id{2});
    REQUIRE_FALSE(p.referenced(item_id{0}));
    // A new item goes just behind the hand (now on 3): it is looked at last.
    p.on_insert(item_id{2}, {});
    REQUIRE(p.pop_victim(0) == item_id{3});
    REQUIRE(p.pop_victim(0) == item_id{0});  // its second chance is spent
    p.on_hold(item_id{1});
    p.on_access(item_id{1}, {});
    p.on_release(item_id{1}, {});  // no reference: its place, and the bit the held hit set
    REQUIRE(p.referenced(item_id{1}));
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{2, 1});
}

TEST_CASE("sieve: the hand keeps its place and new items are demoted quickly", "[eviction][sieve]") {
    sieve p(5, {});
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, {});  // tail 0 1 2 3 head
    p.on_access(item_id{0}, {});
    p.on_access(item_id{1}, {});
    REQUIRE_FALSE(p.hand().has_value());
    // From the tail: 0 and 1 are visited (cleared, kept in place), 2 goes.
    REQUIRE(p.pop_victim(0) == item_id{2});
    REQUIRE(p.hand() == item_id{3});
    REQUIRE_FALSE(p.visited(item_id{0}));
    p.on_insert(item_id{4}, {});  // at the head
    p.on_access(item_id{0}, {});
    // The hand does not go back to the tail: 3 goes, not 0 or 1.
    REQUIRE(p.pop_victim(0) == item_id{3});
    REQUIRE(p.hand() == item_id{4});
    // The new item, never hit, is next: quick demotion.
    REQUIRE(p.pop_victim(0) == item_id{4});
    REQUIRE_FALSE(p.hand().has_value());  // past the head: start at the tail again
    // Tail again: 0 was hit after the first sweep, so 1 goes before it.
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE(p.pop_victim(0) == item_id{0});
}

TEST_CASE("sieve: a held item keeps its place and bit, the hand passes over it", "[eviction][sieve]") {
    sieve p(4, {});
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, {});
    p.on_access(item_id{0}, {});
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE(p.hand() == item_id{2});
    p.on_hold(item_id{2});
    REQUIRE(p.hand() == item_id{2});         // the hold moves nothing
    p.on_access(item_id{2}, {});             // a hit while held sets the bit
    REQUIRE(p.pop_victim(0) == item_id{3});  // 2 passed over, its bit kept
    REQUIRE_FALSE(p.hand().has_value());
    REQUIRE(p.visited(item_id{2}));
    p.on_release(item_id{2}, {});  // no reference: its place (between 0 and the head), its bit
    REQUIRE(p.visited(item_id{2}));
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{0, 2});
}

TEST_CASE("slru: hits climb one segment, overflow cascades down", "[eviction][slru]") {
    slru p(6, {.segments = 3});  // shares: segments 1 and 2 hold 2 items each
    for (std::uint32_t i = 0; i < 6; ++i) p.on_insert(item_id{i}, {});
    for (std::uint32_t i : {0u, 1u, 2u}) p.on_access(item_id{i}, {});
    // Segment 1 took 0, 1, then 2: its least recent (0) went back down to
    // segment 0's most recent end.
    REQUIRE(p.segment_of(item_id{0}) == 0);
    REQUIRE(p.segment_of(item_id{1}) == 1);
    REQUIRE(p.segment_of(item_id{2}) == 1);
    p.on_access(item_id{1}, {});  // to segment 2
    p.on_access(item_id{1}, {});  // top: stays
    REQUIRE(p.segment_of(item_id{1}) == 2);
    REQUIRE(p.segment_size(0) == 4);
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{3, 4, 5, 0, 2, 1});
    REQUIRE_THROWS_AS(slru(4, {.segments = 0}), config_error);
    REQUIRE_THROWS_AS(slru(4, {.segments = 256}), config_error);
}

TEST_CASE("two_q: A1in evictions are remembered, and a remembered key goes to Am", "[eviction][two_q]") {
    two_q p(8, {});  // Kin = 2, Kout = 4
    REQUIRE(p.kin() == 2);
    REQUIRE(p.kout() == 4);
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, at(i, 100 + i));
    p.on_access(item_id{0}, {});             // a hit in A1in changes nothing
    REQUIRE(p.pop_victim(0) == item_id{0});  // |A1in| = 4 > Kin: its oldest
    REQUIRE(p.remembers(100));
    REQUIRE(p.pop_victim(0) == item_id{1});
    p.on_insert(item_id{0}, at(5, 100));  // key 100 comes back: straight to Am
    REQUIRE(p.in_am(item_id{0}));
    REQUIRE_FALSE(p.remembers(100));
    REQUIRE(p.counters().ghost_hits == 1);
    // |A1in| = 2 = Kin, so Am's LRU goes now, without a ghost.
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE_FALSE(p.remembers(100));
    // Am empty: A1in gives its oldest even at or below Kin.
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{2, 3});
    REQUIRE_THROWS_AS(two_q(8, {.kin = 1.5}), config_error);
    REQUIRE_THROWS_AS(two_q(8, {.kout = -1.0}), config_error);
    REQUIRE_THROWS_AS(two_q(8, {.kin = std::numeric_limits<double>::quiet_NaN()}), config_error);
}

TEST_CASE("two_q: held A1in items count toward Kin", "[eviction][two_q]") {
    two_q p(8, {});  // Kin = 2
    for (std::uint32_t i = 0; i < 3; ++i) p.on_insert(item_id{i}, at(i, i));
    p.on_insert(item_id{3}, at(3, 1000));
    p.on_erase(item_id{3});
    // Get one item into Am via a ghost.
    REQUIRE(p.pop_victim(0) == item_id{0});  // |A1in| 3 > 2
    p.on_insert(item_id{0}, at(4, 0));
    REQUIRE(p.in_am(item_id{0}));
    p.on_hold(item_id{1});
    // A1in = {1 (held), 2}: 2 items, not above Kin: Am's LRU goes.
    REQUIRE(p.pop_victim(0) == item_id{0});
    p.on_insert(item_id{4}, at(5, 4));
    p.on_insert(item_id{5}, at(6, 5));
    p.on_insert(item_id{6}, at(7, 6));
    // A1in = {1 (held), 2, 4, 5, 6}; the held one cannot go.
    REQUIRE(p.pop_victim(0) == item_id{2});
}

TEST_CASE("qos_aware: lowest class first, LRU within a class", "[eviction][qos_aware]") {
    qos_aware p(6, {});
    const std::int32_t prio[] = {2, 0, 1, 0, 2, 1};
    for (std::uint32_t i = 0; i < 6; ++i) p.on_insert(item_id{i}, {.now = i, .priority = prio[i]});
    p.on_access(item_id{1}, {.now = 7, .priority = 0});   // most recent of class 0
    p.on_access(item_id{5}, {.now = 8, .priority = -5});  // the latest use's priority wins
    REQUIRE(p.class_count() == 4);
    REQUIRE(pop_all(p, 9) == std::vector<std::uint32_t>{5, 3, 1, 2, 0, 4});
    REQUIRE(p.class_count() == 0);
}

TEST_CASE("qos_aware: a priority lapses at priority_until, evaluated at pop_victim's now", "[eviction][qos_aware]") {
    qos_aware p(4, {});
    p.on_insert(item_id{0}, {.now = 1, .priority = 2, .priority_until = 10});  // high until 10
    p.on_insert(item_id{1}, {.now = 2});                                       // default (1)
    p.on_insert(item_id{2}, {.now = 3, .priority = 0, .priority_until = 20});  // low until 20
    p.on_insert(item_id{3}, {.now = 4});
    // At 9 nothing has lapsed: the low item goes first.
    REQUIRE(p.pop_victim(9) == item_id{2});
    REQUIRE(p.priority_of(item_id{0}) == 2);
    p.on_insert(item_id{2}, {.now = 9, .priority = 0, .priority_until = 20});
    // At 10 item 0's priority lapses (until <= now): it joins the default
    // class as its most recent member, so 1 and 3 go before it — but the low
    // item 2 still goes first.
    REQUIRE(p.pop_victim(10) == item_id{2});
    REQUIRE(p.priority_of(item_id{0}) == default_priority);
    REQUIRE(p.pop_victim(10) == item_id{1});
    REQUIRE(p.pop_victim(10) == item_id{3});
    REQUIRE(p.pop_victim(10) == item_id{0});
}

TEST_CASE("qos_aware: expiry is not evaluated between pops, and a use resets it", "[eviction][qos_aware]") {
    qos_aware p(3, {});
    p.on_insert(item_id{0}, {.now = 1, .priority = 0, .priority_until = 5});  // low until 5
    p.on_insert(item_id{1}, {.now = 2});
    p.on_insert(item_id{2}, {.now = 3, .priority = 0, .priority_until = 5});
    // A later use sets a new retention: item 2 is low with no end now.
    p.on_access(item_id{2}, {.now = 4, .priority = 0});
    // The context's `now` does not expire anything; only pop's now does.
    p.on_access(item_id{1}, {.now = 100});
    REQUIRE(p.priority_of(item_id{0}) == 0);
    // At pop time 6 item 0's priority has lapsed: default class, after 1.
    REQUIRE(p.pop_victim(6) == item_id{2});
    REQUIRE(p.pop_victim(6) == item_id{1});
    REQUIRE(p.pop_victim(6) == item_id{0});
    // Held items leave the expiry heap; their release sets retention anew.
    p.on_insert(item_id{0}, {.now = 7, .priority = 2, .priority_until = 8});
    p.on_insert(item_id{1}, {.now = 7});
    p.on_hold(item_id{0});
    p.on_release(item_id{0}, {.now = 9, .priority = 2});  // high, for good
    REQUIRE(p.pop_victim(50) == item_id{1});
    REQUIRE(p.priority_of(item_id{0}) == 2);
}

TEST_CASE("predictive: lifetime tier, then completion tier, then LRU", "[eviction][predictive]") {
    const double unknown = std::numeric_limits<double>::quiet_NaN();
    predictive p(8, {});
    auto use = [](double lifetime, std::uint64_t len, std::uint64_t max) {
        access_context c;
        c.estimated_lifetime = lifetime;
        c.sequence_length = len;
        c.max_length = max;
        return c;
    };
    p.on_insert(item_id{0}, use(unknown, 0, 0));     // LRU tier, oldest
    p.on_insert(item_id{1}, use(unknown, 90, 100));  // 90% done
    p.on_insert(item_id{2}, use(30.0, 10, 100));     // lifetime known: ratio ignored
    p.on_insert(item_id{3}, use(unknown, 10, 100));  // 10% done
    p.on_insert(item_id{4}, use(5.0, 0, 0));         // shortest lifetime
    p.on_insert(item_id{5}, use(unknown, 0, 0));     // LRU tier
    p.on_insert(item_id{6}, use(30.0, 0, 0));        // ties with 2: 2 is older
    p.on_insert(item_id{7}, use(unknown, 45, 50));   // 90% done, newer than 1
    p.on_access(item_id{0}, use(unknown, 0, 0));     // 0 is now the newest of the LRU tier
    REQUIRE(p.rank_of(item_id{2}).tier == predictive_rank::basis::lifetime);
    REQUIRE(p.rank_of(item_id{3}).tier == predictive_rank::basis::completion);
    REQUIRE(p.rank_of(item_id{5}).tier == predictive_rank::basis::recency);
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{4, 2, 6, 1, 7, 3, 5, 0});
}

TEST_CASE("predictive: a release re-reads what is known", "[eviction][predictive]") {
    predictive p(2, {});
    p.on_insert(item_id{0}, {.estimated_lifetime = 1.0});
    p.on_insert(item_id{1}, {.estimated_lifetime = 2.0});
    p.on_hold(item_id{0});
    p.on_release(item_id{0}, {});  // nothing known any more: LRU tier
    REQUIRE(pop_all(p) == std::vector<std::uint32_t>{1, 0});
}
