// The remote tier of tiered_cache, against a store in a map (the Redis tests
// run the same data checks against redis-server): write-back instead of
// drop, a second instance finding the first's prefix through the store,
// failed fetches and writes, and long random runs of two instances sharing
// one store under faults, with every slot's bytes checked after every step.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/remote_tier.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/cache_snapshot.hpp"
#include "support/memory_store.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using kvpolicy::testing::memory_remote_engine;
using kvpolicy::testing::memory_store;

namespace {

using cache_t = tiered_cache<lru, lru>;
constexpr std::size_t item_bytes = 256;
using kvpolicy::testing::chain;
using kvpolicy::testing::has_pattern;
using kvpolicy::testing::write_pattern;

struct instance : kvpolicy::testing::remote_instance<memory_remote_engine, memory_store> {
    instance(const cache_config& c, memory_store& store)
            : remote_instance(c, item_bytes, store, remote_namespace{.model = "m", .item_bytes = item_bytes}) {}
};

cache_config remote_config(std::size_t gpu, std::size_t cpu) {
    return {.gpu_capacity = gpu, .cpu_capacity = cpu, .block_size = 16, .item_bytes = item_bytes, .remote = true};
}

}  // namespace

TEST_CASE("a digest's handle is its first 8 bytes, little-endian, for one digest or a list", "[cache][remote]") {
    std::mt19937_64 rng(3);
    std::vector<block_digest> d(20);
    for (block_digest& x : d)
        for (std::uint8_t& b : x) b = static_cast<std::uint8_t>(rng());
    const std::vector<block_hash> h = digest_handles(d);
    REQUIRE(h.size() == d.size());
    for (std::size_t i = 0; i < d.size(); ++i) {
        block_hash want = 0;
        for (std::size_t b = 0; b < 8; ++b) want |= block_hash{d[i][b]} << (8 * b);
        REQUIRE(digest_handle(d[i]) == want);
        REQUIRE(h[i] == want);
    }
}

TEST_CASE("remote: victims are written back instead of dropped, another instance hits them, bytes verified",
          "[cache][remote]") {
    memory_store store;
    instance a(remote_config(4, 2), store);
    const std::vector<block_hash> doc = chain(1, 4);
    a.step(store, {{session_id{1}, doc}});
    REQUIRE(a.check_bytes().empty());
    // Two more documents push doc out of A's GPU (4) and CPU (2): every
    // block of it leaves through a write-back, none is dropped.
    std::set<std::uint64_t> written;
    std::size_t drops = 0;
    for (std::uint64_t d : {2, 3}) {
        const auto r = a.step(store, {{session_id{d}, chain(d, 4)}}, &written);
        drops += r.report.drops.size();
        REQUIRE(r.report.clean());
        REQUIRE(a.check_bytes().empty());
        REQUIRE(a.cache.check_invariants().empty());
    }
    REQUIRE(drops == 0);
    for (block_hash h : doc) {
        REQUIRE(a.cache.where(h) == item_state::free);
        REQUIRE(written.contains(h));
    }
    REQUIRE(store.present_prefix(doc) == 4);
    REQUIRE(a.cache.metrics().remote_write_backs >= 4);

    // Instance B has never seen doc: all 4 blocks are remote hits, staged
    // through its CPU tier and swapped in, with A's bytes.
    instance b(remote_config(4, 4), store);
    b.cache.begin_step();
    const remote_admission ra = admit_through(b.cache, store, session_id{9}, doc);
    REQUIRE(ra.remote_blocks == 4);
    REQUIRE(ra.local.match.run == 4);
    REQUIRE(ra.local.match.cpu_blocks == 4);
    REQUIRE(ra.local.computed_blocks == 0);
    const swap_plan& plan = b.cache.end_step();
    REQUIRE(plan.fetches() == 4);
    REQUIRE(plan.swap_ins() == 4);
    std::vector<transfer_status> status;
    REQUIRE(execute_plan(plan, b.engine, status) == 0);
    REQUIRE(b.cache.complete_transfers(plan, status).clean());
    for (block_hash h : doc) REQUIRE(has_pattern(b.gpu.block(*b.cache.gpu().cached_block(h)), h));
    REQUIRE(b.check_bytes().empty());
    REQUIRE(b.cache.metrics().remote_staged_blocks == 4);
    REQUIRE(b.cache.check_invariants().empty());
}

