// Every run of a comparison: one (policy, capacity) pair in the setup's
// mode, all pairs on a pool of threads, --match-lru's capacity searches,
// and the comparison as kvpolicy-sim and kvpolicy.simulate() run it.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/sim/capacity.hpp>
#include <kvpolicy/sim/report.hpp>

#include "runs.hpp"

namespace kvpolicy::sim {

namespace {

/// Runs `body(0 .. n-1)` on `threads` threads; the first exception stops
/// the rest and is rethrown. A progress bar when stderr is a terminal.
void run_parallel(std::size_t n, unsigned threads, const char* what, const std::function<void(std::size_t)>& body) {
    std::atomic<std::size_t> next{0}, done{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const bool progress = isatty(STDERR_FILENO) != 0;
    auto worker = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < n;) {
            try {
                body(i);
            } catch (...) {
                std::scoped_lock lock(failure_mutex);
                if (!failure) failure = std::current_exception();
                next = n;
            }
            const std::size_t d = ++done;
            if (progress) {
                std::scoped_lock lock(failure_mutex);
                const std::size_t width = 30, filled = width * d / n;
                std::fprintf(stderr, "\r[%s%s] %zu/%zu %s", std::string(filled, '#').c_str(),
                             std::string(width - filled, '.').c_str(), d, n, what);
                if (d == n) std::fprintf(stderr, "\n");
            }
        }
    };
    const unsigned k = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(std::max<std::size_t>(n, 1))));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < k; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);
}

}  // namespace

replay_result run_one(const run_setup& s, const policy_choice& policy, std::size_t capacity, const run_inputs& in) {
    replay_result r = s.options.mode == replay_mode::flat ? detail::run_flat(s, policy, capacity, in)
                                                          : detail::run_requests(s, policy, capacity, in);
    r.built_for = std::string(policy.built_for);
    return r;
}

std::vector<replay_result> run_all(const run_setup& s, const run_inputs& in) {
    const std::size_t n = s.policies.size();
    std::vector<replay_result> results(s.capacities.size() * n);
    run_parallel(results.size(), s.options.threads, "runs",
                 [&](std::size_t i) { results[i] = run_one(s, s.policies[i % n], s.capacities[i / n], in); });
    return results;
}

void match_lru(const run_setup& s, const run_inputs& in, std::size_t distinct, std::vector<replay_result>& results) {
    const std::size_t n = s.policies.size();
    const auto lru_at = std::ranges::find(s.policies, index_of_type<eviction_policies, lru>, &policy_choice::index);
    if (lru_at == s.policies.end() || results.size() != s.capacities.size() * n)
        throw usage_error("match_lru: give the results of run_all for a setup that runs lru (plan_runs adds it for "
                          "match_lru), not " + std::to_string(results.size()) + " results");
    const std::size_t lru_column = static_cast<std::size_t>(lru_at - s.policies.begin());
    run_parallel(results.size(), s.options.threads, "capacity searches", [&](std::size_t i) {
        replay_result& r = results[i];
        const double target = results[i - i % n + lru_column].hit_ratio();
        const std::size_t hi = std::max(distinct, r.capacity);
        const capacity_search found = smallest_capacity_reaching(
            target, r.capacity, hi, std::max<std::size_t>(1, r.capacity / 100), [&](std::size_t c) {
                return c == r.capacity ? r.hit_ratio() : run_one(s, s.policies[i % n], c, in).hit_ratio();
            });
        r.lru_match_capacity = found.capacity;
        r.lru_match_unreachable = found.capacity == 0;
    });
}

comparison compare(run_options o) {
    comparison c;
    c.setup = prepare(std::move(o));
    run_setup& s = c.setup;
    const run_inputs in = load_inputs(s);
    const bool relative = std::ranges::any_of(s.options.capacities, &capacity_spec::relative);
    c.distinct_blocks = relative || s.options.match_lru ? count_distinct_blocks(s, in) : 0;
    for (const capacity_spec& spec : s.options.capacities) {
        const std::size_t blocks = spec.resolve(c.distinct_blocks);
        if (std::ranges::find(s.capacities, blocks) == s.capacities.end()) s.capacities.push_back(blocks);
    }
    c.results = run_all(s, in);
    fill_gap_closed(c.results);
    if (s.options.match_lru) match_lru(s, in, c.distinct_blocks, c.results);
    keep_shown(c.results, s.plan);
    return c;
}

}  // namespace kvpolicy::sim
