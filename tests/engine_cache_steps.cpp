// engine::cache_steps against the cache driven by hand: two caches of one
// configuration over long random runs, one through cache_steps, one through
// the calls it stands for, written out (an admission outside a step between
// begin_step and end_step, an empty step ended when it throws, the last plan
// kept by the caller, a plan reported at most once). The same admissions,
// errors, holds, plans, reports and metrics, and run_last's refusals where
// the hand-driven side has no plan to run.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/any_tiered_cache.hpp>
#include <kvpolicy/engine/cache_steps.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace kvpolicy;

std::vector<block_hash> steps_chain(std::uint64_t session, std::size_t n) {
    std::vector<block_hash> h;
    for (std::size_t c = 0; c < n; ++c) h.push_back(mix64((session << 32) | c));
    return h;
}

void same_plans(const swap_plan& a, const swap_plan& b) {
    REQUIRE(a.step == b.step);
    REQUIRE(a.transfers == b.transfers);
    REQUIRE(a.drops == b.drops);
    REQUIRE(a.recovery == b.recovery);
}

void random_steps_run(const std::string& policy, bool thread_safe, std::uint64_t seed) {
    const cache_config cfg{.gpu_capacity = 10, .cpu_capacity = 8, .verify_chain = false};
    const auto driven = any_tiered_cache::make(cfg, {.policy = policy}, {.policy = "lru"}, thread_safe);
    const auto by_hand = any_tiered_cache::make(cfg, {.policy = policy}, {.policy = "lru"}, thread_safe);
    engine::cache_steps steps(*driven);
    swap_plan kept;              // by_hand's last plan
    std::uint64_t reported = 0;  // ... and the step last reported
    std::mutex lock;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 3000; ++i) {
        INFO("call " << i);
        const auto op = rng() % 100;
        if (op < 45) {  // an admission, inside an open step or as a step of its own
            const session_id s{1 + rng() % 5};
            const std::vector<block_hash> h = steps_chain(s.value, 1 + rng() % 12);  // over 10 blocks: refused
            std::string ea, eb;
            std::optional<engine::cache_steps::admitted> a;
            try {
                a = steps.admit(
                    s,
                    [&] {
                        return remote_admission{driven->admit(s, h), 0};
                    },
                    rng() % 2 ? &lock : nullptr);
            } catch (const error& e) {
                ea = e.what();
            }
            const bool own = !by_hand->in_step();
            if (own) by_hand->begin_step();
            admission b;
            try {
                b = by_hand->admit(s, h);
            } catch (const error& e) {
                eb = e.what();
            }
            REQUIRE(ea == eb);
            if (!eb.empty()) {
                if (own) kept = by_hand->end_step();
                continue;
            }
            REQUIRE(a->admission.local.match.run == b.match.run);
            REQUIRE(a->admission.local.computed_blocks == b.computed_blocks);
            REQUIRE(a->held == by_hand->held_by(s));
            REQUIRE(a->plan.has_value() == own);
            if (own) {
                kept = by_hand->end_step();
                same_plans(*a->plan, kept);
            }
        } else if (op < 55 && !by_hand->in_step()) {
            driven->begin_step();
            by_hand->begin_step();
        } else if (op < 70 && by_hand->in_step()) {
            const swap_plan a = steps.end_step();
            kept = by_hand->end_step();
            same_plans(a, kept);
        } else if (op < 85) {  // the copies reported, some failed
            std::vector<transfer_status> st(kept.transfers.size(), transfer_status::done);
            for (auto& x : st)
                if (rng() % 10 == 0) x = transfer_status::failed;
            std::string ea, eb;
            transfer_report a, b;
            try {
                a = steps.complete_transfers(st);
            } catch (const error& e) {
                ea = e.what();
            }
            try {
                b = by_hand->complete_transfers(kept, st);
                reported = kept.step;
            } catch (const error& e) {
                eb = e.what();
            }
            REQUIRE(ea == eb);
            REQUIRE(a.failed == b.failed);
            REQUIRE(a.drops == b.drops);
            REQUIRE(a.recompute == b.recompute);
        } else if (op < 92) {  // the plan run once: every copy done
            const bool open = by_hand->in_step();
            const bool nothing = !open && (kept.step == 0 || kept.step == reported);
            std::string ea;
            try {
                (void)steps.run_last("run", [&](const swap_plan& p) {
                    if (driven->in_step()) throw usage_error("a step is open");
                    same_plans(p, kept);
                    return driven->complete_transfers(p, std::vector(p.transfers.size(), transfer_status::done));
                });
            } catch (const error& e) {
                ea = e.what();
            }
            if (nothing) {
                REQUIRE(ea.starts_with("run: "));
            } else if (open) {
                REQUIRE(ea == "a step is open");
            } else {
                REQUIRE(ea.empty());
                (void)by_hand->complete_transfers(kept, std::vector(kept.transfers.size(), transfer_status::done));
                reported = kept.step;
            }
        } else {
            const session_id s{1 + rng() % 5};
            if (!by_hand->held_by(s).empty()) REQUIRE(driven->release(s, 0, 0) == by_hand->release(s, 0, 0));
        }
        same_plans(steps.last_plan(), kept);
        REQUIRE(driven->in_step() == by_hand->in_step());
        REQUIRE(driven->check_invariants() == by_hand->check_invariants());
    }
    const cache_metrics ma = driven->metrics(), mb = by_hand->metrics();
    REQUIRE(ma.requests == mb.requests);
    REQUIRE(ma.gpu.evictions == mb.gpu.evictions);
    REQUIRE(ma.swap_in_items == mb.swap_in_items);
    REQUIRE(ma.dropped_items == mb.dropped_items);
    REQUIRE(ma.failed_transfers == mb.failed_transfers);
}

}  // namespace

TEST_CASE("cache_steps drives a cache as its calls written out by hand", "[engine]") {
    for (bool thread_safe : {false, true})
        for (std::uint64_t seed : {1u, 2u, 3u}) {
            INFO("thread_safe " << thread_safe << ", seed " << seed);
            random_steps_run("lru", thread_safe, seed);
            random_steps_run("arc", thread_safe, seed);
        }
}

TEST_CASE("cache_steps: no plan to run until a step ends, and each plan runs once", "[engine]") {
    const auto cache = any_tiered_cache::make({.gpu_capacity = 4, .cpu_capacity = 4}, {}, {}, false);
    engine::cache_steps steps(*cache);
    const auto run = [&](const swap_plan& p) { return cache->complete_transfers(p, {}); };
    REQUIRE_THROWS_WITH(steps.run_last("TieredCache.run_plan", run),
                        "TieredCache.run_plan: no step has ended yet; run one step (begin_step, admit_through, "
                        "end_step, or admit_through outside a step), then run_plan() once");
    const std::vector<block_hash> h = steps_chain(1, 2);
    const auto a = steps.admit(session_id{1}, [&] { return remote_admission{cache->admit(session_id{1}, h), 0}; });
    REQUIRE(a.plan.has_value());
    REQUIRE(a.plan->step == 1);
    REQUIRE(steps.run_last("TieredCache.run_plan", run).failed == 0);
    REQUIRE_THROWS_WITH(steps.run_last("TieredCache.run_plan", run),
                        Catch::StartsWith("TieredCache.run_plan: the last plan (step 1) was already run or reported"));
}
