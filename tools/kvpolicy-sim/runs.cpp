// What every kvpolicy-sim run shares: reading the inputs once, running
// every (policy, capacity) pair on a pool of threads, and the capacity
// searches of --match-lru. kvpolicy-sim's main() and the Python package's
// kvpolicy.simulate() both call these, so the two replay alike.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/sim/capacity.hpp>

#include "sim_runs.hpp"

namespace kvpolicy::sim_tool {

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


void set_return_hints(options& o, const std::string& spec) {
    double sigma = 0.0;
    bool ok = spec == "oracle" || spec == "ends" || (spec.starts_with("file:") && spec.size() > 5);
    if (!ok && spec.starts_with("oracle:")) {
        const std::string number = spec.substr(7);
        char* end = nullptr;
        sigma = std::strtod(number.c_str(), &end);
        ok = !number.empty() && end == number.c_str() + number.size() && sigma >= 0.0 && std::isfinite(sigma);
    }
    if (!ok)
        throw config_error("--return-hints " + spec +
                           ": give ends (each session's last request says it will not return), oracle "
                           "(each session's true next request), oracle:SIGMA with SIGMA a number >= 0 "
                           "(its gap off by e^(SIGMA x N(0,1)), e.g. oracle:1.2) or file:PATH (one hint per "
                           "request: milliseconds until its session's next request, never, or empty)");
    if (o.mode == sim::replay_mode::flat || o.instances > 1 || o.remote_capacity > 0)
        throw config_error("--return-hints applies to prefix and tiered modes with one instance "
                           "(releases are per request there)");
    o.return_hints = spec;
    o.return_hint_error = sigma;
    o.hints = spec == "ends"                ? hint_source::ends
              : spec.starts_with("file:") ? hint_source::file
                                          : hint_source::oracle;
    if (o.hints == hint_source::file) o.return_hint_file = spec.substr(5);
}

shared_inputs load_inputs(const options& o) {
    shared_inputs in;
    // Belady and reuse_oracle_lru read each access's next use: the trace is
    // read into memory once for them.
    const bool needs_future = std::ranges::any_of(o.policies, [](const std::string& name) {
        return visit_by_name<eviction_policies>(name, []<class P>() { return uses_future<P>; }, "eviction policy");
    });
    if (o.trace.empty()) {
        sim::chat_workload_config w = o.workload;
        w.block_size = o.block_size;
        w.seed = o.seed;
        in.requests = std::make_shared<const std::vector<sim::request_record>>(sim::generate_chat_workload(w));
    } else if ((needs_future || o.hints != hint_source::none) && o.mode != sim::replay_mode::flat) {
        if (o.format == trace_format::csv)
            throw config_error("--mode " + std::string(sim::to_string(o.mode)) +
                               " needs requests (mooncake JSONL or the built-in workload); a CSV holds only block accesses");
        auto reqs = std::make_shared<std::vector<sim::request_record>>();
        sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
        sim::request_record r;
        while (reader.next(r)) reqs->push_back(r);
        in.requests = std::move(reqs);
    }
    if (o.hints == hint_source::ends)
        in.returns = std::make_shared<const std::vector<timestamp>>(sim::compute_session_ends(*in.requests, o.block_size));
    else if (o.hints == hint_source::oracle)
        in.returns = std::make_shared<const std::vector<timestamp>>(
                sim::compute_expected_returns(*in.requests, o.block_size, o.return_hint_error, o.seed));
    else if (o.hints == hint_source::file) {
        std::ifstream f(o.return_hint_file);
        if (!f)
            throw config_error("--return-hints file:" + o.return_hint_file + ": cannot open it; check the path");
        in.returns = std::make_shared<const std::vector<timestamp>>(
                sim::parse_expected_returns(f, o.return_hint_file, *in.requests));
    }
    if (needs_future) {
        if (o.mode == sim::replay_mode::flat) {
            auto oracle = std::make_shared<sim::oracle_accesses>();
            sim::access_record a;
            auto add = [&](const sim::access_record& x) {
                oracle->keys.push_back(x.obj_id);
                oracle->sizes.push_back(static_cast<std::uint32_t>(std::max<std::uint64_t>(x.obj_size, 1)));
            };
            if (in.requests) {
                sim::vector_request_source rs(*in.requests);
                sim::flattened_requests<sim::vector_request_source> src(rs);
                while (src.next(a)) add(a);
            } else if (o.format == trace_format::csv) {
                sim::csv_reader src(o.trace, o.skip_bad_lines);
                while (src.next(a)) add(a);
            } else {
                sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
                sim::flattened_requests<sim::mooncake_reader> src(reader);
                while (src.next(a)) add(a);
            }
            oracle->compute_next_use();
            in.oracle = std::move(oracle);
        } else {
            in.times = std::make_shared<const sim::request_times>(sim::compute_request_times(*in.requests));
        }
    }
    return in;
}

/// The trace's distinct blocks (what `--capacity P%` is a share of).
std::size_t count_distinct_blocks(const options& o, const shared_inputs& in) {
    std::unordered_set<std::uint64_t> seen;
    if (in.requests) {
        for (const sim::request_record& r : *in.requests) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    } else if (in.oracle) {
        seen.insert(in.oracle->keys.begin(), in.oracle->keys.end());
    } else if (o.format == trace_format::csv) {
        sim::csv_reader src(o.trace, o.skip_bad_lines);
        for (sim::access_record a; src.next(a);) seen.insert(a.obj_id);
    } else {
        sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
        for (sim::request_record r; reader.next(r);) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    }
    return seen.size();
}

sim::replay_result run_one(const options& o, const std::string& policy, std::size_t capacity, const shared_inputs& in) {
    return o.mode == sim::replay_mode::flat ? run_flat(o, policy, capacity, in) : run_requests(o, policy, capacity, in);
}

std::vector<sim::replay_result> run_all(const options& o, const shared_inputs& in) {
    struct job {
        std::string policy;
        std::size_t capacity;
    };
    std::vector<job> jobs;
    for (std::size_t c : o.capacities)
        for (const std::string& p : o.policies) jobs.push_back({p, c});
    std::vector<sim::replay_result> results(jobs.size());
    run_parallel(jobs.size(), o.threads, "runs",
                 [&](std::size_t i) { results[i] = run_one(o, jobs[i].policy, jobs[i].capacity, in); });
    return results;
}

/// `--match-lru`: per result, the least capacity at which its policy
/// reaches LRU's hit ratio at the result's capacity (bisection to 1% of
/// that capacity, searched up to the trace's distinct blocks).
void match_lru(const options& o, const shared_inputs& in, std::size_t distinct, std::vector<sim::replay_result>& results) {
    std::map<std::size_t, double> lru_at;
    for (const sim::replay_result& r : results)
        if (r.policy == "lru") lru_at[r.capacity] = r.hit_ratio();
    run_parallel(results.size(), o.threads, "capacity searches", [&](std::size_t i) {
        sim::replay_result& r = results[i];
        const double target = lru_at.at(r.capacity);
        const std::size_t hi = std::max(distinct, r.capacity);
        const sim::capacity_search s = sim::smallest_capacity_reaching(
            target, r.capacity, hi, std::max<std::size_t>(1, r.capacity / 100),
            [&](std::size_t c) { return c == r.capacity ? r.hit_ratio() : run_one(o, r.policy, c, in).hit_ratio(); });
        r.lru_match_capacity = s.capacity;
        r.lru_match_unreachable = s.capacity == 0;
    });
}

}  // namespace kvpolicy::sim_tool
