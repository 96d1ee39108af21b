#include <cstddef>
#include <utility>

#include "runs.hpp"

namespace kvpolicy::sim::detail {

replay_result run_requests(const run_setup& s, const policy_choice& policy, std::size_t capacity,
                           const run_inputs& in) {
    return [&]<std::size_t... Part>(std::index_sequence<Part...>) {
        using part_run = replay_result (*)(const run_setup&, const policy_choice&, std::size_t, const run_inputs&);
        static constexpr part_run parts[] = {&run_requests_part<Part>...};
        // The parts are consecutive runs of the list: the policy's index names its part.
        std::size_t part = 0;
        while (part + 1 < request_parts && policy.index >= request_part_begin(part + 1)) ++part;
        return parts[part](s, policy, capacity, in);
    }
    (std::make_index_sequence<request_parts>{});
}

}  // namespace kvpolicy::sim::detail
