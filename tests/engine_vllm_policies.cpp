// The engine room's vLLM policies against naive models on long random
// operation sequences: vllm_lru (sort every evictable chunk by rank, then
// key bytes), vllm_arc (vLLM's ARCCachePolicy spelled out over vectors), and
// cache_policy_core's contract over kvpolicy policies (a protected or pinned
// chunk is never a victim; a refused eviction changes nothing).
// python/tests/test_vllm_policies.py compares both against vLLM's own classes
// through vLLM's own manager; this runs them under the sanitizers.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <kvpolicy/engine/cache_policy_core.hpp>
#include <kvpolicy/engine/vllm_arc.hpp>
#include <kvpolicy/engine/vllm_lru.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>

namespace {

using kvpolicy::no_index;
using kvpolicy::engine::vllm_rank;

/// std::mt19937 drawing uint32_t (its result_type is wider on LP64).
struct rng32 {
    std::mt19937 g;
    explicit rng32(std::uint32_t seed) : g(seed) {}
    std::uint32_t operator()() { return static_cast<std::uint32_t>(g()); }
};

struct naive_lru {
    struct chunk {
        vllm_rank rank;
        std::string key;
        bool evictable = false;
    };
    std::map<std::uint32_t, chunk> chunks;
    std::int64_t counter = 0;

    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, const std::set<std::uint32_t>& prot) {
        std::vector<std::uint32_t> c;
        for (const auto& [id, ch] : chunks)
            if (ch.evictable && !prot.contains(id)) c.push_back(id);
        std::sort(c.begin(), c.end(), [&](std::uint32_t a, std::uint32_t b) {
            const chunk &x = chunks.at(a), &y = chunks.at(b);
            if (x.rank != y.rank) return x.rank < y.rank;
            return x.key != y.key ? x.key < y.key : a < b;
        });
        if (n == 0) return std::vector<std::uint32_t>{};
        if (c.size() < n) return std::nullopt;
        c.resize(n);
        for (auto id : c) chunks.erase(id);
        return c;
    }
};

}  // namespace

TEST_CASE("vllm_lru evicts as a sort of the evictable chunks by (rank, key) does", "[engine]") {
    for (std::uint32_t seed = 1; seed <= 40; ++seed) {
        rng32 rng(seed);
        const std::uint32_t cap = 1 + rng() % 24;
        kvpolicy::engine::vllm_lru p(cap);
        naive_lru ref;
        std::int64_t request_rank = 0;
        for (int step = 0; step < 3000; ++step) {
            const std::uint32_t id = static_cast<std::uint32_t>(rng() % cap);
            const bool present = ref.chunks.contains(id);
            switch (rng() % 9) {
                case 0:
                case 1:
                    if (!present) {
                        // few distinct keys and positions: equal ranks, ties broken by the key
                        const std::string key(1 + rng() % 3, static_cast<char>('a' + rng() % 4));
                        const bool positioned = rng() % 2 == 0;
                        const std::int64_t pos = static_cast<std::int64_t>(rng() % 4) * 16;
                        if (positioned && rng() % 3 == 0) request_rank = p.new_request_rank(), ++ref.counter;
                        const bool evictable = rng() % 2 == 0;
                        p.insert(id, key, positioned ? std::optional(pos) : std::nullopt, request_rank, evictable);
                        const vllm_rank r = positioned ? vllm_rank{request_rank, -pos} : vllm_rank{++ref.counter, 0};
                        ref.chunks[id] = {r, key, evictable};
                    }
                    break;
                case 2: {
                    std::vector<std::uint32_t> ids{id, static_cast<std::uint32_t>(rng() % cap), no_index};
                    p.refresh(ids);
                    for (auto i : ids)
                        if (i != no_index && ref.chunks.contains(i)) ref.chunks[i].rank = {++ref.counter, 0};
                    break;
                }
                case 3: {
                    const std::int64_t pos = static_cast<std::int64_t>(rng() % 4) * 16;
                    p.raise(id, request_rank, pos);
                    if (present && ref.chunks[id].rank < vllm_rank{request_rank, -pos})
                        ref.chunks[id].rank = {request_rank, -pos};
                    break;
                }
                case 4:
                    if (present) p.mark_evictable(id), ref.chunks[id].evictable = true;
                    break;
                case 5:
                    if (present) p.mark_non_evictable(id), ref.chunks[id].evictable = false;
                    break;
                case 6:
                    if (present) p.remove(id), ref.chunks.erase(id);
                    break;
                default: {
                    const std::size_t n = rng() % 4;
                    std::set<std::uint32_t> prot;
                    for (int k = 0; k < 2; ++k) prot.insert(static_cast<std::uint32_t>(rng() % cap));
                    const auto got = p.evict(n, [&](std::uint32_t i) { return prot.contains(i); });
                    const auto want = ref.evict(n, prot);
                    REQUIRE(got == want);
                }
            }
            REQUIRE(p.size() == ref.chunks.size());
            if (step % 500 == 499 && rng() % 4 == 0) p.clear(), ref = naive_lru{}, request_rank = 0;
        }
    }
}

