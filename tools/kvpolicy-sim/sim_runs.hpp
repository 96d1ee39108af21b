// kvpolicy-sim's pieces: the parsed options, the inputs shared by every
// (policy, capacity) run, and the two entry points that turn a policy name
// into a compile-time type (in translation units of their own, the request
// modes' split into request_parts more, so they compile in parallel).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/workload.hpp>

namespace kvpolicy::sim_tool {

enum class trace_format { mooncake, csv };

/// Where --return-hints come from: none; the trace's future (`ends`: a
/// session's last request says it ends; `oracle[:SIGMA]`: every return); a
/// file of the engine's own predictions.
enum class hint_source { none, ends, oracle, file };

struct options {
    std::string trace;  // empty: the built-in workload
    trace_format format = trace_format::mooncake;
    sim::replay_mode mode = sim::replay_mode::prefix;
    std::vector<std::string> policies;
    std::vector<std::size_t> capacities;
    std::size_t cpu_capacity = 0;
    std::size_t remote_capacity = 0;  // blocks of the remote store shared by the instances
    std::size_t instances = 1;        // serving instances, requests routed by session
    std::string cpu_policy = "lru";
    std::uint32_t block_size = 16;
    std::uint32_t layers = 1;
    std::string output = "table";
    std::string plot;
    std::uint64_t seed = 1;
    unsigned threads = 0;
    bool skip_bad_lines = false;
    /// --return-hints as given (set_return_hints); empty: releases carry no hint.
    std::string return_hints;
    hint_source hints = hint_source::none;
    /// oracle:SIGMA: each true return off by e^(SIGMA x N(0,1)) (compute_expected_returns).
    double return_hint_error = 0.0;
    std::string return_hint_file;  ///< file:PATH (parse_expected_returns)
    sim::chat_workload_config workload;
    sim::request_replay_config replay;
};

/// Read once, shared read-only by every run.
struct shared_inputs {
    std::shared_ptr<const std::vector<sim::request_record>> requests;  // built-in, or a trace Belady needs
    std::shared_ptr<const sim::request_times> times;                   // for Belady, request modes
    std::shared_ptr<const sim::oracle_accesses> oracle;                // for Belady, flat mode
    std::shared_ptr<const std::vector<timestamp>> returns;             // --return-hints, per request
};

/// Parses a --return-hints spec into `o` (its mode, instances and remote
/// store already set): `ends`, `oracle`, `oracle:SIGMA` or `file:PATH`. Throws:
/// config_error naming the spec and the accepted forms, or the modes it
/// applies to.
void set_return_hints(options& o, const std::string& spec);
/// Reads what the runs share: the built-in workload's requests, or a
/// trace's requests and next uses where Belady needs them. Throws:
/// config_error, parse_error.
shared_inputs load_inputs(const options& o);
/// The trace's distinct blocks (what `--capacity P%` is a share of).
std::size_t count_distinct_blocks(const options& o, const shared_inputs& in);
/// One (policy, capacity) run in `o.mode`.
sim::replay_result run_one(const options& o, const std::string& policy, std::size_t capacity, const shared_inputs& in);
/// Every (policy, capacity) pair of `o`, on `o.threads` threads, in
/// capacity-major order.
std::vector<sim::replay_result> run_all(const options& o, const shared_inputs& in);
/// `--match-lru`: fills each result's `lru_match_capacity`.
void match_lru(const options& o, const shared_inputs& in, std::size_t distinct, std::vector<sim::replay_result>& results);

sim::replay_result run_flat(const options& o, const std::string& policy, std::size_t capacity, const shared_inputs& in);
sim::replay_result run_requests(const options& o, const std::string& policy, std::size_t capacity,
                                const shared_inputs& in);

#ifndef KVPOLICY_SIM_REQUEST_PARTS
#error "KVPOLICY_SIM_REQUEST_PARTS is defined by tools/kvpolicy-sim/sources.cmake"
#endif
/// run_requests' translation units (run_requests.hpp).
inline constexpr std::size_t request_parts = KVPOLICY_SIM_REQUEST_PARTS;
/// run_requests for the policies of part `Part` of eviction_policies, or
/// nullopt for a name among the others; each part is explicitly
/// instantiated in its own translation unit.
template <std::size_t Part>
std::optional<sim::replay_result> run_requests_part(const options& o, const std::string& policy, std::size_t capacity,
                                                    const shared_inputs& in);

}  // namespace kvpolicy::sim_tool
