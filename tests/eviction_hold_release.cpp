// The zoo-wide hold/release rule (concepts.hpp) at request level, the way
// tiered_cache drives a policy: every hit is on_access then on_hold while the
// request runs, a miss is on_insert then on_hold, and the request's blocks
// are released in reverse order when it finishes. A release is not a new
// reference: CLOCK and SIEVE must stay CLOCK and SIEVE (not degenerate into
// LRU, as they did when a release re-entered at the newest end), and LFU's
// count must be exactly the number of requests that used the block.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <kvpolicy/eviction/clock.hpp>
#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lfu.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>
#include <kvpolicy/eviction/sieve.hpp>
#include <kvpolicy/eviction/two_q.hpp>

#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

using key_request = std::vector<std::uint64_t>;  // block keys, prefix first

/// Serves requests one after another on a policy at request level; records
/// the victims' keys in eviction order and, per cached key, its slot and the
/// number of requests that used it since it was inserted.
template <class P>
struct request_driver {
    P& p;
    std::map<std::uint64_t, std::uint32_t> slot_of;
    std::map<std::uint64_t, std::uint64_t> uses;
    std::vector<std::uint64_t> key_of;
    std::vector<std::uint32_t> free;
    std::vector<std::uint64_t> victims;
    timestamp now = 0;

    request_driver(P& policy, std::size_t capacity) : p(policy), key_of(capacity, 0) {
        for (std::uint32_t s = static_cast<std::uint32_t>(capacity); s-- > 0;) free.push_back(s);
    }

    void serve(const key_request& r) {
        std::vector<std::uint32_t> held;
        for (const std::uint64_t key : r) {
            access_context ctx;
            ctx.now = ++now;
            ctx.key = key;
            if (auto it = slot_of.find(key); it != slot_of.end()) {
                p.on_access(item_id{it->second}, ctx);
                p.on_hold(item_id{it->second});
                held.push_back(it->second);
                ++uses[key];
                continue;
            }
            if constexpr (requires { p.on_miss(ctx); }) p.on_miss(ctx);
            if (free.empty()) {
                const auto v = p.pop_victim(now);
                REQUIRE(v.has_value());  // requests are shorter than the capacity
                slot_of.erase(key_of[v->value]);
                uses.erase(key_of[v->value]);
                victims.push_back(key_of[v->value]);
                free.push_back(v->value);
            }
            const std::uint32_t s = free.back();
            free.pop_back();
            slot_of[key] = s;
            key_of[s] = key;
            uses[key] = 1;
            p.on_insert(item_id{s}, ctx);
            p.on_hold(item_id{s});
            held.push_back(s);
        }
        access_context end;
        end.now = ++now;
        for (auto it = held.rbegin(); it != held.rend(); ++it) p.on_release(item_id{*it}, end);
    }
};

template <class P>
std::vector<std::uint64_t> serve(P& p, std::size_t capacity, const std::vector<key_request>& requests) {
    request_driver<P> d(p, capacity);
    for (const key_request& r : requests) d.serve(r);
    return d.victims;
}

/// Requests that share prefixes: a few "system prompts" of 2-4 blocks, then a
/// private tail; some sessions come back and extend their own history.
std::vector<key_request> request_stream(std::uint64_t seed, std::size_t n) {
    std::mt19937_64 rng(seed);
    std::vector<key_request> histories(24);
    std::uint64_t next_key = 1000;
    for (std::size_t s = 0; s < histories.size(); ++s) {
        const std::uint64_t prompt = rng() % 4;
        for (std::uint64_t b = 0; b < 2 + prompt % 3; ++b) histories[s].push_back(prompt * 10 + b);
    }
    std::vector<key_request> out;
    for (std::size_t i = 0; i < n; ++i) {
        key_request& h = histories[rng() % histories.size()];
        const std::size_t fresh = 1 + rng() % 3;
        for (std::size_t k = 0; k < fresh; ++k) h.push_back(next_key++);
        if (h.size() > 12) h.erase(h.begin() + 4, h.begin() + 8);  // the session's window slides
        out.push_back(h);
    }
    return out;
}

}  // namespace

TEST_CASE("request level: a hit is no move for clock, sieve and fifo, a move for lru", "[eviction][hold_release]") {
    // Capacity 2: 0 and 1 inserted, then 1 hit, then 0 hit, then a miss.
    // LRU evicts 1 (the least recently used); CLOCK and SIEVE clear both bits
    // and evict 0, the older one, as FIFO does. Before the rule, each
    // release re-entered at the newest end and CLOCK and SIEVE evicted 1.
    const std::vector<key_request> requests = {{0}, {1}, {1}, {0}, {2}};
    lru l(2, {});
    kvpolicy::clock c(2, {});
    sieve v(2, {});
    fifo f(2, {});
    REQUIRE(serve(l, 2, requests) == std::vector<std::uint64_t>{1});
    REQUIRE(serve(c, 2, requests) == std::vector<std::uint64_t>{0});
    REQUIRE(serve(v, 2, requests) == std::vector<std::uint64_t>{0});
    REQUIRE(serve(f, 2, requests) == std::vector<std::uint64_t>{0});
}

TEST_CASE("request level: clock and sieve differ from lru, and match their references", "[eviction][hold_release]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(16u, 40u);
    const auto requests = request_stream(seed, 4000);
    lru l(capacity, {});
    kvpolicy::clock c(capacity, {});
    sieve v(capacity, {});
    ref_clock rc(capacity);
    ref_sieve rv(capacity);
    const auto lru_victims = serve(l, capacity, requests);
    const auto clock_victims = serve(c, capacity, requests);
    const auto sieve_victims = serve(v, capacity, requests);
    REQUIRE(lru_victims.size() > 1000);
    REQUIRE(clock_victims != lru_victims);
    REQUIRE(sieve_victims != lru_victims);
    REQUIRE(clock_victims != sieve_victims);
    REQUIRE(serve(rc, capacity, requests) == clock_victims);
    REQUIRE(serve(rv, capacity, requests) == sieve_victims);
}

TEST_CASE("request level: lfu counts each request once, hold and release add nothing", "[eviction][hold_release]") {
    const std::uint64_t seed = GENERATE(4u, 5u);
    const std::size_t capacity = 32;
    const auto requests = request_stream(seed, 3000);
    lfu p(capacity, {});
    request_driver<lfu> d(p, capacity);
    std::uint64_t hits = 0;
    for (const key_request& r : requests) {
        d.serve(r);
        REQUIRE(d.slot_of.size() == p.size());
        for (const auto& [key, slot] : d.slot_of) REQUIRE(p.count(item_id{slot}) == d.uses.at(key));
        for (const auto& [key, n] : d.uses) hits += n > 1 ? 1 : 0;
    }
    REQUIRE(hits > 1000);  // blocks really were hit while cached
    ref_lfu ref(capacity);
    REQUIRE(serve(ref, capacity, requests) == d.victims);
}
