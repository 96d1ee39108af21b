// kvpolicy-sim: compare KV-cache policies on real or generated workloads.
//
//   kvpolicy-sim [--trace FILE] [--format mooncake|csv] [--mode flat|prefix|tiered]
//                --policy NAME[,NAME...] --capacity N|P%[,...] [--cpu-capacity N] [--bounds] [--match-lru]
//                [--block-size T] [--layers L] [--output table|csv|json]
//                [--plot FILE.png] [--seed S] [--threads K] [--return-hints ends|oracle[:SIGMA]|file:PATH]
//                [--lookahead D | --serve-rate TOKENS_PER_S]
//
// Other programs script this contract: keep it. The command line only: the
// flags fill sim::run_options, and the simulator's driver
// (kvpolicy/sim/driver.hpp) runs and writes the comparison.
#include <iostream>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/eviction/options_help.hpp>
#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/sim/capacity.hpp>
#include <kvpolicy/sim/driver.hpp>
#include <kvpolicy/sim/policy_choice.hpp>
#include <kvpolicy/sim/run_options.hpp>

using namespace kvpolicy;

int main(int argc, char** argv) {
    CLI::App app{"kvpolicy-sim: compare KV-cache eviction policies on real or generated workloads"};
    sim::run_options o;
    std::string format, mode, policy_list, capacity_list;
    double alpha = -1, beta = -1, constant = -1;
    app.add_option("--trace", o.trace,
                   "Mooncake JSONL (.jsonl, .jsonl.gz) or block CSV; omit for the built-in workload");
    app.add_option("--format", format, "mooncake or csv (default: from the file name)")
        ->check(CLI::IsMember({"mooncake", "csv"}));
    app.add_option("--mode", mode,
                   "flat, prefix, tiered, or offload (vLLM's CPU offloading tier behind its GPU prefix cache, the "
                   "policy deciding the CPU tier's victims) (default: prefix; flat for a CSV)")
        ->check(CLI::IsMember({"flat", "prefix", "tiered", "offload"}));
    app.add_option("--policy", policy_list,
                   "policies, comma-separated, or 'all'; accepted: " + sim::accepted_policy_names())
        ->required();
    std::vector<std::string> option_specs;
    app.add_option("--option", option_specs,
                   "POLICY.NAME=VALUE: a compared policy's option (repeat the flag for more), e.g. "
                   "s3fifo.small_fraction=0.2; the others run at their defaults (options listed below)");
    app.add_option(
           "--capacity", capacity_list,
           "capacities, comma-separated: blocks, or P% of the trace's distinct blocks (the GPU tier in tiered mode)")
        ->required();
    app.add_flag("--bounds", o.bounds,
                 "also replay lru and belady at every capacity where not asked for: the gap column (share of the "
                 "LRU -> Belady gap closed) and their rows; without it only the policies asked for run");
    app.add_flag("--match-lru", o.match_lru,
                 "also find, per policy and capacity C, the least capacity reaching LRU's hit ratio at C (bisection "
                 "over replays)");
    app.add_option("--cpu-capacity", o.cpu_capacity, "CPU tier in blocks (tiered and offload modes)");
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
    app.add_option("--csv-file", o.csv_file, "also write the CSV to this file (one run, several outputs)");
    app.add_option("--json-file", o.json_file, "also write the JSON lines to this file");
    app.add_option("--seed", o.seed, "seed of the built-in workload");
    app.add_option("--threads", o.threads, "parallel runs (default: all cores)");
    app.add_flag("--skip-bad-lines", o.skip_bad_lines, "count malformed trace lines, report them, and go on");
    app.add_option("--return-hints", o.return_hints,
                   "what an engine's hints (tiered_cache::release's expected_return) are worth to "
                   "session_aware_lru, read from the trace's future: ends (a session's last request says it "
                   "will not return), oracle (each release says when its session comes back), oracle:SIGMA "
                   "(that gap off by a factor e^(SIGMA x N(0,1))), or your predictor's, file:PATH (a line per "
                   "request: milliseconds until its session's next request, never, or empty for none); prefix, "
                   "tiered and offload modes, one instance");
    app.add_option("--lookahead", o.lookahead,
                   "the waiting queue, D requests deep: before each request starts the cache is told of the next D "
                   "(tiered_cache::enqueue), as an engine knows the requests it has queued; policies that hear it "
                   "(queue_aware_*) keep what they read; prefix, tiered and offload modes, one instance");
    app.add_option("--serve-rate", o.serve_rate,
                   "the waiting queue from load: one instance prefills uncached tokens at this many per second, "
                   "requests start in arrival order (the trace's timestamps), and the queue holds those arrived and "
                   "not started; prefix, tiered and offload modes, one instance")
        ->check(CLI::PositiveNumber);
    app.add_option(
        "--prefill-chunk", o.prefill_chunk,
        "offload mode: tokens a request prefills per engine step (vLLM's max_num_batched_tokens), each "
        "step's blocks offered to the CPU tier apart, as vLLM stores them; default: the whole prompt at once");
    app.add_flag("--queue-past-gpu", o.queue_past_gpu,
                 "offload mode with a queue: the CPU tier hears each queued request's blocks past those the GPU "
                 "prefix cache is forecast to serve when it starts (the queue ahead of it fills the GPU), not all "
                 "of them");
    app.add_flag("--store-admission", o.store_admission,
                 "offload mode: a chunk offered past the CPU tier's free room is stored only where the policy does "
                 "not rank it its own next victim (policies that rank new items: predicted_return and its "
                 "queue_aware_ form); default: every chunk offered is stored, as vLLM's manager stores them");
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
    cost->add_option("--bandwidth", o.cost.bandwidth_gbps, "CPU -> GPU GB/s (default 25)");
    cost->add_option("--remote-bandwidth", o.cost.remote_bandwidth_gbps,
                     "remote store -> CPU GB/s (default 12.5: 100 Gb/s)");
    cost->add_option("--kv-bytes-per-token", o.cost.kv_bytes_per_token, "KV bytes per token (default Llama-3-8B fp16)");
    app.footer(
        "Policies and their options (each runs at its defaults unless --option sets one; kvpolicy::make_config<P>\n"
        "in C++, EvictionPolicy(name, capacity, **options) in Python):\n" +
        options_help<eviction_policies>());
    CLI11_PARSE(app, argc, argv);

    try {
        sim::set_format_and_mode(o, format, mode);
        o.policies = CLI::detail::split(policy_list, ',');
        for (const std::string& spec : option_specs) o.policy_options.push_back(sim::parse_policy_option(spec));
        o.capacities = sim::parse_capacity_list(capacity_list);
        // A negative figure, as the default -1, stands for the default.
        if (alpha >= 0) o.cost.alpha = alpha;
        if (beta >= 0) o.cost.beta = beta;
        if (constant >= 0) o.cost.constant = constant;
        sim::write_comparison(std::cout, sim::compare(std::move(o)));
    } catch (const kvpolicy::error& e) {
        std::cerr << "kvpolicy-sim: " << e.what() << "\n";
        return 2;
    }
    return 0;
}
