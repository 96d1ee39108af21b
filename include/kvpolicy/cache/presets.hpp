// Named compositions: the cache types of common serving engines, each one
// `using` line. Pick one, or write your own line with any two policies.
#pragma once

#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/eviction/fifo.hpp"
#include "kvpolicy/eviction/lru.hpp"

namespace kvpolicy {

/// vLLM's prefix cache with CPU offload: LRU on the GPU (its free-block
/// queue), LRU over the CPU blocks, exclusive tiers by default (set
/// `cache_config::inclusive` for the offload connector's behaviour, which
/// keeps the CPU copy).
using vllm_like_cache = tiered_cache<lru, lru>;

/// Seed 003's first version of CPU offload: LRU on the GPU, FIFO over the
/// CPU slots (round robin in the seed; `round_robin` once registered).
using offload_v0_cache = tiered_cache<lru, fifo>;

}  // namespace kvpolicy