TEST_CASE("remote: a value the store lost, or that does not verify, is a failed fetch, recomputed", "[cache][remote]") {
    memory_store store;
    instance a(remote_config(4, 2), store);
    const std::vector<block_hash> doc = chain(1, 4);
    a.step(store, {{session_id{1}, doc}});
    for (std::uint64_t d : {2, 3}) a.step(store, {{session_id{d}, chain(d, 4)}});
    REQUIRE(store.present_prefix(doc) == 4);

    instance b(remote_config(4, 4), store);
    b.cache.begin_step();
    const remote_admission ra = admit_through(b.cache, store, session_id{9}, doc);
    REQUIRE(ra.remote_blocks == 4);
    const swap_plan& plan = b.cache.end_step();
    // Between the lookup and the fetch the store evicts block 1 and block 2
    // is changed behind the cache's back.
    store.lose(doc[1]);
    store.corrupt(doc[2]);
    std::vector<transfer_status> status;
    REQUIRE(execute_plan(plan, b.engine, status) == 2);  // the 2 fetches; the swap-ins that read them copy junk
    const transfer_report r = b.cache.complete_transfers(plan, status);
    REQUIRE(r.failed == 4);  // the cache counts the swap-ins that read them too
    REQUIRE(r.drops.empty());
    REQUIRE(r.recompute.size() == 2);
    std::set<std::uint64_t> recomputed;
    for (const recompute_item& x : r.recompute) {
        REQUIRE(x.session == session_id{9});
        recomputed.insert(x.key);
    }
    REQUIRE(recomputed == std::set<std::uint64_t>{doc[1], doc[2]});
    REQUIRE(r.recovery == std::vector<recovery_range>{{session_id{9}, 16, 48}});
    // Blocks 0 and 3 arrived; 1 and 2 hold no other block's bytes once computed.
    REQUIRE(has_pattern(b.gpu.block(*b.cache.gpu().cached_block(doc[0])), doc[0]));
    REQUIRE(has_pattern(b.gpu.block(*b.cache.gpu().cached_block(doc[3])), doc[3]));
    for (const recompute_item& x : r.recompute) write_pattern(b.gpu.block(x.block), x.key);
    REQUIRE(b.check_bytes().empty());
    REQUIRE(b.cache.check_invariants().empty());
}

TEST_CASE("remote: a failed write-back loses the item, reported dropped once", "[cache][remote]") {
    memory_store store;
    instance a(remote_config(2, 1), store);
    a.step(store, {{session_id{1}, chain(1, 2)}});
    a.engine.fail_writes = true;
    // doc 2 takes the GPU: one victim sheltered on the CPU, one written back (fails).
    const auto r = a.step(store, {{session_id{2}, chain(2, 2)}});
    REQUIRE(r.report.failed == 1);
    REQUIRE(r.report.drops.size() == 1);
    REQUIRE(a.cache.where(r.report.drops[0].key) == item_state::free);
    REQUIRE(store.size() == 0);
    REQUIRE(a.cache.metrics().dropped_items == 1);
    REQUIRE(a.check_bytes().empty());
    REQUIRE(a.cache.check_invariants().empty());
}

TEST_CASE("remote: only victims below remote_write_back_chunks are worth the network", "[cache][remote]") {
    memory_store store;
    cache_config c = remote_config(4, 1);
    c.remote_write_back_chunks = 2;
    instance a(c, store);
    a.step(store, {{session_id{1}, chain(1, 4)}});
    const auto r = a.step(store, {{session_id{2}, chain(2, 4)}});
    // 4 victims: 1 sheltered on the CPU, 3 leave; chunks 0 and 1 are written
    // back, chunks 2 and 3 are dropped.
    std::size_t dropped_deep = 0;
    for (const dropped_item& d : r.report.drops) dropped_deep += d.chunk.value >= 2 ? 1 : 0;
    REQUIRE(dropped_deep == r.report.drops.size());
    REQUIRE(r.write_backs_done + r.report.drops.size() == 3);
    for (const std::uint64_t k : store.keys()) {
        const auto h = chain(1, 4);
        REQUIRE((k == h[0] || k == h[1]));
    }
}

