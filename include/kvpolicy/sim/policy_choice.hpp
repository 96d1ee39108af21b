// An eviction policy named on the simulator's command line (or in
// kvpolicy.simulate), resolved once: its position in `eviction_policies`,
// which the runs dispatch on (kvpolicy::visit_by_index) without comparing
// the name again, and what the driver asks of its type. The driver looks a
// name up here and nowhere else.
//
// Declared here, defined in the simulator's driver library
// (kvpolicy_sim_driver, src/sim/), which kvpolicy-sim and the Python
// package link.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvpolicy::sim {

struct policy_choice {
    std::size_t index = 0;       ///< position in eviction_policies
    std::string_view name;       ///< its registered name (static storage)
    std::string_view built_for;  ///< built_for<P>(): the setting it is built for; empty: any
    bool uses_future = false;    ///< uses_future<P>: reads each access's next use (the trace in memory)
};

/// The policy named `name`. Throws: unknown_name_error "unknown eviction
/// policy 'NAME'; accepted: all, fifo, lru, ..." (`all` stands for every
/// policy in a list of names: `expand_all`).
[[nodiscard]] policy_choice choose_policy(std::string_view name);

/// `names` with each `all` replaced by every registered name, in registry
/// order; the other names as given, unchecked.
[[nodiscard]] std::vector<std::string> expand_all(const std::vector<std::string>& names);

/// What a policy list accepts, for help texts: "all, fifo, lru, ...".
[[nodiscard]] std::string accepted_policy_names();

}  // namespace kvpolicy::sim
