// A connector's view of the engine's requests (engine/request_lifecycle.hpp)
// feeding cache_policy_core's waiting queue, against a naive model: random
// arrivals, schedules, preemptions, finishes and aborts (ids never seen,
// repeated, out of order among them). At every step the policy hears exactly
// the requests queued: queue_aware<lru> behind cache_policy_core chooses the
// victims of the naive queue_aware<lru> whose queued positions are recomputed
// from the naive queue by scanning; ignored events change nothing and say why;
// a request aborted before it was scheduled leaves nothing behind; a policy
// that does not hear the queue decides as if there were none.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/cache_policy_core.hpp>
#include <kvpolicy/engine/request_lifecycle.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "support/naive_queue_cache.hpp"

using namespace kvpolicy;
using kvpolicy::engine::cache_policy_core;
using kvpolicy::engine::request_lifecycle;
using kvpolicy::engine::request_state;

namespace {

// The naive queue: requests in arrival order (a preemption arrives again),
// each key's earliest reader found by scanning.
struct naive_queue {
    struct queued {
        std::string id;
        std::uint64_t serial;
        std::vector<std::uint64_t> keys;
    };
    std::vector<queued> q;
    std::map<std::string, request_state> known;
    std::uint64_t next_serial = 0;

    [[nodiscard]] std::optional<std::uint64_t> earliest(std::uint64_t key) const {
        for (const queued& r : q)
            if (std::ranges::find(r.keys, key) != r.keys.end()) return r.serial;
        return std::nullopt;
    }
};

struct harness {
    std::size_t capacity;
    cache_policy_core<queue_aware<lru>> core;
    request_lifecycle<cache_policy_core<queue_aware<lru>>> life{core};
    testing::naive_queue_aware_lru model;
    naive_queue queue;
    std::vector<std::optional<std::uint64_t>> key_of;  // [capacity] the present item's key
    std::uint64_t now = 0;

    explicit harness(std::size_t cap) : capacity(cap), core(cap, {}), model(cap), key_of(cap) {}

    access_context ctx(std::uint64_t key = 0, std::uint32_t depth = 0) {
        access_context c;
        c.now = ++now;
        c.key = key;
        c.chunk = chunk_index{depth};
        return c;
    }
    std::optional<std::uint32_t> present(std::uint64_t key) const {
        for (std::uint32_t i = 0; i < capacity; ++i)
            if (key_of[i] == key) return i;
        return std::nullopt;
    }
    // The model hears what waiting_queue promises: on an enqueue, the keys no
    // queued request read before; on a dequeue, last key first, each key the
    // leaving request read first, with its next reader or none.
    void model_enqueue(const std::vector<std::uint64_t>& keys, std::uint64_t serial) {
        for (std::uint64_t k : keys)
            if (!queue.earliest(k))
                if (auto id = present(k)) model.queued(*id, serial);
    }
    void model_dequeue(std::size_t at) {
        const naive_queue::queued leaving = queue.q[at];
        std::vector<std::uint64_t> first_readers;
        for (std::uint64_t k : leaving.keys)
            if (queue.earliest(k) == leaving.serial) first_readers.push_back(k);
        queue.q.erase(queue.q.begin() + static_cast<std::ptrdiff_t>(at));
        std::set<std::uint64_t> done;
        for (auto k = leaving.keys.rbegin(); k != leaving.keys.rend(); ++k) {
            if (!done.insert(*k).second || std::ranges::find(first_readers, *k) == first_readers.end()) continue;
            const auto id = present(*k);
            if (!id) continue;
            if (const auto next = queue.earliest(*k))
                model.queued(*id, *next);
            else
                model.unqueued(*id);
        }
    }
};

std::vector<std::uint64_t> random_keys(std::mt19937_64& rng) {
    std::vector<std::uint64_t> keys(1 + rng() % 6);
    for (auto& k : keys) k = 1 + rng() % 40;  // few keys: requests share them, a request may read one twice
    return keys;
}

}  // namespace

