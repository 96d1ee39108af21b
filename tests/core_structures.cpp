// The flat building blocks against obviously-correct standard containers, on
// long random operation sequences.
#include <catch2/catch.hpp>

#include <kvpolicy/core/ghost_list.hpp>
#include <kvpolicy/core/index_list.hpp>
#include <kvpolicy/core/indexed_heap.hpp>
#include <kvpolicy/core/key_index.hpp>
#include <kvpolicy/core/time_queue.hpp>

#include <algorithm>
#include <deque>
#include <list>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

using namespace kvpolicy;

namespace {
std::vector<std::uint32_t> walk(const index_links& links, const index_list& l) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = l.front; i != no_index; i = links.next(i)) out.push_back(i);
    std::vector<std::uint32_t> back;
    for (std::uint32_t i = l.back; i != no_index; i = links.prev(i)) back.push_back(i);
    std::reverse(back.begin(), back.end());
    REQUIRE(out == back);  // both directions agree
    REQUIRE(out.size() == l.size);
    return out;
}
}  // namespace

TEST_CASE("index_links: three lists sharing one arena match std::list", "[core][index_list]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    std::mt19937_64 rng(seed);
    constexpr std::uint32_t n = 200;
    index_links links(n);
    index_list lists[3];
    std::list<std::uint32_t> ref[3];
    std::vector<int> where(n, -1);
    for (int op = 0; op < 100'000; ++op) {
        const std::uint32_t id = static_cast<std::uint32_t>(rng() % n);
        const int l = static_cast<int>(rng() % 3);
        if (where[id] < 0) {
            if (rng() % 2) {
                links.push_back(lists[l], id);
                ref[l].push_back(id);
            } else {
                links.push_front(lists[l], id);
                ref[l].push_front(id);
            }
            where[id] = l;
        } else {
            const int from = where[id];
            switch (rng() % 4) {
                case 0:
                    links.remove(lists[from], id);
                    ref[from].remove(id);
                    where[id] = -1;
                    break;
                case 1:
                    links.move_to_back(lists[from], lists[l], id);
                    ref[from].remove(id);
                    ref[l].push_back(id);
                    where[id] = l;
                    break;
                case 2: {
                    const std::uint32_t f = links.pop_front(lists[from]);
                    REQUIRE(f == ref[from].front());
                    ref[from].pop_front();
                    where[f] = -1;
                    break;
                }
                default: {
                    // insert a free id right after `id`
                    const std::uint32_t other = static_cast<std::uint32_t>(rng() % n);
                    if (where[other] >= 0) break;
                    links.insert_after(lists[from], id, other);
                    auto it = std::find(ref[from].begin(), ref[from].end(), id);
                    ref[from].insert(std::next(it), other);
                    where[other] = from;
                    break;
                }
            }
        }
        if (op % 97 == 0)
            for (int k = 0; k < 3; ++k)
                REQUIRE(walk(links, lists[k]) == std::vector<std::uint32_t>(ref[k].begin(), ref[k].end()));
    }
    for (int k = 0; k < 3; ++k)
        REQUIRE(walk(links, lists[k]) == std::vector<std::uint32_t>(ref[k].begin(), ref[k].end()));
}

TEST_CASE("ghost_list matches a deque of keys under push, pop, erase and overflow", "[core][ghost_list]") {
    const std::size_t capacity = GENERATE(1u, 7u, 64u, 1000u);
    std::mt19937_64 rng(capacity);
    ghost_list g(capacity);
    std::deque<std::uint64_t> ref;
    // Keys cluster so that hash collisions and probe chains wrap the table.
    const std::uint64_t universe = capacity * 3 + 5;
    for (int op = 0; op < 100'000; ++op) {
        const std::uint64_t key = (rng() % universe) * 0x100000001ULL;
        const bool present = std::find(ref.begin(), ref.end(), key) != ref.end();
        REQUIRE(g.contains(key) == present);
        switch (rng() % 3) {
            case 0:
                if (!present) {
                    const auto dropped = g.push_back(key);
                    if (ref.size() == capacity) {
                        REQUIRE(dropped == ref.front());
                        ref.pop_front();
                    } else {
                        REQUIRE_FALSE(dropped.has_value());
                    }
                    ref.push_back(key);
                }
                break;
            case 1:
                REQUIRE(g.erase(key) == present);
                if (present) ref.erase(std::find(ref.begin(), ref.end(), key));
                break;
            default:
                if (!ref.empty()) {
                    REQUIRE(g.front() == ref.front());
                    REQUIRE(g.pop_front() == ref.front());
                    ref.pop_front();
                }
        }
        REQUIRE(g.size() == ref.size());
    }
    for (std::uint64_t k : ref) REQUIRE(g.contains(k));
    g.clear();
    REQUIRE(g.empty());
    for (std::uint64_t k : ref) REQUIRE_FALSE(g.contains(k));
}

