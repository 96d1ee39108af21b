// The simulator's options as one aggregate: what kvpolicy-sim's flags and
// kvpolicy.simulate's arguments fill in, as given (names, capacity lists,
// the hint spec), before anything is looked up. The driver
// (kvpolicy/sim/driver.hpp) checks and resolves it once, in `prepare`.
//
//     const sim::run_options o{.trace = "conversation_trace.jsonl",
//                              .policies = {"lru", "arc"},
//                              .capacities = sim::parse_capacity_list("1%,5%"),
//                              .block_size = 512};
//     sim::write_comparison(std::cout, sim::compare(o));
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/sim/capacity.hpp"
#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/workload.hpp"

namespace kvpolicy::sim {

enum class trace_format { mooncake, csv };

/// The format of `trace` when none is named: a block CSV by its name
/// (.csv), else Mooncake JSONL.
[[nodiscard]] inline trace_format format_of(const std::string& trace) noexcept {
    return trace.ends_with(".csv") ? trace_format::csv : trace_format::mooncake;
}
/// The mode when none is named: flat for a CSV (it holds only block
/// accesses), else prefix.
[[nodiscard]] constexpr replay_mode default_mode(trace_format f) noexcept {
    return f == trace_format::csv ? replay_mode::flat : replay_mode::prefix;
}

/// The prefill cost tiered mode charges (seconds saved, ready time). An
/// unset figure is Llama-3-8B's on an H100 at the run's block size.
struct prefill_cost_options {
    std::optional<double> alpha;          ///< seconds per context token to recompute one block
    std::optional<double> beta;           ///< seconds per block, attention part (default 0)
    std::optional<double> constant;       ///< seconds per block, non-attention part
    double bandwidth_gbps = 25;           ///< CPU -> GPU
    double remote_bandwidth_gbps = 12.5;  ///< remote store -> CPU (100 Gb/s)
    double kv_bytes_per_token = request_replay_config{}.kv_bytes_per_token;

    /// The figures' names, as kvpolicy.simulate takes them (kvpolicy-sim's
    /// flags without the dashes).
    static constexpr const char* names = "alpha, beta, const, bandwidth, remote_bandwidth, kv_bytes_per_token";
    /// Sets the figure named `name` (one of `names`) to `v`; false, nothing
    /// set, for another name.
    bool set(std::string_view name, double v) {
        if (name == "alpha")
            alpha = v;
        else if (name == "beta")
            beta = v;
        else if (name == "const")
            constant = v;
        else if (name == "bandwidth")
            bandwidth_gbps = v;
        else if (name == "remote_bandwidth")
            remote_bandwidth_gbps = v;
        else if (name == "kv_bytes_per_token")
            kv_bytes_per_token = v;
        else
            return false;
        return true;
    }

    /// The recompute cost model of these figures at `block_size` tokens per
    /// block. Unset: Llama-3-8B on an H100 at ~400 TFLOP/s effective, 2 x
    /// 8e9 FLOPs per token outside attention (40 us) and 4 x 4096 x 32 FLOPs
    /// per token per context token in attention (1.3 ns). Throws:
    /// config_error as pensieve_linear for a figure that is not a cost.
    [[nodiscard]] pensieve_linear model(std::uint32_t block_size) const {
        return pensieve_linear({.alpha = alpha.value_or(1.31e-9 * block_size),
                                .beta = beta.value_or(0.0),
                                .const_non_attention = constant.value_or(4e-5 * block_size)});
    }
};

struct run_options {
    // What to replay.
    std::string trace;  ///< Mooncake JSONL (.jsonl, .jsonl.gz) or block CSV; empty: the built-in workload
    trace_format format = trace_format::mooncake;
    replay_mode mode = replay_mode::prefix;
    chat_workload_config workload;  ///< the built-in workload (its block size and seed are the ones below)
    std::uint64_t seed = 1;         ///< of the built-in workload, and of oracle:SIGMA's errors
    bool skip_bad_lines = false;    ///< count malformed trace lines, report them, and go on

