// A comparison as kvpolicy-sim prints it (driver.hpp: write_comparison).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <utility>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/sim/driver.hpp>
#include <kvpolicy/sim/report.hpp>

namespace kvpolicy::sim {

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
        title += std::string("; requests queue at one instance prefilling ") + rate +
                 " uncached tokens/s (--serve-rate)";
    }
    return title;
}

}  // namespace

void write_comparison(std::ostream& out, const comparison& c) {
    const run_options& o = c.setup.options;
    const std::string name = o.trace.empty() ? "built-in chat workload (seed " + std::to_string(o.seed) + ")"
                                             : o.trace.substr(o.trace.find_last_of('/') + 1);
    if (o.output == "json") write_json_lines(out, c.results);
    else if (o.output == "csv") write_csv(out, c.results);
    else write_table(out, c.results, table_title(c, name));
    for (const auto& [file, json] : {std::pair{o.csv_file, false}, std::pair{o.json_file, true}}) {
        if (file.empty()) continue;
        std::ofstream f(file);
        if (json) write_json_lines(f, c.results);
        else write_csv(f, c.results);
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
        write_plot(o.plot, c.results, "hit ratio vs capacity: " + name + " (" + std::string(to_string(o.mode)) + " mode)");
        if (o.output == "table") out << "\nplot written to " << o.plot << "\n";
    }
}

}  // namespace kvpolicy::sim
