// What a transfer engine moves: block copies between tiers.
//
// The cache plans transfers (a step's swap plan); a `transfer_engine` carries
// them out (host memcpy in tests and the simulator, the CUDA ring loader on a
// GPU, a remote store later) and reports, per copy, whether it happened, so
// that a failed swap-out never loses a block (the cache keeps it where it was).
#pragma once

#include <cstdint>

#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/tier.hpp"

namespace kvpolicy {

/// Copy block `src` of tier `from` into block `dst` of tier `to`; with
/// `exchange`, swap the two blocks' contents instead (through a bounce
/// buffer), which is how a full GPU tier trades a victim for a CPU hit.
struct block_transfer {
    tier from = tier::gpu;
    block_id src{};
    tier to = tier::cpu;
    block_id dst{};
    bool exchange = false;

    friend constexpr bool operator==(const block_transfer&, const block_transfer&) noexcept = default;
};

enum class transfer_status : std::uint8_t { done, failed };

}  // namespace kvpolicy
