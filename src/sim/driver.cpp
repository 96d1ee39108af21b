// The simulator's driver (kvpolicy/sim/driver.hpp) but for the runs'
// dispatch over the policies' types (run_flat.cpp, run_requests.cpp and its
// generated parts): one translation unit, so that its headers (the
// registry, the readers, the reports) are parsed once.
#include <kvpolicy/sim/driver.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/sim/capacity.hpp>
#include <kvpolicy/sim/policy_choice.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/return_hints.hpp>
#include <kvpolicy/sim/trace.hpp>
#include <kvpolicy/sim/workload.hpp>

#include "runs.hpp"

namespace kvpolicy::sim {

// --- Policy names, each resolved once (policy_choice.hpp) -----------------

namespace {

/// Every registered policy as a choice, in registry order.
constexpr auto choices = []<class... Ps>(type_list<Ps...>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<policy_choice, sizeof...(Ps)>{policy_choice{
            .index = I, .name = Ps::name, .built_for = built_for<Ps>(), .uses_future = uses_future<Ps>}...};
    }
    (std::index_sequence_for<Ps...>{});
}(eviction_policies{});

}  // namespace

policy_choice choose_policy(std::string_view name) {
    const std::size_t index = index_of_name<eviction_policies>(name);
    if (index == eviction_policies::size)
        throw unknown_name_error("unknown eviction policy '" + std::string(name) +
                                 "'; accepted: " + accepted_policy_names());
    return choices[index];
}

std::vector<std::string> expand_all(const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& n : names) {
        if (n != "all") {
            out.push_back(n);
            continue;
        }
        for (std::string_view each : names_of<eviction_policies>()) out.emplace_back(each);
    }
    return out;
}

std::string accepted_policy_names() { return "all, " + joined_names<eviction_policies>(); }

// --- prepare: the options checked in the order kvpolicy-sim always checked
// them, then resolved once ---------------------------------------------------

namespace {

/// Parses the --return-hints spec into `s` (its mode, instances and remote
/// store already set): `ends`, `oracle`, `oracle:SIGMA` or `file:PATH`.
/// Throws: config_error naming the spec and the accepted forms, or the
/// modes it applies to.
void set_return_hints(run_setup& s, const std::string& spec) {
    const run_options& o = s.options;
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
    if (o.mode == replay_mode::flat || o.instances > 1 || o.remote_capacity > 0)
        throw config_error(
            "--return-hints applies to prefix, tiered and offload modes with one instance "
            "(releases are per request there)");
    s.return_hint_error = sigma;
    s.hints = spec == "ends" ? hint_source::ends : spec.starts_with("file:") ? hint_source::file : hint_source::oracle;
    if (s.hints == hint_source::file) s.return_hint_file = spec.substr(5);
}

/// Each --option names a policy compared, an option it has, a value in
/// range (set_option's checks, on a default config).
void check_policy_options(const run_setup& s) {
    for (const named_policy_option& o : s.options.policy_options) {
        const std::string spec = "--option " + o.policy + "." + o.value.name;
        if (std::ranges::find(s.plan.policies, o.policy) == s.plan.policies.end()) {
            (void)choose_policy(o.policy);  // an unknown name: the accepted ones listed
            throw config_error(spec + ": " + o.policy + " is not compared here; add it to --policy");
        }
        try {
            visit_by_name<eviction_policies>(
                o.policy,
                [&]<class P>() {
                    typename P::config_type config{};
                    set_option<P>(config, o.value.name, o.value.value);
                },
                "eviction policy");
        } catch (const config_error& e) {
            throw config_error(spec + ": " + e.what());
        }
    }
}

}  // namespace

named_policy_option parse_policy_option(std::string_view spec) {
    const std::size_t dot = spec.find('.'), eq = spec.find('=');
    named_policy_option out;
    bool ok = dot != std::string_view::npos && eq != std::string_view::npos && dot > 0 && eq > dot + 1 &&
              eq + 1 < spec.size();
    if (ok) {
        out.policy = std::string(spec.substr(0, dot));
        out.value.name = std::string(spec.substr(dot + 1, eq - dot - 1));
        const std::string number(spec.substr(eq + 1));
        char* end = nullptr;
        out.value.value = std::strtod(number.c_str(), &end);
        ok = end == number.c_str() + number.size() && std::isfinite(out.value.value);
    }
    if (!ok)
        throw config_error("--option " + std::string(spec) +
                           ": give POLICY.NAME=VALUE with VALUE a number (a flag: 0 or 1), e.g. "
                           "s3fifo.small_fraction=0.2; kvpolicy-sim --help lists each policy's options");
    return out;
}

