// The simulator's offload mode (kvpolicy/sim/replay_offload.hpp): vLLM's CPU
// offloading tier behind its GPU prefix cache. Checked against a naive model
// of the same arrangement with LRU written from vLLM's rules (lists scanned
// end to end), on long random multi-turn traces, whole prompts and step by
// step; Belady's bound against an exhaustive search; the waiting queue on a
// worked case; bad configurations refused.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/belady.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/predicted_return.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>
#include <kvpolicy/sim/replay_offload.hpp>
#include <kvpolicy/sim/sources.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace kvpolicy;
using namespace kvpolicy::sim;

namespace {

constexpr std::uint32_t bs = 16;

// Conversations that grow turn by turn over a shared two-block system
// prompt, some prompts ending inside their last block.
std::vector<request_record> conversations(std::uint64_t seed, std::size_t n, std::size_t longest) {
    std::mt19937_64 rng(seed);
    std::map<std::uint64_t, std::size_t> turns;
    std::vector<request_record> out;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t conv = rng() % 24;
        std::size_t& len = turns[conv];
        len = std::min<std::size_t>(len + 1 + rng() % 4, longest);
        if (rng() % 10 == 0) len = 1 + rng() % 3;  // a new conversation under an old id
        request_record r;
        r.timestamp_ms = 100 * i;
        r.hash_ids.clear();
        for (std::size_t j = 0; j < len; ++j)
            r.hash_ids.push_back(j < 2 ? 7 + j : (conv + 1) * 1000 + j * 31 + len % 3);
        r.input_length = len * bs - (rng() % 3 == 0 ? rng() % bs : 0);
        r.output_length = 20;
        r.line = i + 1;
        out.push_back(r);
    }
    return out;
}

struct counts {
    std::uint64_t gpu_hits = 0, cpu_hits = 0, evictions = 0;
    bool operator==(const counts&) const = default;
};

// vLLM's arrangement with its LRU, by list scans: the GPU's free blocks
// least recently freed first; the CPU tier's chunks least recently used
// first, where a load, a store, a completed eviction's protected chunks and
// a request's end each move chunks to the recent end.
counts naive_offload_lru(const std::vector<request_record>& requests, std::size_t gpu_cap, std::size_t cpu_cap,
                         std::size_t step_blocks) {
    std::vector<std::uint64_t> gpu, cpu;  // front: next to go
    auto has = [](const std::vector<std::uint64_t>& v, std::uint64_t k) { return std::ranges::find(v, k) != v.end(); };
    auto drop = [](std::vector<std::uint64_t>& v, std::uint64_t k) { std::erase(v, k); };
    auto to_back = [&](std::vector<std::uint64_t>& v, std::uint64_t k) {
        drop(v, k);
        v.push_back(k);
    };
    counts out;
    for (const request_record& r : requests) {
        const std::vector<std::uint64_t>& k = r.hash_ids;
        const std::size_t n = k.size(), full = std::min<std::size_t>(n, r.input_length / bs);
        const std::size_t max_hit = r.input_length == 0 ? 0 : std::min<std::size_t>(full, (r.input_length - 1) / bs);
        if (n > gpu_cap) continue;
        std::size_t g = 0, c = 0;
        while (g < max_hit && has(gpu, k[g])) ++g;
        while (g + c < max_hit && has(cpu, k[g + c])) ++c;
        std::vector<std::uint64_t> touched;
        for (std::size_t i = g; i < g + c; ++i) {
            to_back(cpu, k[i]);
            touched.push_back(k[i]);
        }
        const std::size_t step = step_blocks == 0 ? full : step_blocks;
        for (std::size_t from = c > 0 ? g + c : 0, to = g + c; from < full; from = to) {
            to = std::min(full, to + step);
            std::vector<std::uint64_t> present, fresh;
            for (std::size_t i = from; i < to; ++i) {
                if (has(cpu, k[i])) {
                    present.push_back(k[i]);
                    touched.push_back(k[i]);
                } else if (!has(fresh, k[i])) {
                    fresh.push_back(k[i]);
                }
            }
            if (fresh.empty()) continue;
            if (cpu.size() + fresh.size() > cpu_cap) {
                const std::size_t need = cpu.size() + fresh.size() - cpu_cap;
                std::vector<std::uint64_t> victims;
                for (std::uint64_t key : cpu)
                    if (victims.size() < need && !has(present, key)) victims.push_back(key);
                if (victims.size() < need) continue;  // no room: nothing of this offer stored
                for (std::uint64_t key : victims) drop(cpu, key);
                for (std::uint64_t key : present) to_back(cpu, key);
                out.evictions += need;
            }
            for (std::uint64_t key : fresh) {
                cpu.push_back(key);
                touched.push_back(key);
            }
        }
        for (auto it = touched.rbegin(); it != touched.rend(); ++it)
            if (has(cpu, *it)) to_back(cpu, *it);
        for (std::size_t i = 0; i < g; ++i) drop(gpu, k[i]);
        while (gpu.size() > gpu_cap - n) gpu.erase(gpu.begin());
        for (std::size_t i = full; i-- > 0;) to_back(gpu, k[i]);
        out.gpu_hits += g;
        out.cpu_hits += c;
    }
    return out;
}

