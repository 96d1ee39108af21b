// engine::any_cache_policy (engine/any_cache_policy.hpp) decides exactly as
// the concrete order its name picks: vllm_lru, vllm_arc, or
// cache_policy_core over a registered policy. Each is driven beside the
// concrete type, called directly as the seam's semantics say, over long
// random runs (inserts, removes, touches, finished requests with and without
// their hints, pins, evictions with protected chunks), and every eviction
// must name the same slots.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/any_cache_policy.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace kvpolicy;
using namespace kvpolicy::engine;

// The concrete orders, called as the seam says (any_cache_policy's header).
struct lru_ref {
    vllm_lru p;
    explicit lru_ref(std::size_t n) : p(n) {}
    void insert(std::uint32_t id, const std::string& bytes, std::uint64_t, std::optional<std::int64_t> position,
                std::int64_t rank, int ref_cnt, const access_context&) {
        p.insert(id, bytes, position, rank, ref_cnt == 0);
    }
    void touch(const key_walk& w, const access_context&) { p.refresh(w.slots); }
    void finish(const key_walk& w, const access_context&) { p.refresh(w.slots); }
    void end_request(const access_context&) {}  // vLLM's orders hear no hints
    void end_session(const access_context&) {}
    void mark_evictable(std::uint32_t id, const access_context&) { p.mark_evictable(id); }
    auto evict(std::size_t n, const std::vector<std::uint32_t>&, const std::vector<std::uint8_t>& prot,
               const access_context&) {
        return p.evict(n, [&](std::uint32_t id) { return prot[id] != 0; });
    }
};

struct arc_ref {
    vllm_arc p;
    explicit arc_ref(std::size_t n) : p(n) {}
    void insert(std::uint32_t id, const std::string&, std::uint64_t key, std::optional<std::int64_t>, std::int64_t,
                int ref_cnt, const access_context&) {
        p.insert(id, key, ref_cnt >= 0, ref_cnt == 0);
    }
    void touch(const key_walk& w, const access_context&) {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p.touch(w.slots[i], w.keys[i]);
    }
    void finish(const key_walk& w, const access_context&) {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p.finish(w.slots[i], w.flags[i] == 1, w.flags[i] == 2);
    }
    void end_request(const access_context&) {}
    void end_session(const access_context&) {}
    void mark_evictable(std::uint32_t id, const access_context&) { p.mark_evictable(id); }
    auto evict(std::size_t n, const std::vector<std::uint32_t>&, const std::vector<std::uint8_t>& prot,
               const access_context&) {
        return p.evict(n, [&](std::uint32_t id) { return prot[id] != 0; });
    }
};

template <class P>
struct core_ref {
    cache_policy_core<P> p;
    explicit core_ref(std::size_t n) : p(n, {}) {}
    void insert(std::uint32_t id, const std::string&, std::uint64_t, std::optional<std::int64_t>, std::int64_t,
                int ref_cnt, const access_context& ctx) {
        p.insert(id, ctx, ref_cnt == 0);
    }
    void touch(const key_walk& w, const access_context& ctx) {
        for (std::uint32_t id : w.slots) p.touch(id, ctx);
    }
    void finish(const key_walk& w, const access_context& ctx) {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p.finish(w.slots[i], w.flags[i] == 2, ctx);
    }
    void end_request(const access_context& ctx) { p.end_request(ctx.session, ctx); }
    void end_session(const access_context& ctx) { p.end_session(ctx.session, ctx); }
    void mark_evictable(std::uint32_t id, const access_context& ctx) { p.mark_evictable(id, ctx); }
    auto evict(std::size_t n, const std::vector<std::uint32_t>& ids, const std::vector<std::uint8_t>&,
               const access_context& ctx) {
        return p.evict(n, ids, ctx);
    }
};

