// Every eviction policy kvpolicy ships, by the name a flag or config uses.
// Adding a policy: write its header, include it here, add it to the list.
#pragma once

#include "kvpolicy/core/type_list.hpp"
#include "kvpolicy/eviction/adaptive_kv.hpp"
#include "kvpolicy/eviction/arc.hpp"
#include "kvpolicy/eviction/belady.hpp"
#include "kvpolicy/eviction/checkerboard.hpp"
#include "kvpolicy/eviction/clock.hpp"
#include "kvpolicy/eviction/fifo.hpp"
#include "kvpolicy/eviction/gdsf.hpp"
#include "kvpolicy/eviction/lfu.hpp"
#include "kvpolicy/eviction/lirs.hpp"
#include "kvpolicy/eviction/lrfu.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/eviction/predicted_return.hpp"
#include "kvpolicy/eviction/predictive.hpp"
#include "kvpolicy/eviction/qos_aware.hpp"
#include "kvpolicy/eviction/queue_aware.hpp"
#include "kvpolicy/eviction/retention_value.hpp"
#include "kvpolicy/eviction/reuse_oracle_lru.hpp"
#include "kvpolicy/eviction/round_robin.hpp"
#include "kvpolicy/eviction/s3fifo.hpp"
#include "kvpolicy/eviction/session_aware_lru.hpp"
#include "kvpolicy/eviction/sieve.hpp"
#include "kvpolicy/eviction/tail_aware_lru.hpp"
#include "kvpolicy/eviction/slru.hpp"
#include "kvpolicy/eviction/superseded_lru.hpp"
#include "kvpolicy/eviction/two_q.hpp"
#include "kvpolicy/eviction/w_tinylfu.hpp"

namespace kvpolicy {

using eviction_policies =
    type_list<fifo, lru, round_robin, lfu, clock, sieve, slru, two_q, qos_aware, predictive, retention_value<>,
              lexicographic_checkerboard, arc, s3fifo, lirs, w_tinylfu, gdsf<>, tail_aware_lru, session_aware_lru, lrfu,
              superseded_lru, adaptive_kv, adaptive_kv_fast, queue_aware<lru>, queue_aware<adaptive_kv>,
              predicted_return, queue_aware<predicted_return>, reuse_oracle_lru, belady>;

}  // namespace kvpolicy
