#include <kvpolicy/eviction/registry.hpp>

#include "sim_runs.hpp"

namespace kvpolicy::sim_tool {

namespace {

/// The CPU tier's policies in tiered mode: a short list, since every entry
/// multiplies the cache types compiled (prefix mode reuses the lru ones).
using cpu_policies = type_list<lru, lexicographic_checkerboard>;

template <class Gpu, class Cpu>
sim::replay_result replay(const options& o, std::size_t capacity, const shared_inputs& in) {
    sim::request_replay_config cfg = o.replay;
    cfg.capacity = capacity;
    cfg.cpu_capacity = o.cpu_capacity;
    cfg.block_size = o.block_size;
    cfg.num_layers = o.layers;
    cfg.skip_bad_lines = o.skip_bad_lines;
    cfg.trace_name = o.trace.empty() ? "built-in" : o.trace;
    cfg.expected_returns = in.returns.get();
    const sim::request_times* times = uses_future<Gpu> ? in.times.get() : nullptr;
    sim::request_times own;  // a request longer than this capacity is no use of its blocks
    if (times && !sim::times_fit(*times, capacity)) {
        own = sim::compute_request_times(*in.requests, capacity);
        times = &own;
    }
    if (o.instances > 1 || o.remote_capacity > 0) {
        // N instances with one shared store, then with a store each (same
        // total memory), on the same requests.
        auto run = [&](bool shared) {
            if (in.requests) {
                sim::vector_request_source src(*in.requests);
                return sim::replay_instances<Gpu, Cpu>(src, cfg, o.instances, o.remote_capacity, shared);
            }
            sim::mooncake_reader src(o.trace, o.skip_bad_lines);
            return sim::replay_instances<Gpu, Cpu>(src, cfg, o.instances, o.remote_capacity, shared);
        };
        sim::replay_result r = run(true);
        r.isolated_hit_ratio = run(false).hit_ratio();
        return r;
    }
    if (in.requests) {
        sim::vector_request_source src(*in.requests);
        return sim::replay_requests<Gpu, Cpu>(src, cfg, o.mode, times);
    }
    sim::mooncake_reader src(o.trace, o.skip_bad_lines);
    sim::replay_result r = sim::replay_requests<Gpu, Cpu>(src, cfg, o.mode, times);
    r.bad_lines.count += src.bad_lines().count;
    for (const auto& m : src.bad_lines().first_messages) r.bad_lines.first_messages.push_back(m);
    return r;
}

}  // namespace

sim::replay_result run_requests(const options& o, const std::string& policy, std::size_t capacity,
                                const shared_inputs& in) {
    return visit_by_name<eviction_policies>(
        policy,
        [&]<class Gpu>() -> sim::replay_result {
            if (o.mode == sim::replay_mode::prefix) return replay<Gpu, lru>(o, capacity, in);
            return visit_by_name<cpu_policies>(
                o.cpu_policy, [&]<class Cpu>() -> sim::replay_result { return replay<Gpu, Cpu>(o, capacity, in); },
                "CPU-tier policy");
        },
        "eviction policy");
}

}  // namespace kvpolicy::sim_tool
