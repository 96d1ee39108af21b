// tiered_cache, metrics and invariants: metrics() brings the derived
// figures (fairness, occupancy, re-prefill rate) up to date, and
// check_invariants() checks every slot, hold and policy entry (tests and
// fuzzers). This file is included by tiered_cache.hpp, which is the header
// to include.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache.hpp"

namespace kvpolicy {

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
cache_metrics tiered_cache<GpuPolicy, CpuPolicy, Traits>::metrics() const {
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

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
std::string tiered_cache<GpuPolicy, CpuPolicy, Traits>::check_invariants() const {
    std::scoped_lock lock(mutex_);
    std::ostringstream bad;
    std::vector<std::uint32_t> holds(gpu_.capacity(), 0);
    for (const auto& [id, s] : sessions_)
        for (std::uint32_t b : s.held) ++holds[b];
    for (const deferred_release& d : deferred_releases_) ++holds[d.block];
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
    std::size_t remote_ops = 0;
    for (const block_transfer& t : plan_.transfers) {
        if (t.from != tier::remote && t.to != tier::remote) continue;
        ++remote_ops;
        const block_id k = t.from == tier::remote ? t.src : t.dst;
        if (t.exchange || (t.from == tier::remote && t.to != tier::cpu) || k.value >= plan_.remote_keys.size())
            bad << "plan: a remote copy that is an exchange, fetches into another tier than the cpu, or names "
                   "no remote key; ";
    }
    if (remote_ops != plan_.remote_keys.size())
        bad << "plan: " << remote_ops << " remote copies but " << plan_.remote_keys.size() << " remote keys; ";
    if (remote_ops > 0 && !config_.remote) bad << "plan: remote copies without a remote tier; ";
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

}  // namespace kvpolicy