TEST_CASE("request_lifecycle: the policy hears exactly the queued requests, victim for victim", "[engine][queue]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u, 4u);
    const std::size_t capacity = GENERATE(4u, 24u);
    std::mt19937_64 rng(seed);
    harness h(capacity);
    std::size_t ignored = 0, applied = 0, queued_victims = 0;
    auto some_id = [&] { return "req-" + std::to_string(rng() % 30); };
    for (int op = 0; op < 20'000; ++op) {
        const auto dice = rng() % 100;
        if (dice < 12) {  // arrive
            const std::string id = some_id();
            const auto keys = random_keys(rng);
            const session_id s{rng() % 5};
            const bool fresh = !h.queue.known.contains(id);
            const auto r = h.life.arrive(id, s, keys);
            REQUIRE(r.applied == fresh);
            if (fresh) {
                h.model_enqueue(keys, h.queue.next_serial);
                h.queue.q.push_back({id, h.queue.next_serial++, keys});
                h.queue.known[id] = request_state::waiting;
            } else {
                REQUIRE(r.reason == "arrive: request '" + id + "' arrived already; a request id is used once; ignored");
            }
        } else if (dice < 22) {  // schedule
            const std::string id = some_id();
            const auto it = h.queue.known.find(id);
            const bool ok = it != h.queue.known.end() && it->second == request_state::waiting;
            const auto r = h.life.schedule(id, h.ctx());
            REQUIRE(r.applied == ok);
            if (ok) {
                const auto at = std::ranges::find_if(h.queue.q, [&](const auto& q) { return q.id == id; });
                h.model_dequeue(static_cast<std::size_t>(at - h.queue.q.begin()));
                it->second = request_state::running;
            }
        } else if (dice < 27) {  // preempt
            const std::string id = some_id();
            const auto it = h.queue.known.find(id);
            const bool ok = it != h.queue.known.end() && it->second == request_state::running;
            const auto keys = random_keys(rng);
            const auto r = h.life.preempt(id, keys);
            REQUIRE(r.applied == ok);
            if (ok) {
                h.model_enqueue(keys, h.queue.next_serial);
                h.queue.q.push_back({id, h.queue.next_serial++, keys});
                it->second = request_state::waiting;
            }
        } else if (dice < 35) {  // finish or abort
            const std::string id = some_id();
            const auto it = h.queue.known.find(id);
            const bool ok = it != h.queue.known.end();
            const auto r = h.life.finish(id, h.ctx());
            REQUIRE(r.applied == ok);
            if (ok) {
                if (it->second == request_state::waiting) {
                    const auto at = std::ranges::find_if(h.queue.q, [&](const auto& q) { return q.id == id; });
                    h.model_dequeue(static_cast<std::size_t>(at - h.queue.q.begin()));
                }
                h.queue.known.erase(it);
            } else {
                REQUIRE(r.reason ==
                        "finish: request '" + id + "' is not known (never arrived, or ended already); ignored");
            }
        } else if (dice < 60) {  // a chunk stored: evict one first when full
            const std::uint64_t key = 1 + rng() % 40;
            if (h.present(key)) continue;
            std::optional<std::uint32_t> slot;
            for (std::uint32_t i = 0; i < capacity && !slot; ++i)
                if (!h.key_of[i]) slot = i;
            if (!slot) {
                const bool only_queued = std::none_of(h.model.items.begin(), h.model.items.end(),
                                                      [](const auto& x) { return x.tracked && !x.held && !x.queued; });
                const auto got = h.core.evict(1, {}, h.ctx());
                const auto want = h.model.pop();
                REQUIRE(got.has_value() == want.has_value());
                if (!got) continue;
                REQUIRE(got->front() == *want);
                queued_victims += only_queued ? 1 : 0;
                h.key_of[*want].reset();
                slot = *want;
            }
            const auto depth = static_cast<std::uint32_t>(rng() % 4);
            h.core.insert(*slot, h.ctx(key, depth), true);
            h.model.insert(*slot, depth);
            if (const auto e = h.queue.earliest(key)) h.model.queued(*slot, *e);
            h.key_of[*slot] = key;
        } else if (dice < 75) {  // a hit
            const std::uint64_t key = 1 + rng() % 40;
            if (const auto id = h.present(key)) {
                h.core.touch(*id, h.ctx(key, h.model.items[*id].depth));
                h.model.access(*id);
            }
        } else if (dice < 87) {  // the manager pins a chunk (a load or store in flight), or lets it go
            const std::uint64_t key = 1 + rng() % 40;
            if (const auto id = h.present(key)) {
                if (!h.model.items[*id].held) {
                    h.core.mark_non_evictable(*id);
                    h.model.hold(*id);
                } else {
                    h.core.mark_evictable(*id, h.ctx(key, h.model.items[*id].depth));
                    h.model.release(*id);
                }
            }
        } else {  // a failed store forgets a chunk
            const std::uint64_t key = 1 + rng() % 40;
            if (const auto id = h.present(key)) {
                h.core.remove(*id);
                h.model.erase(*id);
                h.key_of[*id].reset();
            }
        }
        (void)applied;
        REQUIRE(h.core.queued_requests() == h.queue.q.size());
        REQUIRE(h.life.waiting() == h.queue.q.size());
        REQUIRE(h.life.running() == h.queue.known.size() - h.queue.q.size());
        REQUIRE(h.core.evictable_size() == h.model.evictable());
    }
    REQUIRE(queued_victims > 0);  // the queue's own order decided some victims
    (void)ignored;
}

