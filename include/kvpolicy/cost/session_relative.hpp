// session_relative: how expensive an item is to recompute, by where its chunk
// sits in its session.
//
//     weight(chunk, total_chunks) = (chunk + 1) / total_chunks
//
// A leading chunk attends over few tokens and is cheap to recompute; a
// trailing one attends over the whole session. So leading chunks weigh
// little and are evicted first (Pensieve recovers dropped leading tokens by
// recomputation). Use it with `retention_value`; `uniform_position_weight` is
// the neutral alternative.
//
// Seed 000's rule, after Pensieve's preference for dropping leading tokens
// (Yu et al., "Stateful Large Language Model Serving with Pensieve",
// EuroSys'25, §4.3.4). Departures: the weight multiplies a cost that already
// grows with context length, so the position is counted twice (seed 000's
// model, kept as specified); seed 000's worked numbers divide by tokens
// (1/100 for 100 tokens) where its formula divides by chunks: this follows
// the formula.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

struct session_relative {
    static constexpr std::string_view name = "session_relative";

    /// Precondition: chunk < total_chunks (so total_chunks > 0; checked by
    /// KVPOLICY_ASSERT in debug builds: the cache knows the session's length,
    /// so a violation is a caller bug, not bad input).
    /// Returns: in (0, 1], computed as double(chunk + 1) / total_chunks.
    [[nodiscard]] double weight(chunk_index chunk, std::uint32_t total_chunks) const noexcept {
        KVPOLICY_ASSERT(chunk.value < total_chunks);
        return static_cast<double>(chunk.value + 1) / static_cast<double>(total_chunks);
    }

    friend constexpr bool operator==(session_relative, session_relative) noexcept = default;
};

static_assert(position_weight<session_relative>);
static_assert(!layer_weight<session_relative>);

}  // namespace kvpolicy