run_setup prepare(run_options o) {
    run_setup s;
    s.options = std::move(o);
    const run_options& opt = s.options;
    if (opt.format == trace_format::csv && opt.mode != replay_mode::flat)
        throw config_error("--mode " + std::string(to_string(opt.mode)) +
                           " needs requests (mooncake JSONL or the built-in workload); a CSV holds only block "
                           "accesses: use --mode flat");
    if (opt.policies.empty()) throw config_error("--policy: give at least one policy name, or all");
    if (opt.capacities.empty())
        throw config_error("--capacity: give at least one capacity, in blocks or a percentage of the trace's blocks");
    for (const capacity_spec& c : opt.capacities) c.check();
    if (opt.block_size == 0) throw config_error("--block-size 0: give the tokens per block, at least 1");
    if (opt.layers == 0) throw config_error("--layers 0: give the layers per block, at least 1");
    if (opt.instances == 0) throw config_error("--instances 0 serves nothing; give at least 1");
    if ((opt.mode == replay_mode::tiered || opt.mode == replay_mode::offload) && opt.cpu_capacity == 0)
        throw config_error("--mode " + std::string(to_string(opt.mode)) +
                           " needs --cpu-capacity N (blocks of the CPU tier)");
    if ((opt.remote_capacity > 0 || opt.instances > 1) && opt.mode != replay_mode::tiered)
        throw config_error(
            "--remote-capacity and --instances need --mode tiered (remote hits are staged "
            "through the CPU tier) and --cpu-capacity N");
    if (!opt.return_hints.empty()) set_return_hints(s, opt.return_hints);
    if (opt.lookahead > 0 && opt.serve_rate > 0)
        throw config_error("--lookahead and --serve-rate both model the waiting queue; give one");
    if ((opt.lookahead > 0 || opt.serve_rate > 0) &&
        (opt.mode == replay_mode::flat || opt.instances > 1 || opt.remote_capacity > 0))
        throw config_error(
            "--lookahead and --serve-rate apply to prefix, tiered and offload modes with one instance "
            "and no remote store (requests queue at one engine)");
    if (opt.queue_past_gpu && (opt.mode != replay_mode::offload || (opt.lookahead == 0 && opt.serve_rate == 0)))
        throw config_error(
            "--queue-past-gpu applies to offload mode with a waiting queue (--lookahead or --serve-rate): it "
            "trims what the CPU tier hears of each queued request");
    if (opt.store_admission && opt.mode != replay_mode::offload)
        throw config_error("--store-admission applies to offload mode (the CPU tier's stores)");
    if (opt.prefill_chunk > 0 && opt.mode != replay_mode::offload)
        throw config_error("--prefill-chunk applies to offload mode (the CPU tier's stores, step by step)");
    if (opt.layers > 1 && (opt.mode == replay_mode::flat || opt.mode == replay_mode::offload))
        throw config_error("--layers applies to prefix and tiered modes; " + std::string(to_string(opt.mode)) +
                           " mode replays whole blocks");

    // Only what was asked runs: the gap column's LRU and Belady with
    // --bounds (Belady reads the whole trace into memory first), LRU
    // without a row of its own as --match-lru's target. Each name is looked
    // up here, once.
    s.plan = plan_runs(expand_all(opt.policies), opt.bounds, opt.match_lru);
    for (const std::string& name : s.plan.policies) s.policies.push_back(choose_policy(name));
    // Offload mode gives Belady its own bound (MIN over the CPU tier's
    // reads) and no other policy a block's next use.
    if (opt.mode == replay_mode::offload)
        for (const policy_choice& p : s.policies)
            if (p.uses_future && p.name != belady::name)
                throw config_error("--mode offload: " + std::string(p.name) +
                                   " reads each block's next use, which offload mode does not pass; "
                                   "belady is its bound there");
    if (opt.mode == replay_mode::tiered && !has_name<detail::cpu_tier::alternatives>(opt.cpu_policy))
        throw_unknown_name<detail::cpu_tier::alternatives>(opt.cpu_policy, "CPU-tier policy");
    check_policy_options(s);

    request_replay_config& r = s.replay;
    r.cost = opt.cost.model(opt.block_size);
    r.bandwidth_bytes_per_s = opt.cost.bandwidth_gbps * 1e9;
    if (!(opt.cost.remote_bandwidth_gbps > 0)) {
        char given[32];
        std::snprintf(given, sizeof given, "%g", opt.cost.remote_bandwidth_gbps);
        throw config_error(std::string("--remote-bandwidth ") + given +
                           ": give the store -> CPU bandwidth in GB/s, a positive number (default 12.5)");
    }
    r.remote_bandwidth_bytes_per_s = opt.cost.remote_bandwidth_gbps * 1e9;
    r.kv_bytes_per_token = opt.cost.kv_bytes_per_token;
    r.cpu_capacity = opt.cpu_capacity;
    r.block_size = opt.block_size;
    r.num_layers = opt.layers;
    r.skip_bad_lines = opt.skip_bad_lines;
    r.trace_name = opt.trace.empty() ? "built-in" : opt.trace;
    r.cpu_policy = opt.cpu_policy;
    r.policy_options = opt.policy_options;
    r.lookahead = opt.lookahead;
    r.serve_rate = opt.serve_rate;
    r.prefill_chunk = opt.prefill_chunk;
    r.queue_past_gpu = opt.queue_past_gpu;
    r.store_admission = opt.store_admission;
    if (s.options.threads == 0) s.options.threads = std::max(1u, std::thread::hardware_concurrency());
    return s;
}

