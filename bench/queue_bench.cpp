// What hearing the waiting queue costs: ns per block access of a prefix-mode
// replay through tiered_cache, queue_aware<B> with the cache told of the next
// D requests (tiered_cache::enqueue before each start, dequeue at it: the
// queue's bookkeeping is in the time) against B with no queue, same run, same
// requests, B = lru and adaptive_kv.
//
//   queue_bench [--trace FILE.jsonl[.gz]] [--block-size T] [--capacity P%] [--depths 8,32,128]
//               [--repeat R]
//
// Default trace: the Mooncake conversation trace of ../shared/traces. Each
// cell is the best of R replays (default 3), alternating the policies so a
// noisy neighbour hits both alike.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/trace.hpp>

using namespace kvpolicy;

namespace {

template <class Policy>
sim::replay_result replay(const std::vector<sim::request_record>& requests, std::size_t capacity,
                          std::uint32_t block_size, std::size_t lookahead) {
    sim::vector_request_source source(requests);
    sim::request_replay_config cfg;
    cfg.capacity = capacity;
    cfg.block_size = block_size;
    cfg.lookahead = lookahead;
    return sim::replay_requests<Policy, lru>(source, cfg, sim::replay_mode::prefix);
}

std::vector<std::size_t> parse_list(const std::string& s) {
    std::vector<std::size_t> out;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        const std::size_t comma = s.find(',', pos);
        out.push_back(std::stoul(s.substr(pos, comma - pos)));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

template <class Base>
void run(const char* name, const std::vector<sim::request_record>& requests, std::size_t capacity,
         std::uint32_t block_size, const std::vector<std::size_t>& depths, int repeat) {
    for (std::size_t d : depths) {
        double base_s = 1e300, queue_s = 1e300;
        sim::replay_result b, q;
        for (int r = 0; r < repeat; ++r) {
            b = replay<Base>(requests, capacity, block_size, 0);
            q = replay<queue_aware<Base>>(requests, capacity, block_size, d);
            base_s = std::min(base_s, b.seconds);
            queue_s = std::min(queue_s, q.seconds);
        }
        const double n = static_cast<double>(b.accesses);
        std::printf("%-12s D=%-5zu %12.1f %14.1f %8.2fx   %.4f -> %.4f\n", name, d, 1e9 * base_s / n, 1e9 * queue_s / n,
                    queue_s / base_s, b.hit_ratio(), q.hit_ratio());
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string trace = "../shared/traces/mooncake/conversation_trace.jsonl", depths = "8,32,128";
    std::uint32_t block_size = 512;
    double percent = 5;
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--trace")
            trace = v;
        else if (a == "--block-size")
            block_size = static_cast<std::uint32_t>(std::stoul(v));
        else if (a == "--capacity")
            percent = std::stod(v);
        else if (a == "--depths")
            depths = v;
        else if (a == "--repeat")
            repeat = std::stoi(v);
        else {
            std::fprintf(stderr, "queue_bench: unknown flag %s\n", a.c_str());
            return 2;
        }
    }
    std::vector<sim::request_record> requests;
    try {
        sim::mooncake_reader reader(trace, false);
        sim::request_record r;
        while (reader.next(r)) requests.push_back(r);
    } catch (const kvpolicy::error& e) {
        std::fprintf(stderr, "queue_bench: %s (give --trace FILE)\n", e.what());
        return 2;
    }
    std::vector<std::uint64_t> ids;
    for (const auto& r : requests) ids.insert(ids.end(), r.hash_ids.begin(), r.hash_ids.end());
    std::sort(ids.begin(), ids.end());
    const auto distinct = static_cast<std::size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
    const auto capacity =
        std::max<std::size_t>(1, static_cast<std::size_t>(percent / 100.0 * static_cast<double>(distinct)));
    std::printf("queue_bench: %s, %zu requests, capacity %zu blocks (%.3g%% of %zu), best of %d\n", trace.c_str(),
                requests.size(), capacity, percent, distinct, repeat);
    std::printf("%-12s %-7s %12s %14s %9s   %s\n", "base B", "queue", "B ns/block", "queue_aware ns", "ratio",
                "hit ratio B -> queue_aware");
    const std::vector<std::size_t> d = parse_list(depths);
    run<lru>("lru", requests, capacity, block_size, d, repeat);
    run<adaptive_kv>("adaptive_kv", requests, capacity, block_size, d, repeat);
    return 0;
}
