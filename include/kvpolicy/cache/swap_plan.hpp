// The output of one scheduler step (seed 003's "swap plan").
//
// `transfers` lists the step's copies in the order the cache planned them,
// and that order is the contract: run them in order, all before the step's
// forward pass. Each copy then reads exactly what the cache's bookkeeping
// said was in its source when it was planned, whatever slots the step
// reused (a CPU slot read by a swap-in may be the destination of a later
// swap-out; a GPU slot a victim left may receive a later swap-in). Engines
// that overlap copies with compute may reorder copies that touch disjoint
// slots. Three kinds of copy:
// - swap-out (GPU -> CPU): a GPU victim sheltered in the CPU tier;
// - swap-in (CPU -> GPU): a CPU hit brought back;
// - exchange (GPU <-> CPU, `exchange = true`): with the GPU full, a CPU hit
//   and a GPU victim trade places, which only a two-way swap can do.
// With a remote tier (`cache_config::remote`), two more:
// - write-back (CPU or GPU -> remote): a victim that would have been dropped
//   is written to the store instead;
// - fetch (remote -> CPU): a block the store holds is staged into a CPU slot
//   (tiered_cache::stage_remote), from which a later swap-in reads it.
// On the remote side of such a copy, `src` or `dst` is not a slot but an
// index into `remote_keys`, the item's key (the store adds its namespace).
// Only a `remote_transfer_engine` runs those; any other engine fails them.
// `execute_plan` runs a plan through any transfer engine; the engine's
// statuses then go back to the cache (`tiered_cache::complete_transfers`),
// which answers with a `transfer_report`: what a failed copy cost.
#pragma once

#include <cstdint>
#include <vector>

#include <span>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/transfer.hpp"

namespace kvpolicy {

/// An item whose KV is gone: it must be recomputed if it is needed again.
struct dropped_item {
    std::uint64_t key = 0;
    session_id owner{};
    chunk_index chunk{};
    layer_index layer{};

    friend bool operator==(const dropped_item&, const dropped_item&) = default;
};

/// Tokens [token_begin, token_end) of `session` whose KV was dropped; with
/// per-layer items, a chunk with any dropped layer is reported whole.
struct recovery_range {
    session_id session{};
    std::uint64_t token_begin = 0;
    std::uint64_t token_end = 0;

    friend bool operator==(const recovery_range&, const recovery_range&) = default;
};

/// A GPU item that is still held but whose data never arrived (a failed
/// swap-in): `session` holds it and must compute it in this step's forward
/// pass, as it computes its miss tail.
struct recompute_item {
    block_id block{};  ///< the GPU slot to compute into
    std::uint64_t key = 0;
    session_id session{};
    chunk_index chunk{};
    layer_index layer{};

    friend bool operator==(const recompute_item&, const recompute_item&) = default;
};

/// What `tiered_cache::complete_transfers` found in a plan's statuses.
struct transfer_report {
    std::size_t failed = 0;                 ///< copies that failed, or read the output of one that did
    std::vector<dropped_item> drops;        ///< items unstored: their only copy never arrived
    std::vector<recompute_item> recompute;  ///< held GPU items without data, one entry per holder
    std::vector<recovery_range> recovery;   ///< the drops (by owner) and recomputes (by holder), merged

    [[nodiscard]] bool clean() const noexcept { return failed == 0; }
};

struct swap_plan {
    std::uint64_t step = 0;                  ///< which end_step made it (1, 2, ...): complete_transfers checks it
    std::vector<block_transfer> transfers;   ///< in planning order: run in this order
    std::vector<dropped_item> drops;         ///< items lost this step
    std::vector<recovery_range> recovery;    ///< by session, sorted, merged
    std::vector<std::uint64_t> remote_keys;  ///< item keys of the remote sides of write-backs and fetches

    void clear() noexcept {
        transfers.clear();
        remote_keys.clear();
        drops.clear();
        recovery.clear();
    }
    [[nodiscard]] bool empty() const noexcept { return transfers.empty() && drops.empty(); }

    [[nodiscard]] std::size_t swap_outs() const noexcept {
        return count([](const block_transfer& t) { return !t.exchange && t.from == tier::gpu; });
    }
    [[nodiscard]] std::size_t swap_ins() const noexcept {
        return count([](const block_transfer& t) { return !t.exchange && t.to == tier::gpu; });
    }
    [[nodiscard]] std::size_t exchanges() const noexcept {
        return count([](const block_transfer& t) { return t.exchange; });
    }
    [[nodiscard]] std::size_t write_backs() const noexcept {
        return count([](const block_transfer& t) { return t.to == tier::remote; });
    }
    [[nodiscard]] std::size_t fetches() const noexcept {
        return count([](const block_transfer& t) { return t.from == tier::remote; });
    }

private:
    template <class Pred>
    [[nodiscard]] std::size_t count(Pred pred) const noexcept {
        std::size_t n = 0;
        for (const block_transfer& t : transfers) n += pred(t) ? 1 : 0;
        return n;
    }
};

/// Runs a plan's copies in order. Returns how many failed (0 = all done);
/// `status` receives one entry per transfer.
template <transfer_engine Engine>
std::size_t execute_plan(const swap_plan& plan, Engine& engine, std::vector<transfer_status>& status) {
    status.resize(plan.transfers.size());
    return plan.transfers.size() - engine.execute(plan.transfers, status);
}

/// The same, for an engine that also reaches a remote store: the plan's
/// remote keys go with its copies.
template <remote_transfer_engine Engine>
std::size_t execute_plan(const swap_plan& plan, Engine& engine, std::vector<transfer_status>& status) {
    status.resize(plan.transfers.size());
    return plan.transfers.size() - engine.execute(plan.transfers, plan.remote_keys, status);
}

}  // namespace kvpolicy
