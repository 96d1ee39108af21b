// redis::node: what one serving instance composes to put the Redis tier
// below its tiered cache: the GPU and CPU tiers' bytes (host arenas), a
// store, an engine over the three, and, when blocks are named by digests,
// the store's identity table. A step is the cache's own (begin_step,
// admit, end_step); the node asks the store past the local prefix
// (admit) and runs the step's plan once (run_plan): the copies, their
// report to the cache, the identities of what left, and which remote keys
// were written and fetched.
//
// Cache is a tiered_cache or an any_tiered_cache (whose remote calls are
// members): the node calls whichever the type has.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvpolicy/cache/host_memcpy_engine.hpp"
#include "kvpolicy/cache/remote_tier.hpp"
#include "kvpolicy/cache/swap_plan.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/engine.hpp"
#include "kvpolicy/redis/store.hpp"
#include "kvpolicy/redis/store_fields.hpp"

namespace kvpolicy::redis {

/// One run of a plan: each copy's status (plan order), the cache's report,
/// and the item keys of the write-backs and fetches that were done.
struct plan_run {
    std::vector<transfer_status> statuses;
    transfer_report report;
    std::vector<std::uint64_t> written_keys;
    std::vector<std::uint64_t> fetched_keys;
};

class node {
public:
    /// The store_config for a node from named fields (store_config_from),
    /// checked whole, before anything connects. Throws: config_error naming
    /// the field, or `item_bytes` outside 1 .. 2^32-1.
    static store_config config_from(const store_fields& fields, std::uint32_t block_size, std::size_t item_bytes,
                                    const std::string& what) {
        if (item_bytes == 0 || item_bytes > UINT32_MAX)
            throw config_error(what +
                               ": a remote tier needs item_bytes, the bytes of one item (a block, or one "
                               "layer of it with per_layer=True), from 1 to " +
                               std::to_string(UINT32_MAX) + "; got " + std::to_string(item_bytes));
        bool digests = true;
        store_config c = store_config_from(fields, block_size, static_cast<std::uint32_t>(item_bytes), digests, what);
        c.ns.validate();
        validate(c);
        return c;
    }

    /// Arenas of `gpu_blocks` and `cpu_blocks` items of the namespace's
    /// item_bytes, then the store (which connects: up to connect_timeout +
    /// io_timeout). Throws: config_error as store's constructor.
    node(store_config config, std::size_t gpu_blocks, std::size_t cpu_blocks)
            : ids_(config.ns.identities),
              gpu_(gpu_blocks, config.ns.item_bytes),
              cpu_(cpu_blocks, config.ns.item_bytes),
              store_(std::move(config)),
              engine_(gpu_, cpu_, store_) {}
    node(const node&) = delete;  // the engine keeps the arenas' and the store's addresses
    node& operator=(const node&) = delete;

    [[nodiscard]] store& remote() noexcept { return store_; }
    [[nodiscard]] const store& remote() const noexcept { return store_; }
    [[nodiscard]] const engine& transfers() const noexcept { return engine_; }
    [[nodiscard]] block_arena& gpu() noexcept { return gpu_; }
    [[nodiscard]] block_arena& cpu() noexcept { return cpu_; }
    /// The digests' identity table; null when blocks are named by 64-bit chain hashes.
    [[nodiscard]] remote_identities* identities() const noexcept { return ids_.get(); }
    /// The node's lock: its store and engine take one call at a time, so an
    /// engine that drives the node from several threads holds it across each
    /// admission's step (engine::cache_steps::admit's `lock`), each run_plan
    /// and each read of the counters.
    [[nodiscard]] std::mutex& mutex() const noexcept { return mutex_; }

    /// admit_through for blocks named by 64-bit chain hashes (identity 'hash64').
    template <class Cache>
    remote_admission admit(Cache& cache, session_id session, std::span<const block_hash> hashes) {
        if (ids_)
            throw usage_error(
                "admit_through: this store names blocks by 32-byte digests (identity 'digest'); give the "
                "blocks' digests, or make the store with identity 'hash64'");
        if constexpr (requires { cache.admit_through(store_, session, hashes); })
            return cache.admit_through(store_, session, hashes);
        else
            return admit_through(cache, store_, session, hashes);
    }

    /// admit_through for blocks named by digests (identity 'digest').
    template <class Cache>
    remote_admission admit(Cache& cache, session_id session, std::span<const block_digest> digests) {
        if (!ids_)
            throw usage_error(
                "admit_through: this store names blocks by 64-bit chain hashes (identity 'hash64'); give the "
                "blocks' hashes, or make the store with identity 'digest'");
        if constexpr (requires { cache.admit_through(store_, *ids_, session, digests); })
            return cache.admit_through(store_, *ids_, session, digests);
        else
            return admit_through(cache, store_, *ids_, session, digests);
    }

    /// Runs `plan` (the cache's last, its step ended and not yet reported)
    /// through the engine, reports it to the cache, and forgets the
    /// identities of items the cache no longer holds. A store that is down
    /// makes failed copies, never an exception.
    template <class Cache>
    plan_run run_plan(Cache& cache, const swap_plan& plan) {
        if (cache.in_step())
            throw usage_error("run_plan: a step is open; call end_step() first (run_plan runs its plan)");
        plan_run out;
        execute_plan(plan, engine_, out.statuses);
        out.report = cache.complete_transfers(plan, out.statuses);
        if (ids_) {
            if constexpr (requires { cache.forget_identities(*ids_); })
                (void)cache.forget_identities(*ids_);
            else
                (void)forget_identities(cache, *ids_);
        }
        for (std::size_t i = 0; i < plan.transfers.size(); ++i) {
            if (out.statuses[i] != transfer_status::done) continue;
            const block_transfer& t = plan.transfers[i];
            if (t.to == tier::remote) out.written_keys.push_back(plan.remote_keys[t.dst.index()]);
            if (t.from == tier::remote) out.fetched_keys.push_back(plan.remote_keys[t.src.index()]);
        }
        return out;
    }

private:
    std::shared_ptr<remote_identities> ids_;
    block_arena gpu_;
    block_arena cpu_;
    store store_;
    engine engine_;
    mutable std::mutex mutex_;
};

}  // namespace kvpolicy::redis
