// GDSF: Greedy-Dual-Size-Frequency (Cherkasova, "Improving WWW Proxies
// Performance with Greedy-Dual-Size-Frequency Caching Policy", HP Labs
// HPL-98-69, 1998).
//
// Each item has a priority H = L + frequency x cost / size; the victim is the
// item with the lowest H, and the inflation value L rises to the victim's H,
// so items that were valuable long ago age out against new ones without any
// per-item decay. Frequency counts the item's references since insertion;
// cost comes from the `Cost` cost_model (the recompute cost of the item's
// context, `ctx.context_length`), size from `ctx.size` (blocks). Use it when
// items differ in what they cost to recompute or in size, and frequency
// matters: with `unit_cost` and unit sizes it is LFU with aging.
//
// Ties: equal H are broken by the order in which H was last set, oldest
// first (LRU among equals), so victims are deterministic and independent of
// slot ids. Holds and releases: a held item leaves the heap, keeping its
// frequency; a hit while held counts. A release re-enters with H recomputed
// from the current L (the reference is recent) but is not a new reference:
// the frequency stays, since the request that held it was counted by
// on_insert / on_access. Cost and size are taken at insert. Departure from
// the paper: none beyond the tie rule (the paper leaves ties open).
// O(log n) per operation; about 37 bytes per item.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/cost/unit_cost.hpp"
#include "kvpolicy/eviction/heap_ordered_policy.hpp"

namespace kvpolicy {

/// GDSF's order as a rank: the least H first.
struct gdsf_rank {
    double h;
    std::uint64_t stamp;  // when h was set: older first among equal h

    friend constexpr bool operator<(const gdsf_rank& a, const gdsf_rank& b) noexcept {
        return a.h < b.h || (a.h == b.h && a.stamp < b.stamp);
    }
};

template <cost_model Cost = unit_cost>
class gdsf : public heap_ordered_policy<gdsf<Cost>, gdsf_rank> {
    using ordered = heap_ordered_policy<gdsf<Cost>, gdsf_rank>;
    using ordered::heap_;
    using ordered::tracking_;

public:
    struct config_type {
        /// Recompute cost of an item from its context length.
        Cost cost{};
    };

    static constexpr std::string_view name = "gdsf";

    explicit gdsf(std::size_t capacity) : gdsf(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    gdsf(std::size_t capacity, const config_type& config)
            : ordered(capacity), cost_model_(config.cost), freq_(capacity, 0), value_(capacity, 0.0) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        freq_[id.index()] = 1;
        // Cost per block: the part of H that does not change with use.
        value_[id.index()] = std::max(cost_model_.cost(ctx.context_length), 0.0) /
                             static_cast<double>(std::max<std::uint32_t>(ctx.size, 1));
        heap_.push(id.value, priority(id.value));
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        ++freq_[id.index()];
        if (tracking_.is_evictable(id)) heap_.update(id.value, priority(id.value));
    }

    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        heap_.push(id.value, priority(id.value));
    }

    /// The least H, which becomes the inflation L. Complexity: O(log n).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (heap_.empty()) return std::nullopt;
        const std::uint32_t v = heap_.top();
        inflation_ = heap_.key(v).h;
        heap_.pop();
        const item_id victim{v};
        tracking_.mark_evicted(victim);
        return victim;
    }

    /// The inflation value L: the H of the last victim.
    [[nodiscard]] double inflation() const noexcept { return inflation_; }

private:
    gdsf_rank priority(std::uint32_t x) noexcept {
        return {inflation_ + static_cast<double>(freq_[x]) * value_[x], stamp_++};
    }

    [[no_unique_address]] Cost cost_model_;
    std::vector<std::uint32_t> freq_;  // [capacity] references since insert
    std::vector<double> value_;        // [capacity] cost / size
    double inflation_ = 0.0;
    std::uint64_t stamp_ = 0;
};

static_assert(eviction_policy<gdsf<>>);

}  // namespace kvpolicy
