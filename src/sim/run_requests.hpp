// The prefix, tiered, instances and offload modes' replay. Every policy but
// belady runs through one compiled replay (run_dynamic.cpp), holding the
// policy behind a virtual call per hook (runs.hpp's held_policy). A tiered
// cache instantiated per policy cost 255 s of compiling in a Release build
// (the sim driver 358 -> 151 s), and as much again in each of CI's other
// builds, for a replay at most 11% faster (a --policy all run of the
// built-in workload in tiered mode; the agentic trace's, within 1%). MIN
// reads the whole access sequence and keeps its own (run_belady.cpp).
#pragma once

#include <cstddef>

#include <kvpolicy/sim/replay.hpp>

#include "runs.hpp"

namespace kvpolicy::sim::detail {

/// Any request source as one type, so each policy pair's replay loops are
/// compiled once rather than once per source (an indirect call per request,
/// nothing per block).
class any_request_source {
public:
    template <class Source>
    explicit any_request_source(Source& s)
            : source_(&s), next_(+[](void* p, request_record& out) { return static_cast<Source*>(p)->next(out); }) {}
    bool next(request_record& out) { return next_(source_, out); }

private:
    void* source_;
    bool (*next_)(void*, request_record&);
};

/// The replay config of one run at `capacity`.
inline request_replay_config replay_config(const run_setup& s, std::size_t capacity, const run_inputs& in) {
    request_replay_config cfg = s.replay;
    cfg.capacity = capacity;
    cfg.expected_returns = in.returns.get();
    return cfg;
}

/// Replays the run's requests (in memory, else streamed from the trace) with
/// `play(source)`, counting the trace's bad lines.
template <class Play>
replay_result over_requests(const run_setup& s, const run_inputs& in, Play&& play) {
    if (in.requests) {
        vector_request_source requests(*in.requests);
        any_request_source src(requests);
        return play(src);
    }
    mooncake_reader reader(s.options.trace, s.options.skip_bad_lines);
    any_request_source src(reader);
    replay_result r = play(src);
    r.bad_lines.count += reader.bad_lines().count;
    for (const auto& m : reader.bad_lines().first_messages) r.bad_lines.first_messages.push_back(m);
    return r;
}

/// N instances with one shared store, then with a store each (same total
/// memory), on the same requests; the GPU tier's policy built with `gpu`.
template <class Gpu, class Cpu>
replay_result instances(const run_setup& s, const request_replay_config& cfg, const run_inputs& in,
                        const typename Gpu::config_type& gpu) {
    const run_options& o = s.options;
    auto run = [&](bool shared) {
        return over_requests(s, in, [&](any_request_source& src) {
            return replay_instances<Gpu, Cpu>(src, cfg, o.instances, o.remote_capacity, shared, gpu);
        });
    };
    replay_result r = run(true);
    r.isolated_hit_ratio = run(false).hit_ratio();
    return r;
}

/// Offload mode: `Policy`, built with `config`, decides the CPU tier's
/// victims behind vLLM's GPU prefix cache (replay_offload.hpp).
template <class Policy>
replay_result offload(const run_setup& s, const request_replay_config& cfg, const run_inputs& in,
                      const typename Policy::config_type& config) {
    return over_requests(s, in, [&](any_request_source& src) { return replay_offload<Policy>(src, cfg, config); });
}

/// The prefix and tiered modes (and the instances mode) of `Gpu`, built
/// with `gpu`; `future`: the policy reads each access's next use.
template <class Gpu, class Cpu>
replay_result replay(const run_setup& s, std::size_t capacity, const run_inputs& in,
                     const typename Gpu::config_type& gpu, bool future) {
    const run_options& o = s.options;
    const request_replay_config cfg = replay_config(s, capacity, in);
    if (o.instances > 1 || o.remote_capacity > 0) return instances<Gpu, Cpu>(s, cfg, in, gpu);
    const request_times* times = future ? in.times.get() : nullptr;
    request_times own;  // a request longer than this capacity is no use of its blocks
    if (times && !times_fit(*times, capacity)) {
        own = compute_request_times(*in.requests, capacity);
        times = &own;
    }
    return over_requests(
        s, in, [&](any_request_source& src) { return replay_requests<Gpu, Cpu>(src, cfg, o.mode, times, gpu); });
}

}  // namespace kvpolicy::sim::detail
