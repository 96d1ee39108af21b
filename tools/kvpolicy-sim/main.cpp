// kvpolicy-sim: compare KV-cache policies on real or generated workloads.
//
//   kvpolicy-sim [--trace FILE] [--format mooncake|csv] [--mode flat|prefix|tiered]
//                --policy NAME[,NAME...] --capacity N[,N...] [--cpu-capacity N]
//                [--block-size T] [--layers L] [--output table|csv|json]
//                [--plot FILE.png] [--seed S] [--threads K]
//
// Other programs script this contract: keep it.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>

#include <kvpolicy/cost/pensieve_linear.hpp>
#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/sim/report.hpp>

#include "sim_runs.hpp"

using namespace kvpolicy;
using namespace kvpolicy::sim_tool;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

shared_inputs load_inputs(const options& o) {
    shared_inputs in;
    const bool has_belady = std::find(o.policies.begin(), o.policies.end(), "belady") != o.policies.end();
    if (o.trace.empty()) {
        sim::chat_workload_config w = o.workload;
        w.block_size = o.block_size;
        w.seed = o.seed;
        in.requests = std::make_shared<const std::vector<sim::request_record>>(sim::generate_chat_workload(w));
    } else if (has_belady && o.mode != sim::replay_mode::flat) {
        if (o.format == trace_format::csv)
            throw config_error("--mode " + std::string(sim::to_string(o.mode)) +
                               " needs requests (mooncake JSONL or the built-in workload); a CSV holds only block accesses");
        auto reqs = std::make_shared<std::vector<sim::request_record>>();
        sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
        sim::request_record r;
        while (reader.next(r)) reqs->push_back(r);
        in.requests = std::move(reqs);
    }
    if (has_belady) {
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

std::vector<sim::replay_result> run_all(const options& o, const shared_inputs& in) {
    struct job {
        std::string policy;
        std::size_t capacity;
    };
    std::vector<job> jobs;
    for (std::size_t c : o.capacities)
        for (const std::string& p : o.policies) jobs.push_back({p, c});
    std::vector<sim::replay_result> results(jobs.size());
    std::atomic<std::size_t> next{0}, done{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const bool progress = isatty(STDERR_FILENO) != 0;
    auto worker = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
            try {
                results[i] = o.mode == sim::replay_mode::flat ? run_flat(o, jobs[i].policy, jobs[i].capacity, in)
                                                              : run_requests(o, jobs[i].policy, jobs[i].capacity, in);
            } catch (...) {
                std::scoped_lock lock(failure_mutex);
                if (!failure) failure = std::current_exception();
                next = jobs.size();
            }
            const std::size_t d = ++done;
            if (progress) {
                std::scoped_lock lock(failure_mutex);
                const std::size_t width = 30, filled = width * d / jobs.size();
                std::fprintf(stderr, "\r[%s%s] %zu/%zu runs", std::string(filled, '#').c_str(),
                             std::string(width - filled, '.').c_str(), d, jobs.size());
                if (d == jobs.size()) std::fprintf(stderr, "\n");
            }
        }
    };
    const unsigned n = std::max(1u, std::min<unsigned>(o.threads, static_cast<unsigned>(jobs.size())));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < n; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);
    return results;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvpolicy-sim: compare KV-cache eviction policies on real or generated workloads"};
    options o;
    std::string format, mode, policy_list, capacity_list;
    double alpha = -1, beta = -1, constant = -1, bandwidth_gbps = 25;
    app.add_option("--trace", o.trace, "Mooncake JSONL (.jsonl, .jsonl.gz) or block CSV; omit for the built-in workload");
    app.add_option("--format", format, "mooncake or csv (default: from the file name)")
        ->check(CLI::IsMember({"mooncake", "csv"}));
    app.add_option("--mode", mode, "flat, prefix or tiered (default: prefix; flat for a CSV)")
        ->check(CLI::IsMember({"flat", "prefix", "tiered"}));
    app.add_option("--policy", policy_list, "policies, comma-separated, or 'all'; accepted: all, " +
                                                joined_names<eviction_policies>())
        ->required();
    app.add_option("--capacity", capacity_list, "capacities in blocks, comma-separated (the GPU tier in tiered mode)")
        ->required();
    app.add_option("--cpu-capacity", o.cpu_capacity, "CPU tier in blocks (tiered mode)");
    app.add_option("--remote-capacity", o.remote_capacity,
                   "remote tier in blocks, shared by the instances (tiered mode; victims written back, "
                   "lookups through the store)");
    app.add_option("--instances", o.instances,
                   "serving instances, requests routed by session, each with its own GPU and CPU tiers (tiered mode)")
        ->check(CLI::PositiveNumber);
    app.add_option("--cpu-policy", o.cpu_policy, "CPU tier policy in tiered mode: lru or checkerboard");
    app.add_option("--block-size", o.block_size, "tokens per block (Mooncake traces: 512; agentic: 64)")
        ->check(CLI::PositiveNumber);
    app.add_option("--layers", o.layers, "layers per block: > 1 makes items layer-chunks (prefix and tiered modes)")
        ->check(CLI::PositiveNumber);
    app.add_option("--output", o.output, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}));
    app.add_option("--plot", o.plot, "write a PNG of hit ratio against capacity");
    app.add_option("--seed", o.seed, "seed of the built-in workload");
    app.add_option("--threads", o.threads, "parallel runs (default: all cores)");
    app.add_flag("--skip-bad-lines", o.skip_bad_lines, "count malformed trace lines, report them, and go on");
    auto* wl = app.add_option_group("built-in workload");
    wl->add_option("--sessions", o.workload.sessions, "chat sessions");
    wl->add_option("--session-rate", o.workload.session_rate_per_s, "session arrivals per second (Poisson)");
    wl->add_option("--turns", o.workload.mean_turns, "mean turns per session (geometric)");
    wl->add_option("--prompt-tokens", o.workload.mean_prompt_tokens, "mean prompt tokens per turn (lognormal)");
    wl->add_option("--answer-tokens", o.workload.mean_answer_tokens, "mean answer tokens per turn (lognormal)");
    wl->add_option("--think-time", o.workload.mean_think_time_s, "mean seconds between a session's turns");
    wl->add_option("--system-prompt-tokens", o.workload.system_prompt_tokens, "shared system prompt length");
    wl->add_option("--system-prompts", o.workload.system_prompts, "distinct system prompts");
    auto* cost = app.add_option_group("prefill cost (tiered mode's seconds saved)");
    cost->add_option("--alpha", alpha, "seconds per context token to recompute one block (default from Llama-3-8B)");
    cost->add_option("--beta", beta, "seconds per block, attention part (default 0)");
    cost->add_option("--const", constant, "seconds per block, non-attention part (default from Llama-3-8B)");
    cost->add_option("--bandwidth", bandwidth_gbps, "CPU -> GPU GB/s (default 25)");
    cost->add_option("--kv-bytes-per-token", o.replay.kv_bytes_per_token, "KV bytes per token (default Llama-3-8B fp16)");
    CLI11_PARSE(app, argc, argv);

    try {
        o.format = !format.empty() ? (format == "csv" ? trace_format::csv : trace_format::mooncake)
                   : ends_with(o.trace, ".csv") ? trace_format::csv
                                                : trace_format::mooncake;
        o.mode = !mode.empty() ? (mode == "flat" ? sim::replay_mode::flat
                                  : mode == "tiered" ? sim::replay_mode::tiered
                                                     : sim::replay_mode::prefix)
                 : o.format == trace_format::csv ? sim::replay_mode::flat
                                                 : sim::replay_mode::prefix;
        if (o.format == trace_format::csv && o.mode != sim::replay_mode::flat)
            throw config_error("--mode " + mode + " needs requests (mooncake JSONL or the built-in workload); "
                               "a CSV holds only block accesses: use --mode flat");
        if (o.mode == sim::replay_mode::tiered && o.cpu_capacity == 0)
            throw config_error("--mode tiered needs --cpu-capacity N (blocks of the CPU tier)");
        if ((o.remote_capacity > 0 || o.instances > 1) && o.mode != sim::replay_mode::tiered)
            throw config_error("--remote-capacity and --instances need --mode tiered (remote hits are staged "
                               "through the CPU tier) and --cpu-capacity N");
        if (o.layers > 1 && o.mode == sim::replay_mode::flat)
            throw config_error("--layers applies to prefix and tiered modes; flat mode replays blocks");
        for (const auto& p : CLI::detail::split(policy_list, ',')) {
            if (p == "all") {
                for (std::string_view n : names_of<eviction_policies>()) o.policies.emplace_back(n);
                continue;
            }
            if (!has_name<eviction_policies>(p))
                throw unknown_name_error("unknown eviction policy '" + p + "'; accepted: all, " +
                                         joined_names<eviction_policies>());
            o.policies.push_back(p);
        }
        for (const auto& c : CLI::detail::split(capacity_list, ',')) {
            std::size_t v = 0;
            const auto [ptr, ec] = std::from_chars(c.data(), c.data() + c.size(), v);
            if (ec != std::errc{} || ptr != c.data() + c.size() || v == 0)
                throw config_error("--capacity: '" + c + "' is not a positive number of blocks");
            o.capacities.push_back(v);
        }
        // Default prefill cost: Llama-3-8B on an H100 at ~400 TFLOP/s
        // effective: 2 x 8e9 FLOPs per token outside attention (40 us), and
        // 4 x 4096 x 32 FLOPs per token per context token in attention (1.3 ns).
        o.replay.cost = pensieve_linear({.alpha = alpha >= 0 ? alpha : 1.31e-9 * o.block_size,
                                         .beta = beta >= 0 ? beta : 0.0,
                                         .const_non_attention = constant >= 0 ? constant : 4e-5 * o.block_size});
        o.replay.bandwidth_bytes_per_s = bandwidth_gbps * 1e9;
        if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());

        const shared_inputs in = load_inputs(o);
        const std::vector<sim::replay_result> results = run_all(o, in);
        const std::string name = o.trace.empty() ? "built-in chat workload (seed " + std::to_string(o.seed) + ")"
                                                 : o.trace.substr(o.trace.find_last_of('/') + 1);
        if (o.output == "json") sim::write_json_lines(std::cout, results);
        else if (o.output == "csv") sim::write_csv(std::cout, results);
        else sim::write_table(std::cout, results, "kvpolicy-sim: " + name);
        if (o.output == "table" && (o.instances > 1 || o.remote_capacity > 0)) {
            std::cout << "\nremote tier: " << o.instances << " instances, " << o.remote_capacity
                      << " blocks shared (isolated: " << o.remote_capacity / o.instances << " each)\n";
            for (const sim::replay_result& r : results)
                std::cout << "  " << r.policy << " @ " << r.capacity << ": hit ratio " << r.hit_ratio()
                          << " shared vs " << r.isolated_hit_ratio << " isolated; remote hits " << r.remote_hits
                          << ", failed fetches " << r.remote_failed_fetches << "\n";
        }
        if (!o.plot.empty()) {
            sim::write_plot(o.plot, results, "hit ratio vs capacity: " + name + " (" +
                                                 std::string(sim::to_string(o.mode)) + " mode)");
            if (o.output == "table") std::cout << "\nplot written to " << o.plot << "\n";
        }
    } catch (const kvpolicy::error& e) {
        std::cerr << "kvpolicy-sim: " << e.what() << "\n";
        return 2;
    }
    return 0;
}
