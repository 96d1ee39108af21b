// tiered_cache, its configuration and state: the two tiers' pools (each with
// its policy) and the bookkeeping that more than one part of the cache reads
// or writes: each session's holds, the step's plan under construction, the
// items filled in the open step, the drop record and the counters.
//
// tiered_cache.hpp is the header to include; its header comment has the
// rules. The cache is composed of parts, each a header that includes this
// one and no other part: admission (tiered_cache_admit.hpp), the step and
// transfer completion (tiered_cache_step.hpp), holds, pins and the waiting
// queue (tiered_cache_holds.hpp), and metrics and invariants, which only read
// (tiered_cache_metrics.hpp). The state is a plain struct so that what the
// parts share is visible in one place; what only one part uses (its
// scratch) lives in that part. Nothing here locks: tiered_cache serializes
// every public call on its own mutex before it reaches the state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvpolicy/cache/metrics.hpp"
#include "kvpolicy/cache/swap_plan.hpp"
#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/core/tier.hpp"
#include "kvpolicy/core/waiting_queue.hpp"
#include "kvpolicy/cost/unit_cost.hpp"
#include "kvpolicy/pool/block_pool.hpp"

namespace kvpolicy {

/// The mutex policy for single-threaded use: locking costs nothing.
struct no_mutex {
    constexpr void lock() noexcept {}
    constexpr void unlock() noexcept {}
    constexpr bool try_lock() noexcept { return true; }
};

/// What a cache is composed of besides its two eviction policies.
template <class T>
concept cache_traits = requires {
    typename T::mutex_type;
    typename T::clock_type;
    typename T::cost_model_type;
}
&&clock_source<typename T::clock_type>&& cost_model<typename T::cost_model_type>&& requires(typename T::mutex_type& m) {
    m.lock();
    m.unlock();
};

/// Defaults: single-threaded, a manual clock, unit cost.
/// Derive and override a member to change one thing.
struct default_cache_traits {
    using mutex_type = no_mutex;
    using clock_type = manual_clock;
    using cost_model_type = unit_cost;
};

/// The cache shared between a scheduler thread and a transfer thread.
struct thread_safe_traits : default_cache_traits {
    using mutex_type = std::mutex;
};

struct cache_config {
    std::size_t gpu_capacity = 0;                  ///< items in the GPU tier (blocks, or layer-chunks per_layer)
    std::size_t cpu_capacity = 0;                  ///< items in the CPU tier; 0 = no CPU tier, GPU victims are dropped
    std::uint32_t block_size = 16;                 ///< tokens per block
    std::uint32_t num_layers = 1;                  ///< layers per block; the items per block under per_layer
    granularity items = granularity::whole_block;  ///< what one eviction item is
    std::size_t item_bytes = 0;                    ///< bytes of one item, for the byte counters
    bool inclusive = false;                        ///< keep the CPU copy when a block is swapped in
    bool verify_chain = true;                      ///< reject requests whose hashes contradict the cached chain
                                                   ///< (a hash twice in one request is always rejected)
    bool remote = false;  ///< a remote tier below the CPU tier (needs one): victims that would be
                          ///< dropped are written back, store hits are staged (stage_remote)
    std::uint32_t remote_write_back_chunks = ~std::uint32_t{0};  ///< write back only victims of chunk index
        ///< below this: other instances share prefixes, rarely deep tails
};

/// The longest cached prefix of a request, block by block across the tiers.
struct prefix_match {
    std::size_t run = 0;         ///< blocks [0, run) are cached; [run, n) must be computed
    std::size_t gpu_blocks = 0;  ///< blocks of the run entirely on the GPU
    std::size_t cpu_blocks = 0;  ///< blocks of the run with an item to swap in

    friend bool operator==(const prefix_match&, const prefix_match&) = default;
};

namespace detail {

/// What tiered_cache<GpuPolicy, CpuPolicy, Traits> holds and its parts share.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
struct tiered_state {
    using gpu_pool = block_pool<GpuPolicy>;
    using cpu_pool = block_pool<CpuPolicy>;
    using clock_type = typename Traits::clock_type;

    static constexpr std::uint64_t no_parent = ~std::uint64_t{0};

    struct session_state {
        std::vector<std::uint32_t> held;  // GPU items, one entry per hold
        std::uint64_t lookup_blocks = 0;
        std::uint64_t hit_blocks = 0;
        bool lost_kv = false;
        bool returned_after_loss = false;
    };
    // What complete_transfers needs to know of plan.transfers[i] beyond the copy.
    struct planned_op {
        std::uint64_t to_dst;  // the item the copy writes into its destination
        std::uint64_t to_src;  // exchange: the item it writes into its source
        session_id requester;  // swap-in, exchange: the request it serves
        block_meta meta{};     // write-back: the item's, reported if the write fails
    };
    // A release of an item filled in the open step (it has no data yet).
    struct deferred_release {
        std::uint32_t block;
        session_id by;
        std::uint64_t output_tokens;
        timestamp expected_return;
    };

