// engine::front_cache_forecast (engine/front_cache_forecast.hpp): a worked
// example, the queue's bookkeeping (leave, a request queued again, an
// unknown id, an ended request kept until out of reach), the error for a
// GPU of 0 blocks, and long random queues against a naive model that
// rebuilds each forecast from a plain list.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/front_cache_forecast.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

using kvpolicy::engine::front_cache_forecast;

namespace {

using key_vec = std::vector<std::uint64_t>;

auto none = [](std::uint64_t) { return false; };

// The rule written out: the requests ahead, newest first, each from its
// first block, until the distinct blocks gathered reach the GPU's size;
// while they do not, what the GPU holds now counts too; the forecast is the
// longest prefix of such blocks.
// Ended requests stay in the walk; those it did not reach (the GPU was full
// before them) are dropped from the oldest end, up to the first one still
// waiting or running.
struct naive_forecast {
    struct request {
        std::uint64_t id;
        key_vec blocks;
        bool ended;
    };
    std::size_t gpu_blocks;
    std::vector<request> queue;  // oldest first

    std::size_t join(std::uint64_t id, const key_vec& k, const std::set<std::uint64_t>& held) {
        leave(id);
        std::set<std::uint64_t> window;
        std::vector<bool> reached(queue.size(), false);
        for (std::size_t i = queue.size(); i-- > 0;) {
            reached[i] = window.size() < gpu_blocks;
            for (std::uint64_t b : queue[i].blocks)
                if (window.size() < gpu_blocks) window.insert(b);
        }
        std::size_t dropped = 0;
        while (dropped < queue.size() && queue[dropped].ended && !reached[dropped]) ++dropped;
        queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(dropped));
        const bool room = window.size() < gpu_blocks;
        std::size_t hit = 0;
        while (hit < k.size() && (window.count(k[hit]) == 1 || (room && held.count(k[hit]) == 1))) ++hit;
        queue.push_back({id, k, false});
        return hit;
    }
    std::vector<request>::iterator find(std::uint64_t id) {
        return std::find_if(queue.begin(), queue.end(), [&](const request& q) { return q.id == id; });
    }
    bool leave(std::uint64_t id) {
        const auto it = find(id);
        if (it == queue.end()) return false;
        queue.erase(it);
        return true;
    }
    bool end(std::uint64_t id) {
        const auto it = find(id);
        if (it == queue.end()) return false;
        it->ended = true;
        return true;
    }
};

}  // namespace

TEST_CASE("front_cache_forecast: a worked example", "[engine][forecast]") {
    front_cache_forecast f(4);
    // Nothing ahead: only what the GPU holds now counts.
    CHECK(f.join(1, key_vec{1, 2, 3}, [](std::uint64_t k) { return k == 1; }) == 1);
    CHECK(f.join(2, key_vec{4, 5}, none) == 0);
    // Ahead: {4, 5}, then 1 and 2 of {1, 2, 3} fill a GPU of four, so what
    // it holds now (9) no longer counts; 1 and 2 are served, 9 is not.
    CHECK(f.join(3, key_vec{1, 2, 9}, [](std::uint64_t) { return true; }) == 2);
    // Ahead, newest first: {1, 2, 9}, then 4 of {4, 5}: full, so request
    // 1's 3 (and 5) are outside the window.
    CHECK(f.join(4, key_vec{9, 4, 3}, none) == 2);
    CHECK(f.requests() == 4);
    // Request 3 starts: it no longer stands ahead of anyone.
    CHECK(f.leave(3));
    CHECK(f.requests() == 3);
    // Ahead, newest first: {9, 4, 3}, {4, 5}: four blocks, full.
    CHECK(f.join(5, key_vec{5, 3, 9, 1}, none) == 3);
}

