// predicted_return: victim for victim against a naive model that keeps every
// item in a vector and, for each victim, scans them all and computes each
// session's expected return from scratch; on long random sequences of
// inserts, hits, holds, releases (with and without hints), session ends,
// erasures and pops, at several capacities and gap weights. Also: with no
// sessions it is LRU; queue_aware<predicted_return> with no queue decides as
// predicted_return; a worked example where it keeps the session that comes
// back sooner and LRU does not; bad configuration.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/cache_policy_core.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/predicted_return.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {

// A call of `session` (0: none) at `now`.
access_context session_ctx(std::uint64_t session, timestamp now) {
    access_context c;
    c.now = now;
    c.session = session_id{session};
    return c;
}

// The rule of predicted_return.hpp, written out the slow way.
struct naive_predicted_return {
    struct item {
        bool tracked = false, held = false;
        std::uint64_t session = 0;  // 0: none
        std::uint64_t seq = 0;      // insertion order
        timestamp touch = 0;        // latest insert, access or release
        std::uint64_t touched = 0;  // order of that touch
    };
    struct session {
        timestamp last = 0;
        double gap = 0.0;
        bool has_gap = false;
        timestamp hint = 0;
        bool ended = false;
    };

    double weight;
    std::vector<item> items;
    std::map<std::uint64_t, session> sessions;
    double gap_sum = 0.0;
    std::uint64_t gaps = 0, inserted = 0, touches = 0;
    bool ends_heard = false;

    naive_predicted_return(std::size_t capacity, double w) : weight(w), items(capacity) {}

    [[nodiscard]] double mean_gap() const { return gaps == 0 ? 0.0 : gap_sum / static_cast<double>(gaps); }
    [[nodiscard]] double back(const session& s) const {
        if (s.hint == never) return std::numeric_limits<double>::infinity();
        if (s.hint != 0) return static_cast<double>(s.hint);
        return static_cast<double>(s.last) + (s.has_gap ? s.gap : mean_gap());
    }
    void touch(std::uint32_t x, const access_context& ctx, bool request) {
        item& it = items[x];
        it.touch = ctx.now;
        it.touched = ++touches;
        if (ctx.session.value == 0 && !request) return;  // a release naming no session keeps it
        it.session = ctx.session.value;
        if (it.session == 0) return;
        const auto found = sessions.find(it.session);
        if (found == sessions.end()) {
            sessions[it.session].last = ctx.now;
            return;
        }
        session& s = found->second;
        if (!request) return;
        if (ends_heard) {
            if (!s.ended) return;  // requests are known by their ends
        } else if (ctx.now <= s.last) {
            return;  // by time: a new request comes later
        }
        s.ended = false;
        const double gap = ctx.now > s.last ? static_cast<double>(ctx.now - s.last) : 0.0;
        s.gap = s.has_gap ? s.gap + weight * (gap - s.gap) : gap;
        s.has_gap = true;
        s.last = ctx.now;
        s.hint = 0;
        gap_sum += gap;
        ++gaps;
    }
    void on_insert(std::uint32_t x, const access_context& ctx) {
        items[x] = item{.tracked = true, .seq = ++inserted};
        touch(x, ctx, true);
    }
    void on_access(std::uint32_t x, const access_context& ctx) { touch(x, ctx, true); }
    void on_hold(std::uint32_t x) { items[x].held = true; }
    void on_release(std::uint32_t x, const access_context& ctx) {
        items[x].held = false;
        touch(x, ctx, false);
        if (ctx.expected_return != 0 && items[x].session != 0) sessions[items[x].session].hint = ctx.expected_return;
    }
    void on_session_end(std::uint64_t s) {
        if (const auto it = sessions.find(s); it != sessions.end()) it->second.hint = never;
    }
    void on_request_end(std::uint64_t s) {
        if (!ends_heard) {  // what was learned by time is forgotten
            gap_sum = 0.0;
            gaps = 0;
            for (auto& [id, state] : sessions) {
                state.has_gap = false;
                state.gap = 0.0;
            }
        }
        ends_heard = true;
        if (const auto it = sessions.find(s); it != sessions.end()) it->second.ended = true;
    }
    void on_erase(std::uint32_t x) { items[x].tracked = false; }
    std::optional<std::uint32_t> pop_victim() {
        // The no-session item touched least recently stands for them all.
        std::optional<std::uint32_t> lru;
        for (std::uint32_t x = 0; x < items.size(); ++x) {
            const item& it = items[x];
            if (it.tracked && !it.held && it.session == 0 && (!lru || it.touched < items[*lru].touched)) lru = x;
        }
        std::optional<std::uint32_t> best;
        double best_back = 0.0;
        for (std::uint32_t x = 0; x < items.size(); ++x) {
            const item& it = items[x];
            if (!it.tracked || it.held) continue;
            double b;
            if (it.session == 0) {
                if (x != *lru) continue;
                b = static_cast<double>(it.touch) + mean_gap();
            } else {
                b = back(sessions.at(it.session));
            }
            if (!best || b > best_back || (b == best_back && it.seq > items[*best].seq)) {
                best = x;
                best_back = b;
            }
        }
        if (best) items[*best].tracked = false;
        return best;
    }
};