TEST_CASE("remote: bad calls and configurations change nothing and say what to do", "[cache][remote][errors]") {
    REQUIRE_THROWS_WITH(cache_t({.gpu_capacity = 4, .cpu_capacity = 0, .remote = true}),
                        Catch::Contains("remote tier without a CPU tier") && Catch::Contains("cpu_capacity > 0"));
    memory_store store;
    instance a(remote_config(4, 2), store);
    const std::vector<block_hash> doc = chain(1, 4);
    REQUIRE_THROWS_WITH(a.cache.stage_remote(session_id{1}, doc, 0, 1), Catch::Contains("call begin_step() first"));
    a.cache.begin_step();
    const std::string before = kvpolicy::testing::cache_snapshot(a.cache);
    REQUIRE_THROWS_WITH(a.cache.stage_remote(session_id{1}, doc, 2, 3),
                        Catch::Contains("outside the request's 4 blocks"));
    REQUIRE_THROWS_WITH(a.cache.stage_remote(session_id{1}, doc, 1, 1),
                        Catch::Contains("stage from lookup(hashes).run"));
    const std::vector<block_hash> twice{5, 5};
    REQUIRE_THROWS_WITH(a.cache.stage_remote(session_id{1}, twice, 0, 1), Catch::Contains("appears twice"));
    REQUIRE(kvpolicy::testing::cache_snapshot(a.cache) == before);
    REQUIRE(a.cache.end_step().transfers.empty());

    cache_t local({.gpu_capacity = 4, .cpu_capacity = 2});
    local.begin_step();
    REQUIRE_THROWS_WITH(local.stage_remote(session_id{1}, doc, 0, 1), Catch::Contains("set cache_config::remote"));
    // A request that cannot fit on the GPU: admit_through throws before staging.
    instance small(remote_config(2, 4), store);
    small.cache.begin_step();
    const std::string small_before = kvpolicy::testing::cache_snapshot(small.cache);
    REQUIRE_THROWS_AS(admit_through(small.cache, store, session_id{1}, doc), capacity_error);
    REQUIRE(kvpolicy::testing::cache_snapshot(small.cache) == small_before);
}

TEST_CASE("remote: two instances sharing a store under faults keep every block's bytes and lose nothing unreported",
          "[cache][remote][random]") {
    const bool inclusive = GENERATE(false, true);
    const bool per_layer = GENERATE(false, true);
    const std::uint64_t seed = GENERATE(1, 2, 3);
    CAPTURE(inclusive, per_layer, seed);
    std::mt19937_64 rng(seed);
    memory_store store(per_layer ? 120 : 60);  // the store evicts on its own
    cache_config c = remote_config(per_layer ? 24 : 12, per_layer ? 12 : 6);
    c.inclusive = inclusive;
    if (per_layer) {
        c.items = granularity::per_layer;
        c.num_layers = 2;
    }
    std::vector<std::unique_ptr<instance>> inst;
    inst.push_back(std::make_unique<instance>(c, store));
    inst.push_back(std::make_unique<instance>(c, store));
    std::vector<std::set<std::uint64_t>> seen(2);
    std::uint64_t next_session = 1;
    std::size_t remote_hits = 0, fetch_failures = 0, write_backs = 0;
    for (int step = 0; step < 400; ++step) {
        const std::size_t who = rng() % 2;
        instance& x = *inst[who];
        // Faults between steps: the store evicts or a value is corrupted;
        // some steps every write-back fails.
        const auto keys = store.keys();
        if (!keys.empty() && rng() % 4 == 0) store.lose(keys[rng() % keys.size()]);
        if (!keys.empty() && rng() % 4 == 0) store.corrupt(keys[rng() % keys.size()]);
        x.engine.fail_writes = rng() % 8 == 0;

        std::vector<std::pair<session_id, std::vector<block_hash>>> requests;
        const std::size_t n = 1 + rng() % 3;
        for (std::size_t r = 0; r < n; ++r)
            requests.push_back({session_id{next_session++}, chain(rng() % 12, 1 + rng() % 5)});
        auto resident = [&] {
            std::set<std::uint64_t> s;
            for (std::uint64_t k : seen[who])
                if (x.cache.gpu().cached_block(k) || x.cache.cpu().cached_block(k)) s.insert(k);
            return s;
        };
        const std::set<std::uint64_t> before = resident();
        std::set<std::uint64_t> written;
        const std::size_t fails_before = x.engine.fetch_failures;
        const auto res = x.step(store, requests, &written);
        for (const auto& [s, h] : requests)
            for (block_hash b : h)
                for (std::uint32_t l = 0; l < x.cache.items_per_block(); ++l) seen[who].insert(x.cache.item_key(b, l));
        const std::set<std::uint64_t> after = resident();
        REQUIRE(x.cache.check_invariants().empty());
        REQUIRE(x.check_bytes().empty());
        // Every item that left the cache was written back or reported dropped.
        std::set<std::uint64_t> dropped;
        for (const dropped_item& d : res.report.drops) {
            REQUIRE(x.cache.where(d.key) == item_state::free);  // dropped means no copy is left
            dropped.insert(d.key);
        }
        for (std::uint64_t k : before)
            if (!after.contains(k)) {
                CAPTURE(step, k);
                REQUIRE((written.contains(k) || dropped.contains(k)));
            }
        for (const auto& a : res.admissions) remote_hits += a.remote_blocks;
        fetch_failures += x.engine.fetch_failures - fails_before;
        write_backs += res.write_backs_done;
    }
    // The run went through the paths it is meant to check.
    REQUIRE(remote_hits > 20);
    REQUIRE(fetch_failures > 0);
    REQUIRE(write_backs > 20);
}

