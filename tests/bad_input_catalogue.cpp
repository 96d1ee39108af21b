// The README's "What happens on bad input": one test per row, each checking
// the exception's type and its exact message, and that the object it was
// thrown from is exactly as it was before the call.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/cost/pensieve_linear.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/eviction/select_victims.hpp>
#include <kvpolicy/select/nth_element_selector.hpp>
#include <kvpolicy/sim/trace.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "support/cache_snapshot.hpp"
#include "support/scratch_dir.hpp"
#include "support/require_throws.hpp"

using namespace kvpolicy;

namespace {

using kvpolicy::testing::require_throws;

using cache_t = tiered_cache<lru, lru>;

// Everything observable about the cache (tests/support/cache_snapshot.hpp),
// with the holds of the sessions the fixture uses.
std::string snapshot(const cache_t& c) {
    constexpr session_id sessions[] = {session_id{1}, session_id{2}, session_id{3}};
    return kvpolicy::testing::cache_snapshot(c, sessions);
}

// GPU 4, CPU 2; in a step, session 1 holds {1, 2, 3}; 9 was dropped.
struct fixture {
    cache_t cache{{.gpu_capacity = 4, .cpu_capacity = 1, .block_size = 16}};
    fixture() {
        cache.begin_step();
        cache.admit(session_id{3}, std::vector<block_hash>{9, 10, 11, 12});
        (void)cache.end_step();
        cache.release(session_id{3});
        cache.begin_step();
        cache.admit(session_id{1}, std::vector<block_hash>{1, 2, 3});  // 12 and 11 dropped, 10 sheltered
    }
};

}  // namespace

TEST_CASE("bad input: a malformed trace line is a parse_error naming file:line", "[bad_input]") {
    const testing::scratch_dir dir;  // this test's files, removed at its end
    const std::string path =
        dir.write("trace.jsonl",
                  "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
                  "{\"timestamp\": 1, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, x]}\n");
    sim::mooncake_reader reader(path, /*skip_bad_lines=*/false);
    sim::request_record r;
    REQUIRE(reader.next(r));
    const sim::request_record before = r;
    require_throws<parse_error>([&] { (void)reader.next(r); }, path + ":2: hash_ids must be an array of integers");
    REQUIRE(reader.bad_lines().count == 0);
    // Skipping instead: counted, first messages kept.
    sim::mooncake_reader skipping(path, /*skip_bad_lines=*/true);
    REQUIRE(skipping.next(r));
    REQUIRE_FALSE(skipping.next(r));
    REQUIRE(skipping.bad_lines().count == 1);
    REQUIRE(r.hash_ids == before.hash_ids);
}

TEST_CASE("bad input: a CSV trace without its header, a malformed row, a missing file", "[bad_input]") {
    const testing::scratch_dir dir;  // this test's files, removed at its end
    const std::string no_header = dir.write("no_header.csv", "1,2,3\n");
    require_throws<parse_error>([&] { sim::csv_reader r(no_header, false); },
                                no_header + ":1: expected the header 'time,obj_id,obj_size'");
    const std::string bad_row = dir.write("bad_row.csv", "time,obj_id,obj_size\n1,2,3\n1,-2,3\n");
    sim::csv_reader reader(bad_row, false);
    sim::access_record a;
    REQUIRE(reader.next(a));
    require_throws<parse_error>([&] { (void)reader.next(a); },
                                bad_row + ":3: expected three non-negative integers time,obj_id,obj_size");
    REQUIRE(a.obj_id == 2);
    require_throws<config_error>([&] { sim::csv_reader r("no/such/trace.csv", false); },
                                 "cannot open trace 'no/such/trace.csv': No such file or directory; check the path "
                                 "and that the file is readable");
}

TEST_CASE("bad input: a NaN, infinite or negative cost parameter", "[bad_input]") {
    require_throws<config_error>([] { pensieve_linear m({.alpha = std::numeric_limits<double>::quiet_NaN()}); },
                                 "pensieve_linear: alpha = nan is not a cost; give a finite value >= 0 (seconds per "
                                 "token), e.g. from kvpolicy::calibrate");
    require_throws<config_error>([] { pensieve_linear m({.beta = -1.0}); },
                                 "pensieve_linear: beta = -1.000000 is not a cost; give a finite value >= 0 (seconds), "
                                 "e.g. from kvpolicy::calibrate");
}