// Drives the policy, queue_aware<predicted_return> (no queue) and the model
// with the same random operations; every victim must agree.
// `ends`: the engine also reports request ends (on_request_end).
void check_against_model(std::size_t capacity, double weight, std::uint64_t seed, std::uint64_t sessions,
                         std::size_t operations, bool ends) {
    const predicted_return::config_type config{.gap_weight = weight};
    predicted_return policy(capacity, config);
    queue_aware<predicted_return> wrapped(capacity, config);
    naive_predicted_return model(capacity, weight);
    std::mt19937_64 rng(seed);
    auto below = [&](std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng); };
    timestamp now = 1;
    std::size_t victims = 0, ranked = 0;
    auto context = [&] {
        access_context ctx;
        ctx.now = now;
        ctx.session = session_id{below(sessions + 1)};  // 0: none
        return ctx;
    };
    for (std::size_t op = 0; op < operations; ++op) {
        if (below(4) == 0) now += 1 + below(below(8) == 0 ? 500 : 20);  // often several calls at one time
        if (ends && below(20) == 0) {
            const session_id s{1 + below(sessions)};
            policy.on_request_end(s, now);
            wrapped.on_request_end(s, now);
            model.on_request_end(s.value);
            continue;
        }
        const auto x = static_cast<std::uint32_t>(below(capacity));
        const item_id id{x};
        const auto& it = model.items[x];
        const std::uint64_t what = below(100);
        INFO("seed " << seed << " op " << op << " item " << x);
        if (!it.tracked) {
            if (what < 70) {
                const access_context ctx = context();
                policy.on_insert(id, ctx);
                wrapped.on_insert(id, ctx);
                model.on_insert(x, ctx);
            }
        } else if (what < 25) {
            const access_context ctx = context();
            policy.on_access(id, ctx);
            wrapped.on_access(id, ctx);
            model.on_access(x, ctx);
        } else if (what < 40 && !it.held) {
            policy.on_hold(id);
            wrapped.on_hold(id);
            model.on_hold(x);
        } else if (what < 60 && it.held) {
            access_context ctx = context();
            if (below(2) == 0) ctx.session = session_id{it.session};  // mostly its own session
            const std::uint64_t h = below(10);
            ctx.expected_return = h == 0 ? never : h == 1 ? now + below(300) : h == 2 ? 1 + below(now) : 0;
            policy.on_release(id, ctx);
            wrapped.on_release(id, ctx);
            model.on_release(x, ctx);
        } else if (what < 63) {
            const session_id s{1 + below(sessions)};
            policy.on_session_end(s, now);
            wrapped.on_session_end(s, now);
            model.on_session_end(s.value);
        } else if (what < 66) {
            policy.on_erase(id);
            wrapped.on_erase(id);
            model.on_erase(x);
        }
        if (what >= 66 || policy.evictable_size() == capacity) {
            const std::uint64_t n = what >= 96 ? 1 + below(3) : 1;
            for (std::uint64_t k = 0; k < n; ++k) {
                const auto want = model.pop_victim();
                const auto got = policy.pop_victim(now);
                const auto also = wrapped.pop_victim(now);
                REQUIRE(got.has_value() == want.has_value());
                REQUIRE(also == got);
                if (!want) break;
                REQUIRE(got->value == *want);
                ++victims;
            }
        }
        REQUIRE(policy.size() == wrapped.size());
        REQUIRE(policy.evictable_size() == wrapped.evictable_size());
        // evictable_before against its definition: insert the new item into
        // a copy of the model and count the victims popped before it.
        if (below(capacity >= 300 ? 100 : 20) == 0) {
            std::uint32_t fresh = 0;
            while (fresh < capacity && model.items[fresh].tracked) ++fresh;
            if (fresh == capacity) continue;
            const access_context ctx = context();
            const std::size_t limit = 1 + below(capacity);
            naive_predicted_return after = model;
            after.on_insert(fresh, ctx);
            std::size_t before = 0;
            while (before < limit) {
                const auto v = after.pop_victim();
                REQUIRE(v.has_value());
                if (*v == fresh) break;
                ++before;
            }
            INFO("session " << ctx.session.value << " now " << now << " limit " << limit);
            REQUIRE(policy.evictable_before(ctx, limit) == before);
            REQUIRE(wrapped.evictable_before(ctx, limit) == before);
            ++ranked;
        }
    }
    REQUIRE(victims > operations / 10);
    REQUIRE(ranked > 0);
}

}  // namespace

