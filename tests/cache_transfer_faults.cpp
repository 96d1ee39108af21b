// tiered_cache::complete_transfers: what each kind of failed copy costs, a
// swap-in completing after its request was cancelled, and the validation
// of the statuses (a refused report changes nothing). The random patterns
// run against the reference model in cache_tiered.cpp ("[faults]").
#include <catch2/catch.hpp>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

using cache_t = tiered_cache<lru, lru>;
constexpr auto done = transfer_status::done;
constexpr auto failed = transfer_status::failed;

std::string where_all(const cache_t& c, std::initializer_list<block_hash> keys) {
    std::string s;
    for (block_hash h : keys) s += std::string(to_string(c.where(h))) + ",";
    return s;
}

// GPU 2, CPU 2: session 1 computes {1, 2}, releases; session 2 computes {3}:
// the victim 2 (released first) is swapped out to the CPU.
void one_swap_out(cache_t& cache) {
    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 2});
    (void)cache.end_step();
    cache.release(session_id{1});
    cache.begin_step();
    cache.admit(session_id{2}, std::vector<block_hash>{3});
}

}  // namespace

TEST_CASE("a failed swap-out loses the CPU copy: dropped and recovered, never also cached", "[cache][faults]") {
    cache_t cache({.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16});
    one_swap_out(cache);
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.swap_outs() == 1);
    REQUIRE(cache.where(2) == item_state::in_cpu);
    const std::vector<transfer_status> status{failed};
    const transfer_report r = cache.complete_transfers(plan, status);
    REQUIRE(r.failed == 1);
    REQUIRE(r.drops == std::vector<dropped_item>{{2, session_id{1}, chunk_index{1}, layer_index{0}}});
    REQUIRE(r.recompute.empty());
    REQUIRE(r.recovery == std::vector<recovery_range>{{session_id{1}, 16, 32}});
    REQUIRE(cache.where(2) == item_state::free);  // not in the CPU, and its GPU slot now holds 3
    REQUIRE(cache.where(3) == item_state::in_gpu);
    const cache_metrics m = cache.metrics();
    REQUIRE(m.failed_transfers == 1);
    REQUIRE(m.dropped_items == 1);
    REQUIRE(m.dropped_tokens == 16);
    REQUIRE(cache.check_invariants().empty());
    // Coming back, block 2 is a miss, counted as recomputed.
    cache.release(session_id{2});
    cache.begin_step();
    const admission a = cache.admit(session_id{1}, std::vector<block_hash>{1, 2});
    REQUIRE(a.match.run == 1);
    REQUIRE(cache.metrics().recomputed_blocks == 1);
}

