// Belady's MIN: evict the item whose next use is farthest in the future
// (Belady, "A study of replacement algorithms for a virtual-storage
// computer", IBM Systems Journal 5(2), 1966).
//
// The offline optimum for demand paging: no policy that inserts every missed
// item has fewer misses on the same trace, so it is the bound every online
// policy is measured against. It needs the future: `ctx.next_use`, the time
// of the item's next use, given at insert, access and release (`never` = not
// used again: the farthest of all). Use it in simulation only, with next uses
// computed from the trace; in a live engine nothing knows them.
//
// Ties (several items never used again, or equal next uses) go to the
// deepest item first (largest `ctx.chunk`), then to the item whose next use
// was given earliest, so victims are deterministic and independent of slot
// ids. Deepest first is what makes MIN the optimum of the prefix hit ratio
// (kvpolicy-sim's prefix mode) and not only of block hits: a block hash names
// its whole prefix, so an ancestor is used whenever a descendant is and its
// next use is never later; equal next uses are blocks of one future request,
// and dropping the deeper one keeps the cached set ancestor-closed, so every
// cached block of a request lies in its cached prefix and prefix hits equal
// block hits, which MIN maximises under the rule that a running request's
// blocks are held (tests/sim_belady_optimal.cpp checks this against an
// exhaustive search). Flat replays give every access chunk 0: the stamp
// decides there. A held item leaves the heap; its release brings it back
// with the release's next use (the latest knowledge). O(log n) per
// operation; about 29 bytes per item.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/heap_ordered_policy.hpp"

namespace kvpolicy {

/// Belady's order as a rank: the heap pops its least element, so "least" is
/// "farthest next use".
struct belady_rank {
    timestamp next_use;
    std::uint32_t depth;  // the item's chunk: deeper first among equal next uses
    std::uint64_t stamp;  // when next_use was given: older first among equals

    friend constexpr bool operator<(const belady_rank& a, const belady_rank& b) noexcept {
        if (a.next_use != b.next_use) return a.next_use > b.next_use;
        if (a.depth != b.depth) return a.depth > b.depth;
        return a.stamp < b.stamp;
    }
};

class belady : public heap_ordered_policy<belady, belady_rank> {
public:
    /// MIN has no parameter: the trace supplies the future.
    struct config_type {};

    static constexpr std::string_view name = "belady";
    /// Reads `ctx.next_use`: simulators must pass the trace's next uses.
    static constexpr bool uses_future = true;

    explicit belady(std::size_t capacity, const config_type& = {}) : heap_ordered_policy(capacity) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        heap_.push(id.value, {ctx.next_use, ctx.chunk.value, stamp_++});
    }

    void on_access(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_accessed(id);
        if (tracking_.is_evictable(id)) heap_.update(id.value, {ctx.next_use, ctx.chunk.value, stamp_++});
    }

    void on_release(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_released(id);
        heap_.push(id.value, {ctx.next_use, ctx.chunk.value, stamp_++});
    }

private:
    std::uint64_t stamp_ = 0;
};

static_assert(eviction_policy<belady>);

}  // namespace kvpolicy