TEST_CASE("predicted_return: same victims as a naive scan of every item",
          "[eviction][predicted_return][differential]") {
    const std::size_t capacity = GENERATE(1u, 7u, 64u, 300u);
    const double weight = GENERATE(0.5, 0.2);
    const std::uint64_t sessions = GENERATE(1u, 5u, 40u);
    const bool ends = GENERATE(false, true);
    for (std::uint64_t seed = 1; seed <= 2; ++seed)
        check_against_model(capacity, weight, seed * 7919 + capacity, sessions, capacity >= 300 ? 20'000 : 40'000,
                            ends);
}

TEST_CASE("predicted_return: with no sessions it is LRU", "[eviction][predicted_return]") {
    const std::size_t capacity = 50;
    predicted_return policy(capacity);
    lru reference(capacity);
    std::mt19937_64 rng(5);
    std::vector<int> state(capacity, 0);  // 0 untracked, 1 evictable, 2 held
    timestamp now = 1;
    for (int op = 0; op < 50'000; ++op) {
        now += rng() % 3;
        access_context ctx;
        ctx.now = now;
        const auto x = static_cast<std::uint32_t>(rng() % capacity);
        const item_id id{x};
        const auto what = rng() % 10;
        if (state[x] == 0) {
            policy.on_insert(id, ctx);
            reference.on_insert(id, ctx);
            state[x] = 1;
        } else if (what < 3) {
            policy.on_access(id, ctx);
            reference.on_access(id, ctx);
        } else if (what < 5) {
            if (state[x] == 1) {
                policy.on_hold(id);
                reference.on_hold(id);
                state[x] = 2;
            } else {
                policy.on_release(id, ctx);
                reference.on_release(id, ctx);
                state[x] = 1;
            }
        } else {
            const auto v = policy.pop_victim(now);
            REQUIRE(v == reference.pop_victim(now));
            if (v) state[v->index()] = 0;
        }
    }
}

