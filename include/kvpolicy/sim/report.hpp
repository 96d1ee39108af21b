// Simulator output: a ranked table, CSV, JSON lines, and a gnuplot PNG.
#pragma once

#if defined(__CUDACC__)
#error "kvpolicy/sim headers are host-only; do not include them from .cu files"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <range/v3/view/chunk_by.hpp>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/capacity.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/run_plan.hpp"

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
/// `fixed`, or `none` for NaN (a figure that does not apply).
inline std::string fixed_or(double v, int digits, const char* none) { return std::isnan(v) ? none : fixed(v, digits); }
inline std::string json_number(double v) {
    if (std::isnan(v)) return "null";
    std::ostringstream o;
    o.precision(10);
    o << v;
    return o.str();
}
/// The capacity that reaches LRU's hit ratio, as text: "-" if not computed,
/// ">distinct" if not reached.
inline std::string match_text(const replay_result& r) {
    if (r.lru_match_unreachable) return "never";
    return r.lru_match_capacity == 0 ? "-" : std::to_string(r.lru_match_capacity);
}
inline double capacity_saved(const replay_result& r) {
    if (r.lru_match_capacity == 0 || r.capacity == 0) return std::numeric_limits<double>::quiet_NaN();
    return 1.0 - static_cast<double>(r.lru_match_capacity) / static_cast<double>(r.capacity);
}
}  // namespace detail

/// Fills each result's `gap_closed` from the lru and belady runs at the same
/// capacity (NaN where either is missing, or Belady is not above LRU), and in
/// tiered mode `ready_gap_closed`, the same share of LRU's -> Belady's total
/// ready time (NaN unless Belady's is below LRU's).
inline void fill_gap_closed(std::vector<replay_result>& results) {
    std::map<std::size_t, std::pair<const replay_result*, const replay_result*>> refs;  // capacity -> (lru, belady)
    for (const replay_result& r : results) {
        if (r.policy == baseline_policy) refs[r.capacity].first = &r;
        if (r.policy == optimal_policy) refs[r.capacity].second = &r;
    }
    constexpr double none = std::numeric_limits<double>::quiet_NaN();
    for (replay_result& r : results) {
        const auto [lru, opt] = refs[r.capacity];
        r.gap_closed = lru && opt ? gap_closed(r.hit_ratio(), lru->hit_ratio(), opt->hit_ratio()) : none;
        r.ready_gap_closed = lru && opt && r.mode == replay_mode::tiered
                                 ? gap_closed(-r.ready_s_total, -lru->ready_s_total, -opt->ready_s_total)
                                 : none;
    }
}

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
          << ", \"accesses_per_second\": " << r.accesses_per_second()
          << ", \"gap_closed\": " << detail::json_number(r.gap_closed);
        if (r.lru_match_capacity > 0 || r.lru_match_unreachable)
            o << ", \"lru_match_capacity\": "
              << (r.lru_match_unreachable ? "null" : std::to_string(r.lru_match_capacity))
              << ", \"capacity_saved\": " << detail::json_number(detail::capacity_saved(r));
        if (r.mode != replay_mode::flat)
            o << ", \"token_hit_ratio\": " << r.token_hit_ratio() << ", \"bypassed_requests\": " << r.bypassed_requests
              << ", \"sessions\": " << r.sessions << ", \"fairness\": " << detail::json_number(r.fairness)
              << ", \"re_prefill_share\": " << r.re_prefill_share();
        if (r.mode == replay_mode::offload)
            o << ", \"cpu_capacity\": " << r.cpu_capacity << ", \"gpu_hits\": " << r.gpu_hits
              << ", \"cpu_hits\": " << r.cpu_hits << ", \"declined_stores\": " << r.declined_stores;
        if (r.mode == replay_mode::tiered)
            o << ", \"cpu_capacity\": " << r.cpu_capacity << ", \"gpu_hits\": " << r.gpu_hits
              << ", \"cpu_hits\": " << r.cpu_hits << ", \"recomputed_blocks\": " << r.recomputed_blocks
              << ", \"swap_out_blocks\": " << r.swap_out_blocks
              << ", \"prefill_seconds_saved\": " << r.prefill_seconds_saved
              << ", \"ready_s_total\": " << r.ready_s_total << ", \"ready_s_mean\": " << r.ready_s_mean
              << ", \"ready_s_p99\": " << r.ready_s_p99
              << ", \"ready_gap_closed\": " << detail::json_number(r.ready_gap_closed);
        if (r.instances > 1 || r.remote_capacity > 0)
            o << ", \"instances\": " << r.instances << ", \"remote_capacity\": " << r.remote_capacity
              << ", \"remote_hits\": " << r.remote_hits << ", \"remote_failed_fetches\": " << r.remote_failed_fetches
              << ", \"isolated_hit_ratio\": " << r.isolated_hit_ratio;
        if (r.queue_modelled)
            o << ", \"queue_depth_mean\": " << r.queue_depth_mean << ", \"queue_depth_p50\": " << r.queue_depth_p50
              << ", \"queue_depth_p99\": " << r.queue_depth_p99;
        if (r.bad_lines.count > 0) o << ", \"bad_lines\": " << r.bad_lines.count;
        o << "}\n";
        out << o.str();
    }
}

