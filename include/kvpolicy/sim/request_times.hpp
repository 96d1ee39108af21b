// The request engines' clock and sessions: each request's time on the
// replay's clock, the session of a request whose trace names none, and the
// next use of each block in those times (Belady's input in request modes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/records.hpp"

namespace kvpolicy::sim {

/// Sessions for traces that do not name them (Mooncake's JSONL has no
/// session field). A conversation's next turn repeats its history: its
/// prompt starts with every full block of the previous turn's prompt (the
/// last, partial block changes as the answer is appended). So a request
/// joins the session of the earlier request whose last full block is the
/// deepest of its own blocks; otherwise it opens a new session. A block is
/// registered only by the request that first computed it, so that a shared
/// system prompt (seen before, in other sessions) ties nothing together.
/// Online (earlier requests only), one hash lookup per block. On the agentic
/// trace, which names its sessions, README "kvpolicy-sim" gives how often
/// the derived session agrees with the named one.
class session_deriver {
public:
    std::uint64_t session_of(const request_record& r, std::uint32_t block_size) {
        std::uint64_t session = next_;
        for (std::size_t i = r.hash_ids.size(); i-- > 0;)
            if (auto it = owner_.find(r.hash_ids[i]); it != owner_.end()) {
                session = it->second;
                break;
            }
        if (session == next_) ++next_;
        const std::size_t full =
            std::min<std::size_t>(r.hash_ids.size(), r.input_length / std::max<std::uint32_t>(block_size, 1));
        bool fresh_last = false;
        for (std::size_t i = 0; i < r.hash_ids.size(); ++i) {
            const bool fresh = seen_.insert(r.hash_ids[i]).second;
            if (i + 1 == full) fresh_last = fresh;
        }
        if (full > 0 && fresh_last) owner_[r.hash_ids[full - 1]] = session;
        return session;
    }

private:
    std::unordered_map<std::uint64_t, std::uint64_t> owner_;  // last full block -> its request's session
    std::unordered_set<std::uint64_t> seen_;                  // every block computed so far
    std::uint64_t next_ = 0;
};

/// Each request's session, as session_deriver derives them in trace order,
/// from each request's `hash_ids` and `input_lengths`. Throws: config_error
/// for lists of different lengths or a block size of 0.
[[nodiscard]] inline std::vector<std::uint64_t> derive_sessions(const std::vector<std::vector<std::uint64_t>>& hash_ids,
                                                                const std::vector<std::uint64_t>& input_lengths,
                                                                std::uint32_t block_size) {
    if (hash_ids.size() != input_lengths.size())
        throw config_error("derive_sessions: " + std::to_string(hash_ids.size()) + " hash lists and " +
                           std::to_string(input_lengths.size()) + " input lengths; give one of each per request");
    if (block_size == 0) throw config_error("derive_sessions: block_size 0; give the trace's tokens per block");
    session_deriver sessions;
    std::vector<std::uint64_t> out;
    out.reserve(hash_ids.size());
    request_record r;
    for (std::size_t i = 0; i < hash_ids.size(); ++i) {
        r.hash_ids = hash_ids[i];
        r.input_length = input_lengths[i];
        out.push_back(sessions.session_of(r, block_size));
    }
    return out;
}

/// The "now" of each request, and each block's next use in those units
/// (for Belady): requests in memory.
struct request_times {
    std::vector<timestamp> now;                    // [request]
    std::vector<std::vector<timestamp>> next_use;  // [request][block]
    std::size_t uncached_above = 0;   ///< requests longer than this were not counted as uses (0: none skipped)
    std::size_t longest_request = 0;  ///< blocks
};

/// Monotonic request times: the trace's milliseconds in microseconds, with
/// requests in the same microsecond spread by one tick so time always moves.
inline timestamp request_time(timestamp previous, std::uint64_t timestamp_ms) noexcept {
    return std::max(previous + 1, timestamp_ms * 1000);
}

/// Each request's time on the replay's clock (request_time over the trace).
inline std::vector<timestamp> request_clock(const std::vector<request_record>& requests) {
    std::vector<timestamp> now(requests.size());
    timestamp prev = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) now[i] = prev = request_time(prev, requests[i].timestamp_ms);
    return now;
}

/// Next uses for a replay at `capacity` blocks (0: any capacity that holds
/// every request). A request longer than the capacity is served uncached
/// (`replay_requests`): it reads nothing from the cache, so it is no use of
/// its blocks, and counting it would make Belady keep blocks for a request
/// that cannot hit them (tests/sim_belady_optimal.cpp found such a case).
inline request_times compute_request_times(const std::vector<request_record>& requests, std::size_t capacity = 0) {
    request_times t;
    t.uncached_above = capacity;
    t.now = request_clock(requests);
    for (const request_record& r : requests) t.longest_request = std::max(t.longest_request, r.hash_ids.size());
    t.next_use.resize(requests.size());
    std::unordered_map<std::uint64_t, timestamp> seen;
    for (std::size_t i = requests.size(); i-- > 0;) {
        auto& nu = t.next_use[i];
        nu.resize(requests[i].hash_ids.size());
        for (std::size_t b = 0; b < nu.size(); ++b) {
            auto it = seen.find(requests[i].hash_ids[b]);
            nu[b] = it == seen.end() ? never : it->second;
        }
        if (capacity > 0 && requests[i].hash_ids.size() > capacity) continue;  // served uncached
        for (std::uint64_t h : requests[i].hash_ids) seen[h] = t.now[i];
    }
    return t;
}

/// Whether `t` gives the right next uses for a replay at `capacity`: only
/// if no request is longer than both, or they were computed for it.
[[nodiscard]] inline bool times_fit(const request_times& t, std::size_t capacity) noexcept {
    if (t.uncached_above == capacity) return true;
    const bool none_skipped = t.uncached_above == 0 || t.longest_request <= t.uncached_above;
    return none_skipped && t.longest_request <= capacity;
}

}  // namespace kvpolicy::sim
