// What a policy is told about an item when it is inserted, accessed or released.
//
// One flat struct for every policy rather than a context per policy: the
// cache fills it once per item from its struct-of-arrays metadata, and each
// policy reads the fields its rule needs (LRU none of them, retention_value
// the layer/chunk/context fields, Belady `next_use`). Fields a caller does
// not know keep their defaults, and each default is the value that makes the
// policy fall back to its documented plain behaviour (unknown lifetime ->
// predictive falls back to completion ratio, then LRU).
#pragma once

#include <cstdint>
#include <limits>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/ids.hpp"

namespace kvpolicy {

/// QoS priority classes: higher is kept longer. Seed 002 uses 0 = low,
/// 1 = normal, 2 = high; any int32 is accepted.
inline constexpr std::int32_t default_priority = 1;

struct access_context {
    /// Time of this operation, in the caller's clock ticks.
    timestamp now = 0;
    /// Stable identity of the item (block hash, trace object id, or
    /// `key_of(layer_chunk_key)`): what ghost lists remember after the slot
    /// is reused.
    std::uint64_t key = 0;

    // Where the item sits in its session (seed 000).
    session_id session{};
    chunk_index chunk{};
    layer_index layer{};
    std::uint32_t num_layers = 1;
    std::uint32_t session_total_chunks = 1;
    /// Tokens before this item in its session: what attention over it costs
    /// to recompute.
    std::uint64_t context_length = 0;
    /// Tokens per block (the cache's block size); 0 = unknown. With
    /// `session_total_chunks` it gives the contexts of the chunks after this
    /// one (retention_value prices them).
    std::uint32_t block_tokens = 0;
    /// Size of the item in blocks (GDSF divides by it).
    std::uint32_t size = 1;

    // QoS (seed 002, TensorRT-LLM's retention priorities).
    std::int32_t priority = default_priority;
    /// When `priority` falls back to `default_priority`; `never` = it holds.
    timestamp priority_until = never;

    // Predictive eviction (seed 002).
    /// Seconds the owning sequence is expected to live on; NaN = unknown.
    double estimated_lifetime = std::numeric_limits<double>::quiet_NaN();
    std::uint64_t sequence_length = 0;
    /// 0 = unknown.
    std::uint64_t max_length = 0;

    /// Belady's oracle: time of the item's next use; `never` = not used again.
    timestamp next_use = never;

    /// On a release only: tokens the finished request generated (what an
    /// engine knows when a request ends; session_aware_lru predicts the
    /// session's return from it: a longer answer is read, or its tool call
    /// runs, longer). `session` is then the releasing session. 0 = unknown,
    /// and on every other call.
    std::uint64_t output_tokens = 0;
    /// On a release only: when the engine expects the releasing session's
    /// next request, in the caller's clock ticks (an agent framework knows
    /// its tool call's timeout or its workflow's next step, KVFlow's and
    /// Continuum's signal; a closed conversation will not return: `never`).
    /// session_aware_lru takes it over any prediction of its own.
    /// 0 = no hint, and on every other call.
    timestamp expected_return = 0;
};

/// Counters every policy keeps.
struct policy_counters {
    std::uint64_t insertions = 0;  ///< on_insert calls
    std::uint64_t hits = 0;        ///< on_access calls
    std::uint64_t evictions = 0;   ///< items returned by pop_victim(s)
    std::uint64_t erasures = 0;    ///< on_erase calls
    std::uint64_t ghost_hits = 0;  ///< inserts of a key a ghost list remembered

    friend constexpr bool operator==(const policy_counters&, const policy_counters&) noexcept = default;
};

}  // namespace kvpolicy
