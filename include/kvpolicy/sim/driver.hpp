// The simulator's driver: what kvpolicy-sim and kvpolicy.simulate do with
// their options, so the two replay alike. In order:
//
//   prepare(options)     checks the options and resolves them once: each
//                        policy name a policy_choice, the run plan, the hint
//                        spec, the prefill cost, the thread count
//   load_inputs(setup)   reads what every run shares: the built-in
//                        workload's requests, or a trace's requests and next
//                        uses where Belady or return hints need them
//   run_all(setup, in)   every (policy, capacity) pair on a pool of threads,
//                        each through run_one: the policy's type chosen by
//                        its index, the request modes' dispatch compiled in
//                        slices that build side by side
//   match_lru(...)       --match-lru's capacity searches
//
// and `compare` runs them all and `write_comparison` writes the result as
// kvpolicy-sim prints it. Declared here, defined in the simulator's driver
// library (kvpolicy_sim_driver, src/sim/), which kvpolicy-sim and the
// Python package link.
#pragma once

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/sim/policy_choice.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/request_times.hpp"
#include "kvpolicy/sim/run_options.hpp"
#include "kvpolicy/sim/run_plan.hpp"
#include "kvpolicy/sim/sources.hpp"

namespace kvpolicy::sim {

/// Where return hints come from (run_options::return_hints): none; the
/// trace's future (`ends`: a session's last request says it ends;
/// `oracle[:SIGMA]`: every return); a file of the engine's own predictions.
enum class hint_source { none, ends, oracle, file };

/// `run_options` checked and resolved, before any run.
struct run_setup {
    run_options options;                  ///< as given, but `threads` is never 0
    run_plan plan;                        ///< the names replayed, and which rows are shown
    std::vector<policy_choice> policies;  ///< plan.policies, each resolved once, in order
    std::vector<std::size_t> capacities;  ///< blocks, distinct, in the order given (`compare` resolves them)
    hint_source hints = hint_source::none;
    double return_hint_error = 0.0;  ///< oracle:SIGMA: each true return off by e^(SIGMA x N(0,1))
    std::string return_hint_file;    ///< file:PATH
    /// What every request-mode run shares (cost, bandwidths, queue, tiers,
    /// trace); each run sets its capacity and the hints it reads.
    request_replay_config replay;
};

/// `POLICY.NAME=VALUE` (kvpolicy-sim's --option) as a named option: VALUE
/// a number (a flag: 0 or 1). Throws: config_error naming the spec and the
/// form, for anything else. The policy and option are checked by `prepare`.
[[nodiscard]] named_policy_option parse_policy_option(std::string_view spec);

/// Checks `o` and resolves it, for kvpolicy-sim and kvpolicy.simulate alike.
/// Throws: config_error naming the flag and the fix (a CSV in a request
/// mode; no --policy or --capacity, a capacity of 0 blocks; --block-size,
/// --layers or --instances 0; --cpu-capacity missing, --return-hints,
/// --lookahead / --serve-rate, --layers > 1 in flat or offload mode,
/// --prefill-chunk outside offload mode, --remote-bandwidth, --option: a
/// policy not compared, an option it does not have, a value out of range);
/// unknown_name_error for a policy, or in
/// tiered mode a CPU-tier policy, that does not exist, listing the accepted
/// names.
[[nodiscard]] run_setup prepare(run_options o);

/// Read once, shared read-only by every run.
struct run_inputs {
    std::shared_ptr<const std::vector<request_record>> requests;  ///< built-in, or a trace Belady needs
    std::shared_ptr<const request_times> times;                   ///< for Belady, request modes
    std::shared_ptr<const oracle_accesses> oracle;                ///< for Belady, flat mode
    std::shared_ptr<const std::vector<timestamp>> returns;        ///< return hints, per request
};

/// Reads what the runs share: the built-in workload's requests, or a
/// trace's requests and next uses where a policy that reads the future or
/// the return hints need them. Throws: config_error, parse_error.
[[nodiscard]] run_inputs load_inputs(const run_setup& s);
/// The trace's distinct blocks (what a capacity of P% is a share of).
[[nodiscard]] std::size_t count_distinct_blocks(const run_setup& s, const run_inputs& in);
/// One run of `policy` at `capacity` blocks in the setup's mode.
[[nodiscard]] replay_result run_one(const run_setup& s, const policy_choice& policy, std::size_t capacity,
                                    const run_inputs& in);
/// Every (policy, capacity) pair of `s`, on `s.options.threads` threads,
/// capacity-major: result `i` is policy `i % s.policies.size()` at
/// capacity `i / s.policies.size()`.
[[nodiscard]] std::vector<replay_result> run_all(const run_setup& s, const run_inputs& in);
/// --match-lru: fills each result's `lru_match_capacity`, the least
/// capacity at which its policy reaches LRU's hit ratio at its capacity
/// (bisection to 1% of it, searched up to `distinct` blocks). `results` as
/// run_all returned them, with LRU among the policies. Throws: usage_error
/// otherwise.
void match_lru(const run_setup& s, const run_inputs& in, std::size_t distinct, std::vector<replay_result>& results);

/// One comparison as kvpolicy-sim runs it.
struct comparison {
    run_setup setup;
    std::vector<replay_result> results;  ///< the rows shown, capacity-major, with the gap and match columns
    std::size_t distinct_blocks = 0;     ///< the trace's, where a P% capacity or --match-lru needed it; else 0
};

/// prepare, load_inputs, the capacities resolved, run_all, the gap column
/// (fill_gap_closed), --match-lru, and the rows not asked for dropped
/// (keep_shown). Throws: as prepare and load_inputs.
[[nodiscard]] comparison compare(run_options o);

/// Writes `c` as kvpolicy-sim prints it: the table (its title naming the
/// trace and what the run added or assumed), CSV or JSON lines to `out`,
/// the CSV and JSON files, the remote tier's summary and the plot the
/// options ask for. Throws: config_error if a file cannot be written or
/// gnuplot fails.
void write_comparison(std::ostream& out, const comparison& c);

}  // namespace kvpolicy::sim
