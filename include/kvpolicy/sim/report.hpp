// Simulator output: a ranked table, CSV, JSON lines, and a gnuplot PNG.
#pragma once

#if defined(__CUDACC__)
#error "kvpolicy/sim headers are host-only; do not include them from .cu files"
#endif

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <range/v3/view/chunk_by.hpp>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/replay.hpp"

namespace kvpolicy::sim {

namespace detail {
inline std::string json_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}
inline std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}
}  // namespace detail

/// One JSON object per result, one per line (the contract other programs
/// script against: field names are stable).
inline void write_json_lines(std::ostream& out, const std::vector<replay_result>& results) {
    for (const replay_result& r : results) {
        std::ostringstream o;
        o.precision(10);
        o << "{\"policy\": \"" << detail::json_escape(r.policy) << "\", \"capacity\": " << r.capacity
          << ", \"mode\": \"" << to_string(r.mode) << "\", \"requests\": " << r.requests
          << ", \"accesses\": " << r.accesses << ", \"hits\": " << r.hits << ", \"misses\": " << r.misses
          << ", \"miss_ratio\": " << r.miss_ratio() << ", \"hit_ratio\": " << r.hit_ratio()
          << ", \"evictions\": " << r.evictions << ", \"seconds\": " << r.seconds
          << ", \"accesses_per_second\": " << r.accesses_per_second();
        if (r.mode != replay_mode::flat)
            o << ", \"token_hit_ratio\": " << r.token_hit_ratio() << ", \"bypassed_requests\": " << r.bypassed_requests;
        if (r.mode == replay_mode::tiered)
            o << ", \"cpu_capacity\": " << r.cpu_capacity << ", \"gpu_hits\": " << r.gpu_hits
              << ", \"cpu_hits\": " << r.cpu_hits << ", \"recomputed_blocks\": " << r.recomputed_blocks
              << ", \"swap_out_blocks\": " << r.swap_out_blocks
              << ", \"prefill_seconds_saved\": " << r.prefill_seconds_saved;
        if (r.instances > 1 || r.remote_capacity > 0)
            o << ", \"instances\": " << r.instances << ", \"remote_capacity\": " << r.remote_capacity
              << ", \"remote_hits\": " << r.remote_hits << ", \"remote_failed_fetches\": " << r.remote_failed_fetches
              << ", \"isolated_hit_ratio\": " << r.isolated_hit_ratio;
        if (r.bad_lines.count > 0) o << ", \"bad_lines\": " << r.bad_lines.count;
        o << "}\n";
        out << o.str();
    }
}

inline void write_csv(std::ostream& out, const std::vector<replay_result>& results) {
    out << "policy,capacity,mode,requests,accesses,hits,misses,miss_ratio,hit_ratio,evictions,seconds,"
           "accesses_per_second,token_hit_ratio,gpu_hits,cpu_hits,recomputed_blocks,swap_out_blocks,"
           "prefill_seconds_saved\n";
    for (const replay_result& r : results) {
        out << r.policy << ',' << r.capacity << ',' << to_string(r.mode) << ',' << r.requests << ',' << r.accesses
            << ',' << r.hits << ',' << r.misses << ',' << detail::fixed(r.miss_ratio(), 6) << ','
            << detail::fixed(r.hit_ratio(), 6) << ',' << r.evictions << ',' << detail::fixed(r.seconds, 4) << ','
            << detail::fixed(r.accesses_per_second(), 0) << ',' << detail::fixed(r.token_hit_ratio(), 6) << ','
            << r.gpu_hits << ',' << r.cpu_hits << ',' << r.recomputed_blocks << ',' << r.swap_out_blocks << ','
            << detail::fixed(r.prefill_seconds_saved, 3) << '\n';
    }
}

