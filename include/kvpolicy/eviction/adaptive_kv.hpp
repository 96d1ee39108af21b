// adaptive_kv and adaptive_kv_fast: best_of_shadows (best_of_shadows.hpp)
// over the experts that cover the KV workloads of README "Which policy", for
// when the workload is not known in advance. Each preset is a name and a
// designated-initializer best_of_shadows_defaults, and each policy a `using`
// over basic_best_of_shadows: a preset is its own registry entry, with no
// class of its own.
#pragma once

#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/best_of_shadows.hpp"
#include "kvpolicy/eviction/lrfu.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/eviction/session_aware_lru.hpp"
#include "kvpolicy/eviction/superseded_lru.hpp"

namespace kvpolicy {

/// The policy to pick when the workload is not known (README "Which
/// policy"): whichever of LRU, LRFU at half-lives of 2, 8 and 32 capacities
/// (recency, then more and more frequency), superseded_lru (what sessions
/// moved on from first) and session_aware_lru (the session expected back
/// last) hits most in the shadows lately. With session_aware_lru among the
/// experts, what a release says (output tokens, an engine's return hint) and
/// session ends reach the choice: given exact return hints, adaptive_kv
/// with every expert's state came within 0.005 of session_aware_lru's hit
/// ratio in 7 of README "Which policy"'s 9 cells (before issue 36's
/// defaults; with them, 0.1488 against 0.1676 on the conversation trace at
/// 1%).
///
/// Its defaults (issue 36; docs/performance.md, "adaptive_kv on sampled
/// shadows"): only the followed expert keeps per-item state (leader_only;
/// a switch carries what the new leader can take: an LRFU's values and
/// ghosts from the LRFU it replaces, session_aware_lru's learning from its
/// shadow), and each shadow holds `shadow_items` (4096) items (all keys
/// below that capacity; SHARDS' fixed-size sample above it). Shadows of
/// 4096 items kept its hit ratio within 0.005 of the full-state version's
/// and above LRU's in every cell of README "Which policy"; 2048 put it
/// 0.0007 below LRU on the synthetic trace at 5%, and 5% samples (91 items
/// at 1,827 blocks) misjudged which LRFU leads on the conversation trace.
/// Below about 80,000 items that costs more than LRU's price:
/// adaptive_kv_fast samples at most 5% there. Above 32,768 items (where 4096
/// would sample under 1/8 of the keys) each shadow holds 1024 items: the
/// shadows' fixed 6 MB came to 60 bytes per cached item at 10^5 items, and
/// 1024-item shadows gave the same hit ratio (within 0.0004) on the
/// conversation trace at 25% and 50% of its blocks and the agentic trace at
/// 5% and 10%, where the experts' hit ratios differ by up to 0.3; every
/// README "Which policy" cell below 32,768 blocks keeps its 4096. A switch needs a lead of at
/// least 0.1% of the window's sampled references (switch_gain): it left
/// every cell of README "Which policy" unchanged to the fourth digit and
/// stopped a 10^6-item cache from rebuilding its leader for LRU and an LRFU
/// that missed alike (0.2%: up to 0.0025 lower).
struct adaptive_kv_preset {
    static constexpr std::string_view name = "adaptive_kv";
    static constexpr best_of_shadows_defaults defaults{.shadow_items = 4096,
                                                       .sample_rate = 1.0,
                                                       .switch_gain = 0.001,
                                                       .leader_only = true,
                                                       .large_capacity = 32'768,
                                                       .large_shadow_items = 1024};
};

/// adaptive_kv's experts under a preset's name and defaults.
template <class Preset>
using adaptive_kv_experts =
    basic_best_of_shadows<Preset, lru, basic_lrfu<2>, basic_lrfu<8>, basic_lrfu<32>, superseded_lru, session_aware_lru>;
using adaptive_kv = adaptive_kv_experts<adaptive_kv_preset>;

/// adaptive_kv with its shadows sampling at most 5% of the keys and holding
/// at most 1024 items each: far cheaper than adaptive_kv below about 80,000
/// items (at 10^3 items its shadows hold 50 items, not 1,000), for a hit
/// ratio up to 0.009 lower on the Mooncake traces at 1-10% of their blocks
/// (docs/performance.md).
struct adaptive_kv_fast_preset {
    static constexpr std::string_view name = "adaptive_kv_fast";
    static constexpr best_of_shadows_defaults defaults{
        .shadow_items = 1024,
        .sample_rate = 0.05,
        .switch_gain = adaptive_kv_preset::defaults.switch_gain,
        .leader_only = adaptive_kv_preset::defaults.leader_only,
        .large_capacity = adaptive_kv_preset::defaults.large_capacity,
        .large_shadow_items = adaptive_kv_preset::defaults.large_shadow_items};
};
using adaptive_kv_fast = adaptive_kv_experts<adaptive_kv_fast_preset>;

static_assert(eviction_policy<adaptive_kv>);
static_assert(hears_session_ends<adaptive_kv>);
static_assert(eviction_policy<adaptive_kv_fast>);

static_assert(eviction_policy<best_of_shadows<lru, lrfu>>);
static_assert(!hears_session_ends<best_of_shadows<lru, lrfu>>);

}  // namespace kvpolicy
