// Per-step overhead of the composed cache: begin_step, admit (lookup +
// allocate) for a batch of requests, end_step, release; against the way such
// managers are usually written (std::unordered_map from hash to block +
// std::list LRU per tier, the same LRU/exclusive semantics), in the same run
// on the same request stream. Both must serve the same hits.
//
//   build/release/bench/cache_step_bench [steps] [repeats]
//
// Workload: 256 concurrent sessions with 2k-token contexts (16-token blocks:
// 128 blocks each, a shared 32-block system prompt); every step each session
// asks for its context plus one new block; 1 in 16 sessions ends each step
// and a new one starts. GPU tier 100k blocks, CPU tier 1M blocks.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <random>
#include <unordered_map>
#include <vector>

#include <kvpolicy/cache/presets.hpp>
#include <kvpolicy/core/item_key.hpp>

using namespace kvpolicy;

namespace {

constexpr std::size_t batch = 256, context_blocks = 128, system_blocks = 32;
constexpr std::size_t gpu_blocks = 100'000, cpu_blocks = 1'000'000;

struct session {
    std::uint64_t id;
    std::vector<block_hash> blocks;
};

// The request stream, generated once so both caches see the same one.
std::vector<std::vector<std::pair<std::uint64_t, std::vector<block_hash>>>> make_steps(std::size_t steps) {
    std::mt19937_64 rng(7);
    std::uint64_t next_session = 0;
    auto fresh = [&] {
        session s{next_session++, {}};
        for (std::size_t b = 0; b < context_blocks; ++b)
            s.blocks.push_back(b < system_blocks ? mix64(b + 1) : mix64((s.id << 32) | b | (1ULL << 63)));
        return s;
    };
    std::vector<session> live;
    for (std::size_t i = 0; i < batch; ++i) live.push_back(fresh());
    std::vector<std::vector<std::pair<std::uint64_t, std::vector<block_hash>>>> out(steps);
    for (std::size_t t = 0; t < steps; ++t) {
        for (session& s : live) {
            s.blocks.push_back(mix64((s.id << 32) | s.blocks.size() | (1ULL << 63)));
            out[t].emplace_back(s.id, s.blocks);
        }
        for (session& s : live)
            if (rng() % 16 == 0) s = fresh();
    }
    return out;
}

// The straightforward manager: hash maps into std::list LRUs, exclusive tiers.
struct straightforward_cache {
    struct block {
        block_hash hash;
        int refs = 0;
    };
    std::list<block> gpu_lru, cpu_lru;  // front = least recent (evictable part only)
    std::unordered_map<block_hash, std::list<block>::iterator> gpu_map, cpu_map;
    std::unordered_map<block_hash, block> gpu_held;  // held blocks live here, out of the LRU
    std::size_t gpu_used = 0, cpu_used = 0;
    std::uint64_t hits = 0;

    void admit(const std::vector<block_hash>& hashes, std::vector<block_hash>& held) {
        std::size_t run = 0;
        for (block_hash h : hashes) {
            if (gpu_held.contains(h) || gpu_map.contains(h) || cpu_map.contains(h))
                ++run;
            else
                break;
        }
        hits += run;
        for (block_hash h : hashes) {
            if (auto it = gpu_held.find(h); it != gpu_held.end()) {
                ++it->second.refs;
            } else if (auto g = gpu_map.find(h); g != gpu_map.end()) {
                gpu_held.emplace(h, block{h, 1});
                gpu_lru.erase(g->second);
                gpu_map.erase(g);
            } else {
                if (auto c = cpu_map.find(h); c != cpu_map.end()) {  // swap in
                    cpu_lru.erase(c->second);
                    cpu_map.erase(c);
                    --cpu_used;
                }
                if (gpu_used == gpu_blocks) {  // evict the GPU LRU, shelter it on the CPU
                    const block_hash v = gpu_lru.front().hash;
                    gpu_lru.pop_front();
                    gpu_map.erase(v);
                    --gpu_used;
                    if (cpu_used == cpu_blocks) {
                        cpu_map.erase(cpu_lru.front().hash);
                        cpu_lru.pop_front();
                        --cpu_used;
                    }
                    cpu_lru.push_back({v, 0});
                    cpu_map[v] = std::prev(cpu_lru.end());
                    ++cpu_used;
                }
                gpu_held.emplace(h, block{h, 1});
                ++gpu_used;
            }
            held.push_back(h);
        }
    }
    void release(std::vector<block_hash>& held) {
        for (auto h = held.rbegin(); h != held.rend(); ++h) {  // tail first, as the library does
            auto it = gpu_held.find(*h);
            if (--it->second.refs == 0) {
                gpu_lru.push_back({*h, 0});
                gpu_map[*h] = std::prev(gpu_lru.end());
                gpu_held.erase(it);
            }
        }
        held.clear();
    }
};

}  // namespace

int main(int argc, char** argv) {
    const std::size_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 60;
    const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
    const auto stream = make_steps(steps);
    std::uint64_t blocks = 0;
    for (const auto& step : stream)
        for (const auto& r : step) blocks += r.second.size();

    // Best of `repeats`, the two alternating, each on a fresh cache; thread
    // CPU time, so a process waiting for a shared core does not look slow.
    auto cpu_now = [] {
        timespec t{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    };
    double ours = 0, theirs = 0;
    std::uint64_t hits = 0, base_hits = 0;
    for (int rep = 0; rep < repeats; ++rep) {
        vllm_like_cache cache({.gpu_capacity = gpu_blocks, .cpu_capacity = cpu_blocks, .block_size = 16});
        hits = 0;
        double t0 = cpu_now();
        for (const auto& step : stream) {
            cache.clock().advance(1);
            cache.begin_step();
            for (const auto& [sid, hashes] : step) hits += cache.admit(session_id{sid}, hashes).match.run;
            (void)cache.end_step();
            for (const auto& [sid, hashes] : step) cache.release(session_id{sid});
        }
        const double mine = cpu_now() - t0;

        straightforward_cache base;
        std::vector<std::vector<block_hash>> held(batch);
        t0 = cpu_now();
        for (const auto& step : stream) {
            for (std::size_t i = 0; i < step.size(); ++i) base.admit(step[i].second, held[i]);
            for (std::size_t i = 0; i < step.size(); ++i) base.release(held[i]);
        }
        const double other = cpu_now() - t0;
        base_hits = base.hits;
        if (rep == 0 || mine < ours) ours = mine;
        if (rep == 0 || other < theirs) theirs = other;
    }

    std::printf("%zu steps x %zu requests, %.0f blocks per request, GPU %zu + CPU %zu blocks\n", steps, batch,
                static_cast<double>(blocks) / static_cast<double>(steps * batch), gpu_blocks, cpu_blocks);
    std::printf("  %-36s %12s %12s %12s\n", "cache", "us/step", "ns/block", "hits");
    std::printf("  %-36s %12.1f %12.2f %12llu\n", "kvpolicy vllm_like_cache", 1e6 * ours / static_cast<double>(steps),
                1e9 * ours / static_cast<double>(blocks), static_cast<unsigned long long>(hits));
    std::printf("  %-36s %12.1f %12.2f %12llu\n", "unordered_map + std::list",
                1e6 * theirs / static_cast<double>(steps), 1e9 * theirs / static_cast<double>(blocks),
                static_cast<unsigned long long>(base_hits));
    std::printf("  speed-up: %.2fx (best of %d, thread CPU time)\n", theirs / ours, repeats);
    if (hits != base_hits) {
        std::fprintf(stderr, "the two caches served different hits: the comparison is void\n");
        return 1;
    }
    return 0;
}
