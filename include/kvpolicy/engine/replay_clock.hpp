// replay_clock: an engine adapter's clock, in milliseconds: the steady
// clock's, or a time a replay sets. Replaying a trace through an engine's
// own scheduler (bench/vllm_replay.py drives vLLM's), the policies must see
// the trace's times, not how fast the replay runs; otherwise they see the
// engine's real time. Read and set from any thread. Python's kvpolicy.vllm
// adapters stamp every call with it (python/src/vllm_policy.cpp,
// kvpolicy.vllm.set_time_ms).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy::engine {

class replay_clock {
public:
    /// The time set, else the steady clock's milliseconds since an arbitrary start.
    [[nodiscard]] timestamp now() const noexcept {
        if (const std::int64_t t = set_.load(std::memory_order_relaxed); t >= 0) return static_cast<timestamp>(t);
        const auto d = std::chrono::steady_clock::now().time_since_epoch();
        return static_cast<timestamp>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
    }
    /// now() reads `ms` from here on; nothing: the steady clock again.
    /// Precondition: ms >= 0.
    void set(std::optional<std::int64_t> ms) noexcept {
        KVPOLICY_ASSERT(!ms || *ms >= 0);
        set_.store(ms.value_or(-1), std::memory_order_relaxed);
    }

private:
    std::atomic<std::int64_t> set_{-1};  // the time set, or -1: none
};

static_assert(clock_source<replay_clock>);

}  // namespace kvpolicy::engine
