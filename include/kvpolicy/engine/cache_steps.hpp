// cache_steps: the steps of an any_tiered_cache as an engine that admits
// one request at a time drives them, and the last step's plan.
//
// An admission inside a step the engine opened is just that; one outside
// any step is a whole step of its own (begin, admit, end), and if it throws
// that step still ends, empty (nothing was admitted), so the cache is never
// left inside a step its caller did not open. The plan of the last step
// that ended is kept: the engine reports the copies it ran
// (complete_transfers), or has a transfer engine run it (run_last), once:
// a plan already reported is not run again.
//
// The cache locks itself when it is thread-safe; the kept plan has a lock of
// its own. Python's kvpolicy.TieredCache drives its cache through this
// (python/src/cache.cpp); tests/engine_cache_steps.cpp checks it against
// the cache driven by hand.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvpolicy/cache/any_tiered_cache.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy::engine {

class cache_steps {
public:
    explicit cache_steps(any_tiered_cache& cache) noexcept : cache_(cache) {}

    /// What one admission did: the admission, the GPU blocks its session
    /// holds after it, and, for an admission outside an open step, the plan
    /// of the step it was.
    struct admitted {
        remote_admission admission;
        std::vector<block_id> held;
        std::optional<swap_plan> plan;
    };

    /// `admit_one()` (an admission of `session`: the cache's admit, or an
    /// admit_through, returning a remote_admission), under `lock` if any, in
    /// the open step or in a step of its own. Throws: what admit_one throws,
    /// the cache unchanged but for an empty step ended.
    template <class Admit>
    admitted admit(session_id session, Admit&& admit_one, std::mutex* lock = nullptr) {
        std::unique_lock<std::mutex> locked;
        if (lock) locked = std::unique_lock(*lock);
        const bool own_step = !cache_.in_step();
        if (own_step) cache_.begin_step();
        admitted out;
        try {
            out.admission = admit_one();
        } catch (...) {
            if (own_step) (void)end_step();
            throw;
        }
        out.held = cache_.held_by(session);
        if (own_step) out.plan = end_step();
        return out;
    }

    /// Ends the open step; its plan is kept.
    swap_plan end_step() {
        const swap_plan& p = cache_.end_step();
        std::scoped_lock lock(mutex_);
        last_ = p;
        return p;
    }

    /// The kept plan's copies are done or failed (`statuses`, one per
    /// transfer): the cache's complete_transfers over it.
    transfer_report complete_transfers(std::span<const transfer_status> statuses) {
        const swap_plan plan = last_plan();
        transfer_report r = cache_.complete_transfers(plan, statuses);
        reported_ = plan.step;
        return r;
    }

    /// `run(plan)` over the kept plan (a transfer engine's run, which reports
    /// it to the cache). Throws: usage_error naming `what` when no step has
    /// ended or the plan was run or reported already, and no step is open
    /// (inside one, `run` says why it cannot run).
    template <class Run>
    auto run_last(const std::string& what, Run&& run) {
        const swap_plan plan = last_plan();
        if (!cache_.in_step() && (plan.step == 0 || plan.step == reported_))
            throw usage_error(what + ": " +
                              (plan.step == 0 ? std::string("no step has ended yet")
                                              : "the last plan (step " + std::to_string(plan.step) +
                                                    ") was already run or reported") +
                              "; run one step (begin_step, admit_through, end_step, or admit_through outside a step), "
                              "then run_plan() once");
        auto out = run(plan);
        reported_ = plan.step;
        return out;
    }

    /// A copy of the kept plan (step 0: none has ended).
    [[nodiscard]] swap_plan last_plan() const {
        std::scoped_lock lock(mutex_);
        return last_;
    }

private:
    any_tiered_cache& cache_;
    mutable std::mutex mutex_;                // guards last_
    swap_plan last_;                          // the plan of the last step that ended
    std::atomic<std::uint64_t> reported_{0};  // the step of the last plan reported (a plan runs once)
};

}  // namespace kvpolicy::engine
