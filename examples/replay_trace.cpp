// The simulator as a library: replay a request trace through the real cache
// type from code, the way kvpolicy-sim does, with policies chosen at compile
// time. Mooncake-format traces (JSONL, plain or gzip, 512-token blocks) are
// streamed; without a trace, the built-in multi-turn chat workload runs.
//
//   replay_trace [trace.jsonl[.gz]]
//   replay_trace ../shared/traces/mooncake/synthetic_trace.jsonl
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <kvpolicy/eviction/arc.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/trace.hpp>
#include <kvpolicy/sim/workload.hpp>

using namespace kvpolicy;

namespace {

// GPU tier under `Gpu`, CPU tier under LRU: one replay of the whole input.
template <eviction_policy Gpu>
sim::replay_result replay(const std::string& trace, const std::vector<sim::request_record>& built_in,
                          const sim::request_replay_config& cfg) {
    if (trace.empty()) {
        sim::vector_request_source requests(built_in);
        return sim::replay_requests<Gpu, lru>(requests, cfg, sim::replay_mode::tiered);
    }
    sim::mooncake_reader requests(trace, /*skip_bad_lines=*/false);  // streamed, not loaded
    return sim::replay_requests<Gpu, lru>(requests, cfg, sim::replay_mode::tiered);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string trace = argc > 1 ? argv[1] : "";
    try {
        sim::request_replay_config cfg{.capacity = 2000, .cpu_capacity = 4000, .block_size = 16};
        std::vector<sim::request_record> built_in;
        if (trace.empty()) {
            built_in = sim::generate_chat_workload({.sessions = 100, .block_size = cfg.block_size});
        } else {
            cfg.capacity = 1000;  // Mooncake's blocks are 512 tokens
            cfg.cpu_capacity = 2000;
            cfg.block_size = 512;
            cfg.trace_name = trace;
        }
        std::vector<sim::replay_result> results;
        results.push_back(replay<lru>(trace, built_in, cfg));
        results.push_back(replay<s3fifo>(trace, built_in, cfg));
        results.push_back(replay<arc>(trace, built_in, cfg));
        sim::write_table(std::cout, results, trace.empty() ? "built-in chat workload" : trace);
    } catch (const kvpolicy::error& e) {  // a bad path or line: file:line: reason
        std::fprintf(stderr, "replay_trace: %s\n", e.what());
        return 2;
    }
    return 0;
}