TEST_CASE("remote: a step's lookups asked together (admit_all_through) admit as admit_through does one by one",
          "[cache][remote]") {
    // Reference: the same steps, request by request through admit_through, on
    // a twin cache and a twin store. Within a step the requests read distinct
    // documents (a document's requests share prefixes across steps), and the
    // tiers never evict, so the step's earlier admissions cannot move a later
    // request's local prefix: then the one question per step must give
    // exactly the per-request answers. The store holds random prefixes of the
    // documents, with gaps.
    std::mt19937_64 rng(23);
    constexpr std::size_t docs = 12, max_len = 24;
    memory_store store_a, store_b;
    for (std::uint64_t d = 0; d < docs; ++d) {
        const std::vector<block_hash> h = chain(d, max_len);
        for (std::size_t i = 0; i < max_len; ++i)
            if (rng() % 6 != 0) {  // about one block in six absent
                store_a.put(h[i], {});
                store_b.put(h[i], {});
            }
    }
    const std::size_t cap = docs * max_len + 8;  // every block fits: nothing is evicted
    cache_t a(remote_config(cap, cap)), b(remote_config(cap, cap));
    std::vector<transfer_status> status;
    std::size_t staged = 0;
    for (int step = 0; step < 60; ++step) {
        std::vector<std::uint64_t> order(docs);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<std::vector<block_hash>> hashes;
        std::vector<step_request> requests;
        for (std::size_t r = 0; r < 1 + rng() % 5; ++r) hashes.push_back(chain(order[r], 1 + rng() % max_len));
        for (std::size_t r = 0; r < hashes.size(); ++r)
            requests.push_back({session_id{static_cast<std::uint64_t>(step * 10 + static_cast<int>(r))}, hashes[r]});
        a.begin_step();
        b.begin_step();
        std::vector<remote_admission> one_by_one;
        for (const step_request& q : requests) one_by_one.push_back(admit_through(a, store_a, q.session, q.hashes));
        const std::size_t asked_before = store_b.batched_lookups;
        const std::vector<remote_admission> together = admit_all_through(b, store_b, requests);
        REQUIRE(store_b.batched_lookups == asked_before + 1);
        REQUIRE(together.size() == one_by_one.size());
        for (std::size_t r = 0; r < requests.size(); ++r) {
            CAPTURE(step, r);
            REQUIRE(together[r].admitted);
            REQUIRE(together[r].remote_blocks == one_by_one[r].remote_blocks);
            REQUIRE(together[r].local.match == one_by_one[r].local.match);
            REQUIRE(together[r].local.computed_blocks == one_by_one[r].local.computed_blocks);
            staged += together[r].remote_blocks;
        }
        const swap_plan& plan_a = a.end_step();
        const swap_plan& plan_b = b.end_step();
        REQUIRE(plan_b.transfers == plan_a.transfers);
        REQUIRE(plan_b.remote_keys == plan_a.remote_keys);
        status.assign(plan_a.transfers.size(), transfer_status::done);
        (void)a.complete_transfers(plan_a, status);
        (void)b.complete_transfers(plan_b, status);
        for (const step_request& q : requests) {
            a.release(q.session);
            b.release(q.session);
        }
        REQUIRE(b.check_invariants().empty());
    }
    REQUIRE(staged > 20);  // the runs went through the store
}

TEST_CASE("remote: admit_all_through, two requests of one document in a step: the first stages, the second hits",
          "[cache][remote]") {
    memory_store store;
    const std::vector<block_hash> doc = chain(5, 6);
    for (const block_hash h : doc) store.put(h, {});
    cache_t c(remote_config(16, 16));
    c.begin_step();
    const std::vector<step_request> requests = {{session_id{1}, doc}, {session_id{2}, doc}};
    const std::vector<remote_admission> r = admit_all_through(c, store, requests);
    REQUIRE(r[0].remote_blocks == 6);
    REQUIRE(r[1].remote_blocks == 0);
    REQUIRE(r[1].local.match.run == 6);
    REQUIRE(r[1].local.computed_blocks == 0);
    REQUIRE(store.batched_lookups == 1);
    (void)c.end_step();
    REQUIRE(c.check_invariants().empty());
}

