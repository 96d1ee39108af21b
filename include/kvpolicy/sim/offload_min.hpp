// The offline optimum of a CPU offloading tier (Belady's MIN, bypass
// allowed) over its references: lookups, counted, and store offers. The
// bound offload replay reports for policy `belady` (replay_offload.hpp), and
// the one bench/vllm_replay.py puts under vLLM's own runs (through Python's
// kvpolicy._offload_min_hits), so the simulator and vLLM's scheduler are
// measured against one definition. tests/sim_offload.cpp and
// python/tests/test_vllm_replay_bench.py check it against an exhaustive
// search over every admission and eviction choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::sim {

/// One reference of the CPU tier: a lookup (counted, a hit if held) or a
/// store offer (the chunk may be admitted there).
struct offload_access {
    bool lookup = false;
    std::uint64_t key = 0;
};

/// Lookup hits of the offline optimum over a CPU tier's references
/// (Belady's MIN, bypass allowed): a key may be admitted at any reference,
/// and a held key is worth keeping until its next lookup unless a store
/// offers it first (it can be admitted there again). Keeping those looked
/// up soonest is optimal by the classic exchange argument.
[[nodiscard]] inline std::uint64_t offload_min_hits(std::span<const offload_access> accesses, std::size_t capacity) {
    const std::size_t n = accesses.size();
    std::vector<std::size_t> next_use(n, n);
    std::unordered_map<std::uint64_t, std::size_t> seen;
    for (std::size_t i = n; i-- > 0;) {
        const auto it = seen.find(accesses[i].key);
        next_use[i] = it == seen.end() ? n : it->second;
        seen[accesses[i].key] = accesses[i].lookup ? i : n;
    }
    std::unordered_map<std::uint64_t, std::size_t> held;                  // key -> its next use
    std::priority_queue<std::pair<std::size_t, std::uint64_t>> farthest;  // stale entries skipped
    std::uint64_t hits = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const auto [lookup, key] = accesses[i];
        if (lookup && held.contains(key)) ++hits;
        if (next_use[i] == n) {
            held.erase(key);
            continue;
        }
        held[key] = next_use[i];
        farthest.emplace(next_use[i], key);
        while (held.size() > capacity) {
            const auto [use, victim] = farthest.top();
            farthest.pop();
            if (const auto it = held.find(victim); it != held.end() && it->second == use) held.erase(it);
        }
    }
    return hits;
}

/// offload_min_hits over references given as columns: `lookups[i]` nonzero
/// for a lookup, zero for a store offer, of key `keys[i]`. Throws:
/// usage_error for columns of different lengths.
[[nodiscard]] inline std::uint64_t offload_min_hits(std::span<const std::uint8_t> lookups,
                                                    std::span<const std::uint64_t> keys, std::size_t capacity) {
    if (lookups.size() != keys.size())
        throw usage_error("offload_min_hits: " + std::to_string(lookups.size()) + " lookup flags for " +
                          std::to_string(keys.size()) + " keys; give one per reference");
    std::vector<offload_access> a(keys.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = {.lookup = lookups[i] != 0, .key = keys[i]};
    return offload_min_hits(a, capacity);
}

}  // namespace kvpolicy::sim
