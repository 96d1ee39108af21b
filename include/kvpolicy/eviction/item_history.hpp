// item_history: what best_of_shadows keeps of each cached item: its key
// (whose shadows hear its holds and erases), and with leader-only state what
// a new leader is built from when it switches experts.
//
// Leader-only state (best_of_shadows' config leader_only, adaptive_kv's
// default): only the followed expert exists over the cached items; a switch
// builds the new one from a 32-byte record per item: key, last placement
// order, last reference time and session, references since inserted,
// whether a second session read it, whether it came in as its session's last
// chunk. `replay` places the cached items in the order of their last
// placement (an LRU order: exactly LRU's when the new expert is lru), each as
// inserted at its last reference's time by its session and accessed as many
// more times as it was referenced since it came in (at that same time: a
// frequency for LRFU, up to max_uses), as a tail or not, marked shared if a
// second session read it, the held ones then held; as lrfu's resume_order
// rebuilds its heap. What else the new expert would have learned (when the
// references were, evicted blocks' histories) starts afresh;
// best_of_shadows carries what it can (lrfu::adopt_history,
// session_aware_lru::adopt_learning).
//
// Cost: one record touched per reference; replay O(n log n).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

class item_history {
public:
    explicit item_history(std::size_t capacity) : items_(capacity) {}

    /// The item's stable key (access_context::key) from its insert on.
    void set_key(item_id id, std::uint64_t key) noexcept { items_[id.index()].key = key; }
    [[nodiscard]] std::uint64_t key(item_id id) const noexcept { return items_[id.index()].key; }

    /// Leader-only state: the item was placed (inserted, accessed while
    /// evictable, released: `placed`) and, by `use`, referenced: 0 none (a
    /// release), 1 inserted, 2 accessed. Keeps the order of its last
    /// placement and the time and session of its last reference.
    void note(item_id id, const access_context& ctx, bool placed, std::uint32_t use,
              const item_tracking& tracking) noexcept {
        record& r = items_[id.index()];
        if (placed) {
            if (stamp_counter_ == max_stamp) renumber(tracking);
            r.stamp = ++stamp_counter_;
        }
        // A release places the item but references nothing: its context is
        // the last access's (a queue letting go of the item passes that, at
        // the time it lets go), and a rebuild replaying it as a reference
        // made its session look back at that time (the session's end
        // forgotten: conversation trace at 10% with the queue, 0.36 -> 0.35).
        if (use == 0) return;
        r.now = ctx.now;
        if (use == 1) {
            const bool tail = std::uint64_t{ctx.chunk.value} + 1 >= ctx.session_total_chunks;
            r.uses = static_cast<std::uint16_t>(tail ? 1u | tail_bit : 1u);
        } else if (use == 2) {
            if (r.session != ctx.session.value) r.uses |= shared_bit;
            if (count_of(r.uses) < max_uses) ++r.uses;
        }
        r.session = ctx.session.value;
    }

    /// The tracked items, in the order of their last placement. O(n log n).
    [[nodiscard]] std::vector<std::uint32_t> by_placement(const item_tracking& tracking) const {
        std::vector<std::uint32_t> cached;
        cached.reserve(tracking.size());
        for (std::uint32_t x = 0; x < items_.size(); ++x)
            if (tracking.contains(item_id{x})) cached.push_back(x);
        std::sort(cached.begin(), cached.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return items_[a].stamp < items_[b].stamp; });
        return cached;
    }

    /// Renumbers the tracked items' placement stamps as 1..n in the same
    /// order, so the 32-bit counter goes on from n: done when it would wrap,
    /// once per 2^32 placements; it changes no order. O(n log n).
    void renumber(const item_tracking& tracking) {
        const std::vector<std::uint32_t> cached = by_placement(tracking);
        stamp_counter_ = 0;
        for (const std::uint32_t x : cached) items_[x].stamp = ++stamp_counter_;
    }

    /// Builds `p` (a new, empty expert) over the items `order`
    /// (by_placement's), as the header says; held items are held.
    template <class P>
    void replay(P& p, std::span<const std::uint32_t> order, const item_tracking& tracking) const {
        // Each item is replayed at its own last reference's time, though
        // the placement order need not follow those times (a release or
        // a queue letting go places an item later than it was read):
        // a session-aware expert takes the time as that session's
        // arrival, and a running maximum made sessions that had ended
        // look back at the rebuild (conversation trace at 10% with the
        // queue: 0.3596 -> 0.3468). No expert needs the replay's times
        // in order.
        for (const std::uint32_t x : order) {
            const record& r = items_[x];
            access_context ctx;
            ctx.now = r.now;
            ctx.key = r.key;
            ctx.session = session_id{r.session};
            ctx.session_total_chunks = r.uses & tail_bit ? 1 : 2;  // chunk 0: a tail or not
            p.on_insert(item_id{x}, ctx);
            for (std::uint32_t u = 1; u < count_of(r.uses); ++u) p.on_access(item_id{x}, ctx);
            if constexpr (requires { p.mark_shared(item_id{x}); })
                if (r.uses & shared_bit) p.mark_shared(item_id{x});
            if (tracking.is_held(item_id{x})) p.on_hold(item_id{x});
        }
    }

private:
    // One record per item (one cache line touched per operation).
    struct record {
        std::uint64_t key = 0;      // stable key
        timestamp now = 0;          // time of the last reference
        std::uint64_t session = 0;  // session of the last reference
        std::uint32_t stamp = 0;    // order of the last placement (renumbered before it wraps)
        std::uint16_t uses = 0;     // references since inserted, up to max_uses; shared_bit, tail_bit
    };
    static_assert(sizeof(record) == 32);
    static constexpr std::uint16_t max_uses = 64;
    static constexpr std::uint16_t shared_bit = 0x8000;  // in uses: accessed by a second session
    static constexpr std::uint16_t tail_bit = 0x4000;    // in uses: inserted as its session's last chunk
    [[nodiscard]] static std::uint32_t count_of(std::uint16_t uses) noexcept { return uses & 0x3fffu; }
    static constexpr std::uint32_t max_stamp = ~std::uint32_t{0};

    std::vector<record> items_;  // [capacity]
    std::uint32_t stamp_counter_ = 0;
};

}  // namespace kvpolicy
