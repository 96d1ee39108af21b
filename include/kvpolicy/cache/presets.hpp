// Named compositions: the cache types of common serving engines, each one
// `using` line. Pick one, or write your own line with any two policies.
#pragma once

#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/eviction/checkerboard.hpp"
#include "kvpolicy/eviction/fifo.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/eviction/qos_aware.hpp"
#include "kvpolicy/eviction/retention_value.hpp"

namespace kvpolicy {

/// vLLM's prefix cache with CPU offload: LRU on the GPU (its free-block
/// queue), LRU over the CPU blocks, exclusive tiers by default (set
/// `cache_config::inclusive` for the offload connector's behaviour, which
/// keeps the CPU copy).
using vllm_like_cache = tiered_cache<lru, lru>;

/// TensorRT-LLM's KV cache manager: retention priorities with durations (a
/// priority falls back to the default when its duration ends), LRU within a
/// priority, on the GPU and on the host offload tier alike. Pass the request's
/// priority and `priority_until` in admit's context.
using trtllm_like_cache = tiered_cache<qos_aware, qos_aware>;

/// Pensieve (Yu et al., EuroSys'25) as seed 000 refines it: items are
/// layer-chunks (construct with `.items = granularity::per_layer` and the
/// model's `.num_layers`); the GPU tier evicts to the CPU tier by seed 000's
/// retention value = cost / time inactive, with Pensieve's linear recompute
/// cost and the seed's layer and position weights; the CPU tier drops leading
/// chunks of back layers first (the lexicographic checkerboard), which the
/// seed takes for the cheapest to recompute. In a prefix cache both orders
/// lose what later chunks need (docs/which-policy.md, "Retention value on its
/// own figure"): `tiered_cache<retention_value<>, lru>` is the form that
/// holds there.
using pensieve_cache = tiered_cache<seed000_retention_value, lexicographic_checkerboard>;

/// Seed 003's first version of CPU offload: LRU on the GPU, FIFO over the
/// CPU slots (round robin in the seed; `round_robin` once registered).
using offload_v0_cache = tiered_cache<lru, fifo>;

}  // namespace kvpolicy
