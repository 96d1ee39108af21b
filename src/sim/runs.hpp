// The driver library's own declarations: the two mode dispatchers run_one
// picks between, and the translation units the request modes' dispatch
// sends a policy to (run_requests.hpp).
#pragma once

#include <cstddef>

#include <kvpolicy/eviction/checkerboard.hpp>
#include <kvpolicy/eviction/dyn_policy.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/eviction/runtime_choice.hpp>
#include <kvpolicy/sim/driver.hpp>

namespace kvpolicy::sim::detail {

/// The CPU tier's policy in tiered mode, chosen at run time: one cache type
/// per GPU policy whichever it is (prefix mode, which has no CPU tier, uses
/// the same type).
using cpu_tier = runtime_choice<lru, lexicographic_checkerboard>;

/// Flat mode: `policy` at `capacity` over every block access.
replay_result run_flat(const run_setup& s, const policy_choice& policy, std::size_t capacity, const run_inputs& in);
/// Prefix, tiered, instances and offload modes.
replay_result run_requests(const run_setup& s, const policy_choice& policy, std::size_t capacity, const run_inputs& in);

/// A policy held behind one virtual call per hook, given by its config
/// (held_policy::holding<P>(config)), none by name: a replay compiled with it
/// instantiates no policy.
using held_policy = basic_dyn_policy<type_list<>>;
/// The prefix, tiered and instances modes (--instances, --remote-capacity)
/// and the offload mode of every policy but belady, through one compiled
/// replay each (run_dynamic.cpp): `policy` holds the policy run with its
/// replay config and decides as that policy would
/// (tests/eviction_dyn_policy.cpp; `future`: it reads each access's next
/// use). Compiled per policy, the prefix and tiered modes alone were a
/// tiered cache per policy: 30-50 s of compiling each, in every build. The
/// result is named as the policy held (`policy.policy`).
replay_result run_held_requests(const run_setup& s, std::size_t capacity, const run_inputs& in,
                                const held_policy::config_type& policy, bool future);
replay_result run_offload(const run_setup& s, std::size_t capacity, const run_inputs& in,
                          const held_policy::config_type& policy);
/// Every request mode of belady (run_belady.cpp).
replay_result run_belady(const run_setup& s, std::size_t capacity, const run_inputs& in);

}  // namespace kvpolicy::sim::detail
