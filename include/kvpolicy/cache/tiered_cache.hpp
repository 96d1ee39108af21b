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
// Parts, each in its own header that includes tiered_cache_state.hpp and no
// other part (this header includes them all, and is the one to include):
// - tiered_cache_state.hpp: cache_config, the traits, and the state the
//   parts share: the tiers' pools and policies, holds, the step's plan under
//   construction, the drop record and the counters;
// - tiered_cache_admit.hpp: lookup and admission (admit, and stage_remote
//   and write-backs for the remote tier);
// - tiered_cache_step.hpp: the step and transfer completion;
// - tiered_cache_holds.hpp: releases, pins and the waiting queue;
// - tiered_cache_metrics.hpp: metrics and invariants, reading only.
// The class below is their one public face: it locks, then forwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvpolicy/cache/metrics.hpp"
#include "kvpolicy/cache/swap_plan.hpp"
#include "kvpolicy/cache/tiered_cache_admit.hpp"
#include "kvpolicy/cache/tiered_cache_holds.hpp"
#include "kvpolicy/cache/tiered_cache_metrics.hpp"
#include "kvpolicy/cache/tiered_cache_state.hpp"
#include "kvpolicy/cache/tiered_cache_step.hpp"
#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/tier.hpp"
#include "kvpolicy/core/waiting_queue.hpp"
#include "kvpolicy/pool/block_pool.hpp"

namespace kvpolicy {

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy = GpuPolicy, cache_traits Traits = default_cache_traits>
class tiered_cache {
    using state_type = detail::tiered_state<GpuPolicy, CpuPolicy, Traits>;

public:
    using gpu_policy_type = GpuPolicy;
    using cpu_policy_type = CpuPolicy;
    using traits_type = Traits;
    using clock_type = typename Traits::clock_type;

    /// Throws: config_error for a capacity of 0 GPU items, 0 layers, a block
    /// size of 0, or per-layer capacities that do not hold one whole block.
    explicit tiered_cache(const cache_config& config, const typename GpuPolicy::config_type& gpu_policy_config = {},
                          const typename CpuPolicy::config_type& cpu_policy_config = {}, clock_type clock = {})
            : state_(config, gpu_policy_config, cpu_policy_config, std::move(clock)) {}

    tiered_cache(const tiered_cache&) = delete;
    tiered_cache& operator=(const tiered_cache&) = delete;

    // --- queries -------------------------------------------------------------

    [[nodiscard]] const cache_config& config() const noexcept { return state_.config; }
    [[nodiscard]] std::uint32_t items_per_block() const noexcept { return state_.items_per_block; }
    [[nodiscard]] clock_type& clock() noexcept { return state_.clock; }
    [[nodiscard]] const block_pool<GpuPolicy>& gpu() const noexcept { return state_.gpu; }
    [[nodiscard]] bool has_cpu_tier() const noexcept { return state_.cpu.has_value(); }
    /// Precondition: has_cpu_tier().
    [[nodiscard]] const block_pool<CpuPolicy>& cpu() const noexcept { return *state_.cpu; }
    [[nodiscard]] bool in_step() const noexcept { return state_.in_step; }

    /// The key of layer `layer` of block `hash` (the block hash itself for
    /// whole-block items).
    [[nodiscard]] std::uint64_t item_key(block_hash hash, std::uint32_t layer) const noexcept {
        return state_.item_key(hash, layer);
    }

    /// Where an item is now: `in_gpu`, `in_cpu`, or `free` when the cache
    /// holds no copy of it. The cache keeps no record of keys it no longer
    /// holds (that would grow without bound), so an item it dropped also
    /// reads `free` here: a drop is reported once, when it happens, in the
    /// step's `swap_plan::drops` or `transfer_report::drops`, with the token
    /// range to recompute.
    [[nodiscard]] item_state where(block_hash hash, std::uint32_t layer = 0) const {
        std::scoped_lock lock(mutex_);
        return state_.where(state_.item_key(hash, layer));
    }

    /// The longest prefix of `hashes` whose blocks are each in either tier.
    [[nodiscard]] prefix_match lookup(std::span<const block_hash> hashes) const {
        std::scoped_lock lock(mutex_);
        return state_.lookup(hashes);
    }

    /// Whether admit(hashes) finds room on the GPU: every item of `hashes`
    /// not on the GPU needs a free slot or an evictable item outside the
    /// request. admit throws capacity_error exactly when this is false.
    [[nodiscard]] bool gpu_room_for(std::span<const block_hash> hashes) const {
        std::scoped_lock lock(mutex_);
        return admission_type::gpu_room_for(state_, hashes);
    }

    /// Items `session` holds on the GPU (one entry per hold).
    [[nodiscard]] std::vector<block_id> held_by(session_id session) const {
        std::scoped_lock lock(mutex_);
        return holds_type::held_by(state_, session);
    }

    /// Counters, with the derived figures (fairness, occupancy) brought up to date.
    [[nodiscard]] cache_metrics metrics() const {
        std::scoped_lock lock(mutex_);
        return detail::observed_metrics(state_);
    }

    /// Checks every invariant; returns an empty string when all hold, else
    /// what is broken. For tests and fuzzers: O(capacity).
    [[nodiscard]] std::string check_invariants() const {
        std::scoped_lock lock(mutex_);
        return detail::broken_invariants(state_);
    }

