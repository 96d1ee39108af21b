// Tiered replay over several serving instances and a remote store shared
// by them (or split evenly), the store modelled as an LRU of keys.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvpolicy/cache/remote_tier.hpp"
#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_requests.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/request_times.hpp"

namespace kvpolicy::sim {

/// A remote store's contents as the simulator sees them: the keys it holds,
/// at most `capacity`, evicting the least recently written or read (what
/// Redis's allkeys-lru approximates). A `remote_directory`.
class store_model {
public:
    explicit store_model(std::size_t capacity) : capacity_(capacity) {}
    [[nodiscard]] std::size_t present_prefix(std::span<const std::uint64_t> keys) const {
        std::size_t n = 0;
        while (n < keys.size() && index_.contains(keys[n])) ++n;
        return n;
    }
    /// A write-back; returns false when the store holds nothing (capacity 0).
    bool put(std::uint64_t key) {
        if (capacity_ == 0) return false;
        touch_or_insert(key);
        return true;
    }
    /// A fetch: true (and the key becomes the most recent) if it is there.
    bool get(std::uint64_t key) {
        auto it = index_.find(key);
        if (it == index_.end()) return false;
        order_.splice(order_.end(), order_, it->second);
        return true;
    }

private:
    void touch_or_insert(std::uint64_t key) {
        if (auto it = index_.find(key); it != index_.end()) {
            order_.splice(order_.end(), order_, it->second);
            return;
        }
        if (index_.size() == capacity_) {
            index_.erase(order_.front());
            order_.pop_front();
        }
        index_[key] = order_.insert(order_.end(), key);
    }
    std::size_t capacity_;
    std::list<std::uint64_t> order_;
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> index_;
};
static_assert(remote_directory<store_model>);

/// Tiered replay over `instances` serving instances (requests routed by
/// session), each with its own GPU and CPU tiers, and a remote tier: one
/// store of `remote_capacity` blocks shared by all (`shared`), or one store
/// of remote_capacity / instances blocks each (isolated instances with the
/// same memory). Victims are written back, lookups go through the store
/// (admit_through), fetches of values the store dropped meanwhile fail and
/// are recomputed. hits = blocks served from any tier, the store included.
/// The GPU tiers' policy is built with `gpu_config` (by default the
/// replay's, replay_policy_config).
/// Throws: as replay_requests; config_error without a CPU tier or instances.
template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_instances(RequestSource& source, const request_replay_config& cfg, std::size_t instances,
                               std::size_t remote_capacity, bool shared, const typename Gpu::config_type& gpu_config) {
    if (instances == 0) throw config_error("--instances 0: give at least one serving instance");
    if (cfg.lookahead > 0 || cfg.serve_rate > 0)
        throw config_error(
            "the waiting queue (--lookahead, --serve-rate) is modelled for one instance without a "
            "remote store; drop it, or --instances and --remote-capacity");
    if (cfg.cpu_capacity == 0)
        throw config_error("the remote tier stages its hits through the CPU tier: give --cpu-capacity N (blocks)");
    const std::uint32_t items = cfg.num_layers;
    using cache_type = tiered_cache<Gpu, Cpu, Traits>;
    std::vector<std::unique_ptr<cache_type>> caches;
    std::vector<store_model> stores;
    for (std::size_t i = 0; i < instances; ++i) {
        caches.push_back(std::make_unique<cache_type>(
            cache_config{.gpu_capacity = cfg.capacity * items,
                         .cpu_capacity = cfg.cpu_capacity * items,
                         .block_size = cfg.block_size,
                         .num_layers = cfg.num_layers,
                         .items = items > 1 ? granularity::per_layer : granularity::whole_block,
                         .item_bytes = static_cast<std::size_t>(cfg.kv_bytes_per_token) * cfg.block_size / items,
                         .remote = true},
            gpu_config, replay_cpu_policy_config<Cpu>(cfg)));
        if (shared ? i == 0 : true)
            stores.emplace_back((shared ? remote_capacity : remote_capacity / instances) * items);
    }
    replay_result r;
    r.policy = std::string(Gpu::name);
    r.capacity = cfg.capacity;
    r.cpu_capacity = cfg.cpu_capacity;
    r.mode = replay_mode::tiered;
    r.instances = instances;
    r.remote_capacity = remote_capacity;
    const double transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.bandwidth_bytes_per_s;
    const double remote_transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.remote_bandwidth_bytes_per_s;
    request_record req;
    timestamp now = 0;
    std::vector<transfer_status> status;
    std::vector<std::uint32_t> chunks;
    const auto t0 = std::chrono::steady_clock::now();
    while (source.next(req)) {
        const std::size_t index = r.requests++;
        now = request_time(now, req.timestamp_ms);
        const session_id session{req.has_session ? req.session : index};
        cache_type& cache = *caches[session.value % instances];
        store_model& store = stores[shared ? 0 : session.value % instances];
        cache.clock().set(now);
        const std::size_t n = req.hash_ids.size();
        r.accesses += n;
        const std::uint64_t tokens = std::max<std::uint64_t>(req.input_length, n * cfg.block_size);
        r.tokens += tokens;
        cache.begin_step();
        remote_admission a;
        try {
            a = admit_through(cache, store, session, req.hash_ids);
        } catch (const capacity_error&) {
            (void)cache.end_step();
            ++r.bypassed_requests;
            r.misses += n;
            continue;
        } catch (const usage_error& e) {
            (void)cache.end_step();
            r.refuse_bad_request(cfg.trace_name, req.line, e.what(), cfg.skip_bad_lines, n, tokens);
            continue;
        }
        const swap_plan& plan = cache.end_step();
        // The plan's remote copies against the store model; local ones succeed.
        status.assign(plan.transfers.size(), transfer_status::done);
        std::size_t failed_fetches = 0;
        for (std::size_t i = 0; i < plan.transfers.size(); ++i) {
            const block_transfer& t = plan.transfers[i];
            if (t.to == tier::remote && !store.put(plan.remote_keys[t.dst.index()]))
                status[i] = transfer_status::failed;
            if (t.from == tier::remote && !store.get(plan.remote_keys[t.src.index()])) {
                status[i] = transfer_status::failed;
                ++failed_fetches;
            }
        }
        const transfer_report report = cache.complete_transfers(plan, status);
        if (n > 0) cache.release(session, req.output_length);
        chunks.clear();
        for (const recompute_item& x : report.recompute) chunks.push_back(x.chunk.value);
        std::sort(chunks.begin(), chunks.end());
        const std::size_t recomputed_blocks =
            static_cast<std::size_t>(std::unique(chunks.begin(), chunks.end()) - chunks.begin());
        const std::size_t served = a.local.match.run - std::min(a.local.match.run, recomputed_blocks);
        r.hits += served;
        r.misses += n - served;
        r.hit_tokens += std::min<std::uint64_t>(served * cfg.block_size, tokens);
        const std::size_t remote_arrived = a.remote_blocks - std::min(a.remote_blocks, recomputed_blocks);
        r.remote_hits += remote_arrived;
        r.remote_failed_fetches += failed_fetches / items;
        // Seconds saved as replay_requests counts them: the recompute cost of
        // each block served (a recomputed one saved nothing), less the swap-in
        // of those that came from the CPU tier (staged ones included: only
        // they fail here), less the store -> CPU copy of those that arrived.
        for (std::size_t i = 0; i < a.local.match.run; ++i)
            if (!std::binary_search(chunks.begin(), chunks.begin() + static_cast<std::ptrdiff_t>(recomputed_blocks),
                                    static_cast<std::uint32_t>(i)))
                r.prefill_seconds_saved += cfg.cost.cost(i * cfg.block_size);
        const std::size_t cpu_served = a.local.match.cpu_blocks - std::min(a.local.match.cpu_blocks, recomputed_blocks);
        r.prefill_seconds_saved -=
            static_cast<double>(cpu_served) * transfer_s + static_cast<double>(remote_arrived) * remote_transfer_s;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& c : caches) {
        const cache_metrics m = c->metrics();
        r.evictions += m.gpu.evictions / items;
        r.gpu_hits += m.gpu.hit_blocks;
        r.cpu_hits += m.cpu.hit_blocks;
        r.recomputed_blocks += m.recomputed_blocks;
        r.swap_out_blocks += m.swap_out_items / items;
    }
    return r;
}

template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_instances(RequestSource& source, const request_replay_config& cfg, std::size_t instances,
                               std::size_t remote_capacity, bool shared) {
    return replay_instances<Gpu, Cpu, Traits>(source, cfg, instances, remote_capacity, shared,
                                              replay_policy_config<Gpu>(cfg));
}

}  // namespace kvpolicy::sim