inline void write_csv(std::ostream& out, const std::vector<replay_result>& results) {
    out << "policy,capacity,mode,requests,accesses,hits,misses,miss_ratio,hit_ratio,evictions,seconds,"
           "accesses_per_second,token_hit_ratio,gpu_hits,cpu_hits,recomputed_blocks,swap_out_blocks,"
           "prefill_seconds_saved,gap_closed,lru_match_capacity,capacity_saved,sessions,fairness,re_prefill_share";
    const bool queue = std::ranges::any_of(results, [](const replay_result& r) { return r.queue_modelled; });
    const bool tiered =
        std::ranges::any_of(results, [](const replay_result& r) { return r.mode == replay_mode::tiered; });
    if (tiered) out << ",ready_s_total,ready_s_mean,ready_s_p99,ready_gap_closed";
    out << (queue ? ",queue_depth_mean,queue_depth_p50,queue_depth_p99\n" : "\n");
    for (const replay_result& r : results) {
        out << r.policy << ',' << r.capacity << ',' << to_string(r.mode) << ',' << r.requests << ',' << r.accesses
            << ',' << r.hits << ',' << r.misses << ',' << detail::fixed(r.miss_ratio(), 6) << ','
            << detail::fixed(r.hit_ratio(), 6) << ',' << r.evictions << ',' << detail::fixed(r.seconds, 4) << ','
            << detail::fixed(r.accesses_per_second(), 0) << ',' << detail::fixed(r.token_hit_ratio(), 6) << ','
            << r.gpu_hits << ',' << r.cpu_hits << ',' << r.recomputed_blocks << ',' << r.swap_out_blocks << ','
            << detail::fixed(r.prefill_seconds_saved, 3) << ',' << detail::fixed_or(r.gap_closed, 6, "") << ','
            << (r.lru_match_capacity > 0 ? std::to_string(r.lru_match_capacity) : "") << ','
            << detail::fixed_or(detail::capacity_saved(r), 6, "") << ',';
        if (r.mode != replay_mode::flat)
            out << r.sessions << ',' << detail::fixed_or(r.fairness, 6, "") << ','
                << detail::fixed(r.re_prefill_share(), 6);
        else
            out << ",,";
        if (tiered)
            out << ',' << detail::fixed(r.ready_s_total, 6) << ',' << detail::fixed(r.ready_s_mean, 9) << ','
                << detail::fixed(r.ready_s_p99, 9) << ',' << detail::fixed_or(r.ready_gap_closed, 6, "");
        if (queue)
            out << ',' << detail::fixed(r.queue_depth_mean, 3) << ',' << r.queue_depth_p50 << ',' << r.queue_depth_p99;
        out << '\n';
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
    const auto same_capacity = [](const replay_result* a, const replay_result* b) {
        return a->capacity == b->capacity;
    };
    for (auto rows : sorted | ranges::views::chunk_by(same_capacity)) {
        const std::size_t capacity = rows.front()->capacity;
        const replay_result* opt = nullptr;
        for (const replay_result* r : rows)
            if (r->policy == optimal_policy) opt = r;
        const replay_mode mode = rows.front()->mode;
        out << "\ncapacity " << capacity << " blocks";
        if (mode == replay_mode::tiered || mode == replay_mode::offload)
            out << " (gpu) + " << rows.front()->cpu_capacity << " (cpu)";
        out << ", " << to_string(mode) << " mode, " << rows.front()->accesses << " block accesses\n";
        char line[256];
        bool matched = false;
        for (const replay_result* r : rows) matched = matched || r->lru_match_capacity > 0 || r->lru_match_unreachable;
        // The policy column fits the longest name (queue_aware_adaptive_kv
        // is 23), never narrower than the 18 every table had before.
        int name_width = 18;
        for (const replay_result* r : rows) name_width = std::max(name_width, static_cast<int>(r->policy.size()));
        std::snprintf(line, sizeof line, "  %-4s %-*s %9s %10s %7s", "rank", name_width, "policy", "hit ratio",
                      "vs belady", "gap %");
        out << line;
        if (matched) out << "  cap for lru  saved";
        if (mode != replay_mode::flat) out << "  token hit  fairness  re-prefill";
        if (mode == replay_mode::tiered)
            out << "   gpu hits   cpu hits  swap-outs  prefill s saved  ready ms mean     p99   total s  ready gap %";
        if (mode == replay_mode::offload) out << "   gpu hits   cpu hits";
        const bool queue = rows.front()->queue_modelled;
        if (queue) out << "  queue mean/p50/p99";
        out << "  accesses/s\n";
        int rank = 0;
        for (const replay_result* r : rows) {
            const std::string gap = opt == nullptr ? "-" : detail::fixed(r->hit_ratio() - opt->hit_ratio(), 4);
            const std::string closed = detail::fixed_or(100 * r->gap_closed, 1, "-");
            std::snprintf(line, sizeof line, "  %-4d %-*s %9.4f %10s %7s", ++rank, name_width, r->policy.c_str(),
                          r->hit_ratio(), gap.c_str(), closed.c_str());
            out << line;
            if (matched) {
                const std::string saved = detail::fixed_or(100 * detail::capacity_saved(*r), 1, "-");
                std::snprintf(line, sizeof line, "  %11s %5s%%", detail::match_text(*r).c_str(), saved.c_str());
                out << line;
            }
            if (mode != replay_mode::flat) {
                std::snprintf(line, sizeof line, "  %9.4f  %8s  %9.1f%%", r->token_hit_ratio(),
                              detail::fixed_or(r->fairness, 3, "-").c_str(), 100 * r->re_prefill_share());
                out << line;
            }
            if (mode == replay_mode::tiered) {
                std::snprintf(line, sizeof line, " %10llu %10llu %10llu %16.1f",
                              static_cast<unsigned long long>(r->gpu_hits),
                              static_cast<unsigned long long>(r->cpu_hits),
                              static_cast<unsigned long long>(r->swap_out_blocks), r->prefill_seconds_saved);
                out << line;
                std::snprintf(line, sizeof line, "  %13.3f %7.2f %9.2f %12s", 1e3 * r->ready_s_mean,
                              1e3 * r->ready_s_p99, r->ready_s_total,
                              detail::fixed_or(100 * r->ready_gap_closed, 1, "-").c_str());
                out << line;
            }
            if (mode == replay_mode::offload) {
                std::snprintf(line, sizeof line, " %10llu %10llu", static_cast<unsigned long long>(r->gpu_hits),
                              static_cast<unsigned long long>(r->cpu_hits));
                out << line;
            }
            if (queue) {
                std::snprintf(line, sizeof line, "  %7.1f/%zu/%zu", r->queue_depth_mean, r->queue_depth_p50,
                              r->queue_depth_p99);
                out << line;
            }
            std::snprintf(line, sizeof line, "  %10.3g\n", r->accesses_per_second());
            out << line;
        }
    }
    bool any_match = false, any_requests = false;
    std::map<std::size_t, int> bounds_at;  // capacity -> lru (1) | belady (2)
    for (const replay_result& r : results) {
        any_match = any_match || r.lru_match_capacity > 0 || r.lru_match_unreachable;
        any_requests = any_requests || r.mode != replay_mode::flat;
        bounds_at[r.capacity] |= (r.policy == baseline_policy ? 1 : 0) | (r.policy == optimal_policy ? 2 : 0);
    }
    std::map<std::string, std::string> elsewhere;  // policy -> the setting it is built for
    for (const replay_result& r : results)
        if (!r.built_for.empty()) elsewhere[r.policy] = r.built_for;
    for (const auto& [policy, setting] : elsewhere)
        out << "\n" << policy << " is built for " << setting << ", not for the hits ranked here";
    if (!elsewhere.empty()) out << "\n";
    const bool gap_missing = std::ranges::any_of(bounds_at, [](const auto& c) { return c.second != 3; });
    out << "\ngap %: share of the LRU -> Belady gap closed (- without both at this capacity"
        << (gap_missing ? "; --bounds runs them)" : ")");
    if (any_match)
        out << "\ncap for lru: least capacity (blocks, bisection to 1% of this capacity) reaching LRU's hit ratio at "
               "this "
               "capacity; saved: 1 - that / this capacity";
    if (std::ranges::any_of(results, [](const replay_result& r) { return r.mode == replay_mode::tiered; }))
        out << "\nready: seconds until a request's KV is ready at every layer, CPU copies overlapping the compute of "
               "the layers before theirs (mean and p99 per request, total); ready gap %: share of LRU's -> Belady's "
               "total closed";
    if (any_requests)
        out << "\nfairness: Jain's index over sessions' hit ratios; re-prefill: share of block accesses that compute "
               "KV "
               "an earlier request had computed";
    out << "\n";
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
/// gnuplot; in tiered mode a second panel beside it draws the mean ready
/// time. Throws: config_error if gnuplot is missing or fails.
inline void write_plot(const std::string& png, const std::vector<replay_result>& results, const std::string& title) {
    std::map<std::string, std::map<std::size_t, double>> series, ready;
    for (const replay_result& r : results) {
        series[r.policy][r.capacity] = r.hit_ratio();
        if (r.mode == replay_mode::tiered) ready[r.policy][r.capacity] = 1e3 * r.ready_s_mean;
    }
    const bool tiered = !ready.empty();
    std::ostringstream script;
    script << "set terminal pngcairo size " << (tiered ? "1600,640" : "1000,640") << " enhanced font 'sans,11'\n"
           << "set output '" << png << "'\n";
    if (tiered)
        script << "set multiplot layout 1,2 title '" << title << "' noenhanced\n";
    else
        script << "set title '" << title << "' noenhanced\n";
    script << "set xlabel 'capacity (blocks)'\nset ylabel 'hit ratio'\n"
           << "set key outside right top noenhanced\nset grid\nset yrange [0:*]\n";
    std::set<std::size_t> capacities;
    for (const auto& [p, pts] : series)
        for (const auto& [cap, hr] : pts) capacities.insert(cap);
    if (capacities.size() > 2) script << "set logscale x 2\n";
    script << "set xtics (";  // ticks at the measured capacities, not at powers of two
    for (auto it = capacities.begin(); it != capacities.end(); ++it)
        script << (it == capacities.begin() ? "" : ", ") << *it;
    script << ")\n";
    // LRU (the baseline) and Belady (the bound) thick and dark, the policy
    // README "Which policy" recommends (adaptive_kv) thick in blue; every
    // other policy thin and light, in colours that repeat only after 10, with
    // a point type of its own: with 20+ policies the references must stand
    // out and the rest stay tellable apart.
    constexpr std::string_view recommended = "adaptive_kv";
    static constexpr const char* light[] = {"#8fb8de", "#f2b880", "#9ed39e", "#e7a3a3", "#c5b0d5",
                                            "#c49c94", "#f7b6d2", "#bcbd22", "#9edae5", "#b0b0b0"};
    // References drawn last, on top of the rest.
    std::vector<std::string> order;
    for (const auto& [policy, pts] : series)
        if (policy != baseline_policy && policy != optimal_policy && policy != recommended) order.push_back(policy);
    for (const std::string_view ref : {recommended, baseline_policy, optimal_policy})
        if (series.contains(std::string(ref))) order.emplace_back(ref);
    // One panel: a line per policy of `order`, its points from `data`.
    auto panel = [&](std::map<std::string, std::map<std::size_t, double>>& data) {
        script << "plot ";
        std::size_t index = 0, others = 0;
        for (const std::string& policy : order) {
            script << (index == 0 ? "" : ", ") << "'-' using 1:2 with linespoints ";
            if (policy == optimal_policy)
                script << "lw 4 lc rgb '#000000' pt 7 ps 1.2";
            else if (policy == baseline_policy)
                script << "lw 4 lc rgb '#d62728' pt 5 ps 1.2";
            else if (policy == recommended)
                script << "lw 3 lc rgb '#1f77b4' pt 9 ps 1.1";
            else {
                script << "lw 1.5 lc rgb '" << light[others % 10] << "' pt " << 1 + others % 12 << " ps 0.8";
                ++others;
            }
            script << " title '" << policy << "'";
            ++index;
        }
        script << "\n";
        for (const std::string& policy : order) {
            for (const auto& [cap, v] : data[policy]) script << cap << ' ' << v << '\n';
            script << "e\n";
        }
    };
    panel(series);
    if (tiered) {
        script << "set ylabel 'mean ready time (ms): KV ready at every layer, per request'\n";
        panel(ready);
        script << "unset multiplot\n";
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
