// tiered_cache, the step and transfer completion: begin_step, end_step,
// complete_transfers, the releases, pins, drops and recovery ranges.
//
// complete_transfers applies the failed-copy rules of tiered_cache.hpp's
// header comment: which slots a plan left valid, what is unstored and
// reported dropped, and what stays held for recompute. This file is included
// by tiered_cache.hpp, which is the header to include.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache.hpp"

namespace kvpolicy {

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::begin_step() {
    std::scoped_lock lock(mutex_);
    if (in_step_) throw usage_error("begin_step: a step is already open; call end_step() first");
    plan_.clear();
    plan_ops_.clear();
    plan_open_ = false;  // an unreported plan counts as done
    in_step_ = true;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
const swap_plan& tiered_cache<GpuPolicy, CpuPolicy, Traits>::end_step() {
    std::scoped_lock lock(mutex_);
    if (!in_step_) throw usage_error("end_step: no step is open; call begin_step() first");
    in_step_ = false;
    const timestamp now = clock_.now();
    for (const deferred_release& d : deferred_releases_)
        gpu_.release(block_id{d.block}, now, d.by, d.output_tokens, d.expected_return);
    deferred_releases_.clear();
    for (std::uint32_t b : filled_this_step_) filled_[b] = 0;
    filled_this_step_.clear();
    build_recovery();
    plan_.step = ++steps_ended_;
    plan_open_ = true;
    return plan_;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
transfer_report tiered_cache<GpuPolicy, CpuPolicy, Traits>::complete_transfers(
        const swap_plan& plan, std::span<const transfer_status> status) {
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
        const block_transfer& op = plan_.transfers[i];
        const planned_op& keys = plan_ops_[i];
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

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
std::size_t tiered_cache<GpuPolicy, CpuPolicy, Traits>::release(session_id session, std::uint64_t output_tokens,
                                                         timestamp expected_return) {
    std::scoped_lock lock(mutex_);
    auto it = sessions_.find(session);
    if (it == sessions_.end() || it->second.held.empty())
        throw usage_error("release: session " + std::to_string(session.value) +
                          " holds no blocks (released twice, or never admitted)");
    if (expected_return != 0 && expected_return <= clock_.now())
        throw usage_error("release: session " + std::to_string(session.value) + " expected back at " +
                          std::to_string(expected_return) + ", not after now (" + std::to_string(clock_.now()) +
                          "); give a time on this cache's clock, or 0 for no hint");
    release_holds(session, it->second.held, output_tokens, expected_return);
    const std::size_t n = it->second.held.size();
    it->second.held.clear();
    return n;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::release(session_id session, block_id block) {
    std::scoped_lock lock(mutex_);
    auto it = sessions_.find(session);
    auto pos = it == sessions_.end() ? std::vector<std::uint32_t>::iterator{}
                                     : std::find(it->second.held.begin(), it->second.held.end(), block.value);
    if (it == sessions_.end() || pos == it->second.held.end())
        throw usage_error("release: session " + std::to_string(session.value) + " does not hold gpu block " +
                          std::to_string(block.value) + " (released twice, or never acquired)");
    it->second.held.erase(pos);
    release_one(block.value, clock_.now(), session, 0, 0);
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
std::size_t tiered_cache<GpuPolicy, CpuPolicy, Traits>::free_session(session_id session, bool forget_blocks) {
    std::scoped_lock lock(mutex_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return 0;
    release_holds(session, it->second.held, 0, 0);
    it->second.held.clear();
    gpu_.session_ended(session, clock_.now());
    if (cpu_) cpu_->session_ended(session, clock_.now());
    std::size_t freed = 0;
    if (forget_blocks) {
        freed += forget_owned(gpu_, session);
        if (cpu_) freed += forget_owned(*cpu_, session);
    }
    sessions_.erase(it);
    return freed;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::enqueue(std::uint64_t request, session_id session,
                                                         std::span<const block_hash> hashes) {
    std::scoped_lock lock(mutex_);
    queue_keys_.clear();
    for (block_hash h : hashes)
        for (std::uint32_t l = 0; l < items_per_block_; ++l) queue_keys_.push_back(item_key(h, l));
    const timestamp now = clock_.now();
    queue_.enqueue(request, session, queue_keys_, [&](std::uint64_t key, std::uint64_t position) {
        gpu_.queued_read_changed(key, position, now);
        if (cpu_) cpu_->queued_read_changed(key, position, now);
    });
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
session_id tiered_cache<GpuPolicy, CpuPolicy, Traits>::dequeue(std::uint64_t request) {
    std::scoped_lock lock(mutex_);
    const timestamp now = clock_.now();
    return queue_.dequeue(request, [&](std::uint64_t key, std::optional<std::uint64_t> next) {
        gpu_.queued_read_changed(key, next, now);
        if (cpu_) cpu_->queued_read_changed(key, next, now);
    });
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::pin(block_hash hash) {
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

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::unpin(block_hash hash) {
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

// Releases in reverse hold order (tail first); an item filled in the
// open step has no data yet, so its release waits for end_step.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::release_holds(session_id by, const std::vector<std::uint32_t>& held,
                                                                 std::uint64_t output_tokens,
                                                                 timestamp expected_return) {
    const timestamp now = clock_.now();
    for (auto b = held.rbegin(); b != held.rend(); ++b) release_one(*b, now, by, output_tokens, expected_return);
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::release_one(std::uint32_t b, timestamp now, session_id by,
                                                               std::uint64_t output_tokens,
                                                               timestamp expected_return) {
    if (in_step_ && filled_[b]) deferred_releases_.push_back({b, by, output_tokens, expected_return});
    else gpu_.release(block_id{b}, now, by, output_tokens, expected_return);
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::drop(std::uint64_t key, const block_meta& meta) {
    drop_into(plan_.drops, key, meta);
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::drop_into(
        std::vector<dropped_item>& out, std::uint64_t key, const block_meta& meta) {
    out.push_back({key, meta.owner, meta.chunk, meta.layer});
    ++metrics_.dropped_items;
    // Remember the block (layer 0's hash is the block hash only for whole
    // blocks; per layer, remember the chunk by its owner and index).
    if (items_per_block_ == 1 && !dropped_keys_.contains(key)) dropped_keys_.push_back(key);
    if (auto it = sessions_.find(meta.owner); it != sessions_.end()) it->second.lost_kv = true;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::build_recovery() {
    // One range per dropped chunk, then merged per session.
    std::vector<recovery_range>& r = plan_.recovery;
    r.clear();
    for (const dropped_item& d : plan_.drops) r.push_back(chunk_range(d.owner, d.chunk));
    merge_ranges(r);
    for (const recovery_range& x : r) metrics_.dropped_tokens += x.token_end - x.token_begin;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
recovery_range tiered_cache<GpuPolicy, CpuPolicy, Traits>::chunk_range(
        session_id session, chunk_index chunk) const noexcept {
    const std::uint64_t begin = std::uint64_t{chunk.value} * config_.block_size;
    return {session, begin, begin + config_.block_size};
}

// Sorts by session and start, and merges overlapping or touching ranges.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::merge_ranges(std::vector<recovery_range>& r) {
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

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
template <class Pool>
std::size_t tiered_cache<GpuPolicy, CpuPolicy, Traits>::forget_owned(Pool& pool, session_id session) {
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

}  // namespace kvpolicy