TEST_CASE("bad input: impossible cache and arena configurations", "[bad_input]") {
    require_throws<config_error>([] { cache_t c({.gpu_capacity = 0}); },
                                 "cache_config: gpu_capacity 0 cannot hold a block; give at least one block");
    require_throws<config_error>([] { cache_t c({.gpu_capacity = 4, .block_size = 0}); },
                                 "cache_config: block_size 0; give the tokens per block (e.g. 16)");
    require_throws<config_error>([] { cache_t c({.gpu_capacity = 4, .num_layers = 0}); },
                                 "cache_config: num_layers 0; give at least 1");
    require_throws<config_error>(
        [] { cache_t c({.gpu_capacity = 4, .cpu_capacity = 8, .num_layers = 8, .items = granularity::per_layer}); },
        "cache_config: per-layer tiers of 4 / 8 items cannot hold one block of 8 layers; give at least num_layers "
        "items per tier");
    require_throws<config_error>([] { cache_t c({.gpu_capacity = std::size_t{1} << 30}); },
                                 "gpu tier: capacity 1073741824 blocks is impossible; give 1 to 2^30-1 blocks");
    require_throws<config_error>([] { block_arena a(0, 64); },
                                 "block_arena: capacity 0 x block_bytes 64 holds nothing; both must be at least 1");
    block_arena gpu(2, 64), cpu(2, 32);
    require_throws<config_error>([&] { host_memcpy_engine e(gpu, cpu); },
                                 "host_memcpy_engine: gpu blocks have 64 bytes, cpu blocks 32; make them equal");
}

TEST_CASE("bad input: more blocks required than are free or evictable", "[bad_input]") {
    fixture f;
    const std::string before = snapshot(f.cache);
    require_throws<capacity_error>(
        [&] {
            f.cache.admit(session_id{2}, std::vector<block_hash>{4, 5});
        },
        "admit: session 2 needs 2 GPU items but only 1 are free or evictable (the rest are held by running requests "
        "or pinned); raise the GPU capacity or admit fewer requests this step");
    REQUIRE(snapshot(f.cache) == before);
    REQUIRE(f.cache.check_invariants().empty());
}

TEST_CASE("bad input: release of an unknown block, double release", "[bad_input]") {
    fixture f;
    (void)f.cache.end_step();
    std::string before = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.release(session_id{2}, block_id{0}); },
                                "release: session 2 does not hold gpu block 0 (released twice, or never acquired)");
    require_throws<usage_error>([&] { f.cache.release(session_id{2}); },
                                "release: session 2 holds no blocks (released twice, or never admitted)");
    REQUIRE(snapshot(f.cache) == before);
    f.cache.release(session_id{1});
    before = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.release(session_id{1}); },
                                "release: session 1 holds no blocks (released twice, or never admitted)");
    require_throws<usage_error>([&] { f.cache.release(session_id{1}, block_id{1}); },
                                "release: session 1 does not hold gpu block 1 (released twice, or never acquired)");
    REQUIRE(snapshot(f.cache) == before);
    REQUIRE(f.cache.free_session(session_id{42}) == 0);  // freeing is idempotent: not an error
    REQUIRE(f.cache.check_invariants().empty());
}

TEST_CASE("bad input: pin of a dropped block, pin twice, unpin of a block not pinned", "[bad_input]") {
    fixture f;
    REQUIRE(f.cache.where(11) == item_state::free);  // dropped
    REQUIRE(f.cache.where(10) == item_state::in_cpu);
    const std::string before = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.pin(11); }, "pin: block 11 is free, not on the gpu; admit it first");
    require_throws<usage_error>([&] { f.cache.pin(10); }, "pin: block 10 is cpu, not on the gpu; admit it first");
    require_throws<usage_error>([&] { f.cache.unpin(1); }, "unpin: block 1 is not pinned");
    REQUIRE(snapshot(f.cache) == before);
    f.cache.pin(1);
    const std::string pinned = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.pin(1); }, "pin: block 1 is already pinned");
    REQUIRE(snapshot(f.cache) == pinned);
}

