// One timing of a recomputation: how many seconds the forward pass over one
// item took when its session had `context_length` tokens before it.
//
// The input of both ways to fit a cost model to a GPU: `measured_table`
// interpolates the measurements directly, `calibrate` fits Pensieve's linear
// model (Yu et al., "Stateful Large Language Model Serving with Pensieve",
// EuroSys'25, §4.3.1) to them. Kept in its own header so the two share it.
#pragma once

#include <cstdint>

namespace kvpolicy {

struct cost_measurement {
    /// Tokens before the item in its session.
    std::uint64_t context_length = 0;
    /// Measured recompute time, in seconds (any unit works if used throughout:
    /// retention values are only compared with each other).
    double seconds = 0.0;

    friend constexpr bool operator==(const cost_measurement&, const cost_measurement&) noexcept = default;
};

}  // namespace kvpolicy
