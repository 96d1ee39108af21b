// tiered_cache, the step and transfer completion: begin_step, end_step and
// complete_transfers, over the cache's state.
//
// end_step closes the plan admission built (state.plan): the releases that
// waited for their items to be filled take effect, and the drops become
// recovery ranges. complete_transfers applies the failed-copy rules of
// tiered_cache.hpp's header comment (the header to include): which slots a
// plan left valid, what is unstored and reported dropped, and what stays
// held for recompute.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache_state.hpp"

namespace kvpolicy::detail {

/// tiered_cache's step: State is a tiered_state; the caller holds the
/// cache's mutex. Owns which plan is open and complete_transfers' scratch.
template <class State>
class tiered_step {
public:
    /// tiered_cache::begin_step.
    void begin_step(State& state) {
        if (state.in_step) throw usage_error("begin_step: a step is already open; call end_step() first");
        state.plan.clear();
        state.plan_ops.clear();
        plan_open_ = false;  // an unreported plan counts as done
        state.in_step = true;
    }

    /// tiered_cache::end_step.
    const swap_plan& end_step(State& state) {
        if (!state.in_step) throw usage_error("end_step: no step is open; call begin_step() first");
        state.in_step = false;
        const timestamp now = state.clock.now();
        for (const auto& d : state.deferred_releases)
            state.gpu.release(block_id{d.block}, now, d.by, d.output_tokens, d.expected_return);
        state.deferred_releases.clear();
        for (std::uint32_t b : state.filled_this_step) state.filled[b] = 0;
        state.filled_this_step.clear();
        build_recovery(state);
        state.plan.step = ++steps_ended_;
        plan_open_ = true;
        return state.plan;
    }

    /// tiered_cache::complete_transfers.
    transfer_report complete_transfers(State& state, const swap_plan& plan, std::span<const transfer_status> status);

private:
    using planned_op = typename State::planned_op;

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

    // One range per dropped chunk of the step's plan, merged per session.
    static void build_recovery(State& state) {
        std::vector<recovery_range>& r = state.plan.recovery;
        r.clear();
        for (const dropped_item& d : state.plan.drops) r.push_back(chunk_range(state, d.owner, d.chunk));
        merge_ranges(r);
        for (const recovery_range& x : r) state.counters.dropped_tokens += x.token_end - x.token_begin;
    }

