// kvpolicy: every host header. Compiles with g++ and, as a .cu, with nvcc.
#pragma once

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/core/sparse_context.hpp"
#include "kvpolicy/core/tier.hpp"
#include "kvpolicy/core/transfer.hpp"
#include "kvpolicy/core/type_list.hpp"

#include "kvpolicy/cost/calibrate.hpp"
#include "kvpolicy/cost/measured_table.hpp"
#include "kvpolicy/cost/measurement.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/cost/pipelined_depth.hpp"
#include "kvpolicy/cost/session_relative.hpp"
#include "kvpolicy/cost/uniform_weights.hpp"
#include "kvpolicy/cost/unit_cost.hpp"

#include "kvpolicy/eviction/arc.hpp"
#include "kvpolicy/eviction/belady.hpp"
#include "kvpolicy/eviction/checkerboard.hpp"
#include "kvpolicy/eviction/clock.hpp"
#include "kvpolicy/eviction/gdsf.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"
#include "kvpolicy/eviction/lfu.hpp"
#include "kvpolicy/eviction/lirs.hpp"
#include "kvpolicy/eviction/predictive.hpp"
#include "kvpolicy/eviction/qos_aware.hpp"
#include "kvpolicy/eviction/registry.hpp"
#include "kvpolicy/eviction/retention_value.hpp"
#include "kvpolicy/eviction/round_robin.hpp"
#include "kvpolicy/eviction/s3fifo.hpp"
#include "kvpolicy/eviction/select_victims.hpp"
#include "kvpolicy/eviction/sieve.hpp"
#include "kvpolicy/eviction/slru.hpp"
#include "kvpolicy/eviction/two_q.hpp"
#include "kvpolicy/eviction/w_tinylfu.hpp"

#include "kvpolicy/select/nth_element_selector.hpp"

#include "kvpolicy/sparse/full_attention.hpp"
#include "kvpolicy/sparse/lse_merge.hpp"
#include "kvpolicy/sparse/quest.hpp"
#include "kvpolicy/sparse/reference_attention.hpp"
#include "kvpolicy/sparse/registry.hpp"
#include "kvpolicy/sparse/sink_window.hpp"

#include "kvpolicy/cache/host_memcpy_engine.hpp"

#include "kvpolicy/cache/block_hasher.hpp"
#include "kvpolicy/cache/metrics.hpp"
#include "kvpolicy/cache/presets.hpp"
#include "kvpolicy/cache/swap_plan.hpp"
#include "kvpolicy/cache/tiered_cache.hpp"

#include "kvpolicy/pool/block_pool.hpp"

// The simulator's headers are host-only (zlib, range-v3): not under nvcc.
#if !defined(__CUDACC__)
#include "kvpolicy/sim/replay.hpp"
#include "kvpolicy/sim/report.hpp"
#include "kvpolicy/sim/trace.hpp"
#include "kvpolicy/sim/workload.hpp"
#endif