TEST_CASE("request_lifecycle: ignored events say why and change nothing", "[engine][queue]") {
    cache_policy_core<queue_aware<lru>> core(4, {});
    request_lifecycle life(core);
    const std::vector<std::uint64_t> keys{1, 2};
    access_context c;
    REQUIRE(life.arrive("a", session_id{1}, keys));
    auto r = life.arrive("a", session_id{2}, keys);
    REQUIRE(!r);
    REQUIRE(r.reason == "arrive: request 'a' arrived already; a request id is used once; ignored");
    REQUIRE(life.session("a") == session_id{1});
    r = life.schedule("b", c);
    REQUIRE(r.reason == "schedule: request 'b' is not known (never arrived, or ended); ignored");
    r = life.preempt("a", keys);
    REQUIRE(r.reason == "preempt: request 'a' is waiting already; ignored");
    REQUIRE(life.schedule("a", c));
    r = life.schedule("a", c);
    REQUIRE(r.reason == "schedule: request 'a' is running already; ignored");
    REQUIRE(core.queued_requests() == 0);
    REQUIRE(life.preempt("a", keys));
    REQUIRE(core.queued_requests() == 1);
    REQUIRE(life.finish("a", c));  // aborted while waiting: nothing left behind
    REQUIRE(core.queued_requests() == 0);
    REQUIRE(life.waiting() == 0);
    REQUIRE(life.running() == 0);
    REQUIRE(!life.state("a"));
    r = life.finish("a", c);
    REQUIRE(r.reason == "finish: request 'a' is not known (never arrived, or ended already); ignored");
    r = life.preempt("zz", keys);
    REQUIRE(r.reason == "preempt: request 'zz' is not known (never arrived, or ended); ignored");
}

namespace {
// What the queue is told, request by request.
struct told_queue {
    std::vector<std::vector<std::uint64_t>> told;
    void enqueue(std::uint64_t, session_id, std::span<const std::uint64_t> keys) {
        told.emplace_back(keys.begin(), keys.end());
    }
    void dequeue(std::uint64_t, const access_context&) {}
};
using keys_t = std::vector<std::uint64_t>;
}  // namespace