namespace {

// vLLM's ARCCachePolicy over vectors (front = least recent): the naive model.
struct naive_arc {
    std::size_t cap;
    std::vector<std::uint32_t> t1, t2;
    std::vector<std::uint64_t> b1, b2;
    std::map<std::uint32_t, int> ref;  // -1 storing, 0 evictable, 1 pinned
    std::map<std::uint32_t, std::uint64_t> ghost;
    double target = 0;

    static bool erase(auto& v, auto x) {
        auto it = std::find(v.begin(), v.end(), x);
        if (it == v.end()) return false;
        v.erase(it);
        return true;
    }
    static bool has(const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); }
    void adapt(std::uint64_t g) {
        if (has(b1, g)) {
            target = std::min(target + std::max(1.0, double(b2.size()) / double(b1.size())), double(cap));
            erase(b1, g), b1.push_back(g);
        } else if (has(b2, g)) {
            target = std::max(target - std::max(1.0, double(b1.size()) / double(b2.size())), 0.0);
            erase(b2, g), b2.push_back(g);
        }
    }
    void insert(std::uint32_t id, std::uint64_t g, int r) {
        t1.push_back(id), ref[id] = r, ghost[id] = g;
        erase(b1, g), erase(b2, g);
    }
    void touch(std::uint32_t id, std::uint64_t g) {
        if (!ref.contains(id)) return adapt(g);
        if (erase(t1, id))
            (ref[id] < 0 ? t1 : t2).push_back(id);
        else
            erase(t2, id), t2.push_back(id);
    }
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, const std::set<std::uint32_t>& prot) {
        std::vector<std::uint32_t> out;
        std::vector<bool> from1;
        std::size_t i1 = 0, i2 = 0;
        long long vt1 = static_cast<long long>(t1.size());
        auto next = [&](std::vector<std::uint32_t>& l, std::size_t& i) -> std::optional<std::uint32_t> {
            while (i < l.size()) {
                const auto id = l[i++];
                if (ref[id] == 0 && !prot.contains(id)) return id;
            }
            return std::nullopt;
        };
        for (std::size_t k = 0; k < n; ++k) {
            std::optional<std::uint32_t> c;
            bool one = false;
            if (vt1 >= static_cast<long long>(target))
                if ((c = next(t1, i1))) one = true, --vt1;
            if (!c) c = next(t2, i2);
            if (!c) {
                if (!(c = next(t1, i1))) return std::nullopt;
                one = true, --vt1;
            }
            out.push_back(*c), from1.push_back(one);
        }
        for (std::size_t k = 0; k < n; ++k) {
            erase(from1[k] ? t1 : t2, out[k]);
            auto& b = from1[k] ? b1 : b2;
            if (!has(b, ghost[out[k]])) b.push_back(ghost[out[k]]);
            ref.erase(out[k]);
        }
        for (auto* g : {&b1, &b2})
            while (g->size() > cap) g->erase(g->begin());
        return out;
    }
};

}  // namespace

TEST_CASE("vllm_arc decides as vLLM's ARCCachePolicy spelled out over vectors", "[engine]") {
    for (std::uint32_t seed = 1; seed <= 40; ++seed) {
        rng32 rng(seed);
        const std::uint32_t cap = 1 + rng() % 12;
        kvpolicy::engine::vllm_arc p(cap);
        naive_arc ref{cap, {}, {}, {}, {}, {}, {}, 0};
        std::uint64_t next_key = 1;
        std::map<std::uint32_t, std::uint64_t> key_of;
        for (int step = 0; step < 3000; ++step) {
            const std::uint32_t id = static_cast<std::uint32_t>(rng() % cap);
            const bool present = ref.ref.contains(id);
            // keys come back: a ghost hit needs an old key reused
            const std::uint64_t g = rng() % 3 == 0 ? next_key++ : 1 + rng() % next_key;
            switch (rng() % 8) {
                case 0:
                case 1:
                    if (!present) {
                        const int r = static_cast<int>(rng() % 3) - 1;
                        p.insert(id, g, r >= 0, r == 0);
                        ref.insert(id, g, r);
                    }
                    break;
                case 2:
                    p.touch(present ? id : no_index, g);
                    ref.touch(present ? id : 0xffffffffu, g);
                    break;
                case 3:
                    p.adapt_to_ghost(g), ref.adapt(g);
                    break;
                case 4:
                    if (present) p.mark_evictable(id), ref.ref[id] = 0;
                    break;
                case 5:
                    if (present && ref.ref[id] >= 0) p.mark_non_evictable(id), ref.ref[id] = 1;
                    break;
                case 6:
                    if (present) {
                        const bool inserted_only = rng() % 2 == 0;
                        p.finish(id, inserted_only, !inserted_only);
                        if (inserted_only) {
                            auto& l = naive_arc::has(ref.t1, id) ? ref.t1 : ref.t2;
                            naive_arc::erase(l, id), l.push_back(id);
                        } else {
                            naive_arc::erase(ref.t1, id), naive_arc::erase(ref.t2, id), ref.t2.push_back(id);
                        }
                    }
                    break;
                default: {
                    const std::size_t n = rng() % 4;
                    std::set<std::uint32_t> prot{static_cast<std::uint32_t>(rng() % cap)};
                    const auto got = p.evict(n, [&](std::uint32_t i) { return prot.contains(i); });
                    REQUIRE(got == ref.evict(n, prot));
                }
            }
            REQUIRE(p.t1_order() == ref.t1);
            REQUIRE(p.t2_order() == ref.t2);
            REQUIRE(p.b1_size() == ref.b1.size());
            REQUIRE(p.b2_size() == ref.b2.size());
            REQUIRE(p.target_t1_size() == ref.target);
        }
    }
}