TEST_CASE("indexed_heap pops in (key, id) order under updates and erasures", "[core][indexed_heap]") {
    const std::uint64_t seed = GENERATE(11u, 12u);
    std::mt19937_64 rng(seed);
    constexpr std::uint32_t n = 300;
    indexed_heap<std::int64_t> heap(n);
    std::map<std::uint32_t, std::int64_t> ref;  // id -> key
    auto ref_top = [&] {
        auto best = ref.begin();
        for (auto it = ref.begin(); it != ref.end(); ++it)
            if (it->second < best->second || (it->second == best->second && it->first < best->first)) best = it;
        return best;
    };
    for (int op = 0; op < 100'000; ++op) {
        const std::uint32_t id = static_cast<std::uint32_t>(rng() % n);
        const std::int64_t key = static_cast<std::int64_t>(rng() % 50);  // many ties
        REQUIRE(heap.contains(id) == ref.contains(id));
        switch (rng() % 4) {
            case 0:
                if (!ref.contains(id)) {
                    heap.push(id, key);
                    ref[id] = key;
                }
                break;
            case 1:
                if (ref.contains(id)) {
                    heap.update(id, key);
                    ref[id] = key;
                }
                break;
            case 2:
                if (ref.contains(id)) {
                    heap.erase(id);
                    ref.erase(id);
                }
                break;
            default:
                if (!ref.empty()) {
                    const auto best = ref_top();
                    REQUIRE(heap.top() == best->first);
                    REQUIRE(heap.pop() == best->first);
                    ref.erase(best);
                }
        }
        REQUIRE(heap.size() == ref.size());
    }
}

// The naive model: every present item as (time, placement, id) in a set,
// the front its first. Times mostly go forward (an engine's clock, with many
// placements per step) and now and then step back (a rebuild's replay, a
// queue letting go at an earlier access's time), so both the list and the
// heap hold items and the front compares across them, ties included.
TEST_CASE("time_queue's front is the earliest (time, placement) under in-order and late placements",
          "[core][time_queue]") {
    const std::uint64_t seed = GENERATE(21u, 22u, 23u);
    const int late_in = GENERATE(2, 20, 1000);  // one placement in this many is at an earlier time
    std::mt19937_64 rng(seed);
    constexpr std::uint32_t n = 300;
    time_queue q(n);
    std::set<std::tuple<timestamp, std::uint64_t, std::uint32_t>> ref;
    std::vector<std::pair<timestamp, std::uint64_t>> where(n, {0, 0});
    std::vector<bool> present(n, false);
    std::uint64_t placed = 0;
    timestamp now = 1000;
    std::size_t late_seen = 0;
    for (int op = 0; op < 200'000; ++op) {
        const std::uint32_t id = static_cast<std::uint32_t>(rng() % n);
        REQUIRE(q.contains(id) == present[id]);
        if (rng() % 4 == 0) now += rng() % 3;  // several placements share a step
        const int action = static_cast<int>(rng() % 3);
        if (!present[id] && action != 2) {
            const timestamp t = rng() % static_cast<std::uint64_t>(late_in) == 0 ? now - rng() % 50 : now;
            q.push(id, t);
            ref.insert({t, placed, id});
            where[id] = {t, placed++};
            present[id] = true;
            late_seen = std::max(late_seen, q.placed_out_of_order());
        } else if (present[id] && action == 1) {
            q.erase(id);
            ref.erase({where[id].first, where[id].second, id});
            present[id] = false;
        } else if (!ref.empty()) {  // pop the front
            const std::uint32_t front = std::get<2>(*ref.begin());
            REQUIRE(q.front() == front);
            REQUIRE(q.time(front) == std::get<0>(*ref.begin()));
            q.erase(front);
            ref.erase(ref.begin());
            present[front] = false;
        }
        REQUIRE(q.size() == ref.size());
        REQUIRE(q.empty() == ref.empty());
    }
    REQUIRE(late_seen > 0);  // the heap's side was exercised
    q.clear();
    REQUIRE(q.empty());
    for (std::uint32_t id = 0; id < n; ++id) REQUIRE_FALSE(q.contains(id));
}

TEST_CASE("key_index matches std::unordered_map under insert, erase and reuse", "[core][key_index]") {
    const std::size_t capacity = GENERATE(1u, 5u, 300u);
    std::mt19937_64 rng(capacity + 17);
    key_index index(capacity);
    std::unordered_map<std::uint64_t, std::uint32_t> ref;
    const std::uint64_t universe = capacity * 4 + 3;
    for (int op = 0; op < 100'000; ++op) {
        const std::uint64_t key = (rng() % universe) << 32;  // high bits only: mixing must scatter them
        const auto it = ref.find(key);
        REQUIRE(index.find(key) == (it == ref.end() ? no_index : it->second));
        if (rng() % 2 && it == ref.end() && ref.size() < capacity) {
            const auto slot = static_cast<std::uint32_t>(rng() % 1000);
            index.insert(key, slot);
            ref[key] = slot;
        } else {
            REQUIRE(index.erase(key) == (it == ref.end() ? no_index : it->second));
            ref.erase(key);
        }
        REQUIRE(index.size() == ref.size());
    }
    for (const auto& [k, v] : ref) REQUIRE(index.find(k) == v);
    index.clear();
    REQUIRE(index.size() == 0);
    for (const auto& [k, v] : ref) REQUIRE(index.find(k) == no_index);
}
