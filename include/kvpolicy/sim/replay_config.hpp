// What the request-level replay engines (kvpolicy/sim/replay_requests.hpp,
// replay_instances.hpp) need besides the policies: tier sizes, the cost
// model, bandwidths, the hints and the waiting queue. An aggregate, apart
// from the engines, so that the simulator's options can hold one without
// the cache type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"

namespace kvpolicy::sim {

/// What the request-level engines need besides the policies.
/// One option of one policy, as kvpolicy-sim's `--option POLICY.NAME=VALUE`
/// gives it.
struct named_policy_option {
    std::string policy;
    option_value value;
};

/// `config` with every option of `options` that names P set, in order.
/// Throws: config_error from set_option (an unknown option, a value out of
/// its range).
template <class P>
[[nodiscard]] typename P::config_type with_options(typename P::config_type config,
                                                   std::span<const named_policy_option> options) {
    for (const named_policy_option& o : options)
        if (o.policy == P::name) set_option<P>(config, o.value.name, o.value.value);
    return config;
}

struct request_replay_config {
    std::size_t capacity = 0;      ///< GPU tier, blocks
    std::size_t cpu_capacity = 0;  ///< CPU tier, blocks (tiered mode)
    std::uint32_t block_size = 16;
    std::uint32_t num_layers = 1;                  ///< > 1: layer-chunk items (needs a per-layer cache type)
    pensieve_linear cost{};                        ///< recompute seconds of one block from its context
    double bandwidth_bytes_per_s = 25e9;           ///< CPU -> GPU
    double remote_bandwidth_bytes_per_s = 12.5e9;  ///< remote store -> CPU (100 Gb/s; replay_instances)
    double kv_bytes_per_token = 131072;            ///< Llama-3-8B, fp16: 2 x 32 layers x 8 heads x 128 x 2 B
    /// The ready time's pipeline stages when items are whole blocks (the
    /// model's layers: Llama-3-8B has 32); with layer-chunk items, one stage
    /// per item layer (`num_layers`).
    std::uint32_t pipeline_layers = 32;
    bool skip_bad_lines = false;
    std::string trace_name = "built-in";
    /// The CPU tier's policy where its type is a runtime_choice (kvpolicy-sim's lru or checkerboard).
    std::string cpu_policy = "lru";
    /// Options of named policies (with_options); every other policy runs at its defaults.
    std::vector<named_policy_option> policy_options{};
    /// [request]: when each request's release says its session is expected
    /// back (compute_expected_returns); null: releases carry no hint.
    /// replay_requests only.
    const std::vector<timestamp>* expected_returns = nullptr;
    /// The waiting queue the cache hears (tiered_cache::enqueue), one of:
    /// `lookahead` D > 0: before each request starts, the next D are queued;
    /// `serve_rate` > 0: one instance prefills new (uncached) tokens at this
    /// many per second, requests start in arrival order (the trace's
    /// timestamps) once the previous one is done, and the queue holds those
    /// arrived and not yet started. 0 and 0: no queue. replay_requests only.
    std::size_t lookahead = 0;
    double serve_rate = 0;
    /// Offload mode (replay_offload): tokens a request prefills per engine
    /// step, each step's blocks offered for storing apart; 0: one step.
    std::uint64_t prefill_chunk = 0;
    /// Offload mode with a queue: each queued request is told to the CPU
    /// tier past its forecast GPU hit (engine::front_cache_forecast over the
    /// queue ahead of it and the GPU's `capacity`); false: all its blocks.
    bool queue_past_gpu = false;
    /// Offload mode: the CPU tier stores an offered chunk past its free room
    /// only where the policy does not rank it its own next victim
    /// (engine::cache_policy_core::admissible; policies that rank new items,
    /// predicted_return); false: every chunk offered, as vLLM's manager.
    bool store_admission = false;
};

}  // namespace kvpolicy::sim
