// Tiers, item states and the granularity of eviction.
//
// An item is at every moment in exactly one state: free (its slot holds
// nothing), resident in one tier, or dropped (its KV is gone and must be
// recomputed). `dropped` is a state, not a tier: nothing stores it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvpolicy {

enum class tier : std::uint8_t { gpu, cpu, remote };

inline constexpr std::size_t tier_count = 3;

[[nodiscard]] constexpr std::string_view to_string(tier t) noexcept {
    switch (t) {
        case tier::gpu:
            return "gpu";
        case tier::cpu:
            return "cpu";
        case tier::remote:
            return "remote";
    }
    return "?";
}

enum class item_state : std::uint8_t { free, in_gpu, in_cpu, in_remote, dropped };

[[nodiscard]] constexpr item_state resident_in(tier t) noexcept {
    switch (t) {
        case tier::gpu:
            return item_state::in_gpu;
        case tier::cpu:
            return item_state::in_cpu;
        case tier::remote:
            return item_state::in_remote;
    }
    return item_state::free;
}

[[nodiscard]] constexpr bool is_resident(item_state s) noexcept {
    return s == item_state::in_gpu || s == item_state::in_cpu || s == item_state::in_remote;
}

[[nodiscard]] constexpr std::string_view to_string(item_state s) noexcept {
    switch (s) {
        case item_state::free:
            return "free";
        case item_state::in_gpu:
            return "gpu";
        case item_state::in_cpu:
            return "cpu";
        case item_state::in_remote:
            return "remote";
        case item_state::dropped:
            return "dropped";
    }
    return "?";
}

/// What one eviction item is. `whole_block`: all layers of a block move
/// together (vLLM, SGLang). `per_layer`: each (session, chunk, layer) is its
/// own item, seed 000's "checkerboard", so back layers can leave first.
enum class granularity : std::uint8_t { whole_block, per_layer };

[[nodiscard]] constexpr std::string_view to_string(granularity g) noexcept {
    return g == granularity::whole_block ? "whole_block" : "per_layer";
}

}  // namespace kvpolicy
