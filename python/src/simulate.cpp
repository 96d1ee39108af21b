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

void bind_simulate(nb::module_& m) {
    m.def(
        "_simulate_json",
        [](std::optional<std::string> trace, std::optional<std::string> format, std::optional<std::string> mode,
           std::vector<std::string> policies, std::vector<std::size_t> capacities, std::size_t cpu_capacity,
           const std::string& cpu_policy, std::uint32_t block_size, std::uint32_t layers, std::uint64_t seed,
           unsigned threads, bool skip_bad_lines, const nb::dict& options, std::optional<std::string> return_hints,
           bool bounds, std::size_t lookahead, double serve_rate, std::uint64_t prefill_chunk, bool queue_past_gpu,
           bool store_admission, const std::vector<std::tuple<std::string, std::string, double>>& policy_options,
           bool match_lru, std::size_t instances, std::size_t remote_capacity) {
            sim::run_options o;
            o.trace = trace.value_or("");
            sim::set_format_and_mode(o, format.value_or(""), mode.value_or(""));
            o.policies = std::move(policies);  // names or "all", each looked up once by the driver
            for (std::size_t c : capacities) o.capacities.push_back({.blocks = c, .text = std::to_string(c)});
            // The driver (sim::prepare) checks the options below as kvpolicy-sim's flags.
            o.bounds = bounds;
            o.match_lru = match_lru;
            o.instances = instances;
            o.remote_capacity = remote_capacity;
            o.lookahead = lookahead;
            o.serve_rate = serve_rate;
            o.prefill_chunk = prefill_chunk;
            o.queue_past_gpu = queue_past_gpu;
            o.store_admission = store_admission;
            o.cpu_capacity = cpu_capacity;
            o.cpu_policy = cpu_policy;
            o.block_size = block_size;
            o.layers = layers;
            o.seed = seed;
            o.skip_bad_lines = skip_bad_lines;
            o.return_hints = return_hints.value_or("");
            o.threads = threads;
            for (const auto& [policy, name, value] : policy_options)  // kvpolicy-sim --option
                o.policy_options.push_back({policy, {name, value}});
            for (auto [k, v] : options) o.set(nb::cast<std::string>(k), nb::cast<double>(v));  // cost, workload
            std::ostringstream out;
            {
                nb::gil_scoped_release unlocked;
                sim::write_json_lines(out, sim::compare(std::move(o)).results);
            }
            return out.str();
        },
        nb::arg("trace").none(), nb::arg("format").none(), nb::arg("mode").none(), nb::arg("policies"),
        nb::arg("capacities"), nb::arg("cpu_capacity"), nb::arg("cpu_policy"), nb::arg("block_size"), nb::arg("layers"),
        nb::arg("seed"), nb::arg("threads"), nb::arg("skip_bad_lines"), nb::arg("options"),
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
