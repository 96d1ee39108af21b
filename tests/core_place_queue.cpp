// place_links / place_queue (core/place_queue.hpp) against a naive model:
// two queues sharing one id space, each a vector of (stamp, id, held) whose
// front is the evictable entry with the smallest stamp, on long random
// sequences of pushes, holds, releases, removals, pops and moves; with the
// default place limit and with limits small enough that renumbering happens
// every few pushes.
#include <catch2/catch.hpp>

#include <kvpolicy/core/place_queue.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {

struct naive_queue {
    struct entry {
        std::uint64_t stamp;
        std::uint32_t id;
        bool held;
    };
    std::vector<entry> items;

    [[nodiscard]] std::uint32_t front() const {
        const entry* best = nullptr;
        for (const entry& e : items)
            if (!e.held && (best == nullptr || e.stamp < best->stamp)) best = &e;
        return best == nullptr ? no_index : best->id;
    }
    entry& find(std::uint32_t id) {
        return *std::find_if(items.begin(), items.end(), [&](const entry& e) { return e.id == id; });
    }
    void remove(std::uint32_t id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id; });
    }
    [[nodiscard]] std::uint32_t evictable() const {
        return static_cast<std::uint32_t>(
            std::count_if(items.begin(), items.end(), [](const entry& e) { return !e.held; }));
    }
};

template <class Links>
void drive(std::size_t capacity, std::uint64_t seed, int operations) {
    Links links(capacity);
    place_queue q[2];
    naive_queue ref[2];
    std::vector<int> where(capacity, -1);  // queue of each id, -1: none
    std::uint64_t stamp = 0;
    std::mt19937_64 rng(seed);
    auto pick = [&](auto&& pred) -> std::uint32_t {  // a random id satisfying pred, or no_index
        std::vector<std::uint32_t> c;
        for (std::uint32_t id = 0; id < capacity; ++id)
            if (pred(id)) c.push_back(id);
        return c.empty() ? no_index : c[rng() % c.size()];
    };
    std::size_t walks = 0;
    for (int step = 0; step < operations; ++step) {
        const int k = static_cast<int>(rng() % 2);
        switch (rng() % 7) {
            case 0:
            case 1: {  // push
                const std::uint32_t id = pick([&](std::uint32_t i) { return where[i] < 0; });
                if (id == no_index) break;
                links.push_back(q[k], id);
                ref[k].items.push_back({stamp++, id, false});
                where[id] = k;
                break;
            }
            case 2: {  // hold
                const std::uint32_t id = pick([&](std::uint32_t i) { return where[i] >= 0 && !links.is_held(i); });
                if (id == no_index) break;
                links.hold(q[where[id]], id);
                ref[where[id]].find(id).held = true;
                break;
            }
            case 3: {  // release
                const std::uint32_t id = pick([&](std::uint32_t i) { return where[i] >= 0 && links.is_held(i); });
                if (id == no_index) break;
                links.release(q[where[id]], id);
                ref[where[id]].find(id).held = false;
                break;
            }
            case 4: {  // remove, held or not
                const std::uint32_t id = pick([&](std::uint32_t i) { return where[i] >= 0; });
                if (id == no_index || rng() % 3 != 0) break;
                links.remove(q[where[id]], id);
                ref[where[id]].remove(id);
                where[id] = -1;
                break;
            }
            case 5: {  // pop
                const std::uint32_t expected = ref[k].front();
                REQUIRE(links.pop_front(q[k]) == expected);
                if (expected != no_index) {
                    ref[k].remove(expected);
                    where[expected] = -1;
                }
                break;
            }
            case 6: {  // the front to the back of either queue (s3fifo's promotion and reinsertion)
                const std::uint32_t id = ref[k].front();
                if (id == no_index) break;
                const int to = static_cast<int>(rng() % 2);
                links.move_to_back(q[k], q[to], id);
                ref[k].remove(id);
                ref[to].items.push_back({stamp++, id, false});
                where[id] = to;
                break;
            }
        }
        for (int j = 0; j < 2; ++j) {
            REQUIRE(Links::front(q[j]) == ref[j].front());
            REQUIRE(q[j].evictable == ref[j].evictable());
            REQUIRE(q[j].size() == ref[j].items.size());
            REQUIRE(q[j].empty() == (ref[j].evictable() == 0));
            // Held items before the front: the cursor's invariant.
            for (std::uint32_t id = q[j].items.front; id != q[j].first; id = links.next(id)) {
                REQUIRE(links.is_held(id));
                ++walks;
            }
        }
    }
    REQUIRE(walks > 0);  // held items did sit before a front
}

}  // namespace

TEST_CASE("place queues: same fronts as a naive stamped model, holds and releases included", "[core][place_queue]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 8u, 61u);
    drive<place_links>(capacity, seed, 20'000);
}

TEST_CASE("place queues: renumbering keeps the order (tiny place limits)", "[core][place_queue]") {
    const std::uint64_t seed = GENERATE(4u, 5u);
    const std::size_t capacity = GENERATE(8u, 61u);
    drive<basic_place_links<1>>(capacity, seed, 20'000);  // renumbers at every push
    drive<basic_place_links<70>>(capacity, seed, 20'000);
}

TEST_CASE("place queues: a released item goes back to its place, not to the back", "[core][place_queue]") {
    place_links links(4);
    place_queue q;
    for (std::uint32_t id = 0; id < 4; ++id) links.push_back(q, id);
    links.hold(q, 0);
    links.hold(q, 1);
    REQUIRE(place_links::front(q) == 2);
    REQUIRE(links.pop_front(q) == 2);
    links.release(q, 1);
    REQUIRE(place_links::front(q) == 1);  // older than 3
    links.release(q, 0);
    REQUIRE(links.pop_front(q) == 0);
    REQUIRE(links.pop_front(q) == 1);
    REQUIRE(links.pop_front(q) == 3);
    REQUIRE(links.pop_front(q) == no_index);
    REQUIRE(q.size() == 0);
}
