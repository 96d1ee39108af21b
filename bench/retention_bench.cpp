// Victim selection for retention_value on the host: score every evictable
// item at `now` and select the lowest 1%, at 10^4, 10^6 and 10^7 items.
//
// Part 2, one victim per pop (as a flat replay or a per-block engine asks):
// ns per victim at 10^6 items in steady state (pop one, insert a new item in
// its slot, time moves on), for the exact rule (`scan_fraction = 0`: every
// pop scores every candidate) and the default scan of 1% with its reserve,
// in the same run; and lexicographic_checkerboard's heap for comparison.
//
// Reports ns per item for `pop_victims` (one scoring pass plus the selector)
// and, as the yardstick, for a plain std::sort of the same scores in the same
// run; their ratio is the figure to compare across machines. Victims are put
// back (untimed) after each repetition so every repetition sees n items.
//
//   retention_bench [--reps N] [--json FILE]
#include <kvpolicy/core/item_key.hpp>
#include <kvpolicy/eviction/checkerboard.hpp>
#include <kvpolicy/eviction/retention_value.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <ctime>
#include <vector>

using namespace kvpolicy;

namespace {

// Seed 000's layout: 40 layers, sessions of 100 chunks of 32 tokens, last
// uses spread over 10^6 ticks; fields are a function of the id so victims
// can be put back without storing contexts.
access_context context_of(std::uint32_t id) {
    access_context c;
    c.num_layers = 40;
    c.session_total_chunks = 100;
    c.layer = layer_index{id % 40};
    c.chunk = chunk_index{(id / 40) % 100};
    c.session = session_id{id / 4000};
    c.context_length = 32u * c.chunk.value;
    c.now = mix64(id) % 1'000'000;
    return c;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct row {
    std::size_t n, k;
    double policy_ns, sort_ns;
};

row measure(std::size_t n, int reps) {
    using clock = std::chrono::steady_clock;
    const std::size_t k = std::max<std::size_t>(1, n / 100);
    const timestamp now = 2'000'000;
    retention_value<> policy(n);
    for (std::uint32_t id = 0; id < n; ++id) policy.on_insert(item_id{id}, context_of(id));

    std::vector<double> scores(n), sorted(n);
    for (std::uint32_t id = 0; id < n; ++id) scores[id] = *policy.retention(item_id{id}, now);

    std::vector<item_id> out(k);
    std::vector<double> policy_t, sort_t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = clock::now();
        const std::size_t got = policy.pop_victims(out, now);
        const auto t1 = clock::now();
        if (got != k) std::abort();
        for (std::size_t i = 0; i < got; ++i) policy.on_insert(out[i], context_of(out[i].value));

        std::copy(scores.begin(), scores.end(), sorted.begin());
        const auto t2 = clock::now();
        std::sort(sorted.begin(), sorted.end());
        const auto t3 = clock::now();
        if (sorted.front() > sorted.back()) std::abort();  // keeps the sort observable
        policy_t.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
        sort_t.push_back(std::chrono::duration<double, std::nano>(t3 - t2).count());
    }
    return {n, k, median(policy_t) / double(n), median(sort_t) / double(n)};
}

/// This thread's CPU time (the machine is shared: wall-clock time counts
/// other programs' slices).
double thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// Steady state, one victim per pop: thread CPU ns per (pop + insert of a
/// new item).
template <class Policy>
double per_victim_ns(Policy& policy, std::size_t n, std::size_t pops) {
    for (std::uint32_t id = 0; id < n; ++id) policy.on_insert(item_id{id}, context_of(id));
    timestamp now = 2'000'000;
    std::uint64_t next_key = n;
    // warm-up: one scan's worth
    auto step = [&] {
        const auto v = policy.pop_victim(now);
        if (!v) std::abort();
        access_context c = context_of(static_cast<std::uint32_t>(next_key++));
        c.now = now;
        policy.on_insert(*v, c);
        ++now;
    };
    for (std::size_t i = 0; i < std::min<std::size_t>(pops / 10 + 1, 1000); ++i) step();
    const double t0 = thread_cpu_ns();
    for (std::size_t i = 0; i < pops; ++i) step();
    return (thread_cpu_ns() - t0) / double(pops);
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 0;
    const char* json = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else {
            std::fprintf(stderr, "usage: %s [--reps N] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    const std::size_t sizes[] = {10'000, 1'000'000, 10'000'000};
    std::vector<row> rows;
    std::printf("retention_value<> pop_victims(lowest 1%%) vs std::sort of the same scores (medians)\n");
    std::printf("%12s %10s %18s %16s %10s\n", "items", "victims", "pop_victims ns/it", "std::sort ns/it", "ratio");
    for (std::size_t n : sizes) {
        const int r = reps > 0 ? reps : (n <= 10'000 ? 101 : n <= 1'000'000 ? 11 : 5);
        const row x = measure(n, r);
        rows.push_back(x);
        std::printf("%12zu %10zu %18.2f %16.2f %10.3f\n", x.n, x.k, x.policy_ns, x.sort_ns, x.policy_ns / x.sort_ns);
        std::fflush(stdout);
    }
    constexpr std::size_t million = 1'000'000;
    retention_value<> exact(million, {.scan_fraction = 0});
    const double exact_ns = per_victim_ns(exact, million, reps > 0 ? std::size_t(reps) : 30);
    retention_value<> batched(million);  // default scan_fraction 0.01
    const double batched_ns = per_victim_ns(batched, million, 300'000);
    lexicographic_checkerboard board(million);
    const double board_ns = per_victim_ns(board, million, 300'000);
    std::printf("\none victim per pop at 10^6 items, steady state (thread CPU ns per pop + insert)\n");
    std::printf("  retention_value, exact (scan_fraction 0): %12.0f\n", exact_ns);
    std::printf("  retention_value, scan_fraction 0.01:      %12.1f  (%.0fx faster)\n", batched_ns,
                exact_ns / batched_ns);
    std::printf("  checkerboard (indexed heap):               %12.1f\n", board_ns);
    if (json != nullptr) {
        std::FILE* f = std::fopen(json, "w");
        if (f == nullptr) {
            std::fprintf(stderr, "cannot write %s\n", json);
            return 1;
        }
        std::fprintf(f, "{\"selection\": [");
        for (std::size_t i = 0; i < rows.size(); ++i)
            std::fprintf(f,
                         "%s{\"items\": %zu, \"victims\": %zu, \"pop_victims_ns_per_item\": %.4f, "
                         "\"sort_ns_per_item\": %.4f, \"ratio\": %.4f}",
                         i ? ", " : "", rows[i].n, rows[i].k, rows[i].policy_ns, rows[i].sort_ns,
                         rows[i].policy_ns / rows[i].sort_ns);
        std::fprintf(f,
                     "], \"per_victim_ns_exact\": %.1f, \"per_victim_ns_scan_1pct\": %.2f, "
                     "\"per_victim_ns_checkerboard\": %.2f}\n",
                     exact_ns, batched_ns, board_ns);
        std::fclose(f);
    }
    return 0;
}
