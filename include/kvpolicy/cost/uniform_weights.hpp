// Uniform layer and position weights: every layer and every chunk of a
// session weighs the same. The neutral choice, against which seed 000's
// `pipelined_depth` and `session_relative` weights are measured.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"

namespace kvpolicy {

struct uniform_layer_weight {
    static constexpr std::string_view name = "uniform";

    [[nodiscard]] constexpr double weight(layer_index, std::uint32_t /*num_layers*/) const noexcept { return 1.0; }
};

struct uniform_position_weight {
    static constexpr std::string_view name = "uniform";

    [[nodiscard]] constexpr double weight(chunk_index, std::uint32_t /*total_chunks*/) const noexcept { return 1.0; }
};

static_assert(layer_weight<uniform_layer_weight>);
static_assert(position_weight<uniform_position_weight>);
static_assert(!position_weight<uniform_layer_weight>, "strong ids keep the two weight seams apart");

}  // namespace kvpolicy
