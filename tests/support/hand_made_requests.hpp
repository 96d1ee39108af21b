// Hand-made request traces for the simulator's tests, whose hits and tier
// traffic the tests write out by hand.
#pragma once

#include <kvpolicy/sim/trace.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace kvpolicy::testing {

/// Appends a hand-made request of 16-token blocks at `ts` ms (its line: its place).
inline void add_request(std::vector<sim::request_record>& reqs, std::uint64_t ts, std::vector<std::uint64_t> ids) {
    sim::request_record r;
    r.timestamp_ms = ts;
    r.input_length = ids.size() * 16;
    r.hash_ids = std::move(ids);
    r.line = reqs.size() + 1;
    reqs.push_back(std::move(r));
}

/// Five requests for a GPU tier of 2 blocks over a CPU tier of 2, LRU on both,
/// exclusive:
///  r1 [1 2]  0 hits.                                   GPU LRU after: 2 1
///  r2 [3 4]  victims 2, 1, swapped out: 0 hits.         GPU: 4 3, CPU: 2 1
///  r3 [1 2]  two CPU hits; the GPU is full, so each is exchanged with a
///            GPU victim (4, 3): 2 CPU hits.              GPU: 2 1, CPU: 4 3
///  r4 [5]    victim 2 sheltered; the CPU is full: it drops 4: 0 hits.
///                                                       GPU: 1 5, CPU: 3 2
///  r5 [3 9]  3 is a CPU hit, exchanged with victim 1; 9 needs victim 5,
///            sheltered, the CPU dropping 2: 1 CPU hit.
inline std::vector<sim::request_record> hand_made_tiered_trace() {
    std::vector<sim::request_record> reqs;
    add_request(reqs, 0, {1, 2});
    add_request(reqs, 1, {3, 4});
    add_request(reqs, 2, {1, 2});
    add_request(reqs, 3, {5});
    add_request(reqs, 4, {3, 9});
    return reqs;
}

}  // namespace kvpolicy::testing