TEST_CASE("remote values: the checksum of bytes given in pieces equals the one-shot checksum",
          "[cache][remote][values]") {
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 400; ++trial) {
        const std::size_t n = trial < 100 ? static_cast<std::size_t>(trial) : rng() % 5000;
        std::vector<std::byte> bytes(n);
        for (auto& b : bytes) b = std::byte(rng() & 0xff);
        remote_checksum_stream stream;
        for (std::size_t at = 0; at < n;) {  // pieces of 0 .. 99 bytes, empty ones too
            const std::size_t piece = std::min<std::size_t>(n - at, rng() % 100);
            stream.update(std::span<const std::byte>(bytes).subspan(at, piece));
            at += piece;
        }
        CAPTURE(n);
        REQUIRE(stream.value() == remote_checksum(bytes));
    }
}

TEST_CASE("remote values: the vector accumulation equals the word-at-a-time one", "[cache][remote][values]") {
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
        const std::size_t n = rng() % 4096;
        std::vector<std::byte> bytes(n), copy(n), slow_copy(n);
        for (auto& b : bytes) b = std::byte(rng() & 0xff);
        std::uint64_t fast[8], slow[8];
        for (int i = 0; i < 8; ++i) fast[i] = slow[i] = rng();
        const std::size_t whole = detail::checksum_stripes(fast, bytes.data(), n, copy.data());
        REQUIRE(detail::checksum_stripes_scalar(slow, bytes.data(), n, slow_copy.data()) == whole);
        REQUIRE(whole == n / 64 * 64);
        REQUIRE(std::equal(fast, fast + 8, slow));
        REQUIRE(std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(whole), copy.begin()));
        REQUIRE(copy == slow_copy);
    }
}

TEST_CASE("remote values: the one-pass copy agrees with the checksum, each kind of bad value is refused",
          "[cache][remote][values]") {
    std::mt19937_64 rng(7);
    for (std::size_t n = 0; n < 600; ++n) {
        std::vector<std::byte> src(n), dst(n);
        for (auto& b : src) b = std::byte(rng() & 0xff);
        REQUIRE(copy_with_checksum(dst, src) == remote_checksum(src));
        REQUIRE(dst == src);
        if (n > 0) {  // any one flipped bit changes it
            std::vector<std::byte> other = src;
            other[rng() % n] ^= std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
            REQUIRE(remote_checksum(other) != remote_checksum(src));
        }
    }
    const remote_namespace ns{.model = "m", .item_bytes = 64};
    const std::uint64_t h = ns.hash();
    std::vector<std::byte> payload(64);
    write_pattern(payload, 42);
    std::vector<std::byte> value(remote_value_header::size + 64);
    encode_remote_value(value, ns, h, 42, payload);
    std::vector<std::byte> out(64);
    auto check = [&](const std::vector<std::byte>& v, std::uint64_t key, const remote_namespace& n) {
        const remote_value_check a = verify_remote_value(v, n, n.hash(), key, 64);
        REQUIRE(verify_and_copy_remote_value(v, n, n.hash(), key, out) == a);
        return a;
    };
    REQUIRE(check(value, 42, ns) == remote_value_check::ok);
    REQUIRE(out == payload);
    REQUIRE(check(value, 43, ns) == remote_value_check::wrong_key);
    REQUIRE(check(value, 42, remote_namespace{.model = "other", .item_bytes = 64}) ==
            remote_value_check::wrong_namespace);
    REQUIRE(check(std::vector<std::byte>(value.begin(), value.begin() + 20), 42, ns) == remote_value_check::too_short);
    REQUIRE(check(std::vector<std::byte>(value.begin(), value.end() - 1), 42, ns) == remote_value_check::wrong_length);
    std::vector<std::byte> bad = value;
    bad[0] ^= std::byte{1};
    REQUIRE(check(bad, 42, ns) == remote_value_check::bad_magic);
    bad = value;
    bad[remote_value_header::size + 10] ^= std::byte{1};
    REQUIRE(check(bad, 42, ns) == remote_value_check::bad_checksum);
    REQUIRE(ns.key(0x1234) == "kvp:m:default:1:16:64:tp0.1:pp0.1:0000000000001234");
}
