#include <utility>

#include <kvpolicy/eviction/registry.hpp>

#include "sim_runs.hpp"

namespace kvpolicy::sim_tool {

sim::replay_result run_requests(const options& o, const std::string& policy, std::size_t capacity,
                                const shared_inputs& in) {
    std::optional<sim::replay_result> r;
    // Each part answers only for its own policies (run_requests.hpp).
    [&]<std::size_t... Part>(std::index_sequence<Part...>) {
        (void)((r = run_requests_part<Part>(o, policy, capacity, in)) || ...);
    }(std::make_index_sequence<request_parts>{});
    if (!r) throw_unknown_name<eviction_policies>(policy, "eviction policy");
    return std::move(*r);
}

}  // namespace kvpolicy::sim_tool
