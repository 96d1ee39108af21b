// A custom eviction policy in about 40 lines, plugged into `tiered_cache`.
//
// MRU evicts the most recently used item. It suits requests that cycle
// through more blocks than the tier holds (a batch job re-reading documents
// in turn): there LRU always evicts the block needed next and never hits,
// while MRU keeps most of the cycle cached. It is LRU with the victim taken
// from the other end of the same list.
//
// What a policy must provide is the concept `eviction_policy` in
// kvpolicy/core/concepts.hpp; `item_tracking` does the bookkeeping of tracked
// and held items every policy shares. Define KVPOLICY_EXAMPLE_FORGET_ON_RELEASE
// to drop one member and see the diagnostic quoted in the README
// (tests/compile_fail/custom_policy_missing_member.cpp keeps it honest).
//
//   custom_policy
#include <cstdio>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/core/index_list.hpp>
#include <kvpolicy/eviction/item_tracking.hpp>
#include <kvpolicy/eviction/lru.hpp>

using namespace kvpolicy;

class mru {
public:
    struct config_type {};
    static constexpr std::string_view name = "mru";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit mru(std::size_t capacity, const config_type& = {}) : tracking_(capacity, "mru"), links_(capacity) {}

    void on_miss(const access_context&) noexcept {}  // learns nothing from a miss
    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        links_.push_back(recency_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        if (tracking_.is_evictable(id)) links_.move_to_back(recency_, recency_, id.value);
    }
    void on_hold(item_id id) noexcept {  // held items are never victims: unlink
        tracking_.mark_held(id);
        links_.remove(recency_, id.value);
    }
#ifndef KVPOLICY_EXAMPLE_FORGET_ON_RELEASE
    void on_release(item_id id, const access_context&) noexcept {  // a release is a use
        tracking_.mark_released(id);
        links_.push_back(recency_, id.value);
    }
#endif
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(recency_, id.value);
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (recency_.empty()) return std::nullopt;
        const item_id v{recency_.back};  // the most recent: the one difference from lru
        links_.remove(recency_, v.value);
        tracking_.mark_evicted(v);
        return v;
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) noexcept {
        return pop_victims_one_by_one(*this, out, now);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

private:
    item_tracking tracking_;
    index_links links_;   // [capacity] recency links
    index_list recency_;  // evictable items, least recent first
};

static_assert(eviction_policy<mru>);

// MRU on the GPU, LRU below it: one `using` line, as with the built-in policies.
using mru_cache = tiered_cache<mru, lru>;

namespace {

// Six one-block documents read in turn, eight rounds, through a GPU tier of
// four blocks (no CPU tier): the share of reads that hit.
template <class Cache>
double cyclic_hit_ratio() {
    Cache cache({.gpu_capacity = 4});
    std::size_t reads = 0, hits = 0;
    for (std::uint32_t round = 0; round < 8; ++round)
        for (std::uint32_t doc = 0; doc < 6; ++doc) {
            const block_hash document[] = {mix64(doc + 1)};
            cache.clock().advance(1);
            cache.begin_step();
            hits += cache.admit(session_id{doc}, document).match.run;
            (void)cache.end_step();
            cache.release(session_id{doc});
            ++reads;
        }
    return static_cast<double>(hits) / static_cast<double>(reads);
}

}  // namespace

int main() {
    std::printf("cyclic reads of 6 documents through 4 GPU blocks:\n");
    std::printf("  %-4s hit ratio %.2f\n", lru::name.data(), cyclic_hit_ratio<tiered_cache<lru>>());
    std::printf("  %-4s hit ratio %.2f\n", mru::name.data(), cyclic_hit_ratio<mru_cache>());
    return 0;
}
