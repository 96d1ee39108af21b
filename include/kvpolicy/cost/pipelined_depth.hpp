// pipelined_depth: a layer's share of an item's recompute cost that lies on
// the critical path, when layers are recomputed in a pipeline.
//
//     weight(layer, num_layers) = (num_layers - layer) / num_layers
//
// Layer 0 weighs 1 (its recomputation delays everything after it), the last
// layer 1/num_layers (its recomputation hides behind the layers before it),
// so back layers are evicted first. Use it with `retention_value` on
// layer-chunk items (the checkerboard); with whole-block items, use
// `uniform_layer_weight`.
//
// Seed 000's rule, after Pensieve's layer-wise pipelining (Yu et al.,
// "Stateful Large Language Model Serving with Pensieve", EuroSys'25,
// §4.3.2). Departure: Pensieve scores whole chunks (all layers together);
// weighting each layer separately is seed 000's extension, and the linear
// weight is its model of the pipelining, not a measurement.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

struct pipelined_depth {
    static constexpr std::string_view name = "pipelined_depth";

    /// Precondition: 0 < num_layers and layer < num_layers (checked by
    /// KVPOLICY_ASSERT in debug builds; the cache fills both from the model
    /// shape, so a violation is a caller bug, not bad input).
    /// Returns: in (0, 1], computed as double(num_layers - layer) / num_layers.
    [[nodiscard]] double weight(layer_index layer, std::uint32_t num_layers) const noexcept {
        KVPOLICY_ASSERT(num_layers > 0 && layer.value < num_layers);
        return static_cast<double>(num_layers - layer.value) / static_cast<double>(num_layers);
    }

    friend constexpr bool operator==(pipelined_depth, pipelined_depth) noexcept = default;
};

static_assert(layer_weight<pipelined_depth>);
static_assert(!position_weight<pipelined_depth>);

}  // namespace kvpolicy