TEST_CASE("request_lifecycle: behind a GPU prefix cache, the queue hears each request past its forecast hit",
          "[engine][queue][forecast]") {
    told_queue q;
    request_lifecycle life(q);
    life.forecast_front_cache(4);
    REQUIRE(life.front_cache_blocks() == 4);
    access_context c;
    REQUIRE(life.arrive("a", session_id{1}, keys_t{1, 2, 3}));  // nothing ahead, no view of the GPU
    REQUIRE(life.arrive("b", session_id{1}, keys_t{1, 2, 5}));  // a waits ahead: 1 and 2 forecast on the GPU
    REQUIRE(life.schedule("a", c));
    REQUIRE(life.finish("a", c));  // ran: its blocks stay in the forecast, as the GPU's free list keeps them
    REQUIRE(life.arrive("c", session_id{1}, keys_t{1, 2, 3, 9}));  // b {1, 2, 5} then a's 3: full
    REQUIRE(life.finish("b", c));  // aborted while waiting, never ran: gone from the forecast
    REQUIRE(life.arrive("d", session_id{2}, keys_t{1, 5, 7}));  // c fills the GPU: a, ended, dropped
    REQUIRE(life.schedule("c", c));
    REQUIRE(life.preempt("c", keys_t{1, 2, 3, 9, 11}));  // behind d {1, 5, 7}: only 1
    REQUIRE(q.told == std::vector<keys_t>{{1, 2, 3}, {5}, {9}, {5, 7}, {2, 3, 9, 11}});
    life.forecast_front_cache(0);  // off: every key
    REQUIRE(life.front_cache_blocks() == 0);
    REQUIRE(life.arrive("e", session_id{2}, keys_t{1, 5, 7}));
    REQUIRE(q.told.back() == keys_t{1, 5, 7});
}

TEST_CASE("request_lifecycle: a policy that does not hear the queue decides as with no queue", "[engine][queue]") {
    std::mt19937_64 rng(9);
    cache_policy_core<lru> with(16, {}), without(16, {});
    static_assert(!cache_policy_core<lru>::hears_queue && cache_policy_core<queue_aware<lru>>::hears_queue);
    request_lifecycle life(with);
    std::uint64_t now = 0;
    std::vector<bool> present(16, false);
    for (int op = 0; op < 5'000; ++op) {
        access_context c;
        c.now = ++now;
        const std::uint32_t id = static_cast<std::uint32_t>(rng() % 16);
        c.key = 100 + id;
        switch (rng() % 5) {
            case 0:
                (void)life.arrive("r" + std::to_string(rng() % 8), session_id{1}, std::vector<std::uint64_t>{c.key});
                break;
            case 1:
                (void)life.schedule("r" + std::to_string(rng() % 8), c);
                break;
            case 2:
                (void)life.finish("r" + std::to_string(rng() % 8), c);
                break;
            default:
                if (!present[id]) {
                    with.insert(id, c, true);
                    without.insert(id, c, true);
                    present[id] = true;
                } else {
                    with.touch(id, c);
                    without.touch(id, c);
                }
        }
        if (rng() % 7 == 0) {
            const auto a = with.evict(1, {}, c), b = without.evict(1, {}, c);
            REQUIRE(a == b);
            if (a) present[a->front()] = false;
        }
        REQUIRE(with.queued_requests() == 0);
    }
}

TEST_CASE("cache_policy_core::reset: the cache empties, the queue stays", "[engine][queue]") {
    cache_policy_core<queue_aware<lru>> core(3, {});
    request_lifecycle life(core);
    auto at = [](std::uint64_t key, std::uint64_t now) {
        access_context c;
        c.key = key;
        c.now = now;
        return c;
    };
    for (std::uint32_t id = 0; id < 3; ++id) core.insert(id, at(10 + id, id + 1), true);
    REQUIRE(life.arrive("q", session_id{1}, std::vector<std::uint64_t>{11, 20}));
    core.reset({});
    REQUIRE(core.size() == 0);
    REQUIRE(core.queued_requests() == 1);  // "q" still waits, reading 11 and 20
    // After the reset, key 20 is stored first: LRU would evict it first, the
    // queue keeps it while "q" waits.
    core.insert(0, at(20, 10), true);
    core.insert(1, at(30, 11), true);
    core.insert(2, at(31, 12), true);
    const access_context now = at(0, 13);
    REQUIRE(core.evict(1, {}, now) == std::optional<std::vector<std::uint32_t>>{{1}});
    REQUIRE(life.schedule("q", now));  // the lifecycle goes on as before the reset
    REQUIRE(core.queued_requests() == 0);
    // Dequeued, key 20 is LRU's most recent (as a queue_aware policy hands
    // back every chunk a started request read): 31 goes, then 20.
    REQUIRE(core.evict(1, {}, at(0, 14)) == std::optional<std::vector<std::uint32_t>>{{2}});
    REQUIRE(core.evict(1, {}, at(0, 15)) == std::optional<std::vector<std::uint32_t>>{{0}});
}
