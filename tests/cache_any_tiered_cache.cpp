// any_tiered_cache (cache/any_tiered_cache.hpp) decides exactly as the
// tiered_cache it holds: made by name, plain or thread-safe, beside a
// tiered_cache of the concrete policies, over long random runs of steps
// (admissions, some through a remote directory, releases, failed copies):
// the same admissions, plans, errors, metrics and states.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/any_tiered_cache.hpp>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

// A remote store's directory: the item keys it holds.
struct key_directory {
    std::set<std::uint64_t> keys;
    std::size_t present_prefix(std::span<const std::uint64_t> k) const {
        std::size_t n = 0;
        while (n < k.size() && keys.contains(k[n])) ++n;
        return n;
    }
};

std::vector<block_hash> session_chain(std::uint64_t session, std::size_t n) {
    std::vector<block_hash> h;
    for (std::size_t c = 0; c < n; ++c) h.push_back(mix64((session << 32) | c));
    return h;
}

template <class Gpu, class Cpu>
void same_decisions(const std::string& gpu, const std::string& cpu, bool thread_safe, bool remote, std::uint64_t seed) {
    const cache_config cfg{.gpu_capacity = 12, .cpu_capacity = 10, .verify_chain = false, .remote = remote};
    const auto any = any_tiered_cache::make(cfg, {.policy = gpu}, {.policy = cpu}, thread_safe);
    tiered_cache<Gpu, Cpu> alone(cfg, {}, {});
    key_directory dir;
    std::mt19937_64 rng(seed);
    for (int step = 0; step < 1500; ++step) {
        INFO("step " << step);
        const timestamp t = 10 * static_cast<timestamp>(step + 1);
        any->set_time(t);
        alone.clock().set(t);
        any->begin_step();
        alone.begin_step();
        for (std::size_t r = rng() % 3; r-- > 0;) {
            const session_id s{1 + rng() % 6};
            const std::vector<block_hash> h = session_chain(s.value, 1 + rng() % 6);
            std::string ea, eb;
            remote_admission a, b;
            const bool through = remote && rng() % 2 == 0;
            try {
                a = through ? any->admit_through(dir, s, h) : remote_admission{any->admit(s, h), 0};
            } catch (const error& e) {
                ea = e.what();
            }
            try {
                b = through ? admit_through(alone, dir, s, h) : remote_admission{alone.admit(s, h), 0};
            } catch (const error& e) {
                eb = e.what();
            }
            REQUIRE(ea == eb);
            REQUIRE(a.remote_blocks == b.remote_blocks);
            REQUIRE(a.local.computed_blocks == b.local.computed_blocks);
            REQUIRE(a.local.match.run == b.local.match.run);
            REQUIRE(any->held_by(s) == alone.held_by(s));
        }
        const swap_plan pa = any->end_step();
        const swap_plan& pb = alone.end_step();
        REQUIRE(pa.transfers == pb.transfers);
        REQUIRE(pa.remote_keys == pb.remote_keys);
        REQUIRE(pa.drops.size() == pb.drops.size());
        std::vector<transfer_status> st(pa.transfers.size(), transfer_status::done);
        for (auto& x : st)
            if (rng() % 20 == 0) x = transfer_status::failed;
        for (std::size_t i = 0; i < pa.transfers.size(); ++i)
            if (pa.transfers[i].to == tier::remote && st[i] == transfer_status::done)
                dir.keys.insert(pa.remote_keys[pa.transfers[i].dst.index()]);
        const transfer_report ra = any->complete_transfers(pa, st), rb = alone.complete_transfers(pb, st);
        REQUIRE(ra.failed == rb.failed);
        for (std::uint64_t s = 1; s <= 6; ++s)
            if (rng() % 3 == 0 && !alone.held_by(session_id{s}).empty())
                REQUIRE(any->release(session_id{s}, 0, 0) == alone.release(session_id{s}, 0, 0));
        REQUIRE(any->check_invariants() == alone.check_invariants());
        REQUIRE(any->check_invariants().empty());
    }
    const cache_metrics ma = any->metrics(), mb = alone.metrics();
    REQUIRE(ma.gpu.evictions == mb.gpu.evictions);
    REQUIRE(ma.cpu.hit_blocks == mb.cpu.hit_blocks);
    REQUIRE(ma.swap_in_items == mb.swap_in_items);
    REQUIRE(ma.dropped_items == mb.dropped_items);
    REQUIRE(ma.remote_staged_blocks == mb.remote_staged_blocks);
    REQUIRE((ma.remote_staged_blocks > 0) == remote);  // the store was asked, and answered
    for (std::uint64_t s = 1; s <= 6; ++s)
        for (block_hash h : session_chain(s, 6)) REQUIRE(any->where(h, 0) == alone.where(h, 0));
}

}  // namespace

TEST_CASE("any_tiered_cache decides exactly as the tiered_cache of the policies it names", "[cache]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const bool thread_safe = GENERATE(false, true);
    same_decisions<lru, lru>("lru", "lru", thread_safe, false, seed);
    same_decisions<arc, sieve>("arc", "sieve", thread_safe, false, seed);
    same_decisions<session_aware_lru, lru>("session_aware_lru", "lru", thread_safe, true, seed);
}

TEST_CASE("any_tiered_cache refuses an unknown policy name", "[cache][errors]") {
    REQUIRE_THROWS_AS(any_tiered_cache::make({.gpu_capacity = 4}, {.policy = "nope"}, {}, false), unknown_name_error);
}