template <class Ref>
void same_decisions(const std::string& name, std::uint64_t seed) {
    constexpr std::size_t n = 24;
    const auto any = any_cache_policy::make(name, n);
    Ref ref(n);
    std::mt19937_64 rng(seed);
    std::vector<int> state(n, 0);  // 0 absent, 1 evictable, 2 pinned
    std::vector<std::uint64_t> key(n, 0);
    std::vector<std::uint8_t> prot(n, 0);
    timestamp now = 0;
    const auto walk = [&](bool flags) {
        key_walk w;
        for (std::size_t i = rng() % 6; i-- > 0;) {
            const auto id = static_cast<std::uint32_t>(rng() % n);
            w.slots.push_back(state[id] == 0 ? no_index : id);
            w.keys.push_back(state[id] == 0 ? 1000 + rng() % 50 : key[id]);
            if (flags) w.flags.push_back(static_cast<std::uint8_t>(rng() % 3));
        }
        return w;
    };
    for (int step = 0; step < 5000; ++step) {
        INFO("step " << step);
        access_context c;
        c.now = ++now;
        c.session = session_id{rng() % 4};
        const auto id = static_cast<std::uint32_t>(rng() % n);
        switch (rng() % 7) {
            case 0:
            case 1:
                if (state[id] == 0) {
                    key[id] = 1000 + rng() % 50;
                    c.key = key[id];
                    const std::string bytes = std::to_string(key[id]);
                    const auto position = rng() % 2 ? std::optional<std::int64_t>(rng() % 9) : std::nullopt;
                    const std::int64_t rank = any->new_request_rank();
                    const int ref_cnt = static_cast<int>(rng() % 2);
                    any->insert(id, bytes, key[id], position, rank, ref_cnt, c);
                    ref.insert(id, bytes, key[id], position, rank, ref_cnt, c);
                    if constexpr (requires { ref.p.new_request_rank(); }) (void)ref.p.new_request_rank();
                    state[id] = ref_cnt == 0 ? 1 : 2;
                } else if (rng() % 4 == 0) {
                    any->remove(id);
                    ref.p.remove(id);
                    state[id] = 0;
                }
                break;
            case 2: {
                const key_walk w = walk(false);
                any->touch(w, c);
                ref.touch(w, c);
                break;
            }
            case 3: {
                key_walk w = walk(true);
                if (rng() % 2 == 0) {
                    any->finish(w, c);
                    ref.finish(w, c);
                    break;
                }
                // A request's end with its hints: a session that ends, or one expected back.
                const bool session_end = rng() % 3 == 0;
                const auto back = rng() % 2 ? std::optional<double>(static_cast<double>(rng() % 500)) : std::nullopt;
                any->finish_request(w, c, back, session_end);
                access_context h = c;
                if (session_end)
                    h.expected_return = never;
                else if (back)
                    h.expected_return = c.now + static_cast<timestamp>(*back);
                ref.finish(w, h);
                if (c.session.value != 0) ref.end_request(h);
                if (c.session.value != 0 && session_end) ref.end_session(h);
                break;
            }
            case 4:
                if (state[id] == 1) {
                    any->mark_non_evictable(id);
                    ref.p.mark_non_evictable(id);
                    state[id] = 2;
                } else if (state[id] == 2) {
                    any->mark_evictable(id, c);
                    ref.mark_evictable(id, c);
                    state[id] = 1;
                }
                break;
            default: {
                std::vector<std::uint32_t> ids;
                for (std::size_t i = rng() % 4; i-- > 0;)
                    if (const auto p = static_cast<std::uint32_t>(rng() % n); state[p] != 0 && !prot[p]) {
                        ids.push_back(p);
                        prot[p] = 1;
                    }
                const std::size_t want = rng() % 4;
                ids.insert(ids.end(), ids.begin(), ids.end());  // repeated: the same
                ids.push_back(no_index);                        // absent: nothing
                const auto a = any->evict(want, ids, c);
                const auto b = ref.evict(want, ids, prot, c);
                std::fill(prot.begin(), prot.end(), 0);
                REQUIRE(a == b);
                if (a)
                    for (std::uint32_t v : *a) state[v] = 0;
            }
        }
    }
}

}  // namespace

TEST_CASE("any_cache_policy decides exactly as the order its name picks", "[engine]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    same_decisions<lru_ref>("vllm_lru", seed);
    same_decisions<arc_ref>("vllm_arc", seed);
    same_decisions<core_ref<lru>>("lru", seed);
    same_decisions<core_ref<arc>>("arc", seed);
    same_decisions<core_ref<session_aware_lru>>("session_aware_lru", seed);
    same_decisions<core_ref<queue_aware<lru>>>("queue_aware_lru", seed);
}

TEST_CASE("any_cache_policy says what each kind offers", "[engine]") {
    const auto lru_kind = any_cache_policy::make("vllm_lru", 4);
    REQUIRE(lru_kind->orders_by_request());
    REQUIRE(lru_kind->arc() == nullptr);
    const auto arc_kind = any_cache_policy::make("vllm_arc", 4);
    REQUIRE(arc_kind->arc() != nullptr);
    REQUIRE(!arc_kind->hears_queue());
    REQUIRE(any_cache_policy::make("queue_aware_lru", 4)->hears_queue());
    REQUIRE(!any_cache_policy::make("lru", 4)->hears_queue());
    for (const char* name : {"vllm_lru", "vllm_arc", "lru", "queue_aware_lru"})
        REQUIRE(!any_cache_policy::make(name, 4)->ranks_new());
    REQUIRE(any_cache_policy::make("predicted_return", 4)->ranks_new());
    REQUIRE(any_cache_policy::make("queue_aware_predicted_return", 4)->ranks_new());
}

