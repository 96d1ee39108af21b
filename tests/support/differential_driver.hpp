// The differential driver of tiered_cache: scheduler steps on a real cache
// and on the naive reference_cache side by side, with the data moved through
// real arenas. Every step it checks the decisions (prefix match, victims,
// drops, the completion reports of failed copies), the residency of every
// key, the bytes behind every cached item, check_invariants(), and that a
// refused admission changed nothing.
//
// Two users drive it through the same code: the Catch test
// (tests/cache_tiered.cpp, choices from std::mt19937_64, checks as REQUIRE)
// and the libFuzzer harness (fuzz/cache_ops.cpp, choices decoded from the
// fuzz input, a failed check aborts). So the driver is parameterised by
// - a `choice_source`: choose(n) in [0, n); exhausted() ends the run early
//   (a fuzz input that has run out of bytes);
// - a `differential_checker`: require(ok, what), which must not return when
//   `ok` is false (Catch's REQUIRE throws, the fuzzer aborts), since the
//   driver goes on to use what it just checked.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>

#include "cache_snapshot.hpp"
#include "fault_injecting_engine.hpp"
#include "reference_cache.hpp"

namespace kvpolicy::testing {

template <class C>
concept choice_source = requires(C& c, std::uint64_t n) {
    { c.choose(n) } -> std::same_as<std::uint64_t>;
    { c.exhausted() } -> std::same_as<bool>;
};

template <class C>
concept differential_checker = requires(C& c, bool ok, std::string_view what) {
    c.require(ok, what);
};

/// Choices from a seeded generator: one draw per choice, `rng() % n`.
struct random_choices {
    std::mt19937_64 rng;

