// tiered_cache with thread_safe_traits: a scheduler thread runs the steps
// (begin_step / admit / end_step, releases, cancellations, queries) while a
// transfer thread runs each plan through a failing engine and reports it
// (complete_transfers) asynchronously, as vLLM's connector reports
// complete_store / complete_load, querying the cache as it goes. Built and
// run under TSan too (`ctest --preset tsan -L threads`).
#include <catch2/catch.hpp>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/fault_injecting_engine.hpp"

using namespace kvpolicy;

namespace {

using cache_t = tiered_cache<lru, lru, thread_safe_traits>;

// One plan handed from the scheduler to the transfer thread.
struct mailbox {
    std::mutex m;
    std::condition_variable cv;
    std::optional<swap_plan> plan;  // waiting to run
    bool reported = true;           // the last plan's report is in
    bool stop = false;
};

}  // namespace

TEST_CASE("a scheduler thread and a transfer thread share the cache", "[cache][threads]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    constexpr std::size_t steps = 20000;
    constexpr std::size_t gpu_cap = 24, cpu_cap = 16;
    cache_t cache({.gpu_capacity = gpu_cap, .cpu_capacity = cpu_cap, .block_size = 16, .item_bytes = 64});
    block_arena gpu_bytes(gpu_cap, 64), cpu_bytes(cpu_cap, 64);
    testing::fault_injecting_engine engine(gpu_bytes, cpu_bytes, 0.1, seed);
    mailbox box;
    std::atomic<std::uint64_t> ops{0};
    std::atomic<std::uint64_t> bad_invariants{0};

    std::thread transfer([&] {
        std::vector<transfer_status> status;
        for (;;) {
            swap_plan plan;
            {
                std::unique_lock lock(box.m);
                box.cv.wait(lock, [&] { return box.plan.has_value() || box.stop; });
                if (!box.plan) return;
                plan = std::move(*box.plan);
                box.plan.reset();
            }
            (void)execute_plan(plan, engine, status);
            // Meanwhile the scheduler releases and cancels: the report lands
            // before, between or after those calls.
            (void)cache.metrics();
            (void)cache.lookup(std::vector<block_hash>{1, 2, 3});
            (void)cache.complete_transfers(plan, status);
            if (!cache.check_invariants().empty()) ++bad_invariants;
            ops += 4;
            {
                std::scoped_lock lock(box.m);
                box.reported = true;
            }
            box.cv.notify_all();
        }
    });

    std::mt19937_64 rng(seed);
    constexpr std::size_t n_sessions = 8;
    std::vector<std::vector<block_hash>> chains(n_sessions);
    std::vector<bool> busy(n_sessions, false);
    std::uint64_t next_key = 100, refused = 0;
    for (std::size_t step = 0; step < steps; ++step) {
        {  // the forward pass of the last step needs its copies: wait for the report
            std::unique_lock lock(box.m);
            box.cv.wait(lock, [&] { return box.reported; });
        }
        cache.clock().advance(1);
        cache.begin_step();
        ++ops;
        for (std::size_t r = 0, n = 1 + rng() % 3; r < n; ++r) {
            const std::size_t s = rng() % n_sessions;
            if (busy[s]) continue;
            // Truncate with erase, not resize: GCC 12 at -O2 reports a bogus
            // -Warray-bounds inside resize's append path here, a path this
            // call never takes since it only shrinks (one of the false
            // positives tracked by GCC's -Warray-bounds meta-bug, PR 56456).
            if (chains[s].size() > 6) chains[s].erase(chains[s].begin() + (rng() % 2 ? 3 : 0), chains[s].end());
            if (chains[s].empty()) chains[s] = {1, 2, 3};
            for (std::size_t g = rng() % 3; g > 0; --g) chains[s].push_back(next_key++);
            try {
                cache.admit(session_id{s}, chains[s]);
                busy[s] = true;
            } catch (const capacity_error&) {
                ++refused;
            }
            ++ops;
        }
        const swap_plan& plan = cache.end_step();
        ++ops;
        {
            std::scoped_lock lock(box.m);
            box.plan = plan;  // a copy: the transfer thread reports it by its step
            box.reported = false;
        }
        box.cv.notify_all();
        // While the copies run: finish some requests, cancel one now and then
        // (its swap-ins still in flight), look things up.
        for (std::size_t s = 0; s < n_sessions; ++s) {
            if (!busy[s] || rng() % 2) continue;
            if (rng() % 8 == 0)
                cache.free_session(session_id{s}, /*forget_blocks=*/true);
            else
                cache.release(session_id{s});
            busy[s] = false;
            ++ops;
        }
        (void)cache.where(1 + rng() % 3);
        (void)cache.held_by(session_id{rng() % n_sessions});
        ops += 2;
    }
    {
        std::unique_lock lock(box.m);
        box.cv.wait(lock, [&] { return box.reported; });
        box.stop = true;
    }
    box.cv.notify_all();
    transfer.join();

    REQUIRE(bad_invariants == 0);
    REQUIRE(cache.check_invariants().empty());
    const cache_metrics m = cache.metrics();
    REQUIRE(m.failed_transfers > 0);
    REQUIRE(m.swap_in_items > 0);
    std::printf("cache_threads seed %llu: %llu cache calls over %zu steps (%llu refused admits), %llu failed copies\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(ops.load()), steps,
                static_cast<unsigned long long>(refused), static_cast<unsigned long long>(m.failed_transfers));
}
