// The prefix-aware policies keep cached sets prefix-closed through the cache:
// after every request of random prefix forests served in prefix mode (as
// kvpolicy-sim serves traces), every cached block's parent is cached, so no
// cached block is stranded behind an evicted ancestor. Requests come from a
// dozen sessions, so that sessions move on (superseded_lru), return with a rhythm
// (session_aware_lru) and share blocks.
#include <catch2/catch.hpp>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/eviction/lrfu.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>
#include <kvpolicy/eviction/superseded_lru.hpp>
#include <kvpolicy/eviction/tail_aware_lru.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

template <class Policy>
void check_cached_sets_stay_prefixes(std::uint64_t seed, std::size_t capacity,
                                     const typename Policy::config_type& config = {}) {
    std::mt19937_64 rng(seed);
    constexpr int nodes = 400;
    std::vector<int> parent(nodes);
    for (int v = 0; v < nodes; ++v)
        parent[v] = v == 0 || rng() % 8 == 0 ? -1 : static_cast<int>(rng() % static_cast<std::uint64_t>(v));
    auto hash = [](int v) { return block_hash{5000 + static_cast<std::uint64_t>(v)}; };
    tiered_cache<Policy, lru> cache({.gpu_capacity = capacity, .block_size = 16}, config);
    std::size_t evictions = 0;
    for (int r = 0; r < 3000; ++r) {
        // Low ids more often: they are the shared prefixes.
        const int end = static_cast<int>(rng() % static_cast<std::uint64_t>(rng() % 2 ? 40 : nodes));
        std::vector<block_hash> chain;
        for (int v = end; v >= 0; v = parent[v]) chain.insert(chain.begin(), hash(v));
        if (chain.size() > capacity) continue;
        const session_id session{rng() % 12};
        cache.clock().set(static_cast<timestamp>(r + 1) * 1000);
        cache.begin_step();
        evictions += cache.admit(session, chain).gpu_evictions;
        (void)cache.end_step();
        cache.release(session);
        for (int v = 0; v < nodes; ++v)
            if (parent[v] >= 0 && cache.where(hash(v)) == item_state::in_gpu) {
                INFO(std::string(Policy::name)
                     << ", request " << r << ": block " << v << " is cached, its parent " << parent[v] << " is not");
                REQUIRE(cache.where(hash(parent[v])) == item_state::in_gpu);
            }
    }
    REQUIRE(evictions > 1000);
}

}  // namespace

TEST_CASE("prefix-aware policies keep cached sets prefix-closed on random prefix forests", "[eviction][prefix]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(24u, 96u);
    check_cached_sets_stay_prefixes<lru>(seed, capacity);
    check_cached_sets_stay_prefixes<lrfu>(seed, capacity);
    check_cached_sets_stay_prefixes<basic_lrfu<32>>(seed, capacity);
    check_cached_sets_stay_prefixes<superseded_lru>(seed, capacity);
    check_cached_sets_stay_prefixes<adaptive_kv>(seed, capacity);
    check_cached_sets_stay_prefixes<tail_aware_lru>(seed, capacity);
    check_cached_sets_stay_prefixes<session_aware_lru>(seed, capacity);
    // Its session rule on every pop where a session is expected back (margin
    // 0, not learned): the rule itself must keep prefixes, not only LRU.
    check_cached_sets_stay_prefixes<session_aware_lru>(seed, capacity,
                                                       {.far_factor = 0.0, .tuner = {.enabled = false}});
}