namespace {

template <class Policy>
void check_core_contract(std::uint32_t seed) {
    rng32 rng(seed);
    const std::uint32_t cap = 2 + rng() % 16;
    kvpolicy::engine::cache_policy_core<Policy> core(cap, {});
    std::vector<int> state(cap, -1);  // -1 absent, 0 evictable, 1 pinned
    kvpolicy::timestamp now = 0;
    for (int step = 0; step < 4000; ++step) {
        const std::uint32_t id = static_cast<std::uint32_t>(rng() % cap);
        kvpolicy::access_context c;
        c.now = ++now;
        c.key = 1000 + rng() % 64;
        c.session = kvpolicy::session_id{1 + rng() % 3};
        switch (rng() % 6) {
            case 0:
                if (state[id] < 0) {
                    const bool ev = rng() % 2 == 0;
                    core.insert(id, c, ev);
                    state[id] = ev ? 0 : 1;
                }
                break;
            case 1:
                core.touch(id, c);
                break;
            case 2:
                if (state[id] == 1)
                    core.mark_evictable(id, c), state[id] = 0;
                else if (state[id] == 0)
                    core.mark_non_evictable(id), state[id] = 1;
                break;
            case 3:
                if (state[id] >= 0) core.finish(id, rng() % 2 == 0, c);
                break;
            default: {
                std::vector<std::uint32_t> prot{static_cast<std::uint32_t>(rng() % cap),
                                                static_cast<std::uint32_t>(rng() % cap)};
                const std::size_t n = rng() % 4;
                std::size_t candidates = 0;
                for (std::uint32_t i = 0; i < cap; ++i)
                    if (state[i] == 0 && std::find(prot.begin(), prot.end(), i) == prot.end()) ++candidates;
                const auto before = core.evictable_size();
                const auto got = core.evict(n, prot, c);
                if (n > candidates) {
                    REQUIRE(!got);
                    REQUIRE(core.evictable_size() == before);
                } else {
                    REQUIRE(got);
                    REQUIRE(got->size() == n);
                    for (auto v : *got) {
                        REQUIRE(state[v] == 0);                                         // never pinned
                        REQUIRE(std::find(prot.begin(), prot.end(), v) == prot.end());  // never protected
                        state[v] = -1;
                    }
                }
            }
        }
        std::size_t present = 0, evictable = 0;
        for (int s : state) present += s >= 0, evictable += s == 0;
        REQUIRE(core.size() == present);
        REQUIRE(core.evictable_size() == evictable);
    }
}

}  // namespace

TEST_CASE("cache_policy_core never offers a pinned or protected chunk, and a refusal changes nothing", "[engine]") {
    for (std::uint32_t seed = 1; seed <= 20; ++seed) {
        check_core_contract<kvpolicy::lru>(seed);
        check_core_contract<kvpolicy::s3fifo>(seed);
        check_core_contract<kvpolicy::session_aware_lru>(seed);
    }
}

TEST_CASE("order_request_keys orders as vLLM's order_request_keys spelled out over a dict", "[engine]") {
    // vLLM builds {key: position}; it sorts the keys by it (stably) only
    // when that dict is as long as the keys, that is, no key is listed twice.
    std::mt19937_64 rng(5);
    for (int run = 0; run < 3000; ++run) {
        INFO("run " << run);
        const std::size_t n = rng() % 12;
        std::map<int, std::int64_t> position_of;  // equal keys share a position, as in vLLM's dict
        std::vector<int> keys;
        std::vector<std::int64_t> positions;
        for (std::size_t i = 0; i < n; ++i) {
            const int k = static_cast<int>(rng() % (run % 2 == 0 ? 40 : 8));
            const auto p = position_of.try_emplace(k, static_cast<std::int64_t>(rng() % 6) - 2).first->second;
            keys.push_back(k);
            positions.push_back(p);
        }
        std::optional<std::vector<std::uint32_t>> want;
        if (std::set<int>(keys.begin(), keys.end()).size() == keys.size()) {
            want.emplace();
            for (std::uint32_t i = 0; i < n; ++i) want->push_back(i);
            std::stable_sort(want->begin(), want->end(),
                             [&](std::uint32_t a, std::uint32_t b) { return positions[a] < positions[b]; });
        }
        REQUIRE(kvpolicy::engine::order_request_keys(
                    positions, [&](std::uint32_t i, std::uint32_t j) { return keys[i] == keys[j]; }) == want);
    }
}
