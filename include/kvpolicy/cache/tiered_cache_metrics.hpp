// tiered_cache, metrics and invariants: an observer of the cache's state
// that only reads it. observed_metrics brings the derived figures
// (fairness, occupancy, re-prefill rate) up to date over the counters the
// other parts keep; broken_invariants checks every slot, hold, policy entry
// and the open plan's remote copies (tests and fuzzers). tiered_cache.hpp is
// the header to include.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache_state.hpp"

namespace kvpolicy::detail {

/// tiered_cache::metrics: the counters, with the figures derived from the
/// tiers and the sessions (occupancy, fairness, re-prefill rate).
template <class State>
[[nodiscard]] cache_metrics observed_metrics(const State& state) {
    cache_metrics m = state.counters;
    m.gpu.used = state.gpu.capacity() - state.gpu.num_free_blocks();
    m.cpu.used = state.cpu ? state.cpu->capacity() - state.cpu->num_free_blocks() : 0;
    double sum = 0, sum_sq = 0;
    std::size_t n = 0, lost = 0, returned = 0;
    for (const auto& [id, s] : state.sessions) {
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

/// tiered_cache::check_invariants: what is broken, or an empty string.
template <class State>
[[nodiscard]] std::string broken_invariants(const State& state) {
    using gpu_slot = typename State::gpu_pool::slot_state;
    using cpu_slot = typename State::cpu_pool::slot_state;
    const auto& gpu = state.gpu;
    const auto& cpu = state.cpu;
    std::ostringstream bad;
    std::vector<std::uint32_t> holds(gpu.capacity(), 0);
    for (const auto& [id, s] : state.sessions)
        for (std::uint32_t b : s.held) ++holds[b];
    for (const auto& d : state.deferred_releases) ++holds[d.block];
    std::size_t evictable = 0;
    for (std::uint32_t i = 0; i < gpu.capacity(); ++i) {
        const block_id b{i};
        const auto st = gpu.state(b);
        if (st == gpu_slot::cached) {
            if (gpu.ref_count(b) != holds[i])
                bad << "gpu block " << i << ": ref count " << gpu.ref_count(b) << " but " << holds[i] << " holds; ";
            if (gpu.cached_block(gpu.key(b)) != b) bad << "gpu block " << i << " not indexed under its key; ";
            if (cpu && !state.config.inclusive && cpu->cached_block(gpu.key(b)))
                bad << "gpu block " << i << " also cached on the cpu in exclusive mode; ";
            evictable += gpu.is_evictable(b) ? 1 : 0;
            if (gpu.policy().contains(item_id{i}) != true) bad << "gpu block " << i << " unknown to its policy; ";
        } else {
            if (holds[i] != 0) bad << "gpu block " << i << " held but not cached; ";
            if (gpu.policy().contains(item_id{i})) bad << "gpu slot " << i << " not cached but in the policy; ";
            if (st == gpu_slot::reserved) bad << "gpu slot " << i << " left reserved; ";
        }
    }
    if (evictable != gpu.policy().evictable_size())
        bad << "gpu: " << evictable << " evictable blocks but the policy has " << gpu.policy().evictable_size() << "; ";
    std::size_t remote_ops = 0;
    for (const block_transfer& t : state.plan.transfers) {
        if (t.from != tier::remote && t.to != tier::remote) continue;
        ++remote_ops;
        const block_id k = t.from == tier::remote ? t.src : t.dst;
        if (t.exchange || (t.from == tier::remote && t.to != tier::cpu) || k.value >= state.plan.remote_keys.size())
            bad << "plan: a remote copy that is an exchange, fetches into another tier than the cpu, or names "
                   "no remote key; ";
    }
    if (remote_ops != state.plan.remote_keys.size())
        bad << "plan: " << remote_ops << " remote copies but " << state.plan.remote_keys.size() << " remote keys; ";
    if (remote_ops > 0 && !state.config.remote) bad << "plan: remote copies without a remote tier; ";
    if (cpu)
        for (std::uint32_t i = 0; i < cpu->capacity(); ++i) {
            const block_id b{i};
            const auto st = cpu->state(b);
            if (st == cpu_slot::reserved) bad << "cpu slot " << i << " left reserved; ";
            if (st == cpu_slot::cached && cpu->cached_block(cpu->key(b)) != b)
                bad << "cpu block " << i << " not indexed; ";
            if (st == cpu_slot::cached && cpu->ref_count(b) != 0) bad << "cpu block " << i << " still held; ";
        }
    return bad.str();
}

}  // namespace kvpolicy::detail