TEST_CASE("any_cache_policy::admissible: predicted_return's answer through the seam, all offered for the others",
          "[engine]") {
    // Session 1's request at 0 and session 2's at 50 hold a chunk each
    // (neither has shown a gap). Session 2's next request, at 60, is back
    // at 70 (its gap of 10), after session 1 at 0 + the mean gap (10): its
    // chunks would go before session 1's, so past the free room none is
    // stored. Once session 2 has ended, session 1's next request may take
    // session 2's chunk, and no more.
    const std::vector<std::uint64_t> offer{31, 32, 33, 34};
    for (const char* name : {"predicted_return", "queue_aware_predicted_return", "lru", "vllm_lru", "vllm_arc"}) {
        INFO(name);
        const auto p = any_cache_policy::make(name, 6);
        access_context c;
        c.session = session_id{1};
        c.key = 11;
        p->insert(0, "11", 11, std::nullopt, 0, 0, c);
        c.now = 50;
        c.session = session_id{2};
        c.key = 21;
        p->insert(1, "21", 21, std::nullopt, 0, 0, c);
        c.now = 60;
        const bool ranks = std::string(name).find("predicted_return") != std::string::npos;
        REQUIRE(p->admissible(offer, 1, 0, c) == (ranks ? 1 : 4));
        p->end_session(c);
        c.session = session_id{1};
        REQUIRE(p->admissible(offer, 0, 0, c) == (ranks ? 1 : 4));
        REQUIRE(p->admissible(offer, 4, 0, c) == 4);  // room for all
    }
}

TEST_CASE("any_cache_policy::admitted_prefix cuts an offer at the first new key admissible declines", "[engine]") {
    // A store's offer, some keys stored (a slot) and some new: the cut is
    // where the offer's new keys, asked of admissible in order, stop.
    std::mt19937_64 rng(9);
    for (const char* name : {"predicted_return", "lru"}) {
        const auto p = any_cache_policy::make(name, 8);
        access_context c;
        for (std::uint32_t id = 0; id < 4; ++id) {
            c.now = 10 * id;
            c.session = session_id{1 + id % 2};
            c.key = 100 + id;
            p->insert(id, "k", c.key, std::nullopt, 0, 0, c);
        }
        c.now = 60;
        for (int run = 0; run < 500; ++run) {
            key_walk w;
            std::vector<std::uint64_t> fresh;
            std::vector<std::size_t> at;
            for (std::size_t i = rng() % 8; i-- > 0;) {
                const bool stored = rng() % 3 == 0;
                w.slots.push_back(stored ? static_cast<std::uint32_t>(rng() % 4) : no_index);
                w.keys.push_back(stored ? 100 + w.slots.back() : 200 + rng() % 50);
                if (!stored) {
                    fresh.push_back(w.keys.back());
                    at.push_back(w.keys.size() - 1);
                }
            }
            const std::size_t free = rng() % 4;
            c.session = session_id{1 + rng() % 3};
            const std::size_t n = p->admissible(fresh, free, w.slots.size() - fresh.size(), c);
            REQUIRE(p->admitted_prefix(w, free, c) == (n < fresh.size() ? at[n] : w.slots.size()));
        }
    }
}

TEST_CASE("any_cache_policy: vllm_arc's order and target, refused for another policy, checked before set",
          "[engine][errors]") {
    const auto lru = any_cache_policy::make("lru", 4);
    REQUIRE_THROWS_WITH(lru->arc_order(), "T1, T2, B1, B2 and the target exist only in policy vllm_arc");
    REQUIRE_THROWS_WITH(lru->set_arc_target(1, 4), "target_t1_size exists only in policy vllm_arc");
    const auto arc = any_cache_policy::make("vllm_arc", 4);
    arc->set_arc_target(2.5, 4);
    REQUIRE(arc->arc_order().target_t1_size() == 2.5);
    REQUIRE_THROWS_WITH(arc->set_arc_target(4.5, 4), Catch::StartsWith("target_t1_size: 4.5") &&
                                                         Catch::EndsWith("is outside 0 .. cache_capacity=4"));
    REQUIRE_THROWS_AS(arc->set_arc_target(-1, 4), usage_error);
    REQUIRE(arc->arc_order().target_t1_size() == 2.5);  // unchanged
}

TEST_CASE("any_cache_policy refuses an unknown name, and options for vLLM's own orders", "[engine][errors]") {
    REQUIRE_THROWS_AS(any_cache_policy::make("nope", 4), unknown_name_error);
    const option_value one[] = {{"x", 1}};
    REQUIRE_THROWS_WITH(any_cache_policy::make("vllm_lru", 4, one), Catch::Contains("takes no options"));
    REQUIRE_THROWS_AS(any_cache_policy::make("lru", 0), config_error);
}
