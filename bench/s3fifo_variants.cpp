// S3-FIFO's two rules for the cold start on KV traces (a measurement of hit
// ratios, not a timing): the paper's (new items always enter S; kvpolicy's
// default) and libCacheSim's newer `fill_main_before_first_eviction` (M
// fills once S is full, until the first eviction), against LRU in the same
// run, in prefix mode (through tiered_cache, as kvpolicy-sim) and flat mode,
// at 1%, 5% and 10% of the trace's distinct blocks and any extra capacities.
//
//   s3fifo_variants TRACE.jsonl[.gz] BLOCK_SIZE [CAPACITY...]
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/s3fifo.hpp>
#include <kvpolicy/sim/replay.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

using namespace kvpolicy;

namespace {

template <bool FillMain>
struct s3fifo_rule : s3fifo {
    explicit s3fifo_rule(std::size_t capacity, const config_type& = {})
            : s3fifo(capacity, {.fill_main_before_first_eviction = FillMain}) {}
};

template <class Policy>
double hit_ratio(const std::vector<sim::request_record>& reqs, std::size_t capacity, std::uint32_t block_size,
                 bool flat) {
    sim::vector_request_source src(reqs);
    if (flat) {
        sim::flattened_requests<sim::vector_request_source> blocks(src);
        return sim::replay_flat<Policy>(blocks, capacity, [](std::size_t) { return never; }).hit_ratio();
    }
    sim::request_replay_config cfg;
    cfg.capacity = capacity;
    cfg.block_size = block_size;
    return sim::replay_requests<Policy, lru>(src, cfg, sim::replay_mode::prefix).hit_ratio();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TRACE.jsonl[.gz] BLOCK_SIZE [CAPACITY...]\n", argv[0]);
        return 2;
    }
    const std::string path = argv[1];
    const auto block_size = static_cast<std::uint32_t>(std::atoi(argv[2]));
    std::vector<sim::request_record> reqs;
    try {
        sim::mooncake_reader reader(path, false);
        for (sim::request_record r; reader.next(r);) reqs.push_back(r);
    } catch (const kvpolicy::error& e) {
        std::fprintf(stderr, "s3fifo_variants: %s\n", e.what());
        return 2;
    }
    std::unordered_set<std::uint64_t> distinct;
    for (const auto& r : reqs) distinct.insert(r.hash_ids.begin(), r.hash_ids.end());
    std::vector<std::size_t> capacities;
    for (const std::size_t per_mille : {10u, 50u, 100u}) capacities.push_back(distinct.size() * per_mille / 1000);
    for (int i = 3; i < argc; ++i) capacities.push_back(std::strtoull(argv[i], nullptr, 10));
    const std::string name = path.substr(path.find_last_of('/') + 1);
    std::printf("%-26s %9s %7s %8s %10s %10s\n", "trace", "capacity", "mode", "lru", "paper", "fill-main");
    for (const std::size_t c : capacities)
        for (const bool flat : {false, true}) {
            std::printf("%-26s %9zu %7s %8.4f %10.4f %10.4f\n", name.c_str(), c, flat ? "flat" : "prefix",
                        hit_ratio<lru>(reqs, c, block_size, flat),
                        hit_ratio<s3fifo_rule<false>>(reqs, c, block_size, flat),
                        hit_ratio<s3fifo_rule<true>>(reqs, c, block_size, flat));
            std::fflush(stdout);
        }
    return 0;
}
