// ARC, S3-FIFO and LIRS against their naive reference models (tests/support)
// on long random operation sequences with holds, releases, erasures and
// batch pops, plus hand-worked traces whose victims are derived step by step
// in the comments. W-TinyLFU, GDSF and Belady: eviction_part_b_frequency.cpp.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/arc.hpp>
#include <kvpolicy/eviction/lirs.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>

#include <string_view>
#include <utility>
#include <vector>

#include "support/flat_cache.hpp"
#include "support/letter_trace.hpp"
#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

TEMPLATE_TEST_CASE("arc, s3fifo and lirs choose the same victims as their reference models", "[eviction][differential]",
                   (std::pair<arc, ref_arc>), (std::pair<s3fifo, ref_s3fifo>), (std::pair<lirs, ref_lirs>)) {
    using policy_t = typename TestType::first_type;
    using reference_t = typename TestType::second_type;
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    policy_t policy(capacity, {});
    reference_t reference(capacity);
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);                                // the sequence really exercised eviction
    if (capacity > 1) REQUIRE(policy.counters().ghost_hits > 0);  // the ghosts were exercised
}

TEST_CASE("s3fifo with libCacheSim's newer fill-main rule: same victims as its reference model",
          "[eviction][differential][s3fifo]") {
    const std::uint64_t seed = GENERATE(4u, 5u);
    const std::size_t capacity = GENERATE(16u, 97u);
    s3fifo policy(capacity, {.fill_main_before_first_eviction = true});
    ref_s3fifo reference(capacity, true);
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(victims.size() > 100);
}

TEST_CASE("arc: a worked trace through every case of Fig. 4", "[eviction][arc]") {
    // c = 2, flat mode with on_miss. T lists are LRU first, p starts at 0.
    //  1 D miss            T1=[D]
    //  2 A miss            T1=[D A]
    //  3 B miss, IV(A): |T1|+|B1| = 2 = c and B1 empty: drop T1's LRU D, no ghost.   -> D
    //                      T1=[A B]
    //  4 B hit             T1=[A] T2=[B]
    //  5 C miss, IV(B): |L1| = 1 < c, total 2 < 2c; REPLACE: |T1| = 1 > p = 0: A -> B1. -> A
    //                      T1=[C] T2=[B] B1=[A]
    //  6 C hit             T1=[] T2=[B C]
    //  7 E miss, IV(B): total 3 < 4; REPLACE: T1 empty, so T2's LRU B -> B2.        -> B
    //                      T1=[E] T2=[C] B1=[A] B2=[B]
    //  8 B miss, in B2 (III): p = max(0 - max(1/1, 1), 0) = 0; REPLACE: |T1| = 1 > 0:
    //                      E -> B1; B enters T2.                                       -> E
    //                      T2=[C B] B1=[A E] B2=[]
    //  9 A miss, in B1 (II): p = min(0 + max(0/2, 1), 2) = 1; REPLACE: T1 empty: C -> B2. -> C
    //                      T2=[B A] B1=[E] B2=[C]
    // 10 E miss, in B1 (II): p = 1 + max(1/1, 1) = 2; REPLACE: T1 empty: B -> B2.     -> B
    //                      T2=[A E] B1=[] B2=[C B]
    // 11 D miss, IV(B): |L1| = 0, total 4 = 2c: trim B2's LRU C; REPLACE: T1 empty:
    //                      A -> B2.                                                    -> A
    //                      T1=[D] T2=[E] B2=[B A]
    // 12 B miss, in B2 (III): p = 2 - max(0/2, 1) = 1; REPLACE: |T1| = 1 = p and the key
    //                      was in B2, so the tie goes to T1: D -> B1 (E would go without
    //                      the tie rule).                                              -> D
    flat_cache<arc, true> cache(2);
    const std::string_view trace = "DABBCCEBAEDB";
    std::vector<char> got;
    std::vector<double> p_after;
    for (const char c : trace) {
        if (const auto r = cache.request(key(c)); r.evicted) got.push_back(static_cast<char>(*r.evicted));
        p_after.push_back(cache.policy().target());
    }
    REQUIRE(got == std::vector<char>{'D', 'A', 'B', 'E', 'C', 'B', 'A', 'D'});
    REQUIRE(p_after == std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 1});
    REQUIRE(cache.policy().counters().ghost_hits == 4);
    REQUIRE(cache.policy().t1_size() == 0);
    REQUIRE(cache.policy().t2_size() == 2);
    REQUIRE(cache.policy().b1_size() == 1);
    REQUIRE(cache.policy().b2_size() == 1);
}

