// kvpolicy.simulate: kvpolicy-sim as a function. The runs are the
// simulator's driver's (kvpolicy/sim/driver.hpp, the kvpolicy_sim_driver
// library kvpolicy-sim links too: the same input loading, thread pool, gap
// column and --bounds), and the results go out through the tool's JSON writer
// (sim::write_json_lines), so a field the simulator gains reaches Python
// with no change here. Runs go in parallel threads with the GIL released.
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/tuple.h>

#include <kvpolicy/sim/driver.hpp>
#include <kvpolicy/sim/offload_min.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/request_times.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

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
           unsigned threads, bool skip_bad_lines, const nb::dict& cost, const nb::dict& workload,
           std::optional<std::string> return_hints, bool bounds, std::size_t lookahead, double serve_rate,
           std::uint64_t prefill_chunk, bool queue_past_gpu, bool store_admission,
           const std::vector<std::tuple<std::string, std::string, double>>& policy_options, bool match_lru,
           std::size_t instances, std::size_t remote_capacity) {
            sim::run_options o;
            o.trace = trace.value_or("");
            o.format = format ? (*format == "csv" ? sim::trace_format::csv : sim::trace_format::mooncake)
                              : sim::format_of(o.trace);
            if (format && *format != "csv" && *format != "mooncake")
                throw config_error("simulate: format '" + *format + "' is not one of mooncake, csv");
            if (mode && !sim::replay_mode_named(*mode))
                throw config_error("simulate: mode '" + *mode + "' is not one of flat, prefix, tiered, offload");
            o.mode = mode ? *sim::replay_mode_named(*mode) : sim::default_mode(o.format);
            if (o.format == sim::trace_format::csv && o.mode != sim::replay_mode::flat)
                throw config_error("simulate: mode '" + mode.value_or("") +
                                   "' needs requests (mooncake JSONL or the built-in workload); a CSV holds only "
                                   "block accesses: use mode='flat'");
            if ((o.mode == sim::replay_mode::tiered || o.mode == sim::replay_mode::offload) && cpu_capacity == 0)
                throw config_error("simulate: mode='" + *mode + "' needs cpu_capacity=N (blocks of the CPU tier)");
            if (layers > 1 && o.mode == sim::replay_mode::flat)
                throw config_error("simulate: layers applies to prefix and tiered modes; flat mode replays blocks");
            if (block_size == 0 || layers == 0)
                throw config_error("simulate: block_size and layers must be at least 1");
            if (policies.empty()) throw config_error("simulate: give at least one policy (kvpolicy.policies())");
            if (capacities.empty()) throw config_error("simulate: give at least one capacity in blocks");
            o.policies = std::move(policies);  // names or "all", each looked up once by the driver
            o.bounds = bounds;                 // kvpolicy-sim --bounds
            o.match_lru = match_lru;           // --match-lru
            if (instances == 0) throw config_error("simulate: instances 0 serves nothing; give at least 1");
            o.instances = instances;              // --instances and --remote-capacity: the driver
            o.remote_capacity = remote_capacity;  // checks they come with mode='tiered'
            o.lookahead = lookahead;              // the driver checks these four
            o.serve_rate = serve_rate;
            o.prefill_chunk = prefill_chunk;
            o.queue_past_gpu = queue_past_gpu;
            o.store_admission = store_admission;
            for (const auto& [policy, name, value] : policy_options)  // kvpolicy-sim --option; the driver checks them
                o.policy_options.push_back({policy, {name, value}});
            for (std::size_t c : capacities) {
                if (c == 0) throw config_error("simulate: capacity 0 cannot hold a block; give at least 1");
                o.capacities.push_back({.blocks = c, .text = std::to_string(c)});
            }
            o.cpu_capacity = cpu_capacity;
            o.cpu_policy = cpu_policy;
            o.block_size = block_size;
            o.layers = layers;
            o.seed = seed;
            o.skip_bad_lines = skip_bad_lines;
            o.return_hints = return_hints.value_or("");
            o.threads = threads;
            // Unset figures take kvpolicy-sim's defaults (sim::prefill_cost_options).
            if (cost.contains("alpha")) o.cost.alpha = number(cost, "alpha", 0.0);
            if (cost.contains("beta")) o.cost.beta = number(cost, "beta", 0.0);
            if (cost.contains("const")) o.cost.constant = number(cost, "const", 0.0);
            o.cost.bandwidth_gbps = number(cost, "bandwidth", o.cost.bandwidth_gbps);
            o.cost.remote_bandwidth_gbps = number(cost, "remote_bandwidth", o.cost.remote_bandwidth_gbps);
            o.cost.kv_bytes_per_token = number(cost, "kv_bytes_per_token", o.cost.kv_bytes_per_token);
            for (auto [k, v] : workload) try {
                    o.workload.set(nb::cast<std::string>(k), nb::cast<double>(v));
                } catch (const config_error& e) {
                    throw config_error(std::string("simulate: ") + e.what());
                }
            std::ostringstream out;
            {
                nb::gil_scoped_release unlocked;
                sim::write_json_lines(out, sim::compare(std::move(o)).results);
            }
            return out.str();
        },
        nb::arg("trace").none(), nb::arg("format").none(), nb::arg("mode").none(), nb::arg("policies"),
        nb::arg("capacities"), nb::arg("cpu_capacity"), nb::arg("cpu_policy"), nb::arg("block_size"), nb::arg("layers"),
        nb::arg("seed"), nb::arg("threads"), nb::arg("skip_bad_lines"), nb::arg("cost"), nb::arg("workload"),
        nb::arg("return_hints").none(), nb::arg("bounds"), nb::arg("lookahead"), nb::arg("serve_rate"),
        nb::arg("prefill_chunk"), nb::arg("queue_past_gpu"), nb::arg("store_admission"), nb::arg("policy_options"),
        nb::arg("match_lru"), nb::arg("instances"), nb::arg("remote_capacity"),
        "kvpolicy-sim --output json, as text (kvpolicy.simulate parses it).");
    m.def(
        "_offload_min_hits",
        [](nb::handle lookups, nb::handle keys, std::size_t capacity) {
            nb::object k1, k2;
            return sim::offload_min_hits(as_span<std::uint8_t>(lookups, "offload_min_hits: lookups", k1),
                                         as_span<std::uint64_t>(keys, "offload_min_hits: keys", k2), capacity);
        },
        nb::arg("lookups"), nb::arg("keys"), nb::arg("capacity"),
        "Lookup hits of Belady's MIN (bypass allowed) over a CPU tier's references (sim/offload_min.hpp): "
        "lookups[i] nonzero for a lookup, zero for a store offer, of key keys[i].");
    m.def("derive_sessions", &sim::derive_sessions, nb::arg("hash_ids"), nb::arg("input_lengths"),
          nb::arg("block_size"),
          "Each request's conversation, as kvpolicy-sim derives it for a trace that names none: a request joins "
          "the earlier request whose last full block is the deepest of its own blocks, else opens a session "
          "(numbered from 0). `hash_ids`, `input_lengths`: per request, in trace order.");
}

}  // namespace kvpolicy::python
