// prepare: the options checked in the order kvpolicy-sim always checked
// them, then resolved once (driver.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include <kvpolicy/core/error.hpp>

#include "runs.hpp"

namespace kvpolicy::sim {

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
        throw config_error("--return-hints applies to prefix and tiered modes with one instance "
                           "(releases are per request there)");
    s.return_hint_error = sigma;
    s.hints = spec == "ends"                ? hint_source::ends
              : spec.starts_with("file:") ? hint_source::file
                                          : hint_source::oracle;
    if (s.hints == hint_source::file) s.return_hint_file = spec.substr(5);
}

}  // namespace

run_setup prepare(run_options o) {
    run_setup s;
    s.options = std::move(o);
    const run_options& opt = s.options;
    if (opt.mode == replay_mode::tiered && opt.cpu_capacity == 0)
        throw config_error("--mode tiered needs --cpu-capacity N (blocks of the CPU tier)");
    if ((opt.remote_capacity > 0 || opt.instances > 1) && opt.mode != replay_mode::tiered)
        throw config_error("--remote-capacity and --instances need --mode tiered (remote hits are staged "
                           "through the CPU tier) and --cpu-capacity N");
    if (!opt.return_hints.empty()) set_return_hints(s, opt.return_hints);
    if (opt.lookahead > 0 && opt.serve_rate > 0)
        throw config_error("--lookahead and --serve-rate both model the waiting queue; give one");
    if ((opt.lookahead > 0 || opt.serve_rate > 0) &&
        (opt.mode == replay_mode::flat || opt.instances > 1 || opt.remote_capacity > 0))
        throw config_error("--lookahead and --serve-rate apply to prefix and tiered modes with one instance "
                           "and no remote store (requests queue at one engine)");
    if (opt.layers > 1 && opt.mode == replay_mode::flat)
        throw config_error("--layers applies to prefix and tiered modes; flat mode replays blocks");

    // Only what was asked runs: the gap column's LRU and Belady with
    // --bounds (Belady reads the whole trace into memory first), LRU
    // without a row of its own as --match-lru's target. Each name is looked
    // up here, once.
    s.plan = plan_runs(expand_all(opt.policies), opt.bounds, opt.match_lru);
    for (const std::string& name : s.plan.policies) s.policies.push_back(choose_policy(name));
    if (opt.mode == replay_mode::tiered && !has_name<detail::cpu_tier::alternatives>(opt.cpu_policy))
        throw_unknown_name<detail::cpu_tier::alternatives>(opt.cpu_policy, "CPU-tier policy");

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
    r.lookahead = opt.lookahead;
    r.serve_rate = opt.serve_rate;
    if (s.options.threads == 0) s.options.threads = std::max(1u, std::thread::hardware_concurrency());
    return s;
}

}  // namespace kvpolicy::sim
