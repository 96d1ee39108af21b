// W-TinyLFU, GDSF and Belady against their naive reference models
// (tests/support) on long random operation sequences with holds, releases,
// erasures and batch pops; W-TinyLFU's hand-worked trace and sketch, GDSF's
// and Belady's orders, and the configuration errors of all part-B policies.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/arc.hpp>
#include <kvpolicy/eviction/belady.hpp>
#include <kvpolicy/eviction/gdsf.hpp>
#include <kvpolicy/eviction/lirs.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>
#include <kvpolicy/eviction/w_tinylfu.hpp>

#include <string_view>
#include <utility>
#include <vector>

#include "support/flat_cache.hpp"
#include "support/letter_trace.hpp"
#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEMPLATE_TEST_CASE("w_tinylfu, gdsf and belady choose the same victims as their reference models",
                   "[eviction][differential]", (std::pair<w_tinylfu, ref_w_tinylfu>), (std::pair<gdsf<>, ref_gdsf>),
                   (std::pair<belady, ref_belady>)) {
    using policy_t = typename TestType::first_type;
    using reference_t = typename TestType::second_type;
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    policy_t policy(capacity, {});
    reference_t reference(capacity);
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);  // the sequence really exercised eviction
}

TEST_CASE("lirs and w_tinylfu with larger HIR / window shares match their references", "[eviction][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t capacity = 97;
    SECTION("lirs, 10% resident HIR") {
        lirs policy(capacity, {.hir_fraction = 0.10});
        ref_lirs reference(capacity, 0.10);
        const auto victims = drive(policy, {.capacity = capacity, .seed = seed}, &reference);
        REQUIRE(victims.size() > 100);
    }
    SECTION("w_tinylfu, 10% window") {
        w_tinylfu policy(capacity, {.window_fraction = 0.10});
        ref_w_tinylfu reference(capacity, 0.10);
        const auto victims = drive(policy, {.capacity = capacity, .seed = seed}, &reference);
        REQUIRE(victims.size() > 100);
    }
}

TEST_CASE("w_tinylfu: a worked trace through admission duels", "[eviction][w_tinylfu]") {
    // c = 4: window 1 (1%, at least one), main 3 with protected 2 (80%, truncated).
    // A key's estimate here is its uses so far: the doorkeeper holds the first,
    // the counters the rest (the REQUIREs below check no hash collides).
    //  1-4 A B C D miss: each enters the window and pushes the previous one to
    //        probation.                    window=[D] probation=[A B C]
    //  5 A hit: probation -> protected.    protected=[A]  probation=[B C]
    //  6 B hit: probation -> protected.    protected=[A B] probation=[C]
    //  7 E miss: duel window D (1 use) vs probation C (1 use): not strictly more
    //        frequent, so D goes.                                                  -> D
    //  8 E hit: E has 2 uses.
    //  9 F miss: duel E (2) vs C (1): E is admitted to probation, C goes.          -> C
    // 10 A hit: protected MRU.             protected=[B A]
    // 11 E hit: probation -> protected; protected is over 2, so its LRU B drops to
    //        probation.                    protected=[A E] probation=[B]
    // 12 G miss: duel F (1) vs B (2): F goes.                                      -> F
    // 13-14 G hit twice: 3 uses.
    // 15 H miss: duel G (3) vs B (2): G admitted, B goes.                           -> B
    flat_cache<w_tinylfu> cache(4);
    REQUIRE(evicted_keys(cache, "ABCDABEEFAEGGGH") == std::vector<char>{'D', 'C', 'F', 'B'});
    const auto& sketch = cache.policy().sketch();
    REQUIRE(sketch.estimate(key('A')) == 3);
    REQUIRE(sketch.estimate(key('B')) == 2);
    REQUIRE(sketch.estimate(key('E')) == 3);
    REQUIRE(sketch.estimate(key('F')) == 1);
    REQUIRE(sketch.estimate(key('G')) == 3);
    REQUIRE(cache.policy().window_size() == 1);
    REQUIRE(cache.policy().protected_size() == 2);
    REQUIRE(cache.policy().probation_size() == 1);
}

