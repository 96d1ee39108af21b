// unit_cost: every item costs the same to recompute.
//
// The neutral cost model: with it, cost-aware policies (retention_value,
// GDSF) reduce to their recency or frequency part. Use it to isolate the
// effect of a real model (`pensieve_linear`, `measured_table`) in a study.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"

namespace kvpolicy {

struct unit_cost {
    static constexpr std::string_view name = "unit";

    [[nodiscard]] constexpr double cost(std::uint64_t /*context_length*/) const noexcept { return 1.0; }
};

static_assert(cost_model<unit_cost>);

}  // namespace kvpolicy