// --- What every run shares, read once ---------------------------------------

run_inputs load_inputs(const run_setup& s) {
    const run_options& o = s.options;
    run_inputs in;
    // Belady and reuse_oracle_lru read each access's next use: the trace is
    // read into memory once for them.
    const bool needs_future = std::ranges::any_of(s.policies, &policy_choice::uses_future);
    if (o.trace.empty()) {
        chat_workload_config w = o.workload;
        w.block_size = o.block_size;
        w.seed = o.seed;
        in.requests = std::make_shared<const std::vector<request_record>>(generate_chat_workload(w));
    } else if ((needs_future || s.hints != hint_source::none) && o.mode != replay_mode::flat) {
        auto reqs = std::make_shared<std::vector<request_record>>();
        mooncake_reader reader(o.trace, o.skip_bad_lines);
        request_record r;
        while (reader.next(r)) reqs->push_back(r);
        in.requests = std::move(reqs);
    }
    if (s.hints == hint_source::ends)
        in.returns = std::make_shared<const std::vector<timestamp>>(compute_session_ends(*in.requests, o.block_size));
    else if (s.hints == hint_source::oracle)
        in.returns = std::make_shared<const std::vector<timestamp>>(
            compute_expected_returns(*in.requests, o.block_size, s.return_hint_error, o.seed));
    else if (s.hints == hint_source::file) {
        std::ifstream f(s.return_hint_file);
        if (!f) throw config_error("--return-hints file:" + s.return_hint_file + ": cannot open it; check the path");
        in.returns =
            std::make_shared<const std::vector<timestamp>>(parse_expected_returns(f, s.return_hint_file, *in.requests));
    }
    if (needs_future) {
        if (o.mode == replay_mode::flat) {
            auto oracle = std::make_shared<oracle_accesses>();
            access_record a;
            auto add = [&](const access_record& x) {
                oracle->keys.push_back(x.obj_id);
                oracle->sizes.push_back(static_cast<std::uint32_t>(std::max<std::uint64_t>(x.obj_size, 1)));
            };
            if (in.requests) {
                vector_request_source rs(*in.requests);
                flattened_requests<vector_request_source> src(rs);
                while (src.next(a)) add(a);
            } else if (o.format == trace_format::csv) {
                csv_reader src(o.trace, o.skip_bad_lines);
                while (src.next(a)) add(a);
            } else {
                mooncake_reader reader(o.trace, o.skip_bad_lines);
                flattened_requests<mooncake_reader> src(reader);
                while (src.next(a)) add(a);
            }
            oracle->compute_next_use();
            in.oracle = std::move(oracle);
        } else {
            in.times = std::make_shared<const request_times>(compute_request_times(*in.requests));
        }
    }
    return in;
}

