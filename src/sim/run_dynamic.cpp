// Every mode of every policy but belady, compiled once: each runs through a
// held_policy holding the policy with its own replay config (runs.hpp).
#include "run_requests.hpp"

namespace kvpolicy::sim::detail {

replay_result run_held_requests(const run_setup& s, std::size_t capacity, const run_inputs& in,
                                const held_policy::config_type& policy, bool future) {
    replay_result r = replay<held_policy, cpu_tier>(s, capacity, in, policy, future);
    r.policy = policy.policy;  // the held policy's name, not held_policy's
    return r;
}

replay_result run_offload(const run_setup& s, std::size_t capacity, const run_inputs& in,
                          const held_policy::config_type& policy) {
    replay_result r = offload<held_policy>(s, replay_config(s, capacity, in), in, policy);
    r.policy = policy.policy;
    return r;
}

}  // namespace kvpolicy::sim::detail
