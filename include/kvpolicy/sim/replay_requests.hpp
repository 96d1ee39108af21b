// Prefix and tiered replay (kvpolicy/sim/replay.hpp's request modes):
// requests served one at a time through the real cache type,
// `tiered_cache`, with the waiting queue and the ready time's pipeline.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/type_list.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/eviction/runtime_choice.hpp"
#include "kvpolicy/sim/critical_path.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/request_times.hpp"
#include "kvpolicy/sim/served_requests.hpp"

namespace kvpolicy::sim {

/// The configuration a replay builds policy `P` with: its default, but a
/// policy that prices recompute with the replay's kind of cost model
/// (retention_value's `pensieve_linear`) is given the replay's own, as a
/// deployment calibrates it to its GPU (kvpolicy::calibrate): its decisions
/// then weigh the costs the replay charges. Then the options the replay
/// names for P (`policy_options`), which may override the cost too.
template <class P>
[[nodiscard]] typename P::config_type replay_policy_config(const request_replay_config& cfg) {
    typename P::config_type c{};
    if constexpr (requires { requires std::same_as<decltype(c.cost), pensieve_linear>; }) c.cost = cfg.cost;
    return with_options<P>(std::move(c), cfg.policy_options);
}

/// The CPU tier's config: replay_policy_config's, and for a runtime_choice
/// the alternative `cfg.cpu_policy` names, each alternative priced as above.
template <class P>
[[nodiscard]] typename P::config_type replay_cpu_policy_config(const request_replay_config& cfg) {
    if constexpr (is_runtime_choice<P>) {
        typename P::config_type c;
        c.policy = cfg.cpu_policy;
        [&]<class... As>(type_list<As...>) {
            c.configs = {replay_policy_config<As>(cfg)...};
        }(typename P::alternatives{});
        return c;
    } else {
        return replay_policy_config<P>(cfg);
    }
}

/// Prefix or tiered replay through `tiered_cache<Gpu, Cpu, Traits>`, its
/// GPU tier's policy built with `gpu` (the simulator's held_policy: any
/// policy through one compiled replay).
/// `times`, when given, supplies each block's next use (Belady), computed
/// for this capacity (`compute_request_times(requests, cfg.capacity)`).
/// Throws: usage_error if `times` was computed for another capacity and a
/// request is longer than one of them (its uses would be counted wrongly);
/// parse_error naming file:line for a request whose hash chain is
/// malformed (unless skipping bad lines, which counts it instead).
template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_requests(RequestSource& source, const request_replay_config& cfg, replay_mode mode,
                              const request_times* times, const typename Gpu::config_type& gpu) {
    if (times && !times_fit(*times, cfg.capacity))
        throw usage_error("replay_requests: next uses computed for capacity " + std::to_string(times->uncached_above) +
                          " replayed at " + std::to_string(cfg.capacity) + " with a request of " +
                          std::to_string(times->longest_request) +
                          " blocks; compute them with compute_request_times(requests, capacity)");
    const std::uint32_t items = cfg.num_layers;
    tiered_cache<Gpu, Cpu, Traits> cache(
        {.gpu_capacity = cfg.capacity * items,
         .cpu_capacity = mode == replay_mode::tiered ? cfg.cpu_capacity * items : 0,
         .block_size = cfg.block_size,
         .num_layers = cfg.num_layers,
         .items = items > 1 ? granularity::per_layer : granularity::whole_block,
         .item_bytes = static_cast<std::size_t>(cfg.kv_bytes_per_token) * cfg.block_size / items},
        gpu, replay_cpu_policy_config<Cpu>(cfg));
    replay_result r;
    r.policy = std::string(Gpu::name);
    r.capacity = cfg.capacity;
    r.cpu_capacity = mode == replay_mode::tiered ? cfg.cpu_capacity : 0;
    r.mode = mode;
    const double transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.bandwidth_bytes_per_s;
    if (items == 1 && cfg.pipeline_layers == 0)
        throw config_error("the ready time's pipeline: 0 model layers; give the model's layer count (Llama-3-8B: 32)");
    // The ready time (critical_path.hpp): one stage per item layer, or the
    // model's layers when an item is a whole block (its copy then spreads
    // over them, as an engine copies a block layer by layer).
    const std::uint32_t stages = items > 1 ? items : cfg.pipeline_layers;
    std::vector<stage_work> work(stages);
    std::vector<std::size_t> loads_at(items);  // [item layer]: CPU -> GPU copies this request
    ready_time_stats ready;
    // Blocks [from, n) computed at every layer; `loads_at` copied.
    auto ready_time = [&](const std::vector<std::uint64_t>& ids, std::size_t from) {
        double compute = 0;
        for (std::size_t i = from; i < ids.size(); ++i) compute += cfg.cost.cost(i * cfg.block_size);
        const double item_load_s = transfer_s / items;
        for (std::uint32_t s = 0; s < stages; ++s) {
            work[s].compute_s = compute / stages;
            work[s].load_s = items > 1 ? static_cast<double>(loads_at[s]) * item_load_s
                                       : static_cast<double>(loads_at[0]) * item_load_s / stages;
        }
        return pipelined_ready_time(work);
    };
    served_requests<RequestSource> served(source, cfg, times);
    std::unordered_set<std::uint64_t> seen_sessions;  // admitted with a block: those fairness counts
    std::unordered_set<std::uint64_t> computed;       // every block some request computed
    // Misses from block `from` on: count those computed before, remember all.
    auto count_reprefill = [&](const std::vector<std::uint64_t>& ids, std::size_t from) {
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const bool fresh = computed.insert(ids[i]).second;
            if (i >= from && !fresh) ++r.reprefill_blocks;
        }
    };
    const auto t0 = std::chrono::steady_clock::now();
    pending_request p;
    while (served.next(p, [&](pending_request& q) { cache.enqueue(q.index, q.session, q.req.hash_ids); })) {
        const request_record& req = p.req;
        const std::size_t index = p.index;
        ++r.requests;
        cache.clock().set(p.now);
        if (p.queued) (void)cache.dequeue(index);
        const std::size_t n = req.hash_ids.size();
        r.accesses += n;
        const std::uint64_t tokens = std::max<std::uint64_t>(req.input_length, n * cfg.block_size);
        r.tokens += tokens;
        const session_id session = p.session;
        cache.begin_step();
        admission a;
        try {
            a = cache.admit(session, req.hash_ids, {},
                            times ? std::span<const timestamp>(times->next_use[index]) : std::span<const timestamp>{});
        } catch (const capacity_error&) {
            (void)cache.end_step();  // longer than the tier: served uncached
            ++r.bypassed_requests;
            r.misses += n;
            count_reprefill(req.hash_ids, 0);
            std::fill(loads_at.begin(), loads_at.end(), 0);
            ready.add(ready_time(req.hash_ids, 0));
            served.served(tokens);
            continue;
        } catch (const usage_error& e) {
            (void)cache.end_step();
            r.refuse_bad_request(cfg.trace_name, req.line, e.what(), cfg.skip_bad_lines, n, tokens);
            served.served(0);
            continue;
        }
        const swap_plan& plan = cache.end_step();
        // Each swap-in's layer, read from the GPU slot it fills (an
        // exchange's hit fills the victim's slot, its source).
        std::fill(loads_at.begin(), loads_at.end(), 0);
        for (const block_transfer& t : plan.transfers)
            if (t.to == tier::gpu || t.exchange)
                ++loads_at[items > 1 ? cache.gpu().meta(t.exchange ? t.src : t.dst).layer.value : 0];
        ready.add(ready_time(req.hash_ids, a.match.run));
        if (n > 0) {
            const timestamp back =
                cfg.expected_returns && index < cfg.expected_returns->size() ? (*cfg.expected_returns)[index] : 0;
            cache.release(session, req.output_length, back);
            seen_sessions.insert(session.value);
        }
        r.hits += a.match.run;
        r.misses += n - a.match.run;
        count_reprefill(req.hash_ids, a.match.run);
        const std::uint64_t hit_tokens = std::min<std::uint64_t>(a.match.run * cfg.block_size, tokens);
        r.hit_tokens += hit_tokens;
        for (std::size_t i = 0; i < a.match.run; ++i) r.prefill_seconds_saved += cfg.cost.cost(i * cfg.block_size);
        r.prefill_seconds_saved -= static_cast<double>(a.match.cpu_blocks) * transfer_s;
        served.served(tokens - hit_tokens);
    }
    served.report(r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.ready_s_total = ready.total();
    r.ready_s_mean = ready.mean();
    r.ready_s_p99 = ready.quantile(0.99);
    const cache_metrics m = cache.metrics();
    r.evictions = m.gpu.evictions / items;
    r.gpu_hits = m.gpu.hit_blocks;
    r.cpu_hits = m.cpu.hit_blocks;
    r.recomputed_blocks = m.recomputed_blocks;
    r.swap_out_blocks = m.swap_out_items / items;
    r.sessions = seen_sessions.size();
    r.fairness = m.fairness;
    return r;
}

/// The same, its GPU tier's policy built as the replay builds it
/// (replay_policy_config).
template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_requests(RequestSource& source, const request_replay_config& cfg, replay_mode mode,
                              const request_times* times = nullptr) {
    return replay_requests<Gpu, Cpu, Traits>(source, cfg, mode, times, replay_policy_config<Gpu>(cfg));
}

}  // namespace kvpolicy::sim