/// Per capacity, policies ranked by hit ratio, with each one's distance to
/// Belady (the offline optimum) when Belady ran.
inline void write_table(std::ostream& out, const std::vector<replay_result>& results, const std::string& title) {
    std::vector<const replay_result*> sorted;
    for (const replay_result& r : results) sorted.push_back(&r);
    std::stable_sort(sorted.begin(), sorted.end(), [](const replay_result* a, const replay_result* b) {
        return a->capacity != b->capacity ? a->capacity < b->capacity : a->hit_ratio() > b->hit_ratio();
    });
    out << title << "\n";
    const auto same_capacity = [](const replay_result* a, const replay_result* b) { return a->capacity == b->capacity; };
    for (auto rows : sorted | ranges::views::chunk_by(same_capacity)) {
        const std::size_t capacity = rows.front()->capacity;
        const replay_result* opt = nullptr;
        for (const replay_result* r : rows)
            if (r->policy == "belady") opt = r;
        const replay_mode mode = rows.front()->mode;
        out << "\ncapacity " << capacity << " blocks";
        if (mode == replay_mode::tiered) out << " (gpu) + " << rows.front()->cpu_capacity << " (cpu)";
        out << ", " << to_string(mode) << " mode, " << rows.front()->accesses << " block accesses\n";
        char line[256];
        std::snprintf(line, sizeof line, "  %-4s %-16s %9s %10s", "rank", "policy", "hit ratio", "vs belady");
        out << line;
        if (mode != replay_mode::flat) out << "  token hit";
        if (mode == replay_mode::tiered) out << "   gpu hits   cpu hits  swap-outs  prefill s saved";
        out << "  accesses/s\n";
        int rank = 0;
        for (const replay_result* r : rows) {
            const std::string gap = opt == nullptr ? "-" : detail::fixed(r->hit_ratio() - opt->hit_ratio(), 4);
            std::snprintf(line, sizeof line, "  %-4d %-16s %9.4f %10s", ++rank, r->policy.c_str(), r->hit_ratio(),
                          gap.c_str());
            out << line;
            if (mode != replay_mode::flat) {
                std::snprintf(line, sizeof line, "  %9.4f", r->token_hit_ratio());
                out << line;
            }
            if (mode == replay_mode::tiered) {
                std::snprintf(line, sizeof line, " %10llu %10llu %10llu %16.1f",
                              static_cast<unsigned long long>(r->gpu_hits), static_cast<unsigned long long>(r->cpu_hits),
                              static_cast<unsigned long long>(r->swap_out_blocks), r->prefill_seconds_saved);
                out << line;
            }
            std::snprintf(line, sizeof line, "  %10.3g\n", r->accesses_per_second());
            out << line;
        }
    }
    std::size_t bad = 0;
    for (const replay_result& r : results) bad = std::max(bad, r.bad_lines.count);
    if (bad > 0) {
        out << "\nskipped " << bad << " bad line(s); first:\n";
        for (const replay_result& r : results) {
            for (const std::string& m : r.bad_lines.first_messages) out << "  " << m << "\n";
            if (!r.bad_lines.first_messages.empty()) break;
        }
    }
}

/// Writes a PNG of hit ratio against capacity, one line per policy, through
/// gnuplot. Throws: config_error if gnuplot is missing or fails.
inline void write_plot(const std::string& png, const std::vector<replay_result>& results, const std::string& title) {
    std::map<std::string, std::map<std::size_t, double>> series;
    for (const replay_result& r : results) series[r.policy][r.capacity] = r.hit_ratio();
    std::ostringstream script;
    script << "set terminal pngcairo size 1000,640 enhanced font 'sans,11'\n"
           << "set output '" << png << "'\n"
           << "set title '" << title << "' noenhanced\n"
           << "set xlabel 'capacity (blocks)'\nset ylabel 'hit ratio'\n"
           << "set key outside right top noenhanced\nset grid\nset yrange [0:*]\n";
    std::set<std::size_t> capacities;
    for (const auto& [p, pts] : series)
        for (const auto& [cap, hr] : pts) capacities.insert(cap);
    if (capacities.size() > 2) script << "set logscale x 2\n";
    script << "set xtics (";  // ticks at the measured capacities, not at powers of two
    for (auto it = capacities.begin(); it != capacities.end(); ++it)
        script << (it == capacities.begin() ? "" : ", ") << *it;
    script << ")\n";
    script << "plot ";
    std::size_t index = 0;
    for (const auto& [policy, pts] : series) {
        // 8 colours repeat: every 8 policies switch the dash style so lines stay apart.
        script << (index == 0 ? "" : ", ") << "'-' using 1:2 with linespoints lw 2 dt " << 1 + index / 8
               << " title '" << policy << "'";
        ++index;
    }
    script << "\n";
    for (const auto& [policy, pts] : series) {
        for (const auto& [cap, hr] : pts) script << cap << ' ' << hr << '\n';
        script << "e\n";
    }
    FILE* gp = popen("gnuplot 2>&1", "w");
    if (gp == nullptr) throw config_error("--plot: cannot start gnuplot; install it (apt-get install gnuplot-nox)");
    const std::string text = script.str();
    const bool wrote = std::fwrite(text.data(), 1, text.size(), gp) == text.size();
    const int rc = pclose(gp);
    if (!wrote || rc != 0)
        throw config_error("--plot: gnuplot failed (exit " + std::to_string(rc) +
                           "); install gnuplot-nox, or drop --plot");
}

}  // namespace kvpolicy::sim
