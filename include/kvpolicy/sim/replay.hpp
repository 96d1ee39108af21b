// Replay engines: drive a policy, or the real cache type, with a trace.
//
// - flat: every block access is independent, as in generic cache
//   simulators: a hit touches the item; a miss is announced (on_miss),
//   evicts one victim when full and inserts. Logical time is the access index.
// - prefix: request level, one tier, through `tiered_cache`: a request hits
//   the longest cached prefix of its hash ids; every block after the first
//   miss is recomputed (a recomputed block still cached is touched, not
//   duplicated); the request's blocks are held while it is served, so they
//   cannot evict each other. Requests are served one at a time in trace
//   order and finish before the next (the trace gives arrivals, not
//   completions). A request longer than the whole tier cannot be held at
//   once: it is served uncached (every block a miss, nothing inserted) and
//   counted in `bypassed_requests`.
// - tiered: the same with a CPU tier below the GPU tier; CPU hits are
//   swapped in, GPU victims sheltered, CPU victims dropped. With
//   `num_layers` > 1 each block is that many layer-chunk items (seed 000).
// - offload: vLLM's arrangement of a CPU offloading tier: its GPU prefix
//   cache in front (not under test), every computed block offered to the
//   CPU tier, whose victims the policy decides; a request reads the CPU
//   tier from its GPU hit's end to the first chunk missing
//   (replay_offload.hpp).
// Belady needs the future: its engines take the whole trace in memory and
// pass every access's next use; every other policy streams.
//
// The engines live in parts, each including only what it needs (one way:
// no part includes this header):
//   replay_result.hpp     replay_mode, replay_result
//   replay_config.hpp     request_replay_config: what the request engines need
//   sources.hpp           in-memory sources: oracle accesses, flattened requests
//   replay_flat.hpp       flat replay
//   request_times.hpp     the request clock, derived sessions, next uses
//   return_hints.hpp      release hints from the trace's future or a file
//   served_requests.hpp   the serve order and the waiting queue (one instance)
//   replay_requests.hpp   prefix and tiered replay through tiered_cache
//   replay_offload.hpp    offload replay through engine::cache_policy_core
//   replay_instances.hpp  several instances and a remote store
#pragma once

#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_flat.hpp"
#include "kvpolicy/sim/replay_instances.hpp"
#include "kvpolicy/sim/replay_offload.hpp"
#include "kvpolicy/sim/replay_requests.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/request_times.hpp"
#include "kvpolicy/sim/return_hints.hpp"
#include "kvpolicy/sim/sources.hpp"
#include "kvpolicy/sim/trace.hpp"
