// The waiting queue (waiting_queue, tiered_cache::enqueue/dequeue) and
// queue_aware<Base>: each against a naive model that recomputes what it
// needs by scanning, on long random sequences.
// - waiting_queue: the earliest queued read of every key, and the change
//   notifications, against a scan of the queued requests.
// - queue_aware<lru>, policy level: random inserts, hits, holds, releases,
//   erasures, queue changes and pops against a model that keeps LRU stamps
//   and picks victims by scanning.
// - tiered_cache<queue_aware<lru>>, prefix mode with several requests in
//   flight, requests started in and out of order and dropped: the resident
//   set and every hit run against a naive cache that, at each eviction,
//   recomputes every block's earliest read by scanning the queue.
// - With no queue, queue_aware<B> decides exactly as B (lru,
//   session_aware_lru, adaptive_kv), through the cache.
// - Bad input: a request enqueued twice, dequeued twice or never queued,
//   refused with the message, nothing changed.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/core/waiting_queue.hpp>
#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "support/naive_queue_cache.hpp"
#include "support/require_throws.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

// ---------------------------------------------------------------- waiting_queue

struct naive_queue {
    struct request {
        std::uint64_t id, position;
        std::vector<std::uint64_t> keys;
    };
    std::vector<request> queued;  // in enqueue order
    std::uint64_t next_position = 0;

    [[nodiscard]] std::optional<std::uint64_t> earliest(std::uint64_t key) const {
        for (const request& r : queued)
            if (std::find(r.keys.begin(), r.keys.end(), key) != r.keys.end()) return r.position;
        return std::nullopt;
    }
};

TEST_CASE("waiting_queue gives every key's earliest queued read and says when it changes", "[queue][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u, 4u);
    std::mt19937_64 rng(seed);
    waiting_queue q;
    naive_queue model;
    std::uint64_t next_id = 100;
    const std::uint64_t universe = 40;
    for (int op = 0; op < 20'000; ++op) {
        const bool add = model.queued.empty() || (rng() % 100 < 52 && model.queued.size() < 60);
        if (add) {
            std::vector<std::uint64_t> keys(rng() % 7);
            for (auto& k : keys) k = rng() % universe;  // repeats inside a request too
            std::map<std::uint64_t, std::optional<std::uint64_t>> before;
            for (std::uint64_t k : keys) before[k] = model.earliest(k);
            std::map<std::uint64_t, std::uint64_t> heard;
            q.enqueue(next_id, session_id{next_id % 5}, keys, [&](std::uint64_t k, std::uint64_t p) {
                REQUIRE(heard.emplace(k, p).second);  // once per key
            });
            model.queued.push_back({next_id, model.next_position++, keys});
            for (const auto& [k, was] : before) {
                if (was)
                    REQUIRE(!heard.contains(k));
                else
                    REQUIRE(heard.at(k) == model.next_position - 1);
            }
            REQUIRE(heard.size() == static_cast<std::size_t>(std::count_if(before.begin(), before.end(),
                                                                           [](const auto& b) { return !b.second; })));
            ++next_id;
        } else {
            // Mostly the head (a FIFO scheduler), sometimes any (dropped, or reordered).
            const std::size_t i = rng() % 3 == 0 ? rng() % model.queued.size() : 0;
            const naive_queue::request r = model.queued[i];
            std::map<std::uint64_t, std::optional<std::uint64_t>> before;
            for (std::uint64_t k : r.keys) before[k] = model.earliest(k);
            model.queued.erase(model.queued.begin() + static_cast<std::ptrdiff_t>(i));
            std::map<std::uint64_t, std::optional<std::uint64_t>> heard;
            std::vector<std::uint64_t> order;
            const session_id s = q.dequeue(r.id, [&](std::uint64_t k, std::optional<std::uint64_t> next) {
                REQUIRE(heard.emplace(k, next).second);
                order.push_back(k);
            });
            REQUIRE(s == session_id{r.id % 5});
            for (const auto& [k, was] : before) {
                const bool changed = was == r.position;
                REQUIRE(heard.contains(k) == changed);
                if (changed) REQUIRE(heard.at(k) == model.earliest(k));
            }
            // Last key first: the order of the request's keys, reversed.
            std::vector<std::uint64_t> expected;
            for (auto k = r.keys.rbegin(); k != r.keys.rend(); ++k)
                if (heard.contains(*k) && std::find(expected.begin(), expected.end(), *k) == expected.end())
                    expected.push_back(*k);
            REQUIRE(order == expected);
        }
        REQUIRE(q.size() == model.queued.size());
        if (op % 97 == 0)
            for (std::uint64_t k = 0; k < universe; ++k) REQUIRE(q.next_read(k) == model.earliest(k));
    }
}

