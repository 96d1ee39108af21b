// What a comparison replays: the policies asked for, the two references
// every comparison is judged against (LRU, the baseline the gap column and
// --match-lru start from; Belady, the offline optimum the gap ends at), and
// which rows are shown. The references are named by their types, so their
// text is the registry's.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/eviction/belady.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/sim/replay_result.hpp"

namespace kvpolicy::sim {

/// The baseline: the gap column's 0 and --match-lru's target.
inline constexpr std::string_view baseline_policy = lru::name;
/// The offline optimum: the gap column's 1.
inline constexpr std::string_view optimal_policy = belady::name;

/// The policies a comparison replays, from the ones the user asked for: the
/// LRU -> Belady bounds (the gap column) run only when asked (`bounds`), and
/// --match-lru's target (LRU at each capacity) runs without a row of its own
/// when LRU was not asked for. Nothing else is added: a one-policy replay
/// replays one policy.
struct run_plan {
    std::vector<std::string> policies;          ///< to replay: the requested ones first, in their order
    std::vector<std::string> added_for_bounds;  ///< of lru, belady: not requested, run for the gap column (shown)
    bool lru_hidden = false;                    ///< lru runs for --match-lru only: its rows are dropped
};

/// Plans the runs (see run_plan). A name given twice runs once.
inline run_plan plan_runs(const std::vector<std::string>& requested, bool bounds, bool match_lru) {
    run_plan plan;
    const auto has = [&](std::string_view name) {
        return std::find(plan.policies.begin(), plan.policies.end(), name) != plan.policies.end();
    };
    for (const std::string& p : requested)
        if (!has(p)) plan.policies.push_back(p);
    if (bounds)
        for (const std::string_view ref : {baseline_policy, optimal_policy})
            if (!has(ref)) {
                plan.policies.emplace_back(ref);
                plan.added_for_bounds.emplace_back(ref);
            }
    if (match_lru && !has(baseline_policy)) {
        plan.policies.emplace_back(baseline_policy);
        plan.lru_hidden = true;
    }
    return plan;
}

/// Drops the rows the user did not ask for and `plan` does not show (lru
/// run only as --match-lru's target); the others keep their order.
inline void keep_shown(std::vector<replay_result>& results, const run_plan& plan) {
    if (!plan.lru_hidden) return;
    std::erase_if(results, [](const replay_result& r) { return r.policy == baseline_policy; });
}

}  // namespace kvpolicy::sim