TEST_CASE("bad input: a hash chain with another or a missing parent, a hash twice", "[bad_input]") {
    fixture f;
    const std::string before = snapshot(f.cache);
    require_throws<usage_error>(
        [&] {
            f.cache.admit(session_id{2}, std::vector<block_hash>{7, 2});
        },
        "admit: malformed hash chain: block 1 (hash 2) is cached under another parent; equal "
        "hashes must mean equal prefixes, so chain each hash from its parent's");
    require_throws<usage_error>([&] { f.cache.admit(session_id{2}, std::vector<block_hash>{2}); },
                                "admit: malformed hash chain: block 0 (hash 2) is cached under another parent; equal "
                                "hashes must mean equal prefixes, so chain each hash from its parent's");
    require_throws<usage_error>(
        [&] {
            f.cache.admit(session_id{2}, std::vector<block_hash>{4, 4});
        },
        "admit: malformed hash chain: block hash 4 appears twice in one request; hashes must "
        "be chained (parent, tokens, extra key)");
    REQUIRE(snapshot(f.cache) == before);
}

TEST_CASE("bad input: steps out of order, a wrong-length next_use", "[bad_input]") {
    fixture f;
    std::string before = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.begin_step(); },
                                "begin_step: a step is already open; call end_step() first");
    const std::vector<timestamp> one{5};
    require_throws<usage_error>(
        [&] {
            f.cache.admit(session_id{2}, std::vector<block_hash>{1, 2}, {}, one);
        },
        "admit: 1 next-use times for 2 blocks; give one per block or none");
    REQUIRE(snapshot(f.cache) == before);
    (void)f.cache.end_step();
    before = snapshot(f.cache);
    require_throws<usage_error>([&] { (void)f.cache.end_step(); },
                                "end_step: no step is open; call begin_step() first");
    require_throws<usage_error>([&] { f.cache.admit(session_id{2}, std::vector<block_hash>{4}); },
                                "admit: no step is open; call begin_step() first");
    REQUIRE(snapshot(f.cache) == before);
}

TEST_CASE("bad input: a transfer report of the wrong size, twice, or with a bad status", "[bad_input]") {
    fixture f;
    const swap_plan& plan = f.cache.end_step();
    REQUIRE(plan.transfers.size() == 1);
    const std::string before = snapshot(f.cache);
    require_throws<usage_error>([&] { (void)f.cache.complete_transfers(plan, std::vector<transfer_status>{}); },
                                "complete_transfers: 0 statuses for 1 transfers; give one per transfer, in plan order");
    require_throws<usage_error>(
        [&] { (void)f.cache.complete_transfers(plan, std::vector<transfer_status>{static_cast<transfer_status>(2)}); },
        "complete_transfers: status 0 is 2, neither done nor failed");
    REQUIRE(snapshot(f.cache) == before);
    (void)f.cache.complete_transfers(plan, std::vector<transfer_status>{transfer_status::done});
    require_throws<usage_error>(
        [&] { (void)f.cache.complete_transfers(plan, std::vector<transfer_status>{transfer_status::failed}); },
        "complete_transfers: the plan of step 2 was already reported; report each plan once");
    REQUIRE(snapshot(f.cache) == before);
    f.cache.begin_step();
    require_throws<usage_error>(
        [&] { (void)f.cache.complete_transfers(plan, std::vector<transfer_status>{transfer_status::done}); },
        "complete_transfers: a step is open; report a plan after its end_step and before the next begin_step");
}

