// kvpolicy.simulate: kvpolicy-sim as a function. The runs are the
// simulator's driver's (kvpolicy/sim/driver.hpp, the kvpolicy_sim_driver
// library kvpolicy-sim links too: the same input loading, thread pool, gap
// column and --bounds), and the results go out through the tool's JSON writer
// (sim::write_json_lines), so a field the simulator gains reaches Python
// with no change here. Runs go in parallel threads with the GIL released.
#include <sstream>
#include <string>
#include <vector>

#include <kvpolicy/sim/driver.hpp>
#include <kvpolicy/sim/offload_min.hpp>
#include <kvpolicy/sim/report.hpp>
#include <kvpolicy/sim/request_times.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

void bind_simulate(nb::module_& m) {
    // kvpolicy.simulate fills one of these by its fields' names and runs it;
    // the driver (sim::prepare) checks it as kvpolicy-sim's flags.
    using o = sim::run_options;
    nb::class_<o>(m, "_RunOptions", "sim::run_options, as kvpolicy.simulate fills it.")
        .def(nb::init<>())
        .def_rw("trace", &o::trace)
        .def_rw("policies", &o::policies)  // names or "all", each looked up once by the driver
        .def_rw("bounds", &o::bounds)
        .def_rw("match_lru", &o::match_lru)
        .def_rw("instances", &o::instances)
        .def_rw("remote_capacity", &o::remote_capacity)
        .def_rw("lookahead", &o::lookahead)
        .def_rw("serve_rate", &o::serve_rate)
        .def_rw("prefill_chunk", &o::prefill_chunk)
        .def_rw("queue_past_gpu", &o::queue_past_gpu)
        .def_rw("store_admission", &o::store_admission)
        .def_rw("cpu_capacity", &o::cpu_capacity)
        .def_rw("cpu_policy", &o::cpu_policy)
        .def_rw("block_size", &o::block_size)
        .def_rw("layers", &o::layers)
        .def_rw("seed", &o::seed)
        .def_rw("skip_bad_lines", &o::skip_bad_lines)
        .def_rw("return_hints", &o::return_hints)
        .def_rw("threads", &o::threads)
        .def("set", &o::set, "A prefill cost figure or a built-in workload option by name.")
        .def("set_format_and_mode", &sim::set_format_and_mode, "--format and --mode ('': the default).")
        .def(
            "set_capacities", [](o& x, std::string_view list) { x.capacities = sim::parse_capacity_list(list); },
            "--capacity: blocks, or P% of the trace's distinct blocks, comma-separated.")
        .def("add_policy_option", [](o& x, const std::string& policy, const std::string& name, double v) {
            x.policy_options.push_back({policy, {name, v}});  // kvpolicy-sim --option POLICY.NAME=VALUE
        });
    m.def(
        "_simulate_json",
        [](o options) {
            std::ostringstream out;
            nb::gil_scoped_release unlocked;
            sim::write_json_lines(out, sim::compare(std::move(options)).results);
            return out.str();
        },
        nb::arg("options"), "kvpolicy-sim --output json, as text (kvpolicy.simulate parses it).");
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