template <class P>
replay_result offload(const std::vector<request_record>& requests, request_replay_config cfg) {
    vector_request_source src(requests);
    return replay_offload<P>(src, cfg);
}

// MIN's hits by trying every choice: at each reference the key may be
// admitted, and any held key dropped.
std::uint64_t exhaustive_min(const std::vector<offload_access>& a, std::size_t cap) {
    std::function<std::uint64_t(std::size_t, std::set<std::uint64_t>)> best = [&](std::size_t i,
                                                                                  std::set<std::uint64_t> held) {
        if (i == a.size()) return std::uint64_t{0};
        const std::uint64_t hit = a[i].lookup && held.contains(a[i].key) ? 1 : 0;
        held.insert(a[i].key);
        const std::vector<std::uint64_t> keys(held.begin(), held.end());
        std::uint64_t most = 0;
        for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << keys.size()); ++mask) {
            if (static_cast<std::size_t>(std::popcount(mask)) > cap) continue;
            std::set<std::uint64_t> kept;
            for (std::size_t b = 0; b < keys.size(); ++b)
                if (mask >> b & 1) kept.insert(keys[b]);
            most = std::max(most, best(i + 1, kept));
        }
        return hit + most;
    };
    return best(0, {});
}

}  // namespace

TEST_CASE("offload mode with lru makes the naive model's decisions on long random traces", "[sim][offload]") {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        const auto requests = conversations(seed, 1500, 40);
        for (const std::size_t gpu : {40, 60, 120})
            for (const std::size_t cpu : {5, 30, 90, 400})
                for (const std::size_t step : {0, 1, 3, 7}) {
                    request_replay_config cfg;
                    cfg.capacity = gpu;
                    cfg.cpu_capacity = cpu;
                    cfg.block_size = bs;
                    cfg.prefill_chunk = step * bs;
                    const replay_result r = offload<lru>(requests, cfg);
                    const counts want = naive_offload_lru(requests, gpu, cpu, step);
                    INFO("seed " << seed << ", gpu " << gpu << ", cpu " << cpu << ", step " << step);
                    REQUIRE(counts{r.gpu_hits, r.cpu_hits, r.evictions} == want);
                    REQUIRE(r.hits == r.gpu_hits + r.cpu_hits);
                    REQUIRE(r.hits + r.misses == r.accesses);
                    REQUIRE(r.requests == requests.size());
                }
    }
}

TEST_CASE("offload mode refuses a request longer than the GPU, as vLLM's front end does", "[sim][offload]") {
    auto requests = conversations(3, 50, 10);
    request_record huge;
    huge.hash_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    huge.input_length = 12 * bs;
    requests.insert(requests.begin() + 20, huge);
    request_replay_config cfg;
    cfg.capacity = 11;
    cfg.cpu_capacity = 30;
    cfg.block_size = bs;
    const replay_result r = offload<lru>(requests, cfg);
    REQUIRE(r.bypassed_requests == 1);
    std::erase_if(requests, [](const request_record& q) { return q.hash_ids.size() > 11; });
    const counts want = naive_offload_lru(requests, 11, 30, 0);
    REQUIRE(counts{r.gpu_hits, r.cpu_hits, r.evictions} == want);
}

