// What one replay measured (`replay_result`), whichever engine ran it, and
// the replay modes (kvpolicy/sim/replay.hpp describes them). The reports
// (kvpolicy/sim/report.hpp) read only this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/records.hpp"

namespace kvpolicy::sim {

enum class replay_mode : std::uint8_t { flat, prefix, tiered, offload };

[[nodiscard]] inline std::string_view to_string(replay_mode m) noexcept {
    switch (m) {
        case replay_mode::flat:
            return "flat";
        case replay_mode::prefix:
            return "prefix";
        case replay_mode::tiered:
            return "tiered";
        case replay_mode::offload:
            return "offload";
    }
    return "?";
}

/// The mode named `name` ("flat", "prefix", "tiered", "offload"); nothing
/// for another name.
[[nodiscard]] inline std::optional<replay_mode> replay_mode_named(std::string_view name) noexcept {
    for (replay_mode m : {replay_mode::flat, replay_mode::prefix, replay_mode::tiered, replay_mode::offload})
        if (to_string(m) == name) return m;
    return std::nullopt;
}

struct replay_result {
    std::string policy;
    std::string built_for;     ///< the policy's built_for<P>() (empty: any setting); tables note it
    std::size_t capacity = 0;  ///< blocks (the GPU tier's, in tiered and offload modes)
    replay_mode mode = replay_mode::flat;
    std::uint64_t requests = 0;
    std::uint64_t accesses = 0;  ///< block accesses
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t evictions = 0;
    double seconds = 0;  ///< replay wall time
    // prefix and tiered
    std::uint64_t tokens = 0;
    std::uint64_t hit_tokens = 0;
    std::uint64_t bypassed_requests = 0;
    // tiered (offload: cpu_capacity, gpu_hits, cpu_hits)
    std::size_t cpu_capacity = 0;
    std::uint64_t gpu_hits = 0;
    std::uint64_t cpu_hits = 0;
    std::uint64_t declined_stores = 0;    ///< offload: chunks offered and not stored (store_admission)
    std::uint64_t recomputed_blocks = 0;  ///< misses on blocks the cache had held and dropped
    std::uint64_t swap_out_blocks = 0;
    double prefill_seconds_saved = 0;
    // tiered (replay_requests): seconds until each request's KV is ready,
    // with seed 000's layer-wise pipeline (kvpolicy/sim/critical_path.hpp)
    double ready_s_total = 0;
    double ready_s_mean = 0;
    double ready_s_p99 = 0;
    // remote tier (replay_instances)
    std::size_t instances = 1;
    std::size_t remote_capacity = 0;          ///< blocks of the remote store (shared, or split evenly)
    std::uint64_t remote_hits = 0;            ///< blocks staged from the store that arrived
    std::uint64_t remote_failed_fetches = 0;  ///< staged blocks the store had dropped by fetch time
    double isolated_hit_ratio = -1;           ///< the same instances, each with its own share of the store
    // the waiting queue (request_replay_config::lookahead, serve_rate)
    bool queue_modelled = false;
    double queue_depth_mean = 0;  ///< requests queued when each request started
    std::size_t queue_depth_p50 = 0;
    std::size_t queue_depth_p99 = 0;
    // prefix and tiered: seed 002's figures
    std::uint64_t sessions = 0;  ///< sessions with a lookup (named by the trace, else derived)
    double fairness = std::numeric_limits<double>::quiet_NaN();  ///< Jain's index over sessions' hit ratios
    std::uint64_t reprefill_blocks = 0;  ///< missed blocks an earlier request had computed (KV computed again)
    // filled by the simulator from the other runs at the same capacity
    double gap_closed = std::numeric_limits<double>::quiet_NaN();        ///< of the LRU -> Belady gap
    double ready_gap_closed = std::numeric_limits<double>::quiet_NaN();  ///< of LRU's -> Belady's total ready time
    std::size_t lru_match_capacity = 0;  ///< least capacity reaching LRU's hit ratio here; 0 = not computed
    bool lru_match_unreachable = false;  ///< computed, and not reached below the distinct blocks
    bad_line_report bad_lines;

    /// A request the cache refused as malformed (`why`): a parse error
    /// naming `trace`:`line`, or with `skip` (skip_bad_lines) a bad line
    /// counted and the request's `blocks` and `request_tokens` taken back
    /// out of the totals.
    void refuse_bad_request(const std::string& trace, std::size_t line, const std::string& why, bool skip,
                            std::uint64_t blocks, std::uint64_t request_tokens) {
        parse_error bad(trace, line, why);
        if (!skip) throw bad;
        bad_lines.add(bad);
        accesses -= blocks;
        tokens -= request_tokens;
    }

    [[nodiscard]] double hit_ratio() const noexcept {
        return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
    }
    [[nodiscard]] double miss_ratio() const noexcept { return accesses == 0 ? 0.0 : 1.0 - hit_ratio(); }
    [[nodiscard]] double token_hit_ratio() const noexcept {
        return tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(tokens);
    }
    /// Share of the prefill (block accesses, so tokens up to each request's
    /// partial last block) that computes KV an earlier request had computed:
    /// every miss that is not the block's first appearance in the trace.
    [[nodiscard]] double re_prefill_share() const noexcept {
        return accesses == 0 ? 0.0 : static_cast<double>(reprefill_blocks) / static_cast<double>(accesses);
    }
    [[nodiscard]] double accesses_per_second() const noexcept {
        return seconds > 0 ? static_cast<double>(accesses) / seconds : 0.0;
    }
};

}  // namespace kvpolicy::sim