TEST_CASE("tinylfu_sketch: doorkeeper, 4-bit saturation and the reset", "[eviction][w_tinylfu]") {
    tinylfu_sketch s(64, 640);  // W = 10 x 64
    REQUIRE(s.estimate(7) == 0);
    s.record(7);
    REQUIRE(s.estimate(7) == 1);  // the doorkeeper alone
    for (int i = 0; i < 30; ++i) s.record(7);
    REQUIRE(s.estimate(7) == 16);  // 15 (saturated) + the doorkeeper
    // Fill the sample with other keys: at W uses every counter halves and the
    // doorkeeper clears.
    for (std::uint64_t k = 1000; s.additions() != 0 && s.additions() < 639; ++k) s.record(k);
    REQUIRE(s.additions() == 639);
    s.record(99);
    REQUIRE(s.additions() == 320);
    REQUIRE(s.estimate(7) == 7);  // 15 / 2, no doorkeeper bit
}

TEST_CASE("gdsf: H = L + frequency x cost / size, with L inflated at each eviction", "[eviction][gdsf]") {
    gdsf<> p(3, {});
    access_context ctx{};
    ctx.size = 1;
    p.on_insert(item_id{0}, ctx);  // H = 0 + 1/1 = 1
    ctx.size = 2;
    p.on_insert(item_id{1}, ctx);  // H = 0 + 1/2 = 0.5
    ctx.size = 1;
    p.on_insert(item_id{2}, ctx);  // H = 1
    p.on_access(item_id{0}, ctx);  // H = 0 + 2/1 = 2
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE(p.inflation() == 0.5);
    p.on_insert(item_id{1}, ctx);            // H = 0.5 + 1 = 1.5
    REQUIRE(p.pop_victim(0) == item_id{2});  // H = 1 is the lowest
    REQUIRE(p.inflation() == 1.0);
    // 1 (H = 1.5) and 0 (H = 2) remain; a release refreshes L without counting a use:
    p.on_hold(item_id{1});
    p.on_release(item_id{1}, ctx);  // H = 1 + 1 = 2, set after item 0's: 0 goes first
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE(p.pop_victim(0) == item_id{1});
}

TEST_CASE("belady: the farthest next use goes first, never-used-again before all", "[eviction][belady]") {
    belady p(4, {});
    access_context ctx{};
    ctx.next_use = 50;
    p.on_insert(item_id{0}, ctx);
    ctx.next_use = never;
    p.on_insert(item_id{1}, ctx);
    ctx.next_use = 10;
    p.on_insert(item_id{2}, ctx);
    ctx.next_use = never;
    p.on_insert(item_id{3}, ctx);
    ctx.next_use = 5;
    p.on_access(item_id{0}, ctx);            // 0 is now needed soonest
    REQUIRE(p.pop_victim(0) == item_id{1});  // never, given first
    REQUIRE(p.pop_victim(0) == item_id{3});
    REQUIRE(p.pop_victim(0) == item_id{2});
    REQUIRE(p.pop_victim(0) == item_id{0});
}

TEST_CASE("part B configurations that cannot work are refused with the reason", "[eviction][config]") {
    REQUIRE_THROWS_AS(arc(0, {}), config_error);
    REQUIRE_THROWS_WITH(s3fifo(8, {.small_fraction = 1.5}), Catch::Contains("small_fraction"));
    REQUIRE_THROWS_WITH(s3fifo(8, {.move_to_main_threshold = 4}), Catch::Contains("move_to_main_threshold"));
    REQUIRE_THROWS_WITH(lirs(8, {.hir_fraction = -0.1}), Catch::Contains("hir_fraction"));
    REQUIRE_THROWS_WITH(w_tinylfu(8, {.sample_factor = 0}), Catch::Contains("sample_factor"));
    REQUIRE_THROWS_AS(gdsf<>(0, {}), config_error);
    REQUIRE_THROWS_AS(belady(0, {}), config_error);
}