TEST_CASE("predicted_return keeps the session that comes back sooner, where LRU does not",
          "[eviction][predicted_return][example]") {
    // Session 1 sends a request every 10 s, session 2 every 100 s; each has
    // one block cached. At t = 101 session 2 has just been served (back at
    // 201), session 1 was served at 100 (back at 110). A third session's block
    // needs room at 102: LRU evicts session 1's block, the older; session 1
    // then misses at 110. predicted_return evicts session 2's, needed at 201.
    const item_id a{0}, b{1}, fresh{2};
    predicted_return p(3);
    lru l(3);
    p.on_insert(a, session_ctx(1, 0));
    l.on_insert(a, session_ctx(1, 0));
    p.on_insert(b, session_ctx(2, 1));
    l.on_insert(b, session_ctx(2, 1));
    for (timestamp t = 10; t <= 100; t += 10) {
        p.on_access(a, session_ctx(1, t));
        l.on_access(a, session_ctx(1, t));
    }
    p.on_access(b, session_ctx(2, 101));
    l.on_access(b, session_ctx(2, 101));
    REQUIRE(p.expected_back(session_id{1}) == 110.0);
    REQUIRE(p.expected_back(session_id{2}) == 201.0);

    REQUIRE(l.pop_victim(102) == a);
    REQUIRE(p.pop_victim(102) == b);
    p.on_insert(fresh, session_ctx(3, 102));
    REQUIRE(p.contains(a));  // session 1 finds its block at 110

    // Once session 1 says it has ended, its block goes before anyone's.
    p.on_session_end(session_id{1}, 103);
    REQUIRE(p.expected_back(session_id{1}) == std::numeric_limits<double>::infinity());
    REQUIRE(p.pop_victim(104) == a);
}

TEST_CASE("predicted_return: where request ends are heard, a request's stores a step apart are one request",
          "[eviction][predicted_return][example]") {
    // Session 1 sends a request every 100 ms; each request's three blocks are
    // stored 5 ms apart (an engine's steps). By time alone each store would
    // be a new request and the session's gap would shrink towards 5 ms;
    // with the ends reported it is about 100 ms. Before the first end the
    // stores at 5 and 10 read as requests; the end at 10 forgets their gaps,
    // so the gaps learned are 90 (from 10), 100 and 100: an average of
    // 90 -> 95 -> 97.5 with weight 0.5.
    auto ctx = [](timestamp now) { return session_ctx(1, now); };
    predicted_return by_ends(16), by_time(16);
    std::uint32_t next = 0;
    for (timestamp start = 0; start <= 300; start += 100) {
        for (timestamp step = 0; step < 3; ++step, ++next) {
            by_ends.on_insert(item_id{next}, ctx(start + 5 * step));
            by_time.on_insert(item_id{next}, ctx(start + 5 * step));
        }
        by_ends.on_request_end(session_id{1}, start + 10);
    }
    // The last request started at 300, after gaps of 100.
    REQUIRE(by_ends.expected_back(session_id{1}) == 397.5);
    REQUIRE(by_ends.mean_gap() == Approx(290.0 / 3));
    // By time: its latest request is the store at 310, its gap under 20 ms.
    REQUIRE(by_time.expected_back(session_id{1}).value() < 330.0);

    // A store completing with no session named leaves the block its
    // session's: once the session ends, it goes with the session's blocks,
    // before a block of no session touched earlier.
    const item_id loose{15};
    access_context unnamed;
    unnamed.now = 305;
    by_ends.on_insert(loose, unnamed);
    by_ends.on_hold(item_id{0});
    unnamed.now = 311;
    by_ends.on_release(item_id{0}, unnamed);
    by_ends.on_session_end(session_id{1}, 312);
    for (int k = 0; k < 12; ++k) REQUIRE(by_ends.pop_victim(313) != loose);  // every block of session 1
    REQUIRE(by_ends.pop_victim(313) == loose);
}

TEST_CASE("predicted_return: a session's deepest block goes first, a held one never", "[eviction][predicted_return]") {
    predicted_return p(4);
    access_context c;
    c.session = session_id{9};
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, c);  // a request's blocks, head first
    p.on_hold(item_id{3});
    REQUIRE(p.pop_victim(0) == item_id{2});
    REQUIRE(p.pop_victim(0) == item_id{1});
    REQUIRE(p.pop_victim(0) == item_id{0});
    REQUIRE_FALSE(p.pop_victim(0).has_value());
}

