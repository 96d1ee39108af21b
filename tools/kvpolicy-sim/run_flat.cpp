#include <kvpolicy/eviction/registry.hpp>

#include "sim_runs.hpp"

namespace kvpolicy::sim_tool {

sim::replay_result run_flat(const options& o, const std::string& policy, std::size_t capacity, const shared_inputs& in) {
    const auto online = [](std::size_t) { return never; };
    return visit_by_name<eviction_policies>(
        policy,
        [&]<class P>() -> sim::replay_result {
            if constexpr (uses_future<P>) {
                sim::oracle_source src(*in.oracle);
                return sim::replay_flat<P>(src, capacity, [&](std::size_t i) { return in.oracle->next_use[i]; });
            } else {
                if (in.requests) {
                    sim::vector_request_source rs(*in.requests);
                    sim::flattened_requests<sim::vector_request_source> src(rs);
                    return sim::replay_flat<P>(src, capacity, online);
                }
                if (o.format == trace_format::csv) {
                    sim::csv_reader src(o.trace, o.skip_bad_lines);
                    sim::replay_result r = sim::replay_flat<P>(src, capacity, online);
                    r.bad_lines = src.bad_lines();
                    return r;
                }
                sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
                sim::flattened_requests<sim::mooncake_reader> src(reader);
                sim::replay_result r = sim::replay_flat<P>(src, capacity, online);
                r.requests = 0;
                r.bad_lines = reader.bad_lines();
                return r;
            }
        },
        "eviction policy");
}

}  // namespace kvpolicy::sim_tool
