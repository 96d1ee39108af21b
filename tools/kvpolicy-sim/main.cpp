// kvpolicy-sim: compare KV-cache policies on real or generated workloads.
//
//   kvpolicy-sim [--trace FILE] [--format mooncake|csv] [--mode flat|prefix|tiered]
//                --policy NAME[,NAME...] --capacity N|P%[,...] [--cpu-capacity N] [--bounds] [--match-lru]
//                [--block-size T] [--layers L] [--output table|csv|json]
//                [--plot FILE.png] [--seed S] [--threads K] [--return-hints ends|oracle[:SIGMA]|file:PATH]
//                [--lookahead D | --serve-rate TOKENS_PER_S]
//
// Other programs script this contract: keep it.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include <kvpolicy/cost/pensieve_linear.hpp>
#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/sim/capacity.hpp>
#include <kvpolicy/sim/report.hpp>

#include "sim_runs.hpp"

using namespace kvpolicy;
using namespace kvpolicy::sim_tool;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvpolicy-sim: compare KV-cache eviction policies on real or generated workloads"};
    options o;
    std::string format, mode, policy_list, capacity_list;
    double alpha = -1, beta = -1, constant = -1, bandwidth_gbps = 25, remote_bandwidth_gbps = 12.5;
    app.add_option("--trace", o.trace, "Mooncake JSONL (.jsonl, .jsonl.gz) or block CSV; omit for the built-in workload");
    app.add_option("--format", format, "mooncake or csv (default: from the file name)")
        ->check(CLI::IsMember({"mooncake", "csv"}));
    app.add_option("--mode", mode, "flat, prefix or tiered (default: prefix; flat for a CSV)")
        ->check(CLI::IsMember({"flat", "prefix", "tiered"}));
    app.add_option("--policy", policy_list, "policies, comma-separated, or 'all'; accepted: all, " +
                                                joined_names<eviction_policies>())
        ->required();
    app.add_option("--capacity", capacity_list,
                   "capacities, comma-separated: blocks, or P% of the trace's distinct blocks (the GPU tier in tiered mode)")
        ->required();
    bool match = false, bounds = false;
    app.add_flag("--bounds", bounds,
                 "also replay lru and belady at every capacity where not asked for: the gap column (share of the "
                 "LRU -> Belady gap closed) and their rows; without it only the policies asked for run");
    app.add_flag("--match-lru", match,
                 "also find, per policy and capacity C, the least capacity reaching LRU's hit ratio at C (bisection over replays)");
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
    std::string csv_file, json_file;
    app.add_option("--csv-file", csv_file, "also write the CSV to this file (one run, several outputs)");
    app.add_option("--json-file", json_file, "also write the JSON lines to this file");
    app.add_option("--seed", o.seed, "seed of the built-in workload");
    app.add_option("--threads", o.threads, "parallel runs (default: all cores)");
    app.add_flag("--skip-bad-lines", o.skip_bad_lines, "count malformed trace lines, report them, and go on");
    std::string return_hints;
    app.add_option("--return-hints", return_hints,
                   "what an engine's hints (tiered_cache::release's expected_return) are worth to "
                   "session_aware_lru, read from the trace's future: ends (a session's last request says it "
                   "will not return), oracle (each release says when its session comes back), oracle:SIGMA "
                   "(that gap off by a factor e^(SIGMA x N(0,1))), or your predictor's, file:PATH (a line per "
                   "request: milliseconds until its session's next request, never, or empty for none); prefix "
                   "and tiered modes, one instance");
    app.add_option("--lookahead", o.replay.lookahead,
                   "the waiting queue, D requests deep: before each request starts the cache is told of the next D "
                   "(tiered_cache::enqueue), as an engine knows the requests it has queued; policies that hear it "
                   "(queue_aware_*) keep what they read; prefix and tiered modes, one instance");
    app.add_option("--serve-rate", o.replay.serve_rate,
                   "the waiting queue from load: one instance prefills uncached tokens at this many per second, "
                   "requests start in arrival order (the trace's timestamps), and the queue holds those arrived and "
                   "not started; prefix and tiered modes, one instance")
        ->check(CLI::PositiveNumber);
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
    cost->add_option("--remote-bandwidth", remote_bandwidth_gbps, "remote store -> CPU GB/s (default 12.5: 100 Gb/s)");
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
        if (!return_hints.empty()) set_return_hints(o, return_hints);
        if (o.replay.lookahead > 0 && o.replay.serve_rate > 0)
            throw config_error("--lookahead and --serve-rate both model the waiting queue; give one");
        if ((o.replay.lookahead > 0 || o.replay.serve_rate > 0) &&
            (o.mode == sim::replay_mode::flat || o.instances > 1 || o.remote_capacity > 0))
            throw config_error("--lookahead and --serve-rate apply to prefix and tiered modes with one instance "
                               "and no remote store (requests queue at one engine)");
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
        const std::vector<sim::capacity_spec> specs = sim::parse_capacity_list(capacity_list);
        // Only what was asked runs: the gap column's LRU and Belady with
        // --bounds (Belady reads the whole trace into memory first), LRU
        // without a row of its own as --match-lru's target.
        const sim::run_plan plan = sim::plan_runs(o.policies, bounds, match);
        o.policies = plan.policies;
        // Default prefill cost: Llama-3-8B on an H100 at ~400 TFLOP/s
        // effective: 2 x 8e9 FLOPs per token outside attention (40 us), and
        // 4 x 4096 x 32 FLOPs per token per context token in attention (1.3 ns).
        o.replay.cost = pensieve_linear({.alpha = alpha >= 0 ? alpha : 1.31e-9 * o.block_size,
                                         .beta = beta >= 0 ? beta : 0.0,
                                         .const_non_attention = constant >= 0 ? constant : 4e-5 * o.block_size});
        o.replay.bandwidth_bytes_per_s = bandwidth_gbps * 1e9;
        if (!(remote_bandwidth_gbps > 0)) {
            char given[32];
            std::snprintf(given, sizeof given, "%g", remote_bandwidth_gbps);
            throw config_error(std::string("--remote-bandwidth ") + given +
                               ": give the store -> CPU bandwidth in GB/s, a positive number (default 12.5)");
        }
        o.replay.remote_bandwidth_bytes_per_s = remote_bandwidth_gbps * 1e9;
        if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());

        const shared_inputs in = load_inputs(o);
        const bool relative = std::any_of(specs.begin(), specs.end(), [](const auto& c) { return c.relative(); });
        const std::size_t distinct = relative || match ? count_distinct_blocks(o, in) : 0;
        for (const sim::capacity_spec& c : specs) {
            const std::size_t v = c.resolve(distinct);
            if (std::find(o.capacities.begin(), o.capacities.end(), v) == o.capacities.end()) o.capacities.push_back(v);
        }
        std::vector<sim::replay_result> results = run_all(o, in);
        for (sim::replay_result& r : results)
            r.built_for = visit_by_name<eviction_policies>(
                    r.policy, []<class P>() { return std::string(built_for<P>()); }, "eviction policy");
        sim::fill_gap_closed(results);
        if (match) match_lru(o, in, distinct, results);
        sim::keep_shown(results, plan);
        const std::string name = o.trace.empty() ? "built-in chat workload (seed " + std::to_string(o.seed) + ")"
                                                 : o.trace.substr(o.trace.find_last_of('/') + 1);
        if (o.output == "json") sim::write_json_lines(std::cout, results);
        else if (o.output == "csv") sim::write_csv(std::cout, results);
        else {
            std::string title = "kvpolicy-sim: " + name;
            if (relative) title += " (" + std::to_string(distinct) + " distinct blocks)";
            for (std::size_t i = 0; i < plan.added_for_bounds.size(); ++i)
                title += (i == 0 ? "; added by --bounds for the gap column: " : ", ") + plan.added_for_bounds[i];
            if (plan.lru_hidden) title += "; lru replayed as --match-lru's target, not shown";
            if (o.hints == hint_source::ends)
                title += "; each session's last release says it ends (--return-hints reads the future)";
            else if (o.hints == hint_source::file)
                title += "; releases carry the return hints of " + o.return_hint_file;
            else if (o.hints == hint_source::oracle)
                title += "; releases carry each session's true return" +
                         (o.return_hint_error > 0.0 ? " off by e^(" + o.return_hints.substr(7) + " x N(0,1))"
                                                    : std::string{}) +
                         " (--return-hints reads the future)";
            if (o.replay.lookahead > 0)
                title += "; the cache hears the next " + std::to_string(o.replay.lookahead) +
                         " requests as queued (--lookahead)";
            else if (o.replay.serve_rate > 0) {
                char rate[32];
                std::snprintf(rate, sizeof rate, "%g", o.replay.serve_rate);
                title += std::string("; requests queue at one instance prefilling ") + rate +
                         " uncached tokens/s (--serve-rate)";
            }
            sim::write_table(std::cout, results, title);
        }
        for (const auto& [file, json] : {std::pair{csv_file, false}, std::pair{json_file, true}}) {
            if (file.empty()) continue;
            std::ofstream f(file);
            if (json) sim::write_json_lines(f, results);
            else sim::write_csv(f, results);
            if (!f.flush()) throw config_error("cannot write '" + file + "'; check the path and free space");
        }
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