    /// Throws: config_error for a capacity of 0 GPU items, 0 layers, a block
    /// size of 0, or per-layer capacities that do not hold one whole block.
    tiered_state(const cache_config& c, const typename GpuPolicy::config_type& gpu_policy_config,
                 const typename CpuPolicy::config_type& cpu_policy_config, clock_type clk)
            : config(validated(c)),
              items_per_block(c.items == granularity::per_layer ? c.num_layers : 1),
              clock(std::move(clk)),
              gpu(tier::gpu, c.gpu_capacity, gpu_policy_config),
              filled(c.gpu_capacity, 0),
              dropped_keys(std::max<std::size_t>(c.gpu_capacity + c.cpu_capacity, 1024)) {
        if (config.cpu_capacity > 0) cpu.emplace(tier::cpu, config.cpu_capacity, cpu_policy_config);
        gpu.hear_queue(&queue);  // the state is neither copied nor moved, so the pools may point at it
        if (cpu) cpu->hear_queue(&queue);
        counters.gpu.capacity = config.gpu_capacity;
        counters.cpu.capacity = config.cpu_capacity;
    }

    tiered_state(const tiered_state&) = delete;
    tiered_state& operator=(const tiered_state&) = delete;

    /// The key of layer `layer` of block `hash` (the block hash itself for
    /// whole-block items).
    [[nodiscard]] std::uint64_t item_key(block_hash hash, std::uint32_t layer) const noexcept {
        return items_per_block == 1 ? hash : mix64(hash + 0x9e3779b97f4a7c15ULL * (std::uint64_t{layer} + 1));
    }

    [[nodiscard]] item_state where(std::uint64_t key) const noexcept {
        if (gpu.cached_block(key)) return item_state::in_gpu;
        if (cpu && cpu->cached_block(key)) return item_state::in_cpu;
        return item_state::free;
    }

    /// The longest prefix of `hashes` whose blocks are each in either tier.
    [[nodiscard]] prefix_match lookup(std::span<const block_hash> hashes) const noexcept {
        prefix_match m;
        for (const block_hash h : hashes) {
            bool all_gpu = true;
            for (std::uint32_t l = 0; l < items_per_block; ++l) {
                const std::uint64_t key = item_key(h, l);
                if (gpu.cached_block(key)) continue;
                if (!(cpu && cpu->cached_block(key))) return m;
                all_gpu = false;
            }
            ++m.run;
            (all_gpu ? m.gpu_blocks : m.cpu_blocks) += 1;
        }
        return m;
    }

    /// Records item `key` as lost (reported in `out`: the step's plan, or a
    /// transfer report): counted, remembered to count its recomputation,
    /// and its owner marked as having lost KV. Admission (a victim with
    /// nowhere to go) and transfer completion (a failed copy) both drop.
    void drop_into(std::vector<dropped_item>& out, std::uint64_t key, const block_meta& meta) {
        out.push_back({key, meta.owner, meta.chunk, meta.layer});
        ++counters.dropped_items;
        // Remember the block (layer 0's hash is the block hash only for whole
        // blocks; per layer, remember the chunk by its owner and index).
        if (items_per_block == 1 && !dropped_keys.contains(key)) dropped_keys.push_back(key);
        if (auto it = sessions.find(meta.owner); it != sessions.end()) it->second.lost_kv = true;
    }

    static cache_config validated(const cache_config& c) {
        if (c.gpu_capacity == 0)
            throw config_error("cache_config: gpu_capacity 0 cannot hold a block; give at least one block");
        if (c.block_size == 0) throw config_error("cache_config: block_size 0; give the tokens per block (e.g. 16)");
        if (c.num_layers == 0) throw config_error("cache_config: num_layers 0; give at least 1");
        if (c.remote && c.cpu_capacity == 0)
            throw config_error(
                "cache_config: remote tier without a CPU tier; remote hits are staged through CPU "
                "memory, so give cpu_capacity > 0");
        if (c.items == granularity::per_layer &&
            (c.gpu_capacity < c.num_layers || (c.cpu_capacity > 0 && c.cpu_capacity < c.num_layers)))
            throw config_error("cache_config: per-layer tiers of " + std::to_string(c.gpu_capacity) + " / " +
                               std::to_string(c.cpu_capacity) + " items cannot hold one block of " +
                               std::to_string(c.num_layers) + " layers; give at least num_layers items per tier");
        return c;
    }

    cache_config config;
    std::uint32_t items_per_block;
    clock_type clock;
    gpu_pool gpu;
    std::optional<cpu_pool> cpu;
    bool in_step = false;
    swap_plan plan;                    // the open (or last ended) step's
    std::vector<planned_op> plan_ops;  // [plan.transfers.size()]
    std::vector<std::uint8_t> filled;  // [gpu capacity] filled in the open step
    std::vector<std::uint32_t> filled_this_step;
    std::vector<deferred_release> deferred_releases;  // releases of filled items, done at end_step
    std::unordered_map<session_id, session_state> sessions;
    ghost_list dropped_keys;  // blocks dropped, to count recomputation
    cache_metrics counters;   // metrics() adds the derived figures
    waiting_queue queue;      // the pools point at it (hear_queue)
};

}  // namespace detail
}  // namespace kvpolicy