    explicit random_choices(std::uint64_t seed) : rng(seed) {}
    std::uint64_t choose(std::uint64_t n) { return rng() % n; }
    [[nodiscard]] bool exhausted() const noexcept { return false; }
};
static_assert(choice_source<random_choices>);

/// A composition the reference can model: LRU or FIFO on each tier.
struct composition {
    const char* name;
    ref_rule gpu_rule, cpu_rule;
    bool inclusive;
};

struct differential_params {
    std::size_t gpu_capacity = 16;
    std::size_t cpu_capacity = 16;  ///< 0 = no CPU tier
    std::size_t steps = 1000;       ///< at most; fewer if the choices run out
    /// Copies fail at random with this probability, decided by the engine's
    /// own generator seeded with `seed`.
    double fail_rate = 0.0;
    std::uint64_t seed = 1;
    /// Copies fail where the choice source says (one choice per copy).
    bool chosen_failures = false;
    /// Now and then a request is cancelled while its copies are in flight.
    bool cancellations = false;
};

namespace detail {

template <class T>
void print_value(std::ostringstream& o, const T& v) {
    if constexpr (requires { o << v; }) {
        o << v;
    } else if constexpr (requires {
                             v.first;
                             v.second;
                         }) {
        o << '(';
        print_value(o, v.first);
        o << ',';
        print_value(o, v.second);
        o << ')';
    } else {
        o << '{';
        for (const auto& x : v) {
            print_value(o, x);
            o << ' ';
        }
        o << '}';
    }
}

}  // namespace detail

/// require(a == b), naming both values when they differ.
template <differential_checker Check, class A, class B>
void require_equal(Check& check, const A& a, const B& b, std::string_view what) {
    if (a == b) {
        check.require(true, what);
        return;
    }
    std::ostringstream o;
    o << what << ": the cache has ";
    detail::print_value(o, a);
    o << ", the reference ";
    detail::print_value(o, b);
    check.require(false, o.str());
}

inline std::uint64_t content_of(std::uint64_t key) { return mix64(key ^ 0xabcdef); }

/// Runs up to `p.steps` steps of `Cache` (a tiered_cache whose policies
/// `comp` names) against reference_cache. Returns the cache's metrics.
/// Steps: 1-3 admissions of six sessions' growing chains (some start with a
/// shared system prompt, keys 1..3; some read only a prefix); the plan run
/// through a fault-injecting engine; cancellations; the completion report;
/// the forward pass writing the computed blocks' bytes; then releases and
/// pins. With failures, every cached item must still have its bytes.
template <class Cache, choice_source Choices, differential_checker Check>
cache_metrics run_differential(const composition& comp, const differential_params& p, Choices& choices, Check& check) {
    const std::size_t gpu_cap = p.gpu_capacity, cpu_cap = p.cpu_capacity;
    Cache cache({.gpu_capacity = gpu_cap,
                 .cpu_capacity = cpu_cap,
                 .block_size = 16,
                 .item_bytes = 64,
                 .inclusive = comp.inclusive});
    reference_cache ref(gpu_cap, cpu_cap, comp.gpu_rule, comp.cpu_rule, comp.inclusive);
    block_arena gpu_bytes(gpu_cap, 64), cpu_bytes(std::max<std::size_t>(cpu_cap, 1), 64);
    fault_injecting_engine engine(gpu_bytes, cpu_bytes, p.fail_rate, p.seed);
    std::vector<transfer_status> status;
    auto choose = [&](std::uint64_t n) { return static_cast<std::size_t>(choices.choose(n)); };

    constexpr std::size_t n_sessions = 6;
    std::vector<std::vector<block_hash>> chains(n_sessions);
    std::vector<bool> busy(n_sessions, false);
    std::uint64_t next_key = 100;
    std::vector<block_hash> universe{1, 2, 3};  // every key ever used
    for (std::size_t s = 0; s < n_sessions; ++s)
        if (choose(2)) chains[s] = {1, 2, 3};
    std::vector<session_id> session_ids;
    for (std::size_t s = 0; s < n_sessions; ++s) session_ids.push_back(session_id{s});

    auto read = [](block_arena& a, block_id b) {
        std::uint64_t v;
        std::memcpy(&v, a.block(b).data(), sizeof v);
        return v;
    };
    auto write = [](block_arena& a, block_id b, std::uint64_t v) { std::memcpy(a.block(b).data(), &v, sizeof v); };
    auto gpu_slot = [&](block_hash h) {
        const std::optional<block_id> b = cache.gpu().cached_block(h);
        check.require(b.has_value(), "a block this step's requests hold is on the GPU");
        return *b;
    };

    for (std::size_t step = 0; step < p.steps && !choices.exhausted(); ++step) {
        cache.clock().advance(1);
        cache.begin_step();
        ref.begin_step();
        std::vector<std::pair<std::vector<block_hash>, std::size_t>> computed;  // chain, run
        std::vector<std::size_t> computed_session;
        const std::size_t admits = 1 + choose(3);
        for (std::size_t r = 0; r < admits; ++r) {
            const std::size_t s = choose(n_sessions);
            if (busy[s]) continue;
            // A new conversation: its first three blocks kept (a shared
            // system prompt), or none.
            if (chains[s].size() > gpu_cap / 2)
                chains[s].resize(choose(2) ? std::min<std::size_t>(chains[s].size(), 3) : 0);
            const std::size_t grow = choose(3);
            for (std::size_t g = 0; g < grow; ++g) {
                chains[s].push_back(next_key);
                universe.push_back(next_key++);
            }
            if (chains[s].empty()) continue;
            // Sometimes a request reads only a prefix (a branch point).
            std::vector<block_hash> req(chains[s].begin(),
                                        chains[s].begin() + static_cast<std::ptrdiff_t>(1 + choose(chains[s].size())));
            // The reference first: a refusal changes nothing there, and the
            // cache is then snapshotted before it is asked.
            bool ref_refused = false;
            std::pair<reference_cache::match_t, std::size_t> expected;
            try {
                expected = ref.admit(s, req);
            } catch (const std::length_error&) {
                ref_refused = true;
            }
            if (ref_refused) {
                const std::string before = cache_snapshot(cache, session_ids);
                bool refused = false;
                try {
                    (void)cache.admit(session_id{s}, req);
                } catch (const capacity_error&) {
                    refused = true;
                }
                check.require(refused, "admit: the cache refuses (capacity_error) what the reference has no room for");
                require_equal(check, cache_snapshot(cache, session_ids), before, "a refused admit changes nothing");
                continue;
            }
            const admission got = cache.admit(session_id{s}, req);
            require_equal(check, got.match.run, expected.first.run, "admit: prefix run");
            require_equal(check, got.match.gpu_blocks, expected.first.gpu, "admit: GPU hits");
            require_equal(check, got.match.cpu_blocks, expected.first.cpu, "admit: CPU hits");
            require_equal(check, got.gpu_evictions, expected.second, "admit: GPU victims");
            busy[s] = true;
            computed.emplace_back(req, got.match.run);
            computed_session.push_back(s);
        }
        const swap_plan& plan = cache.end_step();
        std::vector<std::uint64_t> drops;
        for (const dropped_item& d : plan.drops) drops.push_back(d.key);
        require_equal(check, drops, ref.drops, "end_step: drops, in order");
        if (p.chosen_failures)
            for (std::size_t i = 0; i < plan.transfers.size(); ++i)
                if (choose(4) == 0) engine.fail_next.insert(i);
        const std::size_t injected_before = engine.failures;
        const std::size_t failed = execute_plan(plan, engine, status);
        require_equal(check, failed, engine.failures - injected_before, "only the injected failures fail");
        // Now and then a request is cancelled while its copies are in flight
        // (one whose new items nobody else holds: nobody else computes them).
        std::vector<bool> cancelled(n_sessions, false);
        if (p.cancellations && choose(4) == 0 && !computed.empty()) {
            const std::size_t pick = choose(computed.size());
            const auto& [req, run] = computed[pick];
            const std::size_t s = computed_session[pick];
            bool alone = true;
            for (std::size_t i = run; i < req.size(); ++i)
                alone = alone && cache.gpu().ref_count(gpu_slot(req[i])) == 1;
            if (alone) {
                cache.free_session(session_id{s}, /*forget_blocks=*/true);
                ref.forget(s);
                busy[s] = false;
                cancelled[pick] = true;
            }
        }
        std::vector<bool> failed_ops(status.size());
        for (std::size_t i = 0; i < status.size(); ++i) failed_ops[i] = status[i] == transfer_status::failed;
        const transfer_report report = cache.complete_transfers(plan, status);
        const reference_cache::completion expected_loss = ref.complete(failed_ops);
        std::vector<std::uint64_t> lost;
        for (const dropped_item& d : report.drops) lost.push_back(d.key);
        std::sort(lost.begin(), lost.end());
        require_equal(check, lost, expected_loss.drops, "complete_transfers: drops");
        std::vector<std::pair<std::uint64_t, std::uint64_t>> recompute;
        for (const recompute_item& r : report.recompute) recompute.emplace_back(r.key, r.session.value);
        std::sort(recompute.begin(), recompute.end());
        require_equal(check, recompute, expected_loss.recompute, "complete_transfers: recomputes (key, holder)");
        if (failed == 0) check.require(report.clean(), "complete_transfers: a plan without failures reports clean");
        // The forward pass: the miss tails (of the requests not cancelled)
        // and the failed swap-ins are computed into their GPU slots.
        for (std::size_t r = 0; r < computed.size(); ++r)
            if (!cancelled[r])
                for (std::size_t i = computed[r].second; i < computed[r].first.size(); ++i) {
                    const block_hash h = computed[r].first[i];
                    write(gpu_bytes, gpu_slot(h), content_of(h));
                }
        for (const recompute_item& r : report.recompute) write(gpu_bytes, r.block, content_of(r.key));
        // Residency and data: the same number cached per tier, and every key
        // the reference caches is cached in the same tier with its bytes.
        require_equal(check, cache.gpu().num_cached_blocks(), ref.gpu.size(), "GPU items cached");
        require_equal(check, cache.has_cpu_tier() ? cache.cpu().num_cached_blocks() : 0, ref.cpu.size(),
                      "CPU items cached");
        for (const auto& [h, e] : ref.gpu) {
            const auto g = cache.gpu().cached_block(h);
            check.require(g.has_value(), "every key the reference has on the GPU is on the GPU");
            require_equal(check, read(gpu_bytes, *g), content_of(h), "the bytes of a GPU item");
        }
        for (const auto& [h, e] : ref.cpu) {
            const auto c = cache.has_cpu_tier() ? cache.cpu().cached_block(h) : std::nullopt;
            check.require(c.has_value(), "every key the reference has on the CPU is on the CPU");
            require_equal(check, read(cpu_bytes, *c), content_of(h), "the bytes of a CPU item");
        }
        require_equal(check, cache.check_invariants(), std::string(), "check_invariants()");
        // Finish some requests; pin or unpin now and then.
        for (std::size_t s = 0; s < n_sessions; ++s)
            if (busy[s] && choose(2)) {
                cache.release(session_id{s});
                ref.release(s);
                busy[s] = false;
            }
        if (choose(10) == 0) {
            const block_hash h = universe[choose(universe.size())];
            if (ref.gpu.contains(h)) {
                if (ref.gpu.at(h).pinned) {
                    cache.unpin(h);
                    ref.unpin(h);
                } else {
                    cache.pin(h);
                    ref.pin(h);
                }
            }
        }
    }
    const cache_metrics m = cache.metrics();
    check.require(m.failed_transfers >= engine.failures, "metrics: every injected failure is counted");
    return m;
}

}  // namespace kvpolicy::testing