TEST_CASE("bad input: a NaN score or mismatched lengths to a selector, a duplicate candidate", "[bad_input]") {
    nth_element_selector sel;
    const std::vector<double> scores{1.0, std::nan(""), 0.5};
    const std::vector<item_id> ids{item_id{0}, item_id{1}, item_id{2}};
    std::vector<item_id> out(2, item_id{99});
    require_throws<usage_error>([&] { (void)sel.select_lowest<double>(scores, ids, out); },
                                "select_lowest: score of item 1 is NaN; check the cost model's parameters");
    require_throws<usage_error>(
        [&] { (void)sel.select_lowest<double>(std::span<const double>(scores).first(2), ids, out); },
        "select_lowest: 2 scores for 3 ids; pass one score per id");
    REQUIRE(out == std::vector<item_id>(2, item_id{99}));  // nothing written

    victim_batch_selector<lru> batch;
    const std::vector<block_id> blocks(2);
    const std::vector<eviction_candidate> dup{{.sequence_id = 7, .block_ids = blocks},
                                              {.sequence_id = 8, .block_ids = blocks},
                                              {.sequence_id = 7, .block_ids = blocks}};
    require_throws<usage_error>([&] { (void)batch.select_victims(dup, 2); },
                                "select_victims: sequence 7 appears twice among the candidates (at 0 and 2); pass "
                                "each sequence once");
    REQUIRE(batch.metrics().selections == 0);

    // A batch whose columns are not one per id or sequence.
    const auto any = any_batch_selector::make("lru");
    const std::vector<std::uint64_t> seqs{1, 2, 3}, two_counts{1, 1};
    require_throws<usage_error>(
        [&] { (void)any->select_victims(candidate_columns{.sequence_ids = seqs, .num_blocks = two_counts}, 1); },
        "select_victims: num_blocks: 2 values for 3 sequences; give one per sequence");
    require_throws<usage_error>(
        [&] {
            any->update_access(seqs, std::vector<timestamp>{5, 6});
        },
        "update_access: 2 times for 3 sequences; give one time, or one per sequence");
    REQUIRE(any->metrics().selections == 0);
    REQUIRE(any->metrics().re_prefills == 0);
    // (checked_policy's own column check: tests/eviction_checked_policy.cpp, which builds every
    // policy behind it already; here it would compile all of them once more.)
}

TEST_CASE("bad input: a remote tier without a CPU tier, stage_remote off the cached prefix or the request",
          "[bad_input]") {
    require_throws<config_error>([] { cache_t c({.gpu_capacity = 4, .remote = true}); },
                                 "cache_config: remote tier without a CPU tier; remote hits are staged through CPU "
                                 "memory, so give cpu_capacity > 0");
    cache_t remote({.gpu_capacity = 4, .cpu_capacity = 2, .block_size = 16, .remote = true});
    remote.begin_step();
    remote.admit(session_id{1}, std::vector<block_hash>{1, 2});
    const std::string before = snapshot(remote);
    const std::vector<block_hash> request{1, 2, 3, 4};
    require_throws<usage_error>(
        [&] { remote.stage_remote(session_id{2}, request, 1, 1); },
        "stage_remote: the cached prefix ends at block 2, not 1; stage from lookup(hashes).run");
    require_throws<usage_error>([&] { remote.stage_remote(session_id{2}, request, 2, 3); },
                                "stage_remote: blocks [2, 2 + 3) are outside the request's 4 blocks; stage a range of "
                                "its hashes");
    REQUIRE(snapshot(remote) == before);
    fixture f;
    const std::string local_before = snapshot(f.cache);
    require_throws<usage_error>([&] { f.cache.stage_remote(session_id{2}, request, 0, 1); },
                                "stage_remote: the cache has no remote tier; set cache_config::remote to stage store "
                                "hits");
    REQUIRE(snapshot(f.cache) == local_before);
}

TEST_CASE("bad input: an unknown policy name lists every accepted name", "[bad_input]") {
    auto f = []<class P>() { return P::name; };
    require_throws<unknown_name_error>(
        [&] { (void)visit_by_name<eviction_policies>("lru2", f, "eviction policy"); },
        "unknown eviction policy 'lru2'; accepted: " + joined_names<eviction_policies>());
    REQUIRE(visit_by_name<eviction_policies>("lru", f, "eviction policy") == "lru");
}