TEST_CASE("a failed swap-in stays held, owned by the request, reported for recompute", "[cache][faults]") {
    cache_t cache({.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16});
    one_swap_out(cache);
    (void)cache.end_step();
    cache.release(session_id{2});
    // Session 1 comes back for {1, 2}: 1 on the GPU, 2 swapped in (a free
    // GPU slot? no: the GPU holds 1 and 3, so 2 is exchanged with victim 3).
    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 2});
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.exchanges() == 1);
    const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{failed});
    // Both halves of the exchange are lost: 3's new CPU copy is dropped, 2
    // is held by session 1, which must compute it.
    REQUIRE(r.drops.size() == 1);
    REQUIRE(r.drops[0].key == 3);
    REQUIRE(r.recompute.size() == 1);
    REQUIRE(r.recompute[0].key == 2);
    REQUIRE(r.recompute[0].session == session_id{1});
    REQUIRE(r.recovery == std::vector<recovery_range>{{session_id{1}, 16, 32}, {session_id{2}, 0, 16}});
    REQUIRE(cache.where(2) == item_state::in_gpu);
    REQUIRE(cache.where(3) == item_state::free);
    REQUIRE(cache.metrics().recompute_items == 1);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("a plain failed swap-in: recompute if held, dropped if its request was cancelled", "[cache][faults]") {
    // GPU 3 with a free slot, so the CPU hit is a plain swap-in.
    cache_t cache({.gpu_capacity = 3, .cpu_capacity = 2, .block_size = 16});
    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 2});
    (void)cache.end_step();
    cache.release(session_id{1});
    cache.begin_step();
    cache.admit(session_id{2}, std::vector<block_hash>{3, 4});  // 1 free + victim 2, swapped out
    (void)cache.end_step();
    cache.release(session_id{2});
    cache.free_session(session_id{2}, /*forget_blocks=*/true);  // 3, 4 go: two free GPU slots
    REQUIRE(cache.where(2) == item_state::in_cpu);

    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 2});
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.swap_ins() == 1);
    const std::vector<transfer_status> status{failed};

    SECTION("held: recompute") {
        const transfer_report r = cache.complete_transfers(plan, status);
        REQUIRE(r.drops.empty());
        REQUIRE(r.recompute.size() == 1);
        REQUIRE(r.recompute[0].block == *cache.gpu().cached_block(2));
        REQUIRE(r.recovery == std::vector<recovery_range>{{session_id{1}, 16, 32}});
    }
    SECTION("cancelled while in flight: a failed swap-in nobody holds is dropped") {
        cache.free_session(session_id{1});
        const transfer_report r = cache.complete_transfers(plan, status);
        REQUIRE(r.recompute.empty());
        REQUIRE(r.drops.size() == 1);
        REQUIRE(r.drops[0].key == 2);
        REQUIRE(cache.where(2) == item_state::free);
        REQUIRE(cache.where(1) == item_state::in_gpu);  // it had its data
    }
    SECTION("cancelled while in flight: a swap-in that succeeds stays cached, unheld") {
        cache.free_session(session_id{1});
        const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{done});
        REQUIRE(r.clean());
        REQUIRE(r.drops.empty());
        REQUIRE(cache.where(2) == item_state::in_gpu);
        REQUIRE(cache.gpu().num_evictable_blocks() == 2);
    }
    SECTION("cancelled and forgotten while in flight: the late report finds nothing to drop") {
        cache.free_session(session_id{1}, /*forget_blocks=*/true);
        REQUIRE(cache.where(2) == item_state::free);
        const transfer_report r = cache.complete_transfers(plan, status);
        REQUIRE(r.failed == 1);
        REQUIRE(r.drops.empty());
    }
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("a copy that reads a failed copy's output is lost too, whatever its status", "[cache][faults]") {
    // Chains unchecked, so that 9 can follow 1 here (a branch in block terms).
    cache_t cache({.gpu_capacity = 3, .cpu_capacity = 2, .block_size = 16, .verify_chain = false});
    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 2, 9});
    (void)cache.end_step();
    cache.release(session_id{1});  // tail first: 9 is the oldest, then 2
    cache.begin_step();
    cache.admit(session_id{2}, std::vector<block_hash>{5});     // victim 9: swapped out (op 0)
    cache.admit(session_id{3}, std::vector<block_hash>{1, 9});  // 9 back from that CPU slot, exchanged with 2 (op 1)
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.swap_outs() == 1);
    REQUIRE(plan.exchanges() == 1);
    const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{failed, done});
    REQUIRE(r.failed == 2);
    REQUIRE(r.drops.size() == 1);
    REQUIRE(r.drops[0].key == 2);  // the victim's copy went where 9's bad bytes were
    REQUIRE(r.recompute.size() == 1);
    REQUIRE(r.recompute[0].key == 9);
    REQUIRE(r.recompute[0].session == session_id{3});
    REQUIRE(cache.where(9) == item_state::in_gpu);
    REQUIRE(cache.where(2) == item_state::free);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("inclusive: an item is dropped once, and only when no copy of it is left", "[cache][faults][inclusive]") {
    // Found by fuzz/cache_ops.cpp. In one step, victim 4 is swapped out
    // (op 0) and, requested again, swapped back in from that CPU slot (op 2,
    // after victim 1 made room, op 1). Inclusive tiers then hold two copies
    // of 4.
    // Chains unchecked, so that 4 can be asked for without its parent 1.
    cache_t cache({.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16, .inclusive = true, .verify_chain = false});
    cache.begin_step();
    cache.admit(session_id{1}, std::vector<block_hash>{1, 4});
    (void)cache.end_step();
    cache.release(session_id{1});  // tail first: 4 is the LRU item
    cache.begin_step();
    cache.admit(session_id{2}, std::vector<block_hash>{2});  // victim 4, swapped out
    cache.admit(session_id{3}, std::vector<block_hash>{4});  // a CPU hit: swapped back in, victim 1
    const swap_plan& plan = cache.end_step();
    REQUIRE(plan.swap_outs() == 2);
    REQUIRE(plan.swap_ins() == 1);
    REQUIRE(plan.transfers[2].src == plan.transfers[0].dst);
    const std::uint64_t dropped_before = cache.metrics().dropped_items;

    SECTION("both copies lost, the request holds it: recomputed, not dropped") {
        const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{failed, done, done});
        REQUIRE(r.failed == 2);
        REQUIRE(r.drops.empty());  // the bad CPU copy goes; the item stays, to be recomputed on the GPU
        REQUIRE(r.recompute.size() == 1);
        REQUIRE(r.recompute[0].key == 4);
        REQUIRE(r.recompute[0].session == session_id{3});
        REQUIRE(cache.where(4) == item_state::in_gpu);
        REQUIRE_FALSE(cache.cpu().cached_block(4).has_value());
    }
    SECTION("both copies lost, the request cancelled: dropped once") {
        cache.free_session(session_id{3});
        const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{failed, done, done});
        REQUIRE(r.drops == std::vector<dropped_item>{{4, session_id{1}, chunk_index{1}, layer_index{0}}});
        REQUIRE(r.recovery == std::vector<recovery_range>{{session_id{1}, 16, 32}});
        REQUIRE(cache.metrics().dropped_items == dropped_before + 1);
        REQUIRE(cache.where(4) == item_state::free);
    }
    SECTION("the GPU copy lost, the request cancelled, the CPU copy good: not dropped") {
        cache.free_session(session_id{3});
        const transfer_report r = cache.complete_transfers(plan, std::vector<transfer_status>{done, done, failed});
        REQUIRE(r.failed == 1);
        REQUIRE(r.drops.empty());
        REQUIRE(cache.metrics().dropped_items == dropped_before);
        REQUIRE(cache.where(4) == item_state::in_cpu);
    }
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("complete_transfers validates first: a refused report changes nothing", "[cache][faults][errors]") {
    cache_t cache({.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16});
    one_swap_out(cache);
    const swap_plan& plan = cache.end_step();
    const std::string before = where_all(cache, {1, 2, 3});
    REQUIRE_THROWS_WITH(cache.complete_transfers(plan, std::vector<transfer_status>{}),
                        Catch::Contains("0 statuses for 1 transfers"));
    REQUIRE_THROWS_WITH(cache.complete_transfers(plan, std::vector<transfer_status>{static_cast<transfer_status>(7)}),
                        Catch::Contains("neither done nor failed"));
    swap_plan stale = plan;
    stale.step -= 1;
    REQUIRE_THROWS_WITH(cache.complete_transfers(stale, std::vector<transfer_status>{failed}),
                        Catch::Contains("report each plan before the next begin_step"));
    REQUIRE(where_all(cache, {1, 2, 3}) == before);
    REQUIRE(cache.metrics().failed_transfers == 0);
    const swap_plan copy = plan;  // a copy (another thread's) is the same plan
    (void)cache.complete_transfers(copy, std::vector<transfer_status>{done});
    REQUIRE_THROWS_WITH(cache.complete_transfers(plan, std::vector<transfer_status>{failed}),
                        Catch::Contains("already reported"));
    REQUIRE(where_all(cache, {1, 2, 3}) == before);
    cache.begin_step();
    REQUIRE_THROWS_WITH(cache.complete_transfers(plan, std::vector<transfer_status>{done}),
                        Catch::Contains("a step is open"));
    REQUIRE(cache.check_invariants().empty());
}