    // What to compare.
    std::vector<std::string> policies;      ///< eviction policies by name, or `all`
    std::vector<capacity_spec> capacities;  ///< blocks, or shares of the distinct blocks (the GPU tier's)
    bool bounds = false;                    ///< also lru and belady where not asked for: the gap column
    bool match_lru = false;                 ///< also each result's least capacity reaching LRU's hit ratio
    /// Options of the policies compared (`--option POLICY.NAME=VALUE`,
    /// parse_policy_option); the others run at their defaults.
    std::vector<named_policy_option> policy_options{};

    // The cache.
    std::size_t cpu_capacity = 0;     ///< CPU tier, blocks (tiered mode)
    std::size_t remote_capacity = 0;  ///< remote store shared by the instances, blocks (tiered mode)
    std::size_t instances = 1;        ///< serving instances, requests routed by session (tiered mode)
    std::string cpu_policy = "lru";   ///< the CPU tier's policy in tiered mode: lru or checkerboard
    std::uint32_t block_size = 16;    ///< tokens per block
    std::uint32_t layers = 1;         ///< layers per block: > 1 makes items layer-chunks (request modes)
    /// The hints releases carry: ends, oracle, oracle:SIGMA or file:PATH
    /// (`--return-hints`); empty: none.
    std::string return_hints;
    /// The waiting queue (request_replay_config::lookahead, serve_rate): at
    /// most one of the two.
    std::size_t lookahead = 0;
    double serve_rate = 0;
    /// Offload mode: tokens a request prefills per engine step (vLLM's
    /// max_num_batched_tokens); each step's blocks are offered for storing
    /// apart. 0: the whole prompt in one step.
    std::uint64_t prefill_chunk = 0;
    /// Offload mode with a queue: the CPU tier hears each queued request's
    /// blocks past what the GPU is forecast to serve when it starts
    /// (engine::front_cache_forecast), not all of them.
    bool queue_past_gpu = false;
    /// Offload mode: a chunk offered past the CPU tier's free room is stored
    /// only where the policy does not rank it its own next victim
    /// (engine::cache_policy_core::admissible).
    bool store_admission = false;
    prefill_cost_options cost;

    unsigned threads = 0;  ///< parallel runs; 0: all cores

    // What write_comparison writes.
    std::string output = "table";  ///< table, csv or json, to its stream
    std::string plot;              ///< a PNG of hit ratio against capacity; empty: none
    std::string csv_file;          ///< also the CSV, to this file; empty: none
    std::string json_file;         ///< also the JSON lines, to this file; empty: none

    /// Sets a prefill cost figure (prefill_cost_options::set) or a built-in
    /// workload option (chat_workload_config::set) by name: kvpolicy.simulate's
    /// keyword options. Throws: config_error for another name, listing both.
    void set(std::string_view name, double v) {
        if (cost.set(name, v)) return;
        try {
            workload.set(name, v);
        } catch (const config_error& e) {
            throw config_error(e.what() + std::string("; prefill cost options: ") + prefill_cost_options::names);
        }
    }
};

/// Sets `o.format` and `o.mode` from their names (kvpolicy-sim's --format and
/// --mode), an empty name for the default: format_of(o.trace), then
/// default_mode(o.format). Throws: config_error naming the name given and the
/// accepted ones, `o` unchanged.
inline void set_format_and_mode(run_options& o, std::string_view format, std::string_view mode) {
    if (!format.empty() && format != "mooncake" && format != "csv")
        throw config_error("--format " + std::string(format) + ": give mooncake or csv");
    const std::optional<replay_mode> named = replay_mode_named(mode);
    if (!mode.empty() && !named)
        throw config_error("--mode " + std::string(mode) + ": give flat, prefix, tiered or offload");
    o.format = format.empty() ? format_of(o.trace) : format == "csv" ? trace_format::csv : trace_format::mooncake;
    o.mode = named.value_or(default_mode(o.format));
}

}  // namespace kvpolicy::sim
