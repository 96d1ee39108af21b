#include <cstddef>

#include <kvpolicy/sim/replay.hpp>

#include "runs.hpp"

namespace kvpolicy::sim::detail {

replay_result run_flat(const run_setup& s, const policy_choice& policy, std::size_t capacity, const run_inputs& in) {
    const run_options& o = s.options;
    const auto online = [](std::size_t) { return never; };
    return visit_by_index<eviction_policies>(policy.index, [&]<class P>() -> replay_result {
        const typename P::config_type config = with_options<P>({}, o.policy_options);
        if constexpr (uses_future<P>) {
            oracle_source src(*in.oracle);
            return replay_flat<P>(
                src, capacity, [&](std::size_t i) { return in.oracle->next_use[i]; }, config);
        } else {
            if (in.requests) {
                vector_request_source rs(*in.requests);
                flattened_requests<vector_request_source> src(rs);
                return replay_flat<P>(src, capacity, online, config);
            }
            if (o.format == trace_format::csv) {
                csv_reader src(o.trace, o.skip_bad_lines);
                replay_result r = replay_flat<P>(src, capacity, online, config);
                r.bad_lines = src.bad_lines();
                return r;
            }
            mooncake_reader reader(o.trace, o.skip_bad_lines);
            flattened_requests<mooncake_reader> src(reader);
            replay_result r = replay_flat<P>(src, capacity, online, config);
            r.requests = 0;
            r.bad_lines = reader.bad_lines();
            return r;
        }
    });
}

}  // namespace kvpolicy::sim::detail