TEST_CASE("predicted_return refuses a gap weight that is not above 0 and at most 1",
          "[eviction][predicted_return][config]") {
    for (double w : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()})
        REQUIRE_THROWS_WITH(predicted_return(4, {.gap_weight = w}),
                            Catch::StartsWith("predicted_return: gap_weight") && Catch::Contains("must be in (0, 1]"));
}

TEST_CASE("cache_policy_core::end_request reaches predicted_return, session 0 is no call",
          "[eviction][predicted_return][engine]") {
    engine::cache_policy_core<predicted_return> core(8, {});
    core.insert(0, session_ctx(1, 0), true);
    core.insert(1, session_ctx(1, 5), true);  // by time (no end heard yet): a request with a gap of 5
    REQUIRE(core.policy().expected_back(session_id{1}) == 10.0);
    core.end_request(session_id{0}, session_ctx(0, 8));  // no session: not heard, still by time
    core.insert(2, session_ctx(1, 9), true);
    REQUIRE(core.policy().expected_back(session_id{1}) == Approx(9.0 + 4.5));
    core.end_request(session_id{1}, session_ctx(1, 10));  // by ends from now; the gaps by time forgotten
    REQUIRE(core.policy().mean_gap() == 0.0);
    core.insert(3, session_ctx(1, 100), true);  // the next request: a gap of 91 from the latest, at 9
    core.insert(4, session_ctx(1, 105), true);  // the same request
    REQUIRE(core.policy().expected_back(session_id{1}) == 191.0);
}

TEST_CASE("cache_policy_core::admissible: past the free room, a chunk is stored only where it is not the next victim",
          "[eviction][predicted_return][engine][example]") {
    // With the newest gap as the prediction (weight 1): session 1 holds two
    // chunks and came back after 90 and 10 ms (back at 110), session 2 two
    // and came back after 100 (back at 200); the mean gap is 200 / 3.
    engine::cache_policy_core<queue_aware<predicted_return>> core(6, {.gap_weight = 1.0});
    auto at = [](std::uint64_t session, timestamp now, std::uint64_t key) {
        access_context c = session_ctx(session, now);
        c.key = key;
        return c;
    };
    core.insert(0, at(1, 0, 10), true);
    core.insert(1, at(1, 0, 11), true);
    core.insert(2, at(2, 0, 20), true);
    core.insert(3, at(2, 0, 21), true);
    core.touch(0, at(1, 90, 0));
    core.touch(0, at(1, 100, 0));
    core.touch(2, at(2, 100, 0));
    REQUIRE(core.policy().base().expected_back(session_id{1}) == 110.0);
    REQUIRE(core.policy().base().expected_back(session_id{2}) == 200.0);

    const std::vector<std::uint64_t> offer{31, 32, 33, 34};
    // A new session (back at 105 + 66.7) goes after session 2's chunks: its
    // offer is stored whole, two in the free room and two over session 2's.
    REQUIRE(core.admissible(offer, 2, 0, at(3, 105, 0)) == 4);
    // Session 1 (back at 110, first) may take session 2's two, no more.
    REQUIRE(core.admissible(offer, 0, 0, at(1, 100, 0)) == 2);
    // Session 2 is back last: its deeper chunks would go before anyone's,
    // so only the free room.
    REQUIRE(core.admissible(offer, 1, 0, at(2, 100, 0)) == 1);
    REQUIRE(core.admissible(offer, 0, 0, at(2, 100, 0)) == 0);
    // The offer's chunks already stored (shielded) are no victims: with
    // three of the four evictable among them, one can go.
    REQUIRE(core.admissible(offer, 0, 3, at(3, 105, 0)) == 1);
    // A chunk a queued request reads is stored while anything can go; the
    // one after it, unread, is not (the offer is cut at the first declined).
    core.enqueue(7, session_id{2}, std::vector<std::uint64_t>{31});
    REQUIRE(core.admissible(offer, 0, 0, at(2, 100, 0)) == 1);
    // A policy that cannot rank a new item stores all it is offered.
    engine::cache_policy_core<lru> plain(6, {});
    REQUIRE(plain.admissible(offer, 0, 0, at(2, 100, 0)) == 4);
}
