// A policy's request-mode run: belady's own replay, or the compiled one
// holding the policy (run_requests.hpp). Each policy's held model is built
// here, all 29 in one translation unit.
#include <type_traits>

#include "run_requests.hpp"

namespace kvpolicy::sim::detail {

replay_result run_requests(const run_setup& s, const policy_choice& policy, std::size_t capacity,
                           const run_inputs& in) {
    return visit_by_index<eviction_policies>(policy.index, [&]<class Gpu>() -> replay_result {
        if constexpr (std::is_same_v<Gpu, belady>) {
            return run_belady(s, capacity, in);
        } else {
            const held_policy::config_type held =
                held_policy::holding<Gpu>(replay_policy_config<Gpu>(replay_config(s, capacity, in)));
            if (s.options.mode == replay_mode::offload) return run_offload(s, capacity, in, held);
            return run_held_requests(s, capacity, in, held, uses_future<Gpu>);
        }
    });
}

}  // namespace kvpolicy::sim::detail
