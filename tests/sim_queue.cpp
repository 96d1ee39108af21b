// The simulator's waiting queue (request_replay_config::lookahead and
// serve_rate): replay_requests drives queue_aware<lru> as the naive queue
// cache of tests/support/naive_queue_cache.hpp says it should, at every
// depth; no queue is the base exactly; the load model's queue depths on a
// worked case; bad configurations refused.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>
#include <kvpolicy/sim/replay.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "support/naive_queue_cache.hpp"
#include "support/require_throws.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

std::vector<sim::request_record> session_conversations(std::uint64_t seed, std::size_t n, std::size_t longest) {
    std::mt19937_64 rng(seed);
    std::map<std::uint64_t, std::uint64_t> turns;
    std::vector<sim::request_record> out;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t conv = rng() % 16;
        std::uint64_t& t = turns[conv];
        t = std::min<std::uint64_t>(t + 1 + rng() % 3, longest);
        sim::request_record r;
        r.timestamp_ms = 1000 * i;
        r.input_length = t * 16;
        r.output_length = 50;
        r.session = conv;
        r.has_session = true;
        r.hash_ids = chain(conv, static_cast<std::size_t>(t));
        r.line = i + 1;
        out.push_back(std::move(r));
    }
    return out;
}

template <class Policy>
sim::replay_result replay(const std::vector<sim::request_record>& requests, std::size_t capacity, std::size_t lookahead,
                          double serve_rate = 0) {
    sim::vector_request_source source(requests);
    sim::request_replay_config cfg;
    cfg.capacity = capacity;
    cfg.lookahead = lookahead;
    cfg.serve_rate = serve_rate;
    return sim::replay_requests<Policy, lru>(source, cfg, sim::replay_mode::prefix);
}

// What the naive cache hits with the next `d` requests queued before each.
std::uint64_t naive_hits(const std::vector<sim::request_record>& requests, std::size_t capacity, std::size_t d) {
    naive_prefix_cache model(capacity);
    std::uint64_t hits = 0;
    std::size_t enqueued = 0;  // requests [0, enqueued) have been queued (or served unqueued)
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (enqueued <= i)
            enqueued = i + 1;  // served without having been queued
        else
            model.dequeue(i);
        for (; enqueued < std::min(requests.size(), i + 1 + d); ++enqueued)
            model.enqueue(enqueued, requests[enqueued].hash_ids);
        const auto run = model.admit(requests[i].session, requests[i].hash_ids);
        if (!run) continue;
        hits += *run;
        model.release(requests[i].session);
    }
    return hits;
}

}  // namespace

TEST_CASE("replay_requests with a lookahead hits what the naive queue cache hits", "[sim][queue][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(8u, 30u);
    const auto requests = session_conversations(seed, 400, 14);
    for (std::size_t d : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{16}, std::size_t{64}}) {
        const sim::replay_result r = replay<queue_aware<lru>>(requests, capacity, d);
        INFO("lookahead " << d);
        REQUIRE(r.hits == naive_hits(requests, capacity, d));
        REQUIRE(r.queue_modelled == (d > 0));
        if (d > 0) {
            // The next d requests, fewer at the end of the trace.
            const double n = static_cast<double>(requests.size());
            const double dd = static_cast<double>(d);
            const double expected_mean = (dd * (n - dd) + dd * (dd - 1) / 2) / n;
            REQUIRE(r.queue_depth_mean == Approx(expected_mean));
            REQUIRE(r.queue_depth_p50 == d);
        }
    }
    // No queue: the base, exactly; lru ignores a queue.
    const sim::replay_result base = replay<lru>(requests, capacity, 0);
    REQUIRE(replay<queue_aware<lru>>(requests, capacity, 0).hits == base.hits);
    REQUIRE(replay<lru>(requests, capacity, 16).hits == base.hits);
}

TEST_CASE("the load model queues every request that has arrived and not started", "[sim][queue]") {
    // All requests arrive at 0 and the instance is slow: when request i
    // starts, every later one is queued (n - 1 - i), so the queue is the
    // rest of the trace, as a lookahead of n.
    auto requests = session_conversations(7, 101, 10);
    for (auto& r : requests) r.timestamp_ms = 0;
    const sim::replay_result slow = replay<queue_aware<lru>>(requests, 20, 0, 1.0);
    REQUIRE(slow.queue_modelled);
    REQUIRE(slow.queue_depth_mean == Approx(50.0));
    REQUIRE(slow.queue_depth_p50 == 50);
    REQUIRE(slow.queue_depth_p99 == 99);
    REQUIRE(slow.hits == replay<queue_aware<lru>>(requests, 20, requests.size()).hits);
    // Requests 1 s apart, each prefilled in well under a second: nobody waits.
    auto spaced = session_conversations(7, 101, 10);
    const sim::replay_result fast = replay<queue_aware<lru>>(spaced, 20, 0, 1e9);
    REQUIRE(fast.queue_depth_mean == 0.0);
    REQUIRE(fast.queue_depth_p99 == 0);
    REQUIRE(fast.hits == replay<lru>(spaced, 20, 0).hits);
}

TEST_CASE("the simulator's queue refuses what it cannot model", "[sim][queue][errors]") {
    const auto requests = session_conversations(1, 10, 4);
    sim::vector_request_source source(requests);
    sim::request_replay_config cfg;
    cfg.capacity = 8;
    cfg.lookahead = 4;
    cfg.serve_rate = 100;
    require_throws<config_error>(
        [&] { (void)sim::replay_requests<queue_aware<lru>, lru>(source, cfg, sim::replay_mode::prefix); },
        "the waiting queue: give a lookahead or a serve rate, not both");
    cfg.lookahead = 0;
    cfg.serve_rate = std::numeric_limits<double>::quiet_NaN();
    require_throws<config_error>(
        [&] { (void)sim::replay_requests<queue_aware<lru>, lru>(source, cfg, sim::replay_mode::prefix); },
        "serve rate nan tokens/s: give a finite rate > 0 (or 0 for no queue)");
    cfg.serve_rate = 0;
    cfg.lookahead = 2;
    cfg.cpu_capacity = 4;
    require_throws<config_error>(
        [&] { (void)sim::replay_instances<queue_aware<lru>, lru>(source, cfg, 2, 100, true); },
        "the waiting queue (--lookahead, --serve-rate) is modelled for one instance without a remote store; "
        "drop it, or --instances and --remote-capacity");
}