TEST_CASE("waiting_queue: requests of hundreds of keys, its index growing and shrinking, against the naive model",
          "[queue][differential]") {
    std::mt19937_64 rng(5);
    waiting_queue q;
    naive_queue model;
    auto none = [](auto&&...) {};
    std::uint64_t next_id = 1;
    for (int op = 0; op < 600; ++op) {
        // Waves: the queue fills to 40 requests (about 16,000 distinct keys), then drains.
        const bool add = model.queued.empty() || ((op / 150) % 2 == 0 ? rng() % 10 < 8 : rng() % 10 < 2);
        if (add) {
            std::vector<std::uint64_t> keys(rng() % 800);
            for (auto& k : keys) k = rng() % 50'000;
            q.enqueue(next_id, session_id{1}, keys, none);
            model.queued.push_back({next_id++, model.next_position++, keys});
        } else {
            const std::size_t i = rng() % model.queued.size();
            (void)q.dequeue(model.queued[i].id, none);
            model.queued.erase(model.queued.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if (op % 10 == 0) {
            std::set<std::uint64_t> distinct;
            for (const auto& r : model.queued) distinct.insert(r.keys.begin(), r.keys.end());
            REQUIRE(q.queued_keys() == distinct.size());
        }
        for (int probe = 0; probe < 20; ++probe) {
            const std::uint64_t k = rng() % 50'000;
            REQUIRE(q.next_read(k) == model.earliest(k));
        }
    }
}

TEST_CASE("waiting_queue: one request queued while thousands come and go", "[queue]") {
    // Request 1 stays queued while 10,000 others reading one of its keys are
    // queued and started behind it: the earliest read stays request 1's, and
    // once it leaves, the positions behind it are dropped and new ones work.
    waiting_queue q;
    auto none = [](auto&&...) {};
    const std::vector<std::uint64_t> first{1, 2}, other{2, 3};
    q.enqueue(1, session_id{1}, first, none);
    for (std::uint64_t r = 2; r < 10'002; ++r) {
        q.enqueue(r, session_id{r}, other, none);
        REQUIRE(q.next_read(2) == std::optional<std::uint64_t>{0});
        REQUIRE(q.next_read(3) == std::optional<std::uint64_t>{r - 1});
        (void)q.dequeue(r, none);
        REQUIRE(!q.next_read(3));
    }
    q.enqueue(20'000, session_id{2}, other, none);
    std::vector<std::pair<std::uint64_t, std::optional<std::uint64_t>>> heard;
    (void)q.dequeue(1, [&](std::uint64_t k, std::optional<std::uint64_t> next) { heard.emplace_back(k, next); });
    REQUIRE(heard == std::vector<std::pair<std::uint64_t, std::optional<std::uint64_t>>>{
                         {2, std::optional<std::uint64_t>{10'001}}, {1, std::nullopt}});
    for (std::uint64_t r = 30'000; r < 35'000; ++r) {
        q.enqueue(r, session_id{r}, first, none);
        REQUIRE(q.next_read(1) == std::optional<std::uint64_t>{r - 30'000 + 10'002});
        (void)q.dequeue(r, none);
    }
    REQUIRE(q.next_read(2) == std::optional<std::uint64_t>{10'001});
    (void)q.dequeue(20'000, none);
    REQUIRE(q.empty());
    REQUIRE(q.queued_keys() == 0);
}

TEST_CASE("waiting_queue refuses a request queued twice or dequeued twice, changing nothing", "[queue][errors]") {
    waiting_queue q;
    const std::vector<std::uint64_t> keys{1, 2, 3};
    auto none = [](auto&&...) {};
    q.enqueue(7, session_id{1}, keys, none);
    require_throws<usage_error>([&] { q.enqueue(7, session_id{2}, keys, none); },
                                "enqueue: request 7 is already queued; dequeue it (started or dropped) before "
                                "queueing it again");
    REQUIRE(q.size() == 1);
    REQUIRE(q.queued_reads() == 3);
    require_throws<usage_error>([&] { (void)q.dequeue(8, none); },
                                "dequeue: request 8 is not queued (dequeued twice, or never enqueued); dequeue each "
                                "queued request once");
    REQUIRE(q.dequeue(7, none) == session_id{1});
    require_throws<usage_error>([&] { (void)q.dequeue(7, none); },
                                "dequeue: request 7 is not queued (dequeued twice, or never enqueued); dequeue each "
                                "queued request once");
    REQUIRE(q.empty());
    REQUIRE(q.queued_keys() == 0);
    REQUIRE(!q.next_read(1));
}

// ---------------------------------------------------------- queue_aware, policy level

TEST_CASE("queue_aware<lru> chooses the victims of its naive model", "[eviction][queue][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 8u, 61u);
    std::mt19937_64 rng(seed);
    queue_aware<lru> policy(capacity);
    naive_queue_aware_lru model(capacity);
    std::uint64_t now = 0;
    auto ctx_for = [&](std::uint32_t depth) {
        access_context c;
        c.now = ++now;
        c.chunk = chunk_index{depth};
        return c;
    };
    auto pick = [&](auto pred) -> std::optional<std::uint32_t> {
        std::vector<std::uint32_t> c;
        for (std::uint32_t i = 0; i < capacity; ++i)
            if (pred(model.items[i])) c.push_back(i);
        if (c.empty()) return std::nullopt;
        return c[rng() % c.size()];
    };
    std::size_t queued_victims = 0;
    for (int op = 0; op < 60'000; ++op) {
        const auto dice = rng() % 100;
        if (dice < 25) {  // insert, popping a victim first when full
            auto slot = pick([](const auto& x) { return !x.tracked; });
            if (!slot) {
                const auto v = policy.pop_victim(now);
                const auto m = model.pop();
                REQUIRE(v.has_value() == m.has_value());
                if (!v) continue;
                REQUIRE(v->value == *m);
                slot = *m;
            }
            const auto depth = static_cast<std::uint32_t>(rng() % 4);  // few depths: many ties on position
            policy.on_insert(item_id{*slot}, ctx_for(depth));
            model.insert(*slot, depth);
            if (rng() % 2) {
                policy.on_hold(item_id{*slot});
                model.hold(*slot);
            }
        } else if (dice < 40) {
            if (auto i = pick([](const auto& x) { return x.tracked; })) {
                policy.on_access(item_id{*i}, ctx_for(model.items[*i].depth));
                model.access(*i);
            }
        } else if (dice < 50) {
            if (auto i = pick([](const auto& x) { return x.tracked && !x.held; })) {
                policy.on_hold(item_id{*i});
                model.hold(*i);
            }
        } else if (dice < 62) {
            if (auto i = pick([](const auto& x) { return x.tracked && x.held; })) {
                policy.on_release(item_id{*i}, ctx_for(model.items[*i].depth));
                model.release(*i);
            }
        } else if (dice < 64) {
            if (auto i = pick([](const auto& x) { return x.tracked; })) {
                policy.on_erase(item_id{*i});
                model.erase(*i);
            }
        } else if (dice < 80) {  // a queued request reads it: positions from a small range, so they repeat
            if (auto i = pick([](const auto& x) { return x.tracked; })) {
                const std::uint64_t p = rng() % 16;
                policy.on_queued(item_id{*i}, p);
                model.queued(*i, p);
            }
        } else if (dice < 92) {
            if (auto i = pick([](const auto& x) { return x.tracked; })) {
                policy.on_unqueued(item_id{*i}, ctx_for(model.items[*i].depth));
                model.unqueued(*i);
            }
        } else {  // a victim when none is needed, as a cache shrinking would
            const bool was_queued_only =
                model.evictable() > 0 && std::none_of(model.items.begin(), model.items.end(),
                                                      [](const auto& x) { return x.tracked && !x.held && !x.queued; });
            const auto v = policy.pop_victim(now);
            const auto m = model.pop();
            REQUIRE(v.has_value() == m.has_value());
            if (v) REQUIRE(v->value == *m);
            queued_victims += was_queued_only ? 1 : 0;
        }
        REQUIRE(policy.evictable_size() == model.evictable());
        REQUIRE(policy.size() == static_cast<std::size_t>(std::count_if(model.items.begin(), model.items.end(),
                                                                        [](const auto& x) { return x.tracked; })));
    }
    if (capacity > 1) REQUIRE(queued_victims > 0);  // the queue's own order was exercised
    const policy_counters& c = policy.counters();
    REQUIRE(c.evictions + c.erasures <= c.insertions);
}

// ------------------------------------------------------- through the cache

TEST_CASE("tiered_cache<queue_aware<lru>> keeps what its naive model keeps, requests in flight and dropped",
          "[eviction][queue][differential][cache]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u, 4u, 5u);
    const std::size_t capacity = GENERATE(6u, 24u, 80u);
    std::mt19937_64 rng(seed);
    tiered_cache<queue_aware<lru>> cache({.gpu_capacity = capacity});
    naive_prefix_cache model(capacity);
    struct request {
        std::uint64_t id;
        std::vector<block_hash> hashes;
    };
    std::vector<request> queue;                    // enqueue order
    std::vector<std::uint64_t> flight;             // admitted, not released
    std::map<std::uint64_t, std::uint64_t> turns;  // conversation -> blocks read so far
    std::uint64_t next_id = 1;
    std::size_t hits = 0, dropped = 0, started_out_of_order = 0;
    for (int op = 0; op < 3'000; ++op) {
        cache.clock().set(static_cast<timestamp>(op + 1));
        const auto dice = rng() % 100;
        if (dice < 40 && queue.size() < 40) {
            const std::uint64_t conv = rng() % 12;
            std::uint64_t& t = turns[conv];
            t = std::min<std::uint64_t>(t + 1 + rng() % 3, capacity / 2 + 1);
            request r{next_id++, chain(conv, static_cast<std::size_t>(t))};
            cache.enqueue(r.id, session_id{r.id}, r.hashes);
            model.enqueue(r.id, r.hashes);
            queue.push_back(std::move(r));
        } else if (dice < 75 && !queue.empty()) {  // start one: mostly the head
            const std::size_t i = rng() % 4 == 0 ? rng() % queue.size() : 0;
            started_out_of_order += i > 0 ? 1 : 0;
            const request r = queue[i];
            queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
            REQUIRE(cache.dequeue(r.id) == session_id{r.id});
            model.dequeue(r.id);
            const std::optional<std::size_t> run = model.admit(r.id, r.hashes);
            cache.begin_step();
            if (!run) {
                REQUIRE_THROWS_AS(cache.admit(session_id{r.id}, r.hashes), capacity_error);
                (void)cache.end_step();
            } else {
                const admission a = cache.admit(session_id{r.id}, r.hashes);
                (void)cache.end_step();
                REQUIRE(a.match.run == *run);
                hits += *run;
                flight.push_back(r.id);
            }
        } else if (dice < 80 && !queue.empty()) {  // dropped from the queue
            const std::size_t i = rng() % queue.size();
            const request r = queue[i];
            queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
            (void)cache.dequeue(r.id);
            model.dequeue(r.id);
            ++dropped;
        } else if (!flight.empty()) {  // a request in flight finishes
            const std::size_t i = rng() % flight.size();
            const std::uint64_t s = flight[i];
            flight.erase(flight.begin() + static_cast<std::ptrdiff_t>(i));
            cache.release(session_id{s});
            model.release(s);
        }
        for (std::uint64_t conv = 0; conv < 12; ++conv)
            for (block_hash h : chain(conv, capacity / 2 + 1))
                REQUIRE((cache.where(h) == item_state::in_gpu) == model.cached(h));
        REQUIRE(cache.check_invariants().empty());
    }
    REQUIRE(hits > 0);
    REQUIRE(dropped > 0);
    REQUIRE(started_out_of_order > 0);
}

template <class Base>
void same_as_base_without_queue(std::uint64_t seed, std::size_t capacity) {
    std::mt19937_64 rng(seed);
    tiered_cache<queue_aware<Base>, lru> with({.gpu_capacity = capacity, .cpu_capacity = capacity / 2});
    tiered_cache<Base, lru> base({.gpu_capacity = capacity, .cpu_capacity = capacity / 2});
    std::map<std::uint64_t, std::uint64_t> turns;
    for (std::uint64_t r = 1; r <= 1'500; ++r) {
        const std::uint64_t conv = rng() % 20;
        std::uint64_t& t = turns[conv];
        t = std::min<std::uint64_t>(t + 1 + rng() % 3, capacity / 2);
        const std::vector<block_hash> h = chain(conv, static_cast<std::size_t>(t));
        const auto clock = static_cast<timestamp>(r * 1000);
        with.clock().set(clock);
        base.clock().set(clock);
        with.begin_step();
        base.begin_step();
        const admission a = with.admit(session_id{conv}, h);
        const admission b = base.admit(session_id{conv}, h);
        (void)with.end_step();
        (void)base.end_step();
        REQUIRE(a.match == b.match);
        REQUIRE(a.gpu_evictions == b.gpu_evictions);
        const std::uint64_t output = 1 + rng() % 500;
        (void)with.release(session_id{conv}, output);
        (void)base.release(session_id{conv}, output);
        if (rng() % 10 == 0) {
            (void)with.free_session(session_id{conv});
            (void)base.free_session(session_id{conv});
        }
        if (r % 8 == 0)
            for (std::uint64_t c = 0; c < 20; ++c)
                for (block_hash x : chain(c, capacity / 2)) REQUIRE(with.where(x) == base.where(x));
    }
    REQUIRE(with.metrics().gpu.evictions == base.metrics().gpu.evictions);
    REQUIRE(with.gpu().policy().counters() == base.gpu().policy().counters());
}

TEST_CASE("queue_aware<B> with no queue decides exactly as B", "[eviction][queue][cache]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t capacity = GENERATE(8u, 40u);
    same_as_base_without_queue<lru>(seed, capacity);
    same_as_base_without_queue<session_aware_lru>(seed, capacity);
    same_as_base_without_queue<adaptive_kv>(seed, capacity);
}

TEST_CASE("a dropped queued request gives its blocks back to the base order", "[eviction][queue][cache]") {
    // Capacity 4: blocks of a (1, 2), then of b (3, 4) cached: a is the
    // least recent. A queued request reads a, so c's admit evicts b instead.
    // Dropped, the queue lets go of a, tail first, as a release: a's blocks
    // become more recent than c's, and go after them, 2 before 1.
    tiered_cache<queue_aware<lru>> cache({.gpu_capacity = 4});
    const std::vector<block_hash> a{1, 2}, b{3, 4}, c{5, 6}, d{7, 8};
    auto serve = [&](std::uint64_t s, const std::vector<block_hash>& h) {
        cache.begin_step();
        (void)cache.admit(session_id{s}, h);
        (void)cache.end_step();
        (void)cache.release(session_id{s});
    };
    serve(1, a);
    serve(2, b);
    cache.enqueue(10, session_id{1}, a);
    serve(3, c);  // evicts b: a is queued
    REQUIRE(cache.where(1) == item_state::in_gpu);
    REQUIRE(cache.where(2) == item_state::in_gpu);
    REQUIRE(cache.where(3) == item_state::free);
    REQUIRE(cache.where(4) == item_state::free);
    REQUIRE(cache.gpu().num_evictable_blocks() == 4);  // queued blocks stay candidates, last
    require_throws<usage_error>([&] { cache.enqueue(10, session_id{1}, a); },
                                "enqueue: request 10 is already queued; dequeue it (started or dropped) before "
                                "queueing it again");
    REQUIRE(cache.dequeue(10) == session_id{1});
    require_throws<usage_error>([&] { (void)cache.dequeue(10); },
                                "dequeue: request 10 is not queued (dequeued twice, or never enqueued); dequeue each "
                                "queued request once");
    // Released by the queue, a's blocks are now more recent than c's.
    cache.begin_step();
    (void)cache.admit(session_id{4}, std::vector<block_hash>{7});
    (void)cache.end_step();
    REQUIRE(cache.where(6) == item_state::free);  // c's tail, the least recent
    (void)cache.release(session_id{4});
    serve(5, std::vector<block_hash>{9});  // c's head
    REQUIRE(cache.where(5) == item_state::free);
    serve(6, std::vector<block_hash>{11});  // then a's tail: the queue released it first
    REQUIRE(cache.where(2) == item_state::free);
    REQUIRE(cache.where(1) == item_state::in_gpu);
    REQUIRE(cache.check_invariants().empty());
}

TEST_CASE("per-layer items and the CPU tier hear the queue too", "[eviction][queue][cache]") {
    // Two layers per block: the GPU holds 2 blocks, the CPU 2. A queued
    // request reads block 1: its items stay on the GPU while others are
    // sheltered; another reads block 2, on the CPU: the CPU drops block 3,
    // more recent, rather than block 2.
    tiered_cache<queue_aware<lru>, queue_aware<lru>> cache(
        {.gpu_capacity = 4, .cpu_capacity = 4, .num_layers = 2, .items = granularity::per_layer});
    auto serve = [&](std::uint64_t s, const std::vector<block_hash>& h) {
        cache.begin_step();
        (void)cache.admit(session_id{s}, h);
        (void)cache.end_step();
        (void)cache.release(session_id{s});
    };
    serve(1, {1});
    serve(2, {2});
    cache.enqueue(9, session_id{1}, std::vector<block_hash>{1});
    serve(3, {3});  // block 2 to the CPU, not block 1
    for (std::uint32_t l = 0; l < 2; ++l) {
        REQUIRE(cache.where(1, l) == item_state::in_gpu);
        REQUIRE(cache.where(2, l) == item_state::in_cpu);
    }
    REQUIRE(cache.gpu().policy().queued_evictable() == 2);
    serve(4, {4});  // block 3 to the CPU, which is now full
    cache.enqueue(8, session_id{2}, std::vector<block_hash>{2});
    REQUIRE(cache.cpu().policy().queued_evictable() == 2);
    serve(5, {5});  // block 4 to the CPU; the CPU drops block 3
    for (std::uint32_t l = 0; l < 2; ++l) {
        REQUIRE(cache.where(1, l) == item_state::in_gpu);
        REQUIRE(cache.where(2, l) == item_state::in_cpu);
        REQUIRE(cache.where(3, l) == item_state::free);
        REQUIRE(cache.where(4, l) == item_state::in_cpu);
    }
    (void)cache.dequeue(9);
    (void)cache.dequeue(8);
    REQUIRE(cache.gpu().policy().queued_evictable() == 0);
    REQUIRE(cache.cpu().policy().queued_evictable() == 0);
    REQUIRE(cache.check_invariants().empty());
}

}  // namespace