    [[nodiscard]] static recovery_range chunk_range(const State& state, session_id session,
                                                    chunk_index chunk) noexcept {
        const std::uint64_t begin = std::uint64_t{chunk.value} * state.config.block_size;
        return {session, begin, begin + state.config.block_size};
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

    std::uint64_t steps_ended_ = 0;
    bool plan_open_ = false;                    // ended, not yet reported
    std::vector<slot_fate> slot_fates_;         // scratch for complete_transfers
    std::vector<lost_copy> lost_copies_;        // scratch for complete_transfers, in plan order
    std::vector<std::uint32_t> lost_order_;     // scratch: lost_copies_ indices by key
    std::vector<std::uint32_t> fate_index_[2];  // [gpu, cpu][slot] -> slot_fates_ index or no_index (scratch)
};

template <class State>
transfer_report tiered_step<State>::complete_transfers(State& state, const swap_plan& plan,
                                                       std::span<const transfer_status> status) {
    auto& gpu = state.gpu;
    auto& cpu = state.cpu;
    if (state.in_step)
        throw usage_error(
            "complete_transfers: a step is open; report a plan after its end_step and before the "
            "next begin_step");
    if (plan.step != state.plan.step)
        throw usage_error("complete_transfers: the plan is of step " + std::to_string(plan.step) +
                          " but the cache's last plan is of step " + std::to_string(state.plan.step) +
                          "; report each plan before the next begin_step");
    if (!plan_open_)
        throw usage_error("complete_transfers: the plan of step " + std::to_string(plan.step) +
                          " was already reported; report each plan once");
    if (status.size() != state.plan.transfers.size())
        throw usage_error("complete_transfers: " + std::to_string(status.size()) + " statuses for " +
                          std::to_string(state.plan.transfers.size()) +
                          " transfers; give one per transfer, in plan order");
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
    fate_index_[0].resize(gpu.capacity(), no_index);
    fate_index_[1].resize(cpu ? cpu->capacity() : 0, no_index);
    plan_open_ = false;
    transfer_report report;
    auto fate = [&](tier t, block_id b) -> slot_fate* {
        const std::uint32_t i = fate_index_[t == tier::cpu][b.value];
        return i == no_index ? nullptr : &slot_fates_[i];
    };
    auto valid = [&](tier t, block_id b) {
        if (t == tier::remote) return true;  // the store's side: the op's own status tells
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
        const block_transfer& op = state.plan.transfers[i];
        const planned_op& keys = state.plan_ops[i];
        bool ok = status[i] == transfer_status::done && valid(op.from, op.src);
        if (op.to == tier::remote) {  // a write-back: the cache kept no copy, so a failed one loses the item
            if (!ok) lost_copies_.push_back({keys.to_dst, keys.meta, false});
            report.failed += ok ? 0 : 1;
            continue;
        }
        if (op.exchange) ok = ok && valid(op.to, op.dst);
        if (op.exchange) set(op.from, op.src, ok, keys.to_src, keys.requester);
        set(op.to, op.dst, ok, keys.to_dst, keys.requester);
        report.failed += ok ? 0 : 1;
    }
    state.counters.failed_transfers += report.failed;
    for (const slot_fate& f : slot_fates_) fate_index_[f.where == tier::cpu][f.slot.value] = no_index;
    for (const slot_fate& f : slot_fates_) {
        if (f.valid) continue;
        if (f.where == tier::cpu) {
            if (!cpu || cpu->state(f.slot) != State::cpu_pool::slot_state::cached || cpu->key(f.slot) != f.key)
                continue;  // evicted (and reported) or freed since
            lost_copies_.push_back({f.key, cpu->meta(f.slot), false});
            cpu->unstore(f.slot);
            cpu->free_slot(f.slot);
            continue;
        }
        if (gpu.state(f.slot) != State::gpu_pool::slot_state::cached || gpu.key(f.slot) != f.key) continue;
        if (gpu.ref_count(f.slot) == 0) {
            lost_copies_.push_back({f.key, gpu.meta(f.slot), false});
            gpu.unstore(f.slot);
            gpu.free_slot(f.slot);
            continue;
        }
        // Held: each holder is told; the requester (or, if it left, the
        // first holder) computes it and so owns it.
        const std::size_t first = report.recompute.size();
        for (const auto& [id, st] : state.sessions)
            if (std::find(st.held.begin(), st.held.end(), f.slot.value) != st.held.end())
                report.recompute.push_back({f.slot, f.key, id, gpu.meta(f.slot).chunk, gpu.meta(f.slot).layer});
        std::sort(report.recompute.begin() + static_cast<std::ptrdiff_t>(first), report.recompute.end(),
                  [](const recompute_item& a, const recompute_item& b) { return a.session < b.session; });
        const bool requester_holds =
            std::any_of(report.recompute.begin() + static_cast<std::ptrdiff_t>(first), report.recompute.end(),
                        [&](const recompute_item& r) { return r.session == f.requester; });
        gpu.set_owner(f.slot, requester_holds ? f.requester : report.recompute[first].session);
        ++state.counters.recompute_items;
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
        if (!c.again && state.where(c.key) == item_state::free) state.drop_into(report.drops, c.key, c.meta);
    // Recovery: the drops by owner (counted as dropped tokens), then
    // the recomputes by holder, merged per session.
    for (const dropped_item& d : report.drops) report.recovery.push_back(chunk_range(state, d.owner, d.chunk));
    merge_ranges(report.recovery);
    for (const recovery_range& x : report.recovery) state.counters.dropped_tokens += x.token_end - x.token_begin;
    for (const recompute_item& r : report.recompute) report.recovery.push_back(chunk_range(state, r.session, r.chunk));
    merge_ranges(report.recovery);
    return report;
}

}  // namespace kvpolicy::detail