TEST_CASE("offload_min_hits is the exhaustive optimum on short random sequences", "[sim][offload]") {
    std::mt19937_64 rng(5);
    for (int t = 0; t < 300; ++t) {
        std::vector<offload_access> a(2 + rng() % 9);
        for (auto& x : a) x = {rng() % 3 != 0, rng() % 4};
        const std::size_t cap = 1 + rng() % 3;
        INFO("trial " << t);
        REQUIRE(offload_min_hits(a, cap) == exhaustive_min(a, cap));
        std::vector<std::uint8_t> lookups;  // the same references as columns (kvpolicy._offload_min_hits)
        std::vector<std::uint64_t> keys;
        for (const offload_access& x : a) {
            lookups.push_back(x.lookup ? static_cast<std::uint8_t>(1 + rng() % 200) : 0);
            keys.push_back(x.key);
        }
        REQUIRE(offload_min_hits(lookups, keys, cap) == offload_min_hits(a, cap));
    }
    const std::uint8_t one[] = {1};
    REQUIRE_THROWS_WITH(offload_min_hits(one, std::span<const std::uint64_t>(), 1),
                        "offload_min_hits: 1 lookup flags for 0 keys; give one per reference");
}

TEST_CASE("offload mode's belady row is MIN over the CPU tier's reads, above every policy", "[sim][offload]") {
    const auto requests = conversations(9, 2000, 30);
    request_replay_config cfg;
    cfg.capacity = 45;
    cfg.cpu_capacity = 60;
    cfg.block_size = bs;
    const replay_result opt = offload<belady>(requests, cfg), l = offload<lru>(requests, cfg);
    // The GPU's hits do not depend on the CPU tier's policy.
    REQUIRE(opt.gpu_hits == l.gpu_hits);
    REQUIRE(opt.cpu_hits > l.cpu_hits);
    // Its reads, rebuilt from the arrangement's rules.
    std::vector<offload_access> reads;
    freed_block_lru gpu(cfg.capacity);
    for (const request_record& r : requests) {
        const std::size_t full = std::min<std::size_t>(r.hash_ids.size(), r.input_length / bs);
        const std::size_t max_hit = std::min(full, (r.input_length - 1) / bs);
        const std::size_t g = gpu.hit(r.hash_ids, max_hit);
        for (std::size_t i = g; i < max_hit; ++i) reads.push_back({true, r.hash_ids[i]});
        for (std::size_t i = 0; i < full; ++i) reads.push_back({false, r.hash_ids[i]});
        gpu.serve(r.hash_ids, g, r.hash_ids.size(), full);
    }
    REQUIRE(opt.cpu_hits == offload_min_hits(reads, cfg.cpu_capacity));
}

TEST_CASE("offload mode: a queued request's chunks outlive a store that LRU lets take them", "[sim][offload]") {
    // R0 stores 11 12, R1 then 31; R2's three new chunks need one chunk
    // gone. LRU drops 12 (R0's tail, the least recent), so R3 loads 11 only;
    // told that R3 waits for 11 and 12 (one request of lookahead), the
    // queue-aware LRU drops 31 and R3 loads both.
    auto req = [](std::vector<std::uint64_t> keys, std::uint64_t input, std::uint64_t t) {
        request_record r;
        r.hash_ids = std::move(keys);
        r.input_length = input;
        r.timestamp_ms = t;
        return r;
    };
    const std::vector<request_record> requests{req({11, 12}, 2 * bs, 0), req({31}, bs, 1), req({21, 22, 23}, 3 * bs, 2),
                                               req({11, 12, 13}, 3 * bs, 3)};
    request_replay_config cfg;
    cfg.capacity = 3;
    cfg.cpu_capacity = 5;
    cfg.block_size = bs;
    REQUIRE(offload<lru>(requests, cfg).cpu_hits == 1);
    REQUIRE(offload<queue_aware<lru>>(requests, cfg).cpu_hits == 1);  // no queue: LRU's decisions
    cfg.lookahead = 1;
    const replay_result q = offload<queue_aware<lru>>(requests, cfg);
    REQUIRE(q.cpu_hits == 2);
    REQUIRE(q.queue_depth_p50 == 1);
    REQUIRE(offload<lru>(requests, cfg).cpu_hits == 1);
}

