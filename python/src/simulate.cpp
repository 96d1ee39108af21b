// kvpolicy.simulate: kvpolicy-sim as a function. The runs are the tool's own
// (tools/kvpolicy-sim/run_flat.cpp, run_requests.cpp, compiled into this
// module), and the results go out through the tool's JSON writer
// (sim::write_json_lines), so a field the simulator gains reaches Python
// with no change here. Runs go in parallel threads with the GIL released.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include <kvpolicy/sim/report.hpp>

#include "bindings.hpp"
#include "sim_runs.hpp"

namespace kvpolicy::python {

namespace {

using namespace kvpolicy::sim_tool;

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What every run shares, read once (kvpolicy-sim's load_inputs).
shared_inputs load(const options& o) {
    shared_inputs in;
    const bool has_belady = std::find(o.policies.begin(), o.policies.end(), "belady") != o.policies.end();
    if (o.trace.empty()) {
        sim::chat_workload_config w = o.workload;
        w.block_size = o.block_size;
        w.seed = o.seed;
        in.requests = std::make_shared<const std::vector<sim::request_record>>(sim::generate_chat_workload(w));
    } else if (has_belady && o.mode != sim::replay_mode::flat) {
        auto reqs = std::make_shared<std::vector<sim::request_record>>();
        sim::mooncake_reader reader(o.trace, o.skip_bad_lines);
        for (sim::request_record r; reader.next(r);) reqs->push_back(r);
        in.requests = std::move(reqs);
    }
    if (!has_belady) return in;
    if (o.mode == sim::replay_mode::flat) {
        auto oracle = std::make_shared<sim::oracle_accesses>();
        auto add = [&](const sim::access_record& x) {
            oracle->keys.push_back(x.obj_id);
            oracle->sizes.push_back(static_cast<std::uint32_t>(std::max<std::uint64_t>(x.obj_size, 1)));
        };
        sim::access_record a;
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
    std::atomic<std::size_t> next{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
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

double number(const nb::dict& d, const char* key, double fallback) {
    return d.contains(key) ? nb::cast<double>(d[key]) : fallback;
}

}  // namespace

void bind_simulate(nb::module_& m) {
    m.def(
        "_simulate_json",
        [](std::optional<std::string> trace, std::optional<std::string> format, std::optional<std::string> mode,
           std::vector<std::string> policies, std::vector<std::size_t> capacities, std::size_t cpu_capacity,
           const std::string& cpu_policy, std::uint32_t block_size, std::uint32_t layers, std::uint64_t seed,
           unsigned threads, bool skip_bad_lines, const nb::dict& cost, const nb::dict& workload) {
            options o;
            o.trace = trace.value_or("");
            o.format = format ? (*format == "csv" ? trace_format::csv : trace_format::mooncake)
                       : ends_with(o.trace, ".csv") ? trace_format::csv
                                                    : trace_format::mooncake;
            if (format && *format != "csv" && *format != "mooncake")
                throw config_error("simulate: format '" + *format + "' is not one of mooncake, csv");
            if (mode && *mode != "flat" && *mode != "prefix" && *mode != "tiered")
                throw config_error("simulate: mode '" + *mode + "' is not one of flat, prefix, tiered");
            o.mode = mode ? (*mode == "flat" ? sim::replay_mode::flat
                             : *mode == "tiered" ? sim::replay_mode::tiered
                                                 : sim::replay_mode::prefix)
                     : o.format == trace_format::csv ? sim::replay_mode::flat
                                                     : sim::replay_mode::prefix;
            if (o.format == trace_format::csv && o.mode != sim::replay_mode::flat)
                throw config_error("simulate: mode '" + mode.value_or("") +
                                   "' needs requests (mooncake JSONL or the built-in workload); a CSV holds only "
                                   "block accesses: use mode='flat'");
            if (o.mode == sim::replay_mode::tiered && cpu_capacity == 0)
                throw config_error("simulate: mode='tiered' needs cpu_capacity=N (blocks of the CPU tier)");
            if (layers > 1 && o.mode == sim::replay_mode::flat)
                throw config_error("simulate: layers applies to prefix and tiered modes; flat mode replays blocks");
            if (block_size == 0 || layers == 0)
                throw config_error("simulate: block_size and layers must be at least 1");
            if (policies.empty()) throw config_error("simulate: give at least one policy (kvpolicy.policies())");
            if (capacities.empty()) throw config_error("simulate: give at least one capacity in blocks");
            for (const std::string& p : policies) {
                if (p == "all") {
                    o.policies.clear();
                    for (std::string_view n : names_of<eviction_policies>()) o.policies.emplace_back(n);
                    break;
                }
                if (!has_name<eviction_policies>(p))
                    throw unknown_name_error("unknown eviction policy '" + p + "'; accepted: all, " +
                                             joined_names<eviction_policies>());
                o.policies.push_back(p);
            }
            for (std::size_t c : capacities)
                if (c == 0) throw config_error("simulate: capacity 0 cannot hold a block; give at least 1");
            o.capacities = std::move(capacities);
            o.cpu_capacity = cpu_capacity;
            o.cpu_policy = cpu_policy;
            o.block_size = block_size;
            o.layers = layers;
            o.seed = seed;
            o.skip_bad_lines = skip_bad_lines;
            o.threads = threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : threads;
            // The tool's defaults: Llama-3-8B on an H100 (see kvpolicy-sim's main.cpp).
            o.replay.cost = pensieve_linear({.alpha = number(cost, "alpha", 1.31e-9 * block_size),
                                             .beta = number(cost, "beta", 0.0),
                                             .const_non_attention = number(cost, "const", 4e-5 * block_size)});
            o.replay.bandwidth_bytes_per_s = number(cost, "bandwidth", 25) * 1e9;
            o.replay.kv_bytes_per_token = number(cost, "kv_bytes_per_token", o.replay.kv_bytes_per_token);
            for (auto [k, v] : workload) {
                const std::string key = nb::cast<std::string>(k);
                const double x = nb::cast<double>(v);
                auto& w = o.workload;
                if (key == "sessions") w.sessions = static_cast<std::uint32_t>(x);
                else if (key == "session_rate") w.session_rate_per_s = x;
                else if (key == "turns") w.mean_turns = x;
                else if (key == "prompt_tokens") w.mean_prompt_tokens = x;
                else if (key == "answer_tokens") w.mean_answer_tokens = x;
                else if (key == "think_time") w.mean_think_time_s = x;
                else if (key == "system_prompt_tokens") w.system_prompt_tokens = static_cast<std::uint32_t>(x);
                else if (key == "system_prompts") w.system_prompts = static_cast<std::uint32_t>(x);
                else
                    throw config_error("simulate: unknown option '" + key +
                                       "'; workload options: sessions, session_rate, turns, prompt_tokens, "
                                       "answer_tokens, think_time, system_prompt_tokens, system_prompts");
            }
            std::ostringstream out;
            {
                nb::gil_scoped_release unlocked;
                const shared_inputs in = load(o);
                sim::write_json_lines(out, run_all(o, in));
            }
            return out.str();
        },
        nb::arg("trace").none(), nb::arg("format").none(), nb::arg("mode").none(), nb::arg("policies"),
        nb::arg("capacities"), nb::arg("cpu_capacity"), nb::arg("cpu_policy"), nb::arg("block_size"),
        nb::arg("layers"), nb::arg("seed"), nb::arg("threads"), nb::arg("skip_bad_lines"), nb::arg("cost"),
        nb::arg("workload"), "kvpolicy-sim --output json, as text (kvpolicy.simulate parses it).");
}

}  // namespace kvpolicy::python
