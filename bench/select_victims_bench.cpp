// select_victims latency, seed 002's benchmark scenario: 1000 candidate
// sequences of 10 blocks each, 100 blocks required (so about 10 victims),
// for every batch rule. Baseline in the same run: seed 002's reference
// algorithm (filter the pinned, sort everything by the rule's key, take
// greedily) on the same inputs. Each call is timed on its own; the table
// shows the median and the 90th percentile over many calls that cycle
// through several candidate lists.
//
//   select_victims_bench [--runs N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <kvpolicy/eviction/select_victims.hpp>

using namespace kvpolicy;

namespace {

constexpr std::size_t num_candidates = 1000;
constexpr std::size_t blocks_each = 10;
constexpr std::size_t required_blocks = 100;
constexpr std::size_t num_lists = 16;

struct workload {
    std::vector<block_id> blocks;
    std::vector<std::vector<eviction_candidate>> lists;
};

workload make_workload(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    workload w;
    for (std::uint32_t b = 0; b < num_candidates * blocks_each; ++b) w.blocks.push_back(block_id{b});
    for (std::size_t l = 0; l < num_lists; ++l) {
        std::vector<eviction_candidate> cs(num_candidates);
        for (std::size_t i = 0; i < num_candidates; ++i) {
            auto& c = cs[i];
            c.sequence_id = i;
            c.block_ids = std::span<const block_id>(w.blocks).subspan(i * blocks_each, blocks_each);
            c.last_access_time = 1'000'000 + rng() % 1'000'000;
            c.access_count = 1 + rng() % 10;
            c.priority = static_cast<std::int32_t>(rng() % 3);
            c.pinned = rng() % 10 == 0;
            if (rng() % 3 == 0) c.estimated_lifetime = static_cast<double>(rng() % 600);
            if (rng() % 2 == 0) {
                c.max_length = 512 + rng() % 3584;
                c.sequence_length = rng() % c.max_length;
            }
        }
        std::shuffle(cs.begin(), cs.end(), rng);
        w.lists.push_back(std::move(cs));
    }
    return w;
}

// Seed 002's algorithm: sort every unpinned candidate by the rule's key.
template <class Rule>
std::size_t sort_everything(const std::vector<eviction_candidate>& candidates, std::size_t required,
                            std::vector<std::uint64_t>& out) {
    std::vector<const eviction_candidate*> evictable;
    for (const auto& c : candidates)
        if (!c.pinned) evictable.push_back(&c);
    std::sort(evictable.begin(), evictable.end(), [](const eviction_candidate* a, const eviction_candidate* b) {
        const auto ra = batch_rule<Rule>::rank(*a);
        const auto rb = batch_rule<Rule>::rank(*b);
        if (ra < rb) return true;
        if (rb < ra) return false;
        return a->sequence_id < b->sequence_id;
    });
    out.clear();
    std::size_t freed = 0;
    for (const auto* c : evictable) {
        if (freed >= required) break;
        out.push_back(c->sequence_id);
        freed += c->block_ids.size();
    }
    return freed;
}

struct summary {
    double median_us;
    double p90_us;
};

summary summarize(std::vector<double>& ns) {
    std::sort(ns.begin(), ns.end());
    return {ns[ns.size() / 2] / 1000.0, ns[ns.size() * 9 / 10] / 1000.0};
}

template <class F>
summary time_calls(std::size_t runs, F&& call) {
    for (std::size_t i = 0; i < 200; ++i) call(i);  // warm caches and scratch space
    std::vector<double> ns;
    ns.reserve(runs);
    for (std::size_t i = 0; i < runs; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        call(i);
        const auto t1 = std::chrono::steady_clock::now();
        ns.push_back(static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    return summarize(ns);
}

volatile std::size_t sink = 0;

struct row {
    std::string_view rule;
    summary batch;
    summary baseline;
    std::size_t victims;
};

template <class Rule>
row measure(const workload& w, std::size_t runs) {
    victim_batch_selector<Rule> selector;
    std::size_t victims = 0;
    const summary batch = time_calls(runs, [&](std::size_t i) {
        const auto r = selector.select_victims(w.lists[i % num_lists], required_blocks);
        victims = r.evicted.size();
        sink = sink + r.freed_blocks;
    });
    std::vector<std::uint64_t> out;
    const summary baseline = time_calls(runs, [&](std::size_t i) {
        sink = sink + sort_everything<Rule>(w.lists[i % num_lists], required_blocks, out);
        // The two must agree, or the comparison means nothing.
        if (i < num_lists) {
            const auto r = selector.select_victims(w.lists[i % num_lists], required_blocks);
            if (r.evicted != out) {
                std::fprintf(stderr, "select_victims_bench: %s disagrees with the baseline\n", Rule::name.data());
                std::exit(1);
            }
        }
    });
    return {Rule::name, batch, baseline, victims};
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t runs = 20'000;
    const char* json = nullptr;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--runs" && i + 1 < argc)
            runs = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--json" && i + 1 < argc)
            json = argv[++i];
        else {
            std::fprintf(stderr, "usage: %s [--runs N] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (runs == 0) runs = 1;
    const workload w = make_workload(2024);
    const row rows[] = {measure<lru>(w, runs), measure<lfu>(w, runs), measure<fifo>(w, runs),
                        measure<qos_aware>(w, runs), measure<predictive>(w, runs)};

    std::printf("select_victims: %zu candidates x %zu blocks (10%% pinned), %zu blocks required, %zu calls per rule\n",
                num_candidates, blocks_each, required_blocks, runs);
    std::printf("%-11s %8s %14s %14s %18s %18s %9s\n", "rule", "victims", "median (us)", "p90 (us)",
                "sort-all med (us)", "sort-all p90 (us)", "speedup");
    for (const row& r : rows)
        std::printf("%-11.*s %8zu %14.2f %14.2f %18.2f %18.2f %8.1fx\n", static_cast<int>(r.rule.size()), r.rule.data(),
                    r.victims, r.batch.median_us, r.batch.p90_us, r.baseline.median_us, r.baseline.p90_us,
                    r.baseline.median_us / r.batch.median_us);
    if (json != nullptr) {
        std::FILE* f = std::fopen(json, "w");
        if (f == nullptr) {
            std::fprintf(stderr, "select_victims_bench: cannot write %s\n", json);
            return 1;
        }
        std::fprintf(f, "{\"candidates\": %zu, \"required_blocks\": %zu, \"runs\": %zu, \"rules\": [", num_candidates,
                     required_blocks, runs);
        for (std::size_t i = 0; i < std::size(rows); ++i)
            std::fprintf(f,
                         "%s{\"rule\": \"%.*s\", \"median_us\": %.3f, \"p90_us\": %.3f, \"sort_all_median_us\": %.3f}",
                         i ? ", " : "", static_cast<int>(rows[i].rule.size()), rows[i].rule.data(),
                         rows[i].batch.median_us, rows[i].batch.p90_us, rows[i].baseline.median_us);
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }
    return 0;
}