std::size_t count_distinct_blocks(const run_setup& s, const run_inputs& in) {
    const run_options& o = s.options;
    std::unordered_set<std::uint64_t> seen;
    if (in.requests) {
        for (const request_record& r : *in.requests) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    } else if (in.oracle) {
        seen.insert(in.oracle->keys.begin(), in.oracle->keys.end());
    } else if (o.format == trace_format::csv) {
        csv_reader src(o.trace, o.skip_bad_lines);
        for (access_record a; src.next(a);) seen.insert(a.obj_id);
    } else {
        mooncake_reader reader(o.trace, o.skip_bad_lines);
        for (request_record r; reader.next(r);) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    }
    return seen.size();
}

// --- The runs: one pair, all pairs on a pool of threads, --match-lru -------

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
        throw usage_error(
            "match_lru: give the results of run_all for a setup that runs lru (plan_runs adds it for "
            "match_lru), not " +
            std::to_string(results.size()) + " results");
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

// --- A comparison as kvpolicy-sim prints it -------------------------------

namespace {

/// The table's title: the trace, and what the run added or assumed.
std::string table_title(const comparison& c, const std::string& name) {
    const run_setup& s = c.setup;
    const run_options& o = s.options;
    std::string title = "kvpolicy-sim: " + name;
    if (std::ranges::any_of(o.capacities, &capacity_spec::relative))
        title += " (" + std::to_string(c.distinct_blocks) + " distinct blocks)";
    for (std::size_t i = 0; i < s.plan.added_for_bounds.size(); ++i)
        title += (i == 0 ? "; added by --bounds for the gap column: " : ", ") + s.plan.added_for_bounds[i];
    if (s.plan.lru_hidden) title += "; lru replayed as --match-lru's target, not shown";
    if (s.hints == hint_source::ends)
        title += "; each session's last release says it ends (--return-hints reads the future)";
    else if (s.hints == hint_source::file)
        title += "; releases carry the return hints of " + s.return_hint_file;
    else if (s.hints == hint_source::oracle)
        title += "; releases carry each session's true return" +
                 (s.return_hint_error > 0.0 ? " off by e^(" + o.return_hints.substr(7) + " x N(0,1))" : std::string{}) +
                 " (--return-hints reads the future)";
    if (o.lookahead > 0) {
        title += "; the cache hears the next " + std::to_string(o.lookahead) + " requests as queued (--lookahead)";
    } else if (o.serve_rate > 0) {
        char rate[32];
        std::snprintf(rate, sizeof rate, "%g", o.serve_rate);
        title +=
            std::string("; requests queue at one instance prefilling ") + rate + " uncached tokens/s (--serve-rate)";
    }
    return title;
}

}  // namespace

void write_comparison(std::ostream& out, const comparison& c) {
    const run_options& o = c.setup.options;
    const std::string name = o.trace.empty() ? "built-in chat workload (seed " + std::to_string(o.seed) + ")"
                                             : o.trace.substr(o.trace.find_last_of('/') + 1);
    if (o.output == "json")
        write_json_lines(out, c.results);
    else if (o.output == "csv")
        write_csv(out, c.results);
    else
        write_table(out, c.results, table_title(c, name));
    for (const auto& [file, json] : {std::pair{o.csv_file, false}, std::pair{o.json_file, true}}) {
        if (file.empty()) continue;
        std::ofstream f(file);
        if (json)
            write_json_lines(f, c.results);
        else
            write_csv(f, c.results);
        if (!f.flush()) throw config_error("cannot write '" + file + "'; check the path and free space");
    }
    if (o.output == "table" && (o.instances > 1 || o.remote_capacity > 0)) {
        out << "\nremote tier: " << o.instances << " instances, " << o.remote_capacity
            << " blocks shared (isolated: " << o.remote_capacity / o.instances << " each)\n";
        for (const replay_result& r : c.results)
            out << "  " << r.policy << " @ " << r.capacity << ": hit ratio " << r.hit_ratio() << " shared vs "
                << r.isolated_hit_ratio << " isolated; remote hits " << r.remote_hits << ", failed fetches "
                << r.remote_failed_fetches << "\n";
    }
    if (!o.plot.empty()) {
        write_plot(o.plot, c.results,
                   "hit ratio vs capacity: " + name + " (" + std::string(to_string(o.mode)) + " mode)");
        if (o.output == "table") out << "\nplot written to " << o.plot << "\n";
    }
}

}  // namespace kvpolicy::sim
