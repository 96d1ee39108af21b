// Seed 000's retention value judged on the figure it claims to minimise: the
// time until a request's KV is ready (kvpolicy/sim/critical_path.hpp), in a
// tiered replay (GPU tier under the policy, CPU tier LRU) as kvpolicy-sim
// --mode tiered runs it, one correction at a time:
//
//   lru                     the baseline
//   seed 000                seed000_retention_value, each chunk priced alone:
//                           back layers, leading chunks and short contexts first
//   seed 000, exact scan    the same scoring every candidate at every pop
//                           (scan_fraction 0) instead of 1% per scan
//   seed + dependents       the same weights, a chunk priced with every later
//                           chunk of its session (what a prefix cache loses)
//   uniform, chunk alone    no layer or position weight, each chunk alone
//   retention_value, seed's costs   the default rule (uniform weights, chunk
//                           and dependents) with pensieve_linear's default
//                           parameters, seed 000's illustrative ones
//   retention_value         the same priced with the replay's cost model, as
//                           kvpolicy-sim runs it (calibrated to the GPU)
//   MIN, both tiers         Belady on the GPU and the CPU tier (the offline
//                           reference of the gap columns)
//
//   retention_study [--trace FILE] [--block-size N] [--layers L]
//                   --capacity C1,C2,... --cpu-capacity N
//
// Without --trace: kvpolicy-sim's built-in chat workload (seed 1). The cost
// of a block is kvpolicy-sim's default (Llama-3-8B on an H100), copies at
// 25 GB/s. Prints, per capacity, each row's hit ratio, total / mean / p99
// ready time and its change against LRU's total.
#include <kvpolicy/eviction/belady.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/retention_value.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/run_options.hpp>
#include <kvpolicy/sim/trace.hpp>
#include <kvpolicy/sim/workload.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace kvpolicy;

namespace {

// The replay's cost model, which every row's policy is priced with but the
// one that keeps the seed's illustrative costs.
pensieve_linear g_replay_cost;

// A policy constructed with a fixed configuration, whatever the replay gives.
template <class Base, auto Configure>
struct configured : Base {
    using config_type = typename Base::config_type;
    explicit configured(std::size_t capacity, const config_type& = {}) : Base(capacity, Configure()) {}
};

constexpr auto seed_exact_scan = [] {
    return seed000_retention_value::config_type{.cost = g_replay_cost, .scan_fraction = 0};
};
constexpr auto seed_with_dependents = [] {
    return seed000_retention_value::config_type{.cost = g_replay_cost, .loss = retention_loss::chunk_and_dependents};
};
constexpr auto chunk_alone = [] {
    return retention_value<>::config_type{.cost = g_replay_cost, .loss = retention_loss::chunk};
};
constexpr auto seed_costs = [] { return retention_value<>::config_type{}; };

struct row {
    std::string name;
    sim::replay_result r;
};

template <class Gpu, class Cpu>
row replay(const char* name, const std::vector<sim::request_record>& reqs, const sim::request_replay_config& cfg,
           const sim::request_times* times) {
    sim::vector_request_source src(reqs);
    return {name, sim::replay_requests<Gpu, Cpu>(src, cfg, sim::replay_mode::tiered, times)};
}

std::vector<std::size_t> parse_list(const std::string& s) {
    std::vector<std::size_t> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ',')) out.push_back(std::stoull(item));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string trace;
    std::uint32_t block_size = 16, layers = 1;
    std::vector<std::size_t> capacities;
    std::size_t cpu_capacity = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        const std::string value = argv[i + 1];
        if (flag == "--trace")
            trace = value;
        else if (flag == "--block-size")
            block_size = static_cast<std::uint32_t>(std::stoul(value));
        else if (flag == "--layers")
            layers = static_cast<std::uint32_t>(std::stoul(value));
        else if (flag == "--capacity")
            capacities = parse_list(value);
        else if (flag == "--cpu-capacity")
            cpu_capacity = std::stoull(value);
        else {
            std::fprintf(stderr, "retention_study: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (capacities.empty() || cpu_capacity == 0 || block_size == 0 || layers == 0) {
        std::fprintf(stderr,
                     "usage: retention_study [--trace FILE] [--block-size N] [--layers L] "
                     "--capacity C1,C2,... --cpu-capacity N\n");
        return 2;
    }
    std::vector<sim::request_record> reqs;
    if (trace.empty()) {
        sim::chat_workload_config w;
        w.block_size = block_size;
        reqs = sim::generate_chat_workload(w);
    } else {
        sim::mooncake_reader reader(trace, false);
        sim::request_record r;
        while (reader.next(r)) reqs.push_back(r);
    }
    // kvpolicy-sim's default prefill cost.
    g_replay_cost = sim::prefill_cost_options{}.model(block_size);
    std::printf("retention_study: %s, %zu requests, block %u tokens, %u layer(s), CPU tier %zu blocks (LRU)\n",
                trace.empty() ? "built-in chat workload" : trace.c_str(), reqs.size(), block_size, layers,
                cpu_capacity);
    for (const std::size_t capacity : capacities) {
        const sim::request_replay_config cfg{.capacity = capacity,
                                             .cpu_capacity = cpu_capacity,
                                             .block_size = block_size,
                                             .num_layers = layers,
                                             .cost = g_replay_cost,
                                             .trace_name = trace.empty() ? "built-in" : trace};
        const sim::request_times times = sim::compute_request_times(reqs, capacity);
        std::vector<row> rows;
        rows.push_back(replay<lru, lru>("lru", reqs, cfg, nullptr));
        rows.push_back(replay<seed000_retention_value, lru>("seed 000", reqs, cfg, nullptr));
        rows.push_back(replay<configured<seed000_retention_value, seed_exact_scan>, lru>("seed 000, exact scan", reqs,
                                                                                         cfg, nullptr));
        rows.push_back(replay<configured<seed000_retention_value, seed_with_dependents>, lru>("seed + dependents", reqs,
                                                                                              cfg, nullptr));
        rows.push_back(
            replay<configured<retention_value<>, chunk_alone>, lru>("uniform, chunk alone", reqs, cfg, nullptr));
        rows.push_back(replay<configured<retention_value<>, seed_costs>, lru>("retention_value, seed's costs", reqs,
                                                                              cfg, nullptr));
        rows.push_back(replay<retention_value<>, lru>("retention_value", reqs, cfg, nullptr));
        rows.push_back(replay<belady, belady>("MIN, both tiers", reqs, cfg, &times));
        const double lru_total = rows.front().r.ready_s_total;
        std::printf("\nGPU %zu blocks\n  %-30s %9s %14s %13s %12s %9s\n", capacity, "policy", "hit ratio",
                    "ready total s", "mean ms", "p99 ms", "vs lru");
        for (const row& x : rows)
            std::printf("  %-30s %9.4f %14.3f %13.3f %12.2f %+8.2f%%\n", x.name.c_str(), x.r.hit_ratio(),
                        x.r.ready_s_total, 1e3 * x.r.ready_s_mean, 1e3 * x.r.ready_s_p99,
                        100 * (x.r.ready_s_total / lru_total - 1));
    }
    return 0;
}
