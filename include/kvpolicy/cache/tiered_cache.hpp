// tiered_cache: the cache type a serving engine calls every scheduler step.
//
// A GPU tier and an optional CPU tier (`block_pool`s, each with its own
// eviction policy), composed at compile time:
//
//   using cache = tiered_cache<lru, lru>;                    // vLLM-like
//   using cache = tiered_cache<retention_value<>,            // Pensieve, with
//                              lexicographic_checkerboard>;  // .items = per_layer
//
// One step (ARCHITECTURE.md, "Data flow of one scheduler step"):
//   begin_step();
//   for each scheduled request: admit(session, hashes, ctx)
//       lookup: the longest prefix whose blocks are each in either tier;
//       hold the GPU hits, swap in the CPU hits, allocate the miss tail
//       (a tail block still cached on the GPU is touched, not duplicated);
//       room comes from free slots first, then GPU victims, each sheltered
//       in the CPU tier (a planned swap-out, or an exchange with a CPU hit;
//       the CPU tier evicts through its own policy when full, and a CPU
//       victim is dropped).
//   const swap_plan& plan = end_step();   // run plan.transfers in order
//   complete_transfers(plan, statuses);   // optional: what failed copies cost
//   ... forward pass ...; release(session) when a request finishes.
//
// Failed copies (`complete_transfers`, called after the engine ran the plan
// and before the next begin_step, from any thread). A copy's output is lost
// when its status is `failed` or when it read the output of a lost copy
// earlier in the plan (a swap-out that failed, then a swap-in of the same
// item from that CPU slot). Whatever an item's last planned copy left
// invalid, if the item is still where that copy put it:
// - a swap-out (GPU -> CPU): the CPU copy is unstored and reported dropped
//   (its GPU slot may already hold another item, so it cannot stay there);
// - a swap-in (CPU -> GPU): if a request holds the item, it stays, owned by
//   the request that swapped it in, and is reported for recompute to every
//   holder (the forward pass computes it as it computes the miss tail);
//   if nobody holds it (the request was cancelled meanwhile) or only a pin
//   does, it is unstored and reported dropped;
// - an exchange: both halves are lost (the victim's CPU copy dropped, the
//   hit treated as a failed swap-in), since a two-way copy that failed may
//   have half-written either side.
// An inclusive CPU copy read by a failed swap-in is left as it was (a read
// does not change its source). An item is reported dropped once, and only if
// no copy of it is left: with inclusive tiers, a lost copy whose other copy
// is good, or whose GPU copy stays held for recompute, goes without a report.
// A plan not reported by the next begin_step counts as all done.
//
// Cancelling a request before its forward pass: free_session(s, true). Its
// holds go, and what it owns that nobody holds (its miss tail, the failed
// swap-ins it was to recompute) is freed; its swap-ins still in flight
// complete as above: a done one stays cached, unheld, with its data.
//
// A finished request's holds are released in reverse block order, so its
// tail becomes the least recent and leaves before its prefix (a prefix is
// useful without its tail, never the reverse), as vLLM frees blocks.
//
// Every item is at every moment in exactly one of {gpu, cpu, free, dropped}
// (inclusive tiers: or in gpu and cpu, the CPU copy recorded). A held
// (ref > 0) or pinned item is never a victim. Every public call validates
// first and throws before changing anything.
//
// Items (`cache_config::items`): with `granularity::whole_block` an item is
// a block; with `per_layer` each block is `num_layers` items, one per layer
// (seed 000's layer-chunks), so a policy can drop back layers first. A block
// is a hit only if all its layers are cached; a chunk with any dropped layer
// is recomputed (and reported) whole. A run-time choice: making it a type
// parameter would double every composition's instantiations for one integer.
//
// Remote tier (`cache_config::remote`): a store shared by several instances
// (Redis, kvpolicy/redis/), below the CPU tier. A victim that would be
// dropped (a CPU victim, or a GPU victim with no CPU room) and whose chunk
// is below `remote_write_back_chunks` is written back instead: a planned
// copy to `tier::remote`, after which the cache holds no copy and keeps no
// record of it (the store owns its eviction: several writers, one
// authority). Lookups reach the store through the caller: admit_through
// (remote_tier.hpp) asks the store how far the cached prefix extends, and
// stage_remote puts those blocks in CPU slots with a planned fetch
// (remote -> CPU) each, so that admit then finds them as CPU hits and swaps
// them in. A failed write-back loses its item (reported dropped unless a
// copy is left); a failed fetch (the store lost the value, or it did not
// verify) is a failed copy like any other: the swap-in that read it is
// recomputed, never served another block's bytes.
//
// This header declares the class and is the one to include; the members are
// defined by responsibility in tiered_cache_admit.hpp (lookup and admission),
// tiered_cache_step.hpp (the step, transfer completion, releases and pins)
// and tiered_cache_metrics.hpp (metrics and invariants), included below.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvpolicy/cache/metrics.hpp"
#include "kvpolicy/cache/swap_plan.hpp"
#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
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
} && clock_source<typename T::clock_type> && cost_model<typename T::cost_model_type> &&
    requires(typename T::mutex_type& m) {
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
    std::size_t gpu_capacity = 0;  ///< items in the GPU tier (blocks, or layer-chunks per_layer)
    std::size_t cpu_capacity = 0;  ///< items in the CPU tier; 0 = no CPU tier, GPU victims are dropped
    std::uint32_t block_size = 16; ///< tokens per block
    std::uint32_t num_layers = 1;  ///< layers per block; the items per block under per_layer
    granularity items = granularity::whole_block;  ///< what one eviction item is
    std::size_t item_bytes = 0;    ///< bytes of one item, for the byte counters
    bool inclusive = false;        ///< keep the CPU copy when a block is swapped in
    bool verify_chain = true;      ///< reject requests whose hashes contradict the cached chain
                                   ///< (a hash twice in one request is always rejected)
    bool remote = false;           ///< a remote tier below the CPU tier (needs one): victims that would be
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

/// What admit() did for one request.
struct admission {
    prefix_match match;
    std::size_t computed_blocks = 0;  ///< the miss tail, allocated and to be computed
    std::size_t gpu_evictions = 0;    ///< GPU victims made to find room
};

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy = GpuPolicy, cache_traits Traits = default_cache_traits>
class tiered_cache {
public:
    using gpu_policy_type = GpuPolicy;
    using cpu_policy_type = CpuPolicy;
    using traits_type = Traits;
    using clock_type = typename Traits::clock_type;

    /// Throws: config_error for a capacity of 0 GPU items, 0 layers, a block
    /// size of 0, or per-layer capacities that do not hold one whole block.
    explicit tiered_cache(const cache_config& config, const typename GpuPolicy::config_type& gpu_policy_config = {},
                          const typename CpuPolicy::config_type& cpu_policy_config = {}, clock_type clock = {})
        : config_(validated(config)),
          items_per_block_(config.items == granularity::per_layer ? config.num_layers : 1),
          clock_(std::move(clock)),
          gpu_(tier::gpu, config.gpu_capacity, gpu_policy_config),
          filled_(config.gpu_capacity, 0),
          dropped_keys_(std::max<std::size_t>(config.gpu_capacity + config.cpu_capacity, 1024)) {
        if (config_.cpu_capacity > 0) cpu_.emplace(tier::cpu, config_.cpu_capacity, cpu_policy_config);
        gpu_.hear_queue(&queue_);  // the cache is neither copied nor moved, so the pools may point at it
        if (cpu_) cpu_->hear_queue(&queue_);
        metrics_.gpu.capacity = config_.gpu_capacity;
        metrics_.cpu.capacity = config_.cpu_capacity;
    }

    tiered_cache(const tiered_cache&) = delete;
    tiered_cache& operator=(const tiered_cache&) = delete;

    // --- queries -------------------------------------------------------------

    [[nodiscard]] const cache_config& config() const noexcept { return config_; }
    [[nodiscard]] std::uint32_t items_per_block() const noexcept { return items_per_block_; }
    [[nodiscard]] clock_type& clock() noexcept { return clock_; }
    [[nodiscard]] const block_pool<GpuPolicy>& gpu() const noexcept { return gpu_; }
    [[nodiscard]] bool has_cpu_tier() const noexcept { return cpu_.has_value(); }
    /// Precondition: has_cpu_tier().
    [[nodiscard]] const block_pool<CpuPolicy>& cpu() const noexcept { return *cpu_; }
    [[nodiscard]] bool in_step() const noexcept { return in_step_; }

    /// The key of layer `layer` of block `hash` (the block hash itself for
    /// whole-block items).
    [[nodiscard]] std::uint64_t item_key(block_hash hash, std::uint32_t layer) const noexcept {
        return items_per_block_ == 1 ? hash : mix64(hash + 0x9e3779b97f4a7c15ULL * (std::uint64_t{layer} + 1));
    }

    /// Where an item is now: `in_gpu`, `in_cpu`, or `free` when the cache
    /// holds no copy of it. The cache keeps no record of keys it no longer
    /// holds (that would grow without bound), so an item it dropped also
    /// reads `free` here: a drop is reported once, when it happens, in the
    /// step's `swap_plan::drops` or `transfer_report::drops`, with the token
    /// range to recompute.
    [[nodiscard]] item_state where(block_hash hash, std::uint32_t layer = 0) const {
        std::scoped_lock lock(mutex_);
        return where_unlocked(item_key(hash, layer));
    }

    /// The longest prefix of `hashes` whose blocks are each in either tier.
    [[nodiscard]] prefix_match lookup(std::span<const block_hash> hashes) const {
        std::scoped_lock lock(mutex_);
        return lookup_unlocked(hashes);
    }

    /// Whether admit(hashes) finds room on the GPU: every item of `hashes`
    /// not on the GPU needs a free slot or an evictable item outside the
    /// request. admit throws capacity_error exactly when this is false.
    [[nodiscard]] bool gpu_room_for(std::span<const block_hash> hashes) const {
        std::scoped_lock lock(mutex_);
        std::size_t needed = 0;
        std::size_t own_evictable = 0;
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < items_per_block_; ++l) {
                if (auto b = gpu_.cached_block(item_key(h, l))) own_evictable += gpu_.is_evictable(*b) ? 1 : 0;
                else ++needed;
            }
        return needed <= gpu_.num_free_blocks() + gpu_.num_evictable_blocks() - own_evictable;
    }

    /// Items `session` holds on the GPU (one entry per hold).
    [[nodiscard]] std::vector<block_id> held_by(session_id session) const {
        std::scoped_lock lock(mutex_);
        std::vector<block_id> out;
        if (auto it = sessions_.find(session); it != sessions_.end())
            for (std::uint32_t b : it->second.held) out.push_back(block_id{b});
        return out;
    }

    /// Counters, with the derived figures (fairness, occupancy) brought up to date.
    [[nodiscard]] cache_metrics metrics() const;

    /// Checks every invariant; returns an empty string when all hold, else
    /// what is broken. For tests and fuzzers: O(capacity).
    [[nodiscard]] std::string check_invariants() const;

    // --- the step ------------------------------------------------------------

    /// Starts a step. The previous step's plan must have run by now.
    /// Throws: usage_error inside a step.
    void begin_step();

    /// Ends the step and returns its plan, valid until the next begin_step.
    /// Items filled in the step whose requests were already released become
    /// evictable here: nothing can be allocated between end_step and the next
    /// begin_step, by which time the engine has run the plan and the forward
    /// pass has filled them. Throws: usage_error outside a step.
    const swap_plan& end_step();

    /// Reports how the engine ran the last plan: `status[i]` for
    /// `plan.transfers[i]` (execute_plan's output). Call it after end_step
    /// and before the next begin_step, once per plan, from any thread.
    /// Effects: the rules in the header comment; every lost item is unstored
    /// (reported in `drops`) or left held for recompute (`recompute`), and
    /// counted in metrics().
    /// Throws: usage_error, changing nothing, inside a step, for a plan
    /// already reported or of another step, a status count other than the
    /// plan's transfer count, or a status that is neither done nor failed.
    /// Complexity: O(transfers + sessions' holds per lost GPU item).
    transfer_report complete_transfers(const swap_plan& plan, std::span<const transfer_status> status);

    /// Looks `hashes` up, holds the cached prefix for `session` (swapping CPU
    /// items in), and allocates and holds the miss tail as blocks to compute.
    /// `ctx` supplies the request's other fields (priority, lifetime, ...);
    /// the cache fills in time, key, session and position per item.
    /// `next_use`, when given, holds each block's next use (for Belady and
    /// other oracle studies); empty = unknown.
    /// Throws: usage_error outside a step, for a malformed chain (a hash
    /// twice, or a cached block under another parent) or a `next_use` of the
    /// wrong length; capacity_error if the items to place exceed what is free
    /// or evictable. Nothing changes then.
    admission admit(session_id session, std::span<const block_hash> hashes, const access_context& ctx = {},
                    std::span<const timestamp> next_use = {});

    /// Stages blocks [begin, begin + count) of `hashes`, which the remote
    /// store holds, into the CPU tier: a CPU slot per item (free, or made by
    /// evicting CPU victims, written back or dropped; never this request's
    /// own cached prefix) and a planned fetch (remote -> CPU) into it, so
    /// that admit(session, hashes, ctx), called next, finds them as CPU hits.
    /// `begin` must be lookup(hashes).run. Stages fewer blocks, from the
    /// front, when the CPU tier cannot take them all. Returns the blocks staged.
    /// Throws: usage_error outside a step, without a remote tier, for a
    /// range outside `hashes`, a `begin` that is not the cached prefix's end,
    /// or a malformed chain. Nothing changes then.
    std::size_t stage_remote(session_id session, std::span<const block_hash> hashes, std::size_t begin,
                             std::size_t count, const access_context& ctx = {});

    /// Releases every hold `session` has (its request finished). A released
    /// item stays cached and becomes a candidate when nobody else holds it.
    /// `output_tokens`: how many tokens the request generated (0 = unknown);
    /// policies that predict a session's return from it see it in the
    /// release context. `expected_return`: when the engine expects the
    /// session's next request, on this cache's clock (0 = no hint; `never`:
    /// it will not return, e.g. its conversation closed); session_aware_lru
    /// ranks the session by it. Returns how many holds were released.
    /// Throws: usage_error if the session holds nothing (a double release,
    /// or an unknown session) or `expected_return` is not after now (a hint
    /// in the past is a clock mix-up). Nothing changes then.
    std::size_t release(session_id session, std::uint64_t output_tokens = 0, timestamp expected_return = 0);

    /// Releases one hold of `session` on GPU item `block`. Throws:
    /// usage_error if the session does not hold it (double release, unknown block).
    void release(session_id session, block_id block);

    /// Ends a session: releases its holds and tells each tier's policy that
    /// hears session ends (hears_session_ends: session_aware_lru expects the
    /// session back never, until its next request); with `forget_blocks`,
    /// also frees the items it owns that nobody holds (both tiers). Unknown
    /// sessions are a no-op (freeing is idempotent). Returns the items freed.
    std::size_t free_session(session_id session, bool forget_blocks = false);

    // --- the waiting queue ---------------------------------------------------

    /// Request `request` of `session` is queued (arrived, not yet started)
    /// and will read blocks `hashes`. Tiers whose policy hears the waiting
    /// queue (hears_waiting_queue: queue_aware) learn, for every item a queued
    /// request reads, how soon the earliest such request comes (arrival
    /// order), now and whenever the item enters a tier; other policies are
    /// unaffected. Call dequeue(request) when it starts (before its admit)
    /// or is dropped. O(items of `hashes`). Throws: usage_error if `request`
    /// is already queued. Nothing changes then.
    void enqueue(std::uint64_t request, session_id session, std::span<const block_hash> hashes);

    /// Request `request` left the queue: it starts now (admit it next), or
    /// it was dropped. The items only it was to read lose their protection.
    /// Returns the session it was queued for. O(items of its hashes),
    /// amortised. Throws: usage_error if `request` is not queued (dequeued
    /// twice, or never enqueued). Nothing changes then.
    session_id dequeue(std::uint64_t request);

    /// Requests queued now.
    [[nodiscard]] std::size_t queued_requests() const {
        std::scoped_lock lock(mutex_);
        return queue_.size();
    }
    /// The waiting queue as the cache knows it (unlocked: single-threaded use, tests).
    [[nodiscard]] const waiting_queue& queue() const noexcept { return queue_; }

    /// Pins every item of block `hash` on the GPU: never evicted until
    /// unpinned (a system prompt, say). Throws: usage_error if the block is
    /// not entirely on the GPU (acquire it first) or already pinned.
    void pin(block_hash hash);

    /// Throws: usage_error if the block is not pinned on the GPU.
    void unpin(block_hash hash);

private:
    static constexpr std::uint64_t no_parent = ~std::uint64_t{0};

    struct session_state {
        std::vector<std::uint32_t> held;  // GPU items, one entry per hold
        std::uint64_t lookup_blocks = 0;
        std::uint64_t hit_blocks = 0;
        bool lost_kv = false;
        bool returned_after_loss = false;
    };
    struct pending_swap_in {
        block_id cpu_slot;
        std::uint64_t key;
        block_meta meta;
        access_context ctx;
        std::size_t held_pos;  // its place in the session's holds
    };
    struct planned_op {
        std::uint64_t to_dst;   // the item the copy writes into its destination
        std::uint64_t to_src;   // exchange: the item it writes into its source
        session_id requester;   // swap-in, exchange: the request it serves
        block_meta meta{};      // write-back: the item's, reported if the write fails
    };
    struct slot_fate {
        tier where;
        block_id slot;
        bool valid;
        std::uint64_t key;  // written by the slot's last copy
        session_id requester;
    };
    struct lost_copy {
        std::uint64_t key;
        block_meta meta;
        bool again;  // the same item's other copy comes first in the plan
    };
    struct new_item {
        std::uint64_t key;
        block_meta meta;
        access_context ctx;
        std::size_t held_pos;
    };

    // Lookup and admission (tiered_cache_admit.hpp).
    void fill(block_id g, std::uint64_t key, const block_meta& meta, const access_context& ctx, session_state& s,
              std::size_t held_pos);
    [[nodiscard]] prefix_match lookup_unlocked(std::span<const block_hash> hashes) const noexcept;
    void verify_chain(std::span<const block_hash> hashes);
    void shelter(std::span<const block_id> victims, timestamp now);
    void drop_or_write_back(tier from, block_id slot, std::uint64_t key, const block_meta& meta);

    // Holds, drops and recovery ranges (tiered_cache_step.hpp).
    void release_holds(session_id by, const std::vector<std::uint32_t>& held, std::uint64_t output_tokens,
                       timestamp expected_return);
    void release_one(std::uint32_t b, timestamp now, session_id by, std::uint64_t output_tokens,
                     timestamp expected_return);
    void drop(std::uint64_t key, const block_meta& meta);
    void drop_into(std::vector<dropped_item>& out, std::uint64_t key, const block_meta& meta);
    void build_recovery();
    [[nodiscard]] recovery_range chunk_range(session_id session, chunk_index chunk) const noexcept;
    static void merge_ranges(std::vector<recovery_range>& r);
    template <class Pool>
    std::size_t forget_owned(Pool& pool, session_id session);

    // Used by every part.
    static cache_config validated(const cache_config& c) {
        if (c.gpu_capacity == 0)
            throw config_error("cache_config: gpu_capacity 0 cannot hold a block; give at least one block");
        if (c.block_size == 0) throw config_error("cache_config: block_size 0; give the tokens per block (e.g. 16)");
        if (c.num_layers == 0) throw config_error("cache_config: num_layers 0; give at least 1");
        if (c.remote && c.cpu_capacity == 0)
            throw config_error("cache_config: remote tier without a CPU tier; remote hits are staged through CPU "
                               "memory, so give cpu_capacity > 0");
        if (c.items == granularity::per_layer &&
            (c.gpu_capacity < c.num_layers || (c.cpu_capacity > 0 && c.cpu_capacity < c.num_layers)))
            throw config_error("cache_config: per-layer tiers of " + std::to_string(c.gpu_capacity) + " / " +
                               std::to_string(c.cpu_capacity) + " items cannot hold one block of " +
                               std::to_string(c.num_layers) + " layers; give at least num_layers items per tier");
        return c;
    }

    access_context item_context(const access_context& base, session_id session, block_hash hash, std::size_t chunk,
                                std::uint32_t layer, std::uint32_t total_chunks, timestamp now) const noexcept {
        access_context c = base;
        c.now = now;
        c.key = item_key(hash, layer);
        c.session = session;
        c.chunk = chunk_index{static_cast<std::uint32_t>(chunk)};
        c.layer = layer_index{layer};
        c.num_layers = items_per_block_;
        c.session_total_chunks = total_chunks;
        c.context_length = chunk * config_.block_size;
        c.block_tokens = config_.block_size;
        if (!next_use_.empty()) c.next_use = next_use_[chunk];
        return c;
    }

    [[nodiscard]] item_state where_unlocked(std::uint64_t key) const noexcept {
        if (gpu_.cached_block(key)) return item_state::in_gpu;
        if (cpu_ && cpu_->cached_block(key)) return item_state::in_cpu;
        return item_state::free;
    }

    cache_config config_;
    std::uint32_t items_per_block_;
    clock_type clock_;
    mutable typename Traits::mutex_type mutex_;
    block_pool<GpuPolicy> gpu_;
    std::optional<block_pool<CpuPolicy>> cpu_;
    bool in_step_ = false;
    swap_plan plan_;
    std::vector<planned_op> plan_ops_;           // [plan_.transfers.size()]
    std::uint64_t steps_ended_ = 0;
    bool plan_open_ = false;                     // ended, not yet reported
    std::vector<slot_fate> slot_fates_;          // scratch for complete_transfers
    std::vector<lost_copy> lost_copies_;         // scratch for complete_transfers, in plan order
    std::vector<std::uint32_t> lost_order_;      // scratch: lost_copies_ indices by key
    std::vector<std::uint32_t> fate_index_[2];   // [gpu, cpu][slot] -> slot_fates_ index or no_index (scratch)
    std::vector<std::uint8_t> filled_;           // [gpu capacity] filled in the open step
    std::vector<std::uint32_t> filled_this_step_;
    struct deferred_release {
        std::uint32_t block;
        session_id by;
        std::uint64_t output_tokens;
        timestamp expected_return;
    };
    std::vector<deferred_release> deferred_releases_;  // releases of filled items, done at end_step
    std::unordered_map<session_id, session_state> sessions_;
    ghost_list dropped_keys_;                    // blocks dropped, to count recomputation
    cache_metrics metrics_;
    std::vector<block_id> victims_;              // scratch
    std::vector<block_id> cpu_victims_;          // scratch
    std::vector<pending_swap_in> swap_ins_pending_;  // scratch
    std::vector<new_item> new_items_;               // scratch
    std::vector<std::uint64_t> recomputed_copies_;  // scratch: inclusive CPU copies of new items, sorted
    std::vector<block_hash> chain_scratch_;
    std::span<const timestamp> next_use_;  // of the admit in progress
    waiting_queue queue_;                  // the pools point at it (hear_queue)
    std::vector<std::uint64_t> queue_keys_;  // scratch for enqueue
};

}  // namespace kvpolicy

// The members' definitions, by responsibility. Each includes this header, so
// any one of them can be included alone.
#include "kvpolicy/cache/tiered_cache_admit.hpp"
#include "kvpolicy/cache/tiered_cache_metrics.hpp"
#include "kvpolicy/cache/tiered_cache_step.hpp"