    // --- the step ------------------------------------------------------------

    /// Starts a step. The previous step's plan must have run by now.
    /// Throws: usage_error inside a step.
    void begin_step() {
        std::scoped_lock lock(mutex_);
        step_.begin_step(state_);
    }

    /// Ends the step and returns its plan, valid until the next begin_step.
    /// Items filled in the step whose requests were already released become
    /// evictable here: nothing can be allocated between end_step and the next
    /// begin_step, by which time the engine has run the plan and the forward
    /// pass has filled them. Throws: usage_error outside a step.
    const swap_plan& end_step() {
        std::scoped_lock lock(mutex_);
        return step_.end_step(state_);
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
        return step_.complete_transfers(state_, plan, status);
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
        return admission_.admit(state_, session, hashes, ctx, next_use);
    }

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
                             std::size_t count, const access_context& ctx = {}) {
        std::scoped_lock lock(mutex_);
        return admission_.stage_remote(state_, session, hashes, begin, count, ctx);
    }

    /// Releases every hold `session` has (its request finished). A released
    /// item stays cached and becomes a candidate when nobody else holds it.
    /// `output_tokens`: how many tokens the request generated (0 = unknown);
    /// policies that predict a session's return from it see it in the
    /// release context. `expected_return`: when the engine expects the
    /// session's next request, on this cache's clock (0 = no hint; `never`:
    /// it will not return, e.g. its conversation closed); session_aware_lru
    /// ranks the session by it. The request has ended: each tier's policy
    /// that hears request ends (predicted_return) is told. Returns how many
    /// holds were released.
    /// Throws: usage_error if the session holds nothing (a double release,
    /// or an unknown session) or `expected_return` is not after now (a hint
    /// in the past is a clock mix-up). Nothing changes then.
    std::size_t release(session_id session, std::uint64_t output_tokens = 0, timestamp expected_return = 0) {
        std::scoped_lock lock(mutex_);
        return holds_type::release(state_, session, output_tokens, expected_return);
    }

    /// Releases one hold of `session` on GPU item `block`. Throws:
    /// usage_error if the session does not hold it (double release, unknown block).
    void release(session_id session, block_id block) {
        std::scoped_lock lock(mutex_);
        holds_type::release(state_, session, block);
    }

    /// Ends a session: releases its holds and tells each tier's policy that
    /// hears session ends (hears_session_ends: session_aware_lru expects the
    /// session back never, until its next request); with `forget_blocks`,
    /// also frees the items it owns that nobody holds (both tiers). Unknown
    /// sessions are a no-op (freeing is idempotent). Returns the items freed.
    std::size_t free_session(session_id session, bool forget_blocks = false) {
        std::scoped_lock lock(mutex_);
        return holds_type::free_session(state_, session, forget_blocks);
    }

    // --- the waiting queue ---------------------------------------------------

    /// Request `request` of `session` is queued (arrived, not yet started)
    /// and will read blocks `hashes`. Tiers whose policy hears the waiting
    /// queue (hears_waiting_queue: queue_aware) learn, for every item a queued
    /// request reads, how soon the earliest such request comes (arrival
    /// order), now and whenever the item enters a tier; other policies are
    /// unaffected. Call dequeue(request) when it starts (before its admit)
    /// or is dropped. O(items of `hashes`). Throws: usage_error if `request`
    /// is already queued. Nothing changes then.
    void enqueue(std::uint64_t request, session_id session, std::span<const block_hash> hashes) {
        std::scoped_lock lock(mutex_);
        holds_.enqueue(state_, request, session, hashes);
    }

    /// Request `request` left the queue: it starts now (admit it next), or
    /// it was dropped. The items only it was to read lose their protection.
    /// Returns the session it was queued for. O(items of its hashes),
    /// amortised. Throws: usage_error if `request` is not queued (dequeued
    /// twice, or never enqueued). Nothing changes then.
    session_id dequeue(std::uint64_t request) {
        std::scoped_lock lock(mutex_);
        return holds_type::dequeue(state_, request);
    }

    /// Requests queued now.
    [[nodiscard]] std::size_t queued_requests() const {
        std::scoped_lock lock(mutex_);
        return state_.queue.size();
    }
    /// The waiting queue as the cache knows it (unlocked: single-threaded use, tests).
    [[nodiscard]] const waiting_queue& queue() const noexcept { return state_.queue; }

    /// Pins every item of block `hash` on the GPU: never evicted until
    /// unpinned (a system prompt, say). Throws: usage_error if the block is
    /// not entirely on the GPU (acquire it first) or already pinned.
    void pin(block_hash hash) {
        std::scoped_lock lock(mutex_);
        holds_type::pin(state_, hash);
    }

    /// Throws: usage_error if the block is not pinned on the GPU.
    void unpin(block_hash hash) {
        std::scoped_lock lock(mutex_);
        holds_type::unpin(state_, hash);
    }

private:
    using admission_type = detail::tiered_admission<state_type>;
    using holds_type = detail::tiered_holds<state_type>;

    // Every public call that reads or changes the state locks first, here
    // and nowhere else: the parts run under this lock.
    mutable typename Traits::mutex_type mutex_;
    state_type state_;
    admission_type admission_;
    detail::tiered_step<state_type> step_;
    holds_type holds_;
};

}  // namespace kvpolicy