TEST_CASE("offload mode with queue_past_gpu: the queue hears a request past the GPU hit forecast for it",
          "[sim][offload]") {
    // The worked case above. With a GPU of 3, R2's blocks fill it ahead of
    // R3, so R3 is heard whole and the queue keeps 11 and 12 as before. With
    // a GPU of 6, R3's 11 and 12 are forecast (rightly: two GPU hits) to be
    // the GPU's: told only 13, which nothing has cached, the queue-aware LRU
    // protects nothing and makes LRU's decisions; heard whole, it keeps 11
    // and 12 in the CPU tier for a read the GPU serves, and decides
    // otherwise.
    auto req = [](std::vector<std::uint64_t> keys, std::uint64_t t) {
        request_record r;
        r.input_length = keys.size() * bs;
        r.hash_ids = std::move(keys);
        r.timestamp_ms = t;
        return r;
    };
    const std::vector<request_record> requests{req({11, 12}, 0), req({31}, 1), req({21, 22, 23}, 2),
                                               req({11, 12, 13}, 3)};
    request_replay_config cfg;
    cfg.capacity = 3;
    cfg.cpu_capacity = 5;
    cfg.block_size = bs;
    cfg.lookahead = 1;
    const auto of = [](const replay_result& r) { return counts{r.gpu_hits, r.cpu_hits, r.evictions}; };
    const replay_result whole = offload<queue_aware<lru>>(requests, cfg);
    cfg.queue_past_gpu = true;
    CHECK(of(offload<queue_aware<lru>>(requests, cfg)) == of(whole));
    CHECK(whole.cpu_hits == 2);

    cfg.capacity = 6;
    cfg.queue_past_gpu = false;
    const replay_result heard_whole = offload<queue_aware<lru>>(requests, cfg);
    cfg.queue_past_gpu = true;
    const replay_result past_gpu = offload<queue_aware<lru>>(requests, cfg);
    const replay_result plain = offload<lru>(requests, cfg);
    CHECK(past_gpu.gpu_hits == 2);
    CHECK(of(past_gpu) == of(plain));
    CHECK(of(heard_whole) != of(plain));
}

TEST_CASE("offload mode with store_admission: only a policy that ranks new chunks declines a store", "[sim][offload]") {
    // The conversations, each its own session, a request every 100 ms and a
    // CPU tier of 6 chunks. LRU cannot rank a chunk before storing it: with
    // admission it decides exactly as without. predicted_return declines
    // the chunks of a conversation expected back after every one stored,
    // and so decides otherwise.
    std::vector<request_record> requests = conversations(3, 400, 9);
    for (request_record& r : requests) {
        r.has_session = true;
        r.session = r.hash_ids.size() > 2 ? r.hash_ids[2] / 1000 : 0;
    }
    request_replay_config cfg;
    cfg.capacity = 12;
    cfg.cpu_capacity = 6;
    cfg.block_size = bs;
    cfg.prefill_chunk = 2 * bs;
    const auto of = [](const replay_result& r) { return counts{r.gpu_hits, r.cpu_hits, r.evictions}; };
    const replay_result lru_plain = offload<lru>(requests, cfg);
    const replay_result pr_plain = offload<predicted_return>(requests, cfg);
    cfg.store_admission = true;
    const replay_result lru_admitted = offload<lru>(requests, cfg);
    const replay_result pr_admitted = offload<predicted_return>(requests, cfg);
    CHECK(of(lru_admitted) == of(lru_plain));
    CHECK(lru_admitted.declined_stores == 0);
    CHECK(pr_plain.declined_stores == 0);
    CHECK(pr_admitted.declined_stores > 0);
    CHECK(of(pr_admitted) != of(pr_plain));
    CHECK(pr_admitted.hits == pr_admitted.gpu_hits + pr_admitted.cpu_hits);
}

TEST_CASE("offload mode refuses a tier of no blocks, and a queue of two models", "[sim][offload]") {
    const auto requests = conversations(1, 10, 5);
    request_replay_config cfg;
    cfg.capacity = 10;
    cfg.block_size = bs;
    REQUIRE_THROWS_MATCHES(offload<lru>(requests, cfg), config_error,
                           Catch::Message("offload mode: GPU capacity 10 and CPU capacity 0 blocks; give both > 0 "
                                          "(--capacity, --cpu-capacity)"));
    cfg.cpu_capacity = 10;
    cfg.lookahead = 4;
    cfg.serve_rate = 100;
    REQUIRE_THROWS_MATCHES(offload<queue_aware<lru>>(requests, cfg), config_error,
                           Catch::Message("the waiting queue: give a lookahead or a serve rate, not both"));
}