TEST_CASE("arc: a hit while held moves to T2, a release keeps the list", "[eviction][arc]") {
    arc p(3, {});
    access_context ctx{};
    for (std::uint32_t i = 0; i < 3; ++i) {
        ctx.key = 100 + i;
        p.on_insert(item_id{i}, ctx);  // T1 = [0 1 2]
    }
    p.on_hold(item_id{0});
    p.on_release(item_id{0}, ctx);  // not a second reference: T1 = [1 2 0]
    REQUIRE(p.t1_size() == 3);
    p.on_hold(item_id{1});
    p.on_access(item_id{1}, ctx);  // a hit while held: tagged T2, still out of candidacy
    REQUIRE(p.t2_size() == 1);
    REQUIRE(p.pop_victim(0) == item_id{2});  // |T1| = 2 > p = 0: T1's LRU
    p.on_release(item_id{1}, ctx);
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE_FALSE(p.pop_victim(0).has_value());
}

TEST_CASE("lirs: a worked trace through stack pruning and a ghost hit", "[eviction][lirs]") {
    // c = 3: one resident HIR block (1%, at least one), two LIR blocks. S is
    // listed bottom first, (x) marks a non-resident entry; Q front first.
    //  1 C miss  warm-up: LIR.                  S=[C]          Q=[]
    //  2 A miss  warm-up: LIR (set now full).   S=[C A]        Q=[]
    //  3 B miss  resident HIR (3b).             S=[C A B]      Q=[B]
    //  4 E miss  full: victim Q's front B, which stays in S as (B); E resident HIR.  -> B
    //                                           S=[C A (B) E]  Q=[E]
    //  5 B miss  full: victim E, left as (E). B was (B) in S: ghost hit, B becomes
    //            LIR on top; three LIR > 2, so bottom C drops to Q as HIR; the bottom
    //            is now A (LIR): no pruning.    S=[A (E) B]    Q=[C]                 -> E
    //  6 C hit   resident HIR not in S (2b): on top of S, to Q's end.
    //                                           S=[A (E) B C]  Q=[C]
    //  7 C hit   resident HIR in S (2a): LIR; bottom A drops to Q; pruning removes
    //            (E) from the bottom, stops at B (LIR).   S=[B C]  Q=[A]
    //  8 B hit   LIR at the bottom (1): to the top; pruning stops at C.  S=[C B]
    //  9 D miss  full: victim A (not in S: forgotten); D resident HIR.               -> A
    //                                           S=[C B D]      Q=[D]
    // 10 A miss  victim D, left as (D); A is no ghost any more: resident HIR.        -> D
    //                                           S=[C B (D) A]  Q=[A]
    // 11 D miss  victim A, left as (A); (D) is a ghost hit: D becomes LIR on top and
    //            bottom C drops to Q.           S=[B (A) D]    Q=[C]                 -> A
    flat_cache<lirs> cache(3);
    REQUIRE(evicted_keys(cache, "CABEBCCBDAD") == std::vector<char>{'B', 'E', 'A', 'D', 'A'});
    const lirs& p = cache.policy();
    REQUIRE(p.counters().ghost_hits == 2);
    REQUIRE(p.lir_size() == 2);
    REQUIRE(p.stack_size() == 3);
    REQUIRE(p.nonresident_size() == 1);
    REQUIRE(cache.resident(key('B')));
    REQUIRE(cache.resident(key('C')));
    REQUIRE(cache.resident(key('D')));
}