TEST_CASE("front_cache_forecast: leave and join again", "[engine][forecast]") {
    front_cache_forecast f(100);
    CHECK_FALSE(f.leave(7));  // never queued: nothing changes
    CHECK(f.join(7, key_vec{1, 2}, none) == 0);
    CHECK(f.join(8, key_vec{1, 2, 3}, none) == 2);
    // Request 7 queued again (a preemption): it goes to the back, behind 8.
    CHECK(f.join(7, key_vec{1, 2, 3, 4}, none) == 3);
    CHECK(f.requests() == 2);
    CHECK(f.leave(8));
    CHECK(f.leave(7));
    CHECK_FALSE(f.leave(7));
    CHECK(f.requests() == 0);
    CHECK(f.join(9, key_vec{1, 2}, none) == 0);  // nothing ahead, nothing held
}

TEST_CASE("front_cache_forecast: an ended request stays in the walk until the GPU fills ahead of it",
          "[engine][forecast]") {
    front_cache_forecast f(4);
    CHECK(f.join(1, key_vec{1, 2, 3}, none) == 0);
    CHECK(f.end(1));  // ran and ended: its blocks sit in the GPU's free list
    CHECK_FALSE(f.end(99));
    // No view of the GPU: request 1's blocks stand for what it holds.
    CHECK(f.join(2, key_vec{1, 2, 7}, none) == 2);
    CHECK(f.requests() == 2);
    CHECK(f.end(2));
    // Ahead: {1, 2, 7}, then 3 of request 1: four blocks, full.
    CHECK(f.join(3, key_vec{1, 2, 3, 8}, none) == 3);
    // Ahead: request 3 alone fills the GPU, so requests 1 and 2, ended and
    // out of reach, are dropped.
    CHECK(f.join(4, key_vec{5, 6, 9, 10}, none) == 0);
    CHECK(f.requests() == 2);
    // Ahead: {5, 6, 9, 10}, full: request 3, out of reach but still
    // waiting or running, stays.
    CHECK(f.join(5, key_vec{1, 5}, none) == 0);
    CHECK(f.requests() == 3);
}

TEST_CASE("front_cache_forecast: a GPU of 0 blocks is refused, naming the fix", "[engine][forecast][errors]") {
    CHECK_THROWS_WITH(front_cache_forecast(0),
                      "front_cache_forecast: gpu_blocks is 0; give the GPU prefix "
                      "cache's size in blocks");
}

TEST_CASE("front_cache_forecast forecasts as the naive rule on long random queues", "[engine][forecast]") {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        std::mt19937_64 rng(seed);
        const std::size_t gpu = 4 + rng() % 60;
        front_cache_forecast f(gpu);
        naive_forecast want{gpu, {}};
        std::vector<std::uint64_t> ids;  // ever joined
        for (int op = 0; op < 20000; ++op) {
            INFO("seed " << seed << ", op " << op << ", gpu " << gpu);
            if (rng() % 3 != 0) {
                // A request of a few sessions' chains: a shared prefix, then its own blocks.
                key_vec k;
                const std::uint64_t session = rng() % 8;
                const std::size_t shared = rng() % 12, own = rng() % 6;
                for (std::size_t i = 0; i < shared; ++i) k.push_back(session * 1000 + i);
                for (std::size_t i = 0; i < own; ++i) k.push_back(100000 + rng() % 400);
                std::set<std::uint64_t> held;
                for (int i = 0; i < 10; ++i) held.insert(rng() % 2 == 0 ? session * 1000 + rng() % 12 : rng() % 400);
                const std::uint64_t id = rng() % 5 == 0 && !ids.empty() ? ids[rng() % ids.size()] : op;
                ids.push_back(id);
                REQUIRE(f.join(id, k, [&](std::uint64_t x) { return held.count(x) == 1; }) == want.join(id, k, held));
            } else {
                const std::uint64_t id = ids.empty() || rng() % 6 == 0 ? 1u << 30 : ids[rng() % ids.size()];
                if (rng() % 2 == 0)
                    REQUIRE(f.leave(id) == want.leave(id));
                else
                    REQUIRE(f.end(id) == want.end(id));
            }
            REQUIRE(f.requests() == want.queue.size());
        }
    }
}
