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

    /// Items `session` holds on the GPU (one entry per hold).
    [[nodiscard]] std::vector<block_id> held_by(session_id session) const {
        std::scoped_lock lock(mutex_);
        std::vector<block_id> out;
        if (auto it = sessions_.find(session); it != sessions_.end())
            for (std::uint32_t b : it->second.held) out.push_back(block_id{b});
        return out;
    }

    /// Counters, with the derived figures (fairness, occupancy) brought up to date.
    [[nodiscard]] cache_metrics metrics() const {
        std::scoped_lock lock(mutex_);
        cache_metrics m = metrics_;
        m.gpu.used = gpu_.capacity() - gpu_.num_free_blocks();
        m.cpu.used = cpu_ ? cpu_->capacity() - cpu_->num_free_blocks() : 0;
        double sum = 0, sum_sq = 0;
        std::size_t n = 0, lost = 0, returned = 0;
        for (const auto& [id, s] : sessions_) {
            if (s.lookup_blocks > 0) {
                const double rate = static_cast<double>(s.hit_blocks) / static_cast<double>(s.lookup_blocks);
                sum += rate;
                sum_sq += rate * rate;
                ++n;
            }
            lost += s.lost_kv ? 1 : 0;
            returned += s.returned_after_loss ? 1 : 0;
        }
        m.fairness = (n == 0 || sum_sq == 0) ? 1.0 : (sum * sum) / (static_cast<double>(n) * sum_sq);
        m.re_prefill_rate = lost == 0 ? 0.0 : static_cast<double>(returned) / static_cast<double>(lost);
        return m;
    }

    /// Checks every invariant; returns an empty string when all hold, else
    /// what is broken. For tests and fuzzers: O(capacity).
    [[nodiscard]] std::string check_invariants() const {
        std::scoped_lock lock(mutex_);
        std::ostringstream bad;
        std::vector<std::uint32_t> holds(gpu_.capacity(), 0);
        for (const auto& [id, s] : sessions_)
            for (std::uint32_t b : s.held) ++holds[b];
        for (std::uint32_t b : deferred_releases_) ++holds[b];
        std::size_t evictable = 0;
        for (std::uint32_t i = 0; i < gpu_.capacity(); ++i) {
            const block_id b{i};
            const auto st = gpu_.state(b);
            if (st == block_pool<GpuPolicy>::slot_state::cached) {
                if (gpu_.ref_count(b) != holds[i])
                    bad << "gpu block " << i << ": ref count " << gpu_.ref_count(b) << " but " << holds[i] << " holds; ";
                if (gpu_.cached_block(gpu_.key(b)) != b) bad << "gpu block " << i << " not indexed under its key; ";
                if (cpu_ && !config_.inclusive && cpu_->cached_block(gpu_.key(b)))
                    bad << "gpu block " << i << " also cached on the cpu in exclusive mode; ";
                evictable += gpu_.is_evictable(b) ? 1 : 0;
                if (gpu_.policy().contains(item_id{i}) != true) bad << "gpu block " << i << " unknown to its policy; ";
            } else {
                if (holds[i] != 0) bad << "gpu block " << i << " held but not cached; ";
                if (gpu_.policy().contains(item_id{i})) bad << "gpu slot " << i << " not cached but in the policy; ";
                if (st == block_pool<GpuPolicy>::slot_state::reserved) bad << "gpu slot " << i << " left reserved; ";
            }
        }
        if (evictable != gpu_.policy().evictable_size())
            bad << "gpu: " << evictable << " evictable blocks but the policy has " << gpu_.policy().evictable_size() << "; ";
        if (cpu_)
            for (std::uint32_t i = 0; i < cpu_->capacity(); ++i) {
                const block_id b{i};
                const auto st = cpu_->state(b);
                if (st == block_pool<CpuPolicy>::slot_state::reserved) bad << "cpu slot " << i << " left reserved; ";
                if (st == block_pool<CpuPolicy>::slot_state::cached && cpu_->cached_block(cpu_->key(b)) != b)
                    bad << "cpu block " << i << " not indexed; ";
                if (st == block_pool<CpuPolicy>::slot_state::cached && cpu_->ref_count(b) != 0)
                    bad << "cpu block " << i << " still held; ";
            }
        return bad.str();
    }

    // --- the step ------------------------------------------------------------

    /// Starts a step. The previous step's plan must have run by now.
    /// Throws: usage_error inside a step.
    void begin_step() {
        std::scoped_lock lock(mutex_);
        if (in_step_) throw usage_error("begin_step: a step is already open; call end_step() first");
        plan_.clear();
        plan_ops_.clear();
        plan_open_ = false;  // an unreported plan counts as done
        in_step_ = true;
    }

    /// Ends the step and returns its plan, valid until the next begin_step.
    /// Items filled in the step whose requests were already released become
    /// evictable here: nothing can be allocated between end_step and the next
    /// begin_step, by which time the engine has run the plan and the forward
    /// pass has filled them. Throws: usage_error outside a step.
    const swap_plan& end_step() {
        std::scoped_lock lock(mutex_);
        if (!in_step_) throw usage_error("end_step: no step is open; call begin_step() first");
        in_step_ = false;
        const timestamp now = clock_.now();
        for (std::uint32_t b : deferred_releases_) gpu_.release(block_id{b}, now);
        deferred_releases_.clear();
        for (std::uint32_t b : filled_this_step_) filled_[b] = 0;
        filled_this_step_.clear();
        build_recovery();
        plan_.step = ++steps_ended_;
        plan_open_ = true;
        return plan_;
    }

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
    transfer_report complete_transfers(const swap_plan& plan, std::span<const transfer_status> status) {
        std::scoped_lock lock(mutex_);
        if (in_step_)
            throw usage_error("complete_transfers: a step is open; report a plan after its end_step and before the "
                              "next begin_step");
        if (plan.step != plan_.step)
            throw usage_error("complete_transfers: the plan is of step " + std::to_string(plan.step) +
                              " but the cache's last plan is of step " + std::to_string(plan_.step) +
                              "; report each plan before the next begin_step");
        if (!plan_open_)
            throw usage_error("complete_transfers: the plan of step " + std::to_string(plan.step) +
                              " was already reported; report each plan once");
        if (status.size() != plan_.transfers.size())
            throw usage_error("complete_transfers: " + std::to_string(status.size()) + " statuses for " +
                              std::to_string(plan_.transfers.size()) + " transfers; give one per transfer, in plan order");
        for (std::size_t i = 0; i < status.size(); ++i)
            if (status[i] != transfer_status::done && status[i] != transfer_status::failed)
                throw usage_error("complete_transfers: status " + std::to_string(i) + " is " +
                                  std::to_string(static_cast<unsigned>(status[i])) + ", neither done nor failed");

        // Which slots the plan left holding valid data: untouched ones do;
        // a copy's destination does iff it succeeded and read valid sources.
        // Each tier's slot -> its entry in slot_fates_ is found in O(1), so a
        // per-layer plan of many thousand copies costs no more than its
        // length. Allocated before anything changes.
        slot_fates_.clear();
        slot_fates_.reserve(2 * status.size());
        lost_copies_.clear();
        lost_copies_.reserve(2 * status.size());
        lost_order_.reserve(2 * status.size());
        fate_index_[0].resize(gpu_.capacity(), no_index);
        fate_index_[1].resize(cpu_ ? cpu_->capacity() : 0, no_index);
        plan_open_ = false;
        transfer_report report;
        auto fate = [&](tier t, block_id b) -> slot_fate* {
            const std::uint32_t i = fate_index_[t == tier::cpu][b.value];
            return i == no_index ? nullptr : &slot_fates_[i];
        };
        auto valid = [&](tier t, block_id b) {
            const slot_fate* f = fate(t, b);
            return f == nullptr || f->valid;
        };
        auto set = [&](tier t, block_id b, bool ok, std::uint64_t key, session_id by) {
            if (slot_fate* f = fate(t, b)) {
                *f = {t, b, ok, key, by};
            } else {
                fate_index_[t == tier::cpu][b.value] = static_cast<std::uint32_t>(slot_fates_.size());
                slot_fates_.push_back({t, b, ok, key, by});
            }
        };
        for (std::size_t i = 0; i < status.size(); ++i) {
            const block_transfer& op = plan_.transfers[i];
            const planned_op& keys = plan_ops_[i];
            bool ok = status[i] == transfer_status::done && valid(op.from, op.src);
            if (op.exchange) ok = ok && valid(op.to, op.dst);
            if (op.exchange) set(op.from, op.src, ok, keys.to_src, keys.requester);
            set(op.to, op.dst, ok, keys.to_dst, keys.requester);
            report.failed += ok ? 0 : 1;
        }
        metrics_.failed_transfers += report.failed;
        for (const slot_fate& f : slot_fates_) fate_index_[f.where == tier::cpu][f.slot.value] = no_index;
        for (const slot_fate& f : slot_fates_) {
            if (f.valid) continue;
            if (f.where == tier::cpu) {
                if (!cpu_ || cpu_->state(f.slot) != block_pool<CpuPolicy>::slot_state::cached || cpu_->key(f.slot) != f.key)
                    continue;  // evicted (and reported) or freed since
                lost_copies_.push_back({f.key, cpu_->meta(f.slot), false});
                cpu_->unstore(f.slot);
                cpu_->free_slot(f.slot);
                continue;
            }
            if (gpu_.state(f.slot) != block_pool<GpuPolicy>::slot_state::cached || gpu_.key(f.slot) != f.key) continue;
            if (gpu_.ref_count(f.slot) == 0) {
                lost_copies_.push_back({f.key, gpu_.meta(f.slot), false});
                gpu_.unstore(f.slot);
                gpu_.free_slot(f.slot);
                continue;
            }
            // Held: each holder is told; the requester (or, if it left, the
            // first holder) computes it and so owns it.
            const std::size_t first = report.recompute.size();
            for (const auto& [id, st] : sessions_)
                if (std::find(st.held.begin(), st.held.end(), f.slot.value) != st.held.end())
                    report.recompute.push_back({f.slot, f.key, id, gpu_.meta(f.slot).chunk, gpu_.meta(f.slot).layer});
            std::sort(report.recompute.begin() + static_cast<std::ptrdiff_t>(first), report.recompute.end(),
                      [](const recompute_item& a, const recompute_item& b) { return a.session < b.session; });
            const bool requester_holds =
                std::any_of(report.recompute.begin() + static_cast<std::ptrdiff_t>(first), report.recompute.end(),
                            [&](const recompute_item& r) { return r.session == f.requester; });
            gpu_.set_owner(f.slot, requester_holds ? f.requester : report.recompute[first].session);
            ++metrics_.recompute_items;
        }
        // A lost copy is a lost item only if no copy of it is left (an
        // inclusive tier's other copy, or a held GPU item being recomputed),
        // and an item whose two copies were both lost is dropped once: in
        // plan order, each key reported at its first lost copy.
        lost_order_.resize(lost_copies_.size());
        for (std::uint32_t i = 0; i < lost_order_.size(); ++i) lost_order_[i] = i;
        std::stable_sort(lost_order_.begin(), lost_order_.end(),
                         [&](std::uint32_t a, std::uint32_t b) { return lost_copies_[a].key < lost_copies_[b].key; });
        for (std::size_t i = 1; i < lost_order_.size(); ++i)
            if (lost_copies_[lost_order_[i]].key == lost_copies_[lost_order_[i - 1]].key)
                lost_copies_[lost_order_[i]].again = true;
        for (const lost_copy& c : lost_copies_)
            if (!c.again && where_unlocked(c.key) == item_state::free) drop_into(report.drops, c.key, c.meta);
        // Recovery: the drops by owner (counted as dropped tokens), then
        // the recomputes by holder, merged per session.
        for (const dropped_item& d : report.drops) report.recovery.push_back(chunk_range(d.owner, d.chunk));
        merge_ranges(report.recovery);
        for (const recovery_range& x : report.recovery) metrics_.dropped_tokens += x.token_end - x.token_begin;
        for (const recompute_item& r : report.recompute) report.recovery.push_back(chunk_range(r.session, r.chunk));
        merge_ranges(report.recovery);
        return report;
    }

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
                    std::span<const timestamp> next_use = {}) {
        std::scoped_lock lock(mutex_);
        if (!in_step_) throw usage_error("admit: no step is open; call begin_step() first");
        if (!next_use.empty() && next_use.size() != hashes.size())
            throw usage_error("admit: " + std::to_string(next_use.size()) + " next-use times for " +
                              std::to_string(hashes.size()) + " blocks; give one per block or none");
        next_use_ = next_use;
        verify_chain(hashes);
        const prefix_match match = lookup_unlocked(hashes);

        // Validate: every item not on the GPU needs a GPU slot, from a free
        // slot or an evictable item outside this request.
        std::size_t gpu_items_needed = 0;
        std::size_t own_evictable = 0;
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < items_per_block_; ++l) {
                if (auto b = gpu_.cached_block(item_key(h, l))) own_evictable += gpu_.is_evictable(*b) ? 1 : 0;
                else ++gpu_items_needed;
            }
        const std::size_t available = gpu_.num_free_blocks() + gpu_.num_evictable_blocks() - own_evictable;
        if (gpu_items_needed > available)
            throw capacity_error("admit: session " + std::to_string(session.value) + " needs " +
                                 std::to_string(gpu_items_needed) + " GPU items but only " + std::to_string(available) +
                                 " are free or evictable (the rest are held by running requests or pinned); "
                                 "raise the GPU capacity or admit fewer requests this step");

        // Mutate.
        const timestamp now = clock_.now();
        session_state& s = sessions_[session];
        s.returned_after_loss = s.returned_after_loss || s.lost_kv;
        ++metrics_.requests;
        metrics_.lookup_blocks += hashes.size();
        s.lookup_blocks += hashes.size();
        s.hit_blocks += match.run;
        metrics_.gpu.hit_blocks += match.gpu_blocks;
        metrics_.cpu.hit_blocks += match.cpu_blocks;
        metrics_.gpu.hit_tokens = metrics_.gpu.hit_blocks * config_.block_size;
        metrics_.cpu.hit_tokens = metrics_.cpu.hit_blocks * config_.block_size;
        metrics_.miss_blocks += hashes.size() - match.run;
        metrics_.miss_tokens += (hashes.size() - match.run) * config_.block_size;
        const std::uint32_t total_chunks = static_cast<std::uint32_t>(std::max<std::size_t>(hashes.size(), 1));

        // 1. Hold what is on the GPU (prefix and tail), so making room cannot
        //    take it, and take this request's CPU items out of candidacy:
        //    prefix items will be swapped in; tail items are recomputed, so an
        //    exclusive tier frees their stale copies now (an inclusive one
        //    keeps them as the copies of the items about to be recomputed).
        swap_ins_pending_.clear();
        new_items_.clear();
        recomputed_copies_.clear();
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const bool in_run = i < match.run;
            if (!in_run && dropped_keys_.erase(hashes[i])) {
                ++metrics_.recomputed_blocks;
                metrics_.recomputed_tokens += config_.block_size;
            }
            for (std::uint32_t l = 0; l < items_per_block_; ++l) {
                const std::uint64_t key = item_key(hashes[i], l);
                const access_context ictx = item_context(ctx, session, hashes[i], i, l, total_chunks, now);
                if (auto b = gpu_.cached_block(key)) {
                    gpu_.touch(*b, ictx);
                    gpu_.hold(*b);
                    s.held.push_back(b->value);
                    continue;
                }
                // Its GPU slot is found below; keep its place in block order.
                const std::size_t pos = s.held.size();
                s.held.push_back(no_index);
                const std::optional<block_id> c = cpu_ ? cpu_->cached_block(key) : std::nullopt;
                if (c && in_run) {
                    cpu_->touch(*c, ictx);
                    swap_ins_pending_.push_back({*c, key, cpu_->meta(*c), ictx, pos});
                    // Exclusive: the item leaves the CPU tier, its slot reserved
                    // until its swap-in is planned. Inclusive: the copy stays,
                    // held so that making room cannot evict it first.
                    if (config_.inclusive) cpu_->hold(*c);
                    else cpu_->unstore(*c);
                    continue;
                }
                if (c && !config_.inclusive) {
                    cpu_->unstore(*c);
                    cpu_->free_slot(*c);
                } else if (c) {
                    recomputed_copies_.push_back(key);
                }
                const std::uint64_t parent = i == 0 ? no_parent : hashes[i - 1];
                new_items_.push_back({key, {parent, session, chunk_index{static_cast<std::uint32_t>(i)}, layer_index{l}}, ictx, pos});
            }
        }

        std::sort(recomputed_copies_.begin(), recomputed_copies_.end());

        // 2. Make room. Free GPU slots go first to swap-ins; with the GPU
        //    full, each remaining swap-in is paired with a GPU victim in an
        //    exchange (the victim takes the hit's CPU slot, the hit the
        //    victim's GPU slot). Other victims are sheltered.
        const std::size_t needed = swap_ins_pending_.size() + new_items_.size();
        const std::size_t n_victims = needed > gpu_.num_free_blocks() ? needed - gpu_.num_free_blocks() : 0;
        const std::size_t n_pairs = config_.inclusive ? 0 : std::min(n_victims, swap_ins_pending_.size());
        auto plan_swap_in = [&](const pending_swap_in& p) {
            const block_id g = *gpu_.take_free();
            fill(g, p.key, p.meta, p.ctx, s, p.held_pos);
            plan_.transfers.push_back({tier::cpu, p.cpu_slot, tier::gpu, g});
            plan_ops_.push_back({p.key, 0, session});
            // The copy just planned reads the slot before anything later in
            // the plan can write it, so the slot is free to reuse now.
            if (config_.inclusive) cpu_->release(p.cpu_slot, now);
            else cpu_->free_slot(p.cpu_slot);
            ++metrics_.swap_in_items;
            metrics_.swap_in_bytes += config_.item_bytes;
        };
        // Every item bound for the GPU is a miss there; the policy hears of
        // each before it chooses victims (ARC adapts here).
        for (const pending_swap_in& p : swap_ins_pending_) gpu_.note_miss(p.ctx);
        for (const new_item& n : new_items_) gpu_.note_miss(n.ctx);
        if (!config_.inclusive)  // the unpaired ones fit in the free slots
            for (std::size_t k = n_pairs; k < swap_ins_pending_.size(); ++k) plan_swap_in(swap_ins_pending_[k]);
        if (n_victims > 0) {
            const auto t0 = std::chrono::steady_clock::now();
            victims_.resize(n_victims);
            const std::size_t got = gpu_.pop_victims(victims_, now);
            KVPOLICY_ASSERT(got == n_victims);
            (void)got;
            metrics_.gpu.evictions += n_victims;
            for (std::size_t k = 0; k < n_pairs; ++k) {
                const block_id g = victims_[k];
                const pending_swap_in& p = swap_ins_pending_[k];
                const std::uint64_t victim_key = gpu_.key(g);
                cpu_->store(p.cpu_slot, victim_key, gpu_.meta(g), gpu_.last_context(g, now), 0);
                fill(g, p.key, p.meta, p.ctx, s, p.held_pos);
                plan_.transfers.push_back({tier::gpu, g, tier::cpu, p.cpu_slot, true});
                plan_ops_.push_back({victim_key, p.key, session});
                ++metrics_.swap_in_items;
                ++metrics_.swap_out_items;
                metrics_.swap_in_bytes += config_.item_bytes;
                metrics_.swap_out_bytes += config_.item_bytes;
            }
            shelter(std::span<const block_id>(victims_.data() + n_pairs, n_victims - n_pairs), now);
            const auto t1 = std::chrono::steady_clock::now();
            metrics_.eviction_latency.record(
                static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
        }
        if (config_.inclusive)
            for (const pending_swap_in& p : swap_ins_pending_) plan_swap_in(p);

        // 3. New items, computed by this step's forward pass.
        for (const new_item& n : new_items_) fill(*gpu_.take_free(), n.key, n.meta, n.ctx, s, n.held_pos);
        return {match, hashes.size() - match.run, n_victims};
    }

    /// Releases every hold `session` has (its request finished). A released
    /// item stays cached and becomes a candidate when nobody else holds it.
    /// Returns how many holds were released. Throws: usage_error if the
    /// session holds nothing (a double release, or an unknown session).
    std::size_t release(session_id session) {
        std::scoped_lock lock(mutex_);
        auto it = sessions_.find(session);
        if (it == sessions_.end() || it->second.held.empty())
            throw usage_error("release: session " + std::to_string(session.value) +
                              " holds no blocks (released twice, or never admitted)");
        release_holds(it->second.held);
        const std::size_t n = it->second.held.size();
        it->second.held.clear();
        return n;
    }

    /// Releases one hold of `session` on GPU item `block`. Throws:
    /// usage_error if the session does not hold it (double release, unknown block).
    void release(session_id session, block_id block) {
        std::scoped_lock lock(mutex_);
        auto it = sessions_.find(session);
        auto pos = it == sessions_.end() ? std::vector<std::uint32_t>::iterator{}
                                         : std::find(it->second.held.begin(), it->second.held.end(), block.value);
        if (it == sessions_.end() || pos == it->second.held.end())
            throw usage_error("release: session " + std::to_string(session.value) + " does not hold gpu block " +
                              std::to_string(block.value) + " (released twice, or never acquired)");
        it->second.held.erase(pos);
        release_one(block.value, clock_.now());
    }

    /// Ends a session: releases its holds; with `forget_blocks`, also frees
    /// the items it owns that nobody holds (both tiers). Unknown sessions
    /// are a no-op (freeing is idempotent). Returns the items freed.
    std::size_t free_session(session_id session, bool forget_blocks = false) {
        std::scoped_lock lock(mutex_);
        auto it = sessions_.find(session);
        if (it == sessions_.end()) return 0;
        release_holds(it->second.held);
        it->second.held.clear();
        std::size_t freed = 0;
        if (forget_blocks) {
            freed += forget_owned(gpu_, session);
            if (cpu_) freed += forget_owned(*cpu_, session);
        }
        sessions_.erase(it);
        return freed;
    }

    /// Pins every item of block `hash` on the GPU: never evicted until
    /// unpinned (a system prompt, say). Throws: usage_error if the block is
    /// not entirely on the GPU (acquire it first) or already pinned.
    void pin(block_hash hash) {
        std::scoped_lock lock(mutex_);
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const auto b = gpu_.cached_block(item_key(hash, l));
            if (!b)
                throw usage_error("pin: block " + std::to_string(hash) + " is " +
                                  std::string(to_string(where_unlocked(item_key(hash, l)))) +
                                  ", not on the gpu; admit it first");
            if (gpu_.is_pinned(*b)) throw usage_error("pin: block " + std::to_string(hash) + " is already pinned");
        }
        for (std::uint32_t l = 0; l < items_per_block_; ++l) gpu_.pin(*gpu_.cached_block(item_key(hash, l)));
    }

    /// Throws: usage_error if the block is not pinned on the GPU.
    void unpin(block_hash hash) {
        std::scoped_lock lock(mutex_);
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const auto b = gpu_.cached_block(item_key(hash, l));
            if (!b || !gpu_.is_pinned(*b)) throw usage_error("unpin: block " + std::to_string(hash) + " is not pinned");
        }
        const timestamp now = clock_.now();
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const block_id b = *gpu_.cached_block(item_key(hash, l));
            gpu_.unpin(b, now);
        }
    }

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

    // Stores a swapped-in or new item in reserved GPU slot `g`, held by the session.
    void fill(block_id g, std::uint64_t key, const block_meta& meta, const access_context& ctx, session_state& s,
              std::size_t held_pos) {
        gpu_.store(g, key, meta, ctx, 1);
        s.held[held_pos] = g.value;
        filled_[g.index()] = 1;
        filled_this_step_.push_back(g.value);
    }

    // Releases in reverse hold order (tail first); an item filled in the
    // open step has no data yet, so its release waits for end_step.
    void release_holds(const std::vector<std::uint32_t>& held) {
        const timestamp now = clock_.now();
        for (auto b = held.rbegin(); b != held.rend(); ++b) release_one(*b, now);
    }
    void release_one(std::uint32_t b, timestamp now) {
        if (in_step_ && filled_[b]) deferred_releases_.push_back(b);
        else gpu_.release(block_id{b}, now);
    }

    static cache_config validated(const cache_config& c) {
        if (c.gpu_capacity == 0)
            throw config_error("cache_config: gpu_capacity 0 cannot hold a block; give at least one block");
        if (c.block_size == 0) throw config_error("cache_config: block_size 0; give the tokens per block (e.g. 16)");
        if (c.num_layers == 0) throw config_error("cache_config: num_layers 0; give at least 1");
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
        if (!next_use_.empty()) c.next_use = next_use_[chunk];
        return c;
    }

    [[nodiscard]] item_state where_unlocked(std::uint64_t key) const noexcept {
        if (gpu_.cached_block(key)) return item_state::in_gpu;
        if (cpu_ && cpu_->cached_block(key)) return item_state::in_cpu;
        return item_state::free;
    }

    [[nodiscard]] prefix_match lookup_unlocked(std::span<const block_hash> hashes) const noexcept {
        prefix_match m;
        for (const block_hash h : hashes) {
            bool all_gpu = true;
            for (std::uint32_t l = 0; l < items_per_block_; ++l) {
                const std::uint64_t key = item_key(h, l);
                if (gpu_.cached_block(key)) continue;
                if (!(cpu_ && cpu_->cached_block(key))) return m;
                all_gpu = false;
            }
            ++m.run;
            (all_gpu ? m.gpu_blocks : m.cpu_blocks) += 1;
        }
        return m;
    }

    void verify_chain(std::span<const block_hash> hashes) {
        chain_scratch_.assign(hashes.begin(), hashes.end());
        std::sort(chain_scratch_.begin(), chain_scratch_.end());
        if (auto d = std::adjacent_find(chain_scratch_.begin(), chain_scratch_.end()); d != chain_scratch_.end())
            throw usage_error("admit: malformed hash chain: block hash " + std::to_string(*d) +
                              " appears twice in one request; hashes must be chained (parent, tokens, extra key)");
        if (!config_.verify_chain) return;
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint64_t key = item_key(hashes[i], 0);
            const block_meta* m = nullptr;
            if (auto b = gpu_.cached_block(key)) m = &gpu_.meta(*b);
            else if (cpu_) {
                if (auto c = cpu_->cached_block(key)) m = &cpu_->meta(*c);
            }
            const std::uint64_t parent = i == 0 ? no_parent : hashes[i - 1];
            if (m != nullptr && m->parent_key != parent)
                throw usage_error("admit: malformed hash chain: block " + std::to_string(i) + " (hash " +
                                  std::to_string(hashes[i]) + ") is cached under another parent; equal hashes must "
                                  "mean equal prefixes, so chain each hash from its parent's");
        }
    }

    // Moves GPU victims (in the policy's order, oldest first) to the CPU
    // tier. As if they were sheltered one by one: the CPU first gives up its
    // own victims, and if that is not room enough, the oldest GPU victims
    // are the ones dropped (each newer one would have pushed them out).
    // Inclusive: a victim whose CPU copy exists moves nothing; its copy is
    // protected while the CPU picks its own victims, then counts as used.
    void shelter(std::span<const block_id> victims, timestamp now) {
        std::size_t to_copy = 0;
        if (cpu_)
            for (const block_id v : victims) {
                const auto copy = config_.inclusive ? cpu_->cached_block(gpu_.key(v)) : std::nullopt;
                if (copy) cpu_->hold(*copy);
                else ++to_copy;
            }
        std::size_t cpu_room = 0;
        if (cpu_ && to_copy > 0) {
            cpu_room = cpu_->num_free_blocks();
            for (const block_id v : victims)
                if (!(config_.inclusive && cpu_->cached_block(gpu_.key(v)))) cpu_->note_miss(gpu_.last_context(v, now));
            if (to_copy > cpu_room) {
                cpu_victims_.resize(to_copy - cpu_room);
                const std::size_t got = cpu_->pop_victims(cpu_victims_, now);
                metrics_.cpu.evictions += got;
                for (std::size_t i = 0; i < got; ++i) {
                    // Inclusive: a CPU copy of an item still on the GPU, or
                    // of one this admit recomputes there, is not a loss; the
                    // GPU item just has no copy any more.
                    const std::uint64_t key = cpu_->key(cpu_victims_[i]);
                    const bool on_gpu = gpu_.cached_block(key) ||
                                        std::binary_search(recomputed_copies_.begin(), recomputed_copies_.end(), key);
                    if (!(config_.inclusive && on_gpu)) drop(key, cpu_->meta(cpu_victims_[i]));
                    cpu_->free_slot(cpu_victims_[i]);
                }
                cpu_room += got;
            }
        }
        std::size_t excess = to_copy > cpu_room ? to_copy - cpu_room : 0;
        for (const block_id v : victims) {
            const std::uint64_t key = gpu_.key(v);
            if (const auto copy = cpu_ && config_.inclusive ? cpu_->cached_block(key) : std::nullopt) {
                cpu_->release(*copy, now);  // now the only copy
            } else if (cpu_ && excess == 0) {
                const block_id c = *cpu_->take_free();
                cpu_->store(c, key, gpu_.meta(v), gpu_.last_context(v, now), 0);
                plan_.transfers.push_back({tier::gpu, v, tier::cpu, c});
                plan_ops_.push_back({key, 0, session_id{}});
                ++metrics_.swap_out_items;
                metrics_.swap_out_bytes += config_.item_bytes;
            } else {
                if (excess > 0) --excess;
                drop(key, gpu_.meta(v));
            }
            gpu_.free_slot(v);
        }
    }

    void drop(std::uint64_t key, const block_meta& meta) { drop_into(plan_.drops, key, meta); }
    void drop_into(std::vector<dropped_item>& out, std::uint64_t key, const block_meta& meta) {
        out.push_back({key, meta.owner, meta.chunk, meta.layer});
        ++metrics_.dropped_items;
        // Remember the block (layer 0's hash is the block hash only for whole
        // blocks; per layer, remember the chunk by its owner and index).
        if (items_per_block_ == 1 && !dropped_keys_.contains(key)) dropped_keys_.push_back(key);
        if (auto it = sessions_.find(meta.owner); it != sessions_.end()) it->second.lost_kv = true;
    }

    void build_recovery() {
        // One range per dropped chunk, then merged per session.
        std::vector<recovery_range>& r = plan_.recovery;
        r.clear();
        for (const dropped_item& d : plan_.drops) r.push_back(chunk_range(d.owner, d.chunk));
        merge_ranges(r);
        for (const recovery_range& x : r) metrics_.dropped_tokens += x.token_end - x.token_begin;
    }

    [[nodiscard]] recovery_range chunk_range(session_id session, chunk_index chunk) const noexcept {
        const std::uint64_t begin = std::uint64_t{chunk.value} * config_.block_size;
        return {session, begin, begin + config_.block_size};
    }

    // Sorts by session and start, and merges overlapping or touching ranges.
    static void merge_ranges(std::vector<recovery_range>& r) {
        std::sort(r.begin(), r.end(), [](const recovery_range& a, const recovery_range& b) {
            return a.session != b.session ? a.session < b.session : a.token_begin < b.token_begin;
        });
        std::size_t out = 0;
        for (std::size_t i = 0; i < r.size(); ++i) {
            if (out > 0 && r[out - 1].session == r[i].session && r[i].token_begin <= r[out - 1].token_end)
                r[out - 1].token_end = std::max(r[out - 1].token_end, r[i].token_end);
            else
                r[out++] = r[i];
        }
        r.resize(out);
    }

    template <class Pool>
    std::size_t forget_owned(Pool& pool, session_id session) {
        std::size_t freed = 0;
        for (std::uint32_t i = 0; i < pool.capacity(); ++i) {
            const block_id b{i};
            if (pool.state(b) == Pool::slot_state::cached && pool.meta(b).owner == session && pool.is_evictable(b)) {
                pool.unstore(b);
                pool.free_slot(b);
                ++freed;
            }
        }
        return freed;
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
    std::vector<std::uint32_t> deferred_releases_;  // releases of filled items, done at end_step
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
};

}  // namespace kvpolicy
