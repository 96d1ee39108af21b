// MIN (belady) in the request modes, statically dispatched: its bound reads
// the whole access sequence, and in tiered mode its CPU tier is MIN too.
#include "run_requests.hpp"

namespace kvpolicy::sim::detail {

replay_result run_belady(const run_setup& s, std::size_t capacity, const run_inputs& in) {
    const request_replay_config cfg = replay_config(s, capacity, in);
    const belady::config_type config = replay_policy_config<belady>(cfg);
    if (s.options.mode == replay_mode::offload) return offload<belady>(s, cfg, in, config);
    // The offline reference knows the future on both tiers: MIN's CPU tier
    // drops the item used farthest ahead, whatever --cpu-policy says.
    if (s.options.mode == replay_mode::tiered) return replay<belady, belady>(s, capacity, in, config, true);
    return replay<belady, cpu_tier>(s, capacity, in, config, true);
}

}  // namespace kvpolicy::sim::detail
