// remote_instance: one serving instance for the remote tier's tests: a
// cache, its host arenas and a remote transfer engine over a shared store
// (a map in cache_remote.cpp, redis-server in tests/redis/). A step admits
// through the store, runs the plan, reports it, and plays the forward pass
// (writes each computed or recomputed item's bytes); check_bytes then finds
// any slot holding bytes that are not its own item's.
#pragma once

#include <cstring>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/remote_tier.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>

namespace kvpolicy::testing {

using remote_test_cache = tiered_cache<lru, lru>;

// The bytes item `key` holds when correct: no two items share them.
inline void write_pattern(std::span<std::byte> b, std::uint64_t key) {
    for (std::size_t i = 0; i + 8 <= b.size(); i += 8) {
        const std::uint64_t w = mix64(key * 0x100000001b3ULL + i);
        std::memcpy(b.data() + i, &w, 8);
    }
}
inline bool has_pattern(std::span<const std::byte> b, std::uint64_t key) {
    std::vector<std::byte> want(b.size());
    write_pattern(want, key);
    return std::memcmp(want.data(), b.data(), b.size()) == 0;
}

inline std::vector<block_hash> chain(std::uint64_t doc, std::size_t n) {
    std::vector<block_hash> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = mix64((i == 0 ? doc * 7919 + 1 : h[i - 1]) ^ (i + 1));
    return h;
}

template <class Engine, class Store>
struct remote_instance {
    remote_test_cache cache;
    block_arena gpu;
    block_arena cpu;
    Engine engine;

    template <class... EngineArgs>
    remote_instance(const cache_config& c, std::size_t bytes, Store& store, EngineArgs&&... args)
            : cache(c),
              gpu(c.gpu_capacity, bytes),
              cpu(c.cpu_capacity, bytes),
              engine(gpu, cpu, store, std::forward<EngineArgs>(args)...) {}

    // Every cached slot of both tiers holds its item's bytes.
    std::string check_bytes() const {
        std::string bad;
        for (std::uint32_t i = 0; i < cache.gpu().capacity(); ++i)
            if (cache.gpu().state(block_id{i}) == block_pool<lru>::slot_state::cached &&
                !has_pattern(gpu.block(block_id{i}), cache.gpu().key(block_id{i})))
                bad += "gpu slot " + std::to_string(i) + " holds another item's bytes; ";
        for (std::uint32_t i = 0; i < cache.cpu().capacity(); ++i)
            if (cache.cpu().state(block_id{i}) == block_pool<lru>::slot_state::cached &&
                !has_pattern(cpu.block(block_id{i}), cache.cpu().key(block_id{i})))
                bad += "cpu slot " + std::to_string(i) + " holds another item's bytes; ";
        return bad;
    }

    struct step_result {
        std::vector<remote_admission> admissions;
        transfer_report report;
        std::size_t write_backs_done = 0;
    };

    // One step: admit each request through the store, run the plan, report
    // it, "compute" the miss tails and the recompute list, release all.
    step_result step(Store& store, const std::vector<std::pair<session_id, std::vector<block_hash>>>& requests,
                     std::set<std::uint64_t>* written = nullptr) {
        step_result out;
        cache.begin_step();
        std::vector<std::pair<session_id, std::vector<block_hash>>> admitted;
        for (const auto& [s, h] : requests) {
            if (!cache.gpu_room_for(h)) continue;
            out.admissions.push_back(admit_through(cache, store, s, h));
            admitted.emplace_back(s, h);
        }
        const swap_plan& plan = cache.end_step();
        std::vector<transfer_status> status;
        execute_plan(plan, engine, status);
        for (std::size_t i = 0; i < plan.transfers.size(); ++i)
            if (plan.transfers[i].to == tier::remote && status[i] == transfer_status::done) {
                ++out.write_backs_done;
                if (written) written->insert(plan.remote_keys[plan.transfers[i].dst.index()]);
            }
        const std::vector<dropped_item> plan_drops = plan.drops;
        out.report = cache.complete_transfers(plan, status);
        out.report.drops.insert(out.report.drops.end(), plan_drops.begin(), plan_drops.end());
        // The forward pass: the miss tail of each request, and what must be recomputed.
        for (std::size_t r = 0; r < admitted.size(); ++r) {
            const auto& h = admitted[r].second;
            for (std::size_t i = out.admissions[r].local.match.run; i < h.size(); ++i)
                for (std::uint32_t l = 0; l < cache.items_per_block(); ++l) {
                    const std::uint64_t key = cache.item_key(h[i], l);
                    write_pattern(gpu.block(*cache.gpu().cached_block(key)), key);
                }
        }
        for (const recompute_item& r : out.report.recompute) write_pattern(gpu.block(r.block), r.key);
        for (const auto& [s, h] : admitted) cache.free_session(s);
        return out;
    }
};

}  // namespace kvpolicy::testing
