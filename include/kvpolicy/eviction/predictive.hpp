// Predictive: evict what is predicted to be needed least — sequences about
// to finish first, by predicted lifetime, else by how nearly done they are,
// else the least recently used.
//
// Seed 002's predictive rule (after Orca's use of future token counts). Each
// use tells the policy what is known about the item's sequence:
// `estimated_lifetime` (seconds it is expected to live on; NaN = unknown)
// and the completion ratio `sequence_length / max_length` (max_length 0 =
// unknown). Use it in batch inference where a lifetime predictor exists, or
// where output budgets (max_tokens) are known.
//
// The order, total and explicit (`predictive_rank`), in three tiers:
//   1. items with a known lifetime, smallest lifetime first;
//   2. then items with only a completion ratio, highest ratio first;
//   3. then items with neither, least recently used first;
// ties in any tier go to the least recently used. Why tiers rather than one
// score: the seed's single score compares seconds with a unitless 1 - ratio
// and with raw timestamps, so its order depends on the clock's unit. Why this
// tier order: the more the engine knows about when a sequence ends, the more
// confidently its KV can be given up; an item the engine knows nothing about
// is kept longest, because evicting it is a guess. Estimates are compared
// as given (seconds remaining when last stated); callers refresh them on
// access or release. Negative and infinite lifetimes are ordered as numbers.
//
// Every use (insert, access, release) re-reads lifetime and ratio from the
// context and makes the item the most recent; a held item leaves the order
// and its release places it anew (the LRU tier is recency-ordered: the LRU
// family of concepts.hpp's hold/release rule, most-recent end). One indexed heap:
// O(log n) per operation and pop.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/heap_ordered_policy.hpp"

namespace kvpolicy {

/// Predictive order as a value; smaller is evicted first. Built only by
/// `of`, so the tiers are applied the same way by the incremental policy and
/// by `victim_batch_selector<predictive>`.
struct predictive_rank {
    enum class basis : std::uint8_t { lifetime = 0, completion = 1, recency = 2 };

    basis tier = basis::recency;
    /// lifetime for tier 1, -ratio for tier 2, 0 for tier 3.
    double value = 0.0;
    /// Last use: the tie-break inside every tier, older first.
    std::uint64_t last_use = 0;

    [[nodiscard]] static predictive_rank of(double estimated_lifetime, std::uint64_t sequence_length,
                                            std::uint64_t max_length, std::uint64_t last_use) noexcept {
        if (!std::isnan(estimated_lifetime)) return {basis::lifetime, estimated_lifetime, last_use};
        if (max_length > 0)
            return {basis::completion, -(static_cast<double>(sequence_length) / static_cast<double>(max_length)),
                    last_use};
        return {basis::recency, 0.0, last_use};
    }

    friend constexpr bool operator<(const predictive_rank& a, const predictive_rank& b) noexcept {
        if (a.tier != b.tier) return a.tier < b.tier;
        if (a.value != b.value) return a.value < b.value;
        return a.last_use < b.last_use;
    }
    friend constexpr bool operator==(const predictive_rank&, const predictive_rank&) noexcept = default;
};

class predictive : public heap_ordered_policy<predictive, predictive_rank> {
public:
    struct config_type {};

    static constexpr std::string_view name = "predictive";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit predictive(std::size_t capacity, const config_type& = {}) : heap_ordered_policy(capacity) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        heap_.push(id.value, rank(ctx));
    }
    void on_access(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_accessed(id);
        if (tracking_.is_evictable(id)) heap_.update(id.value, rank(ctx));
    }
    void on_release(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_released(id);
        heap_.push(id.value, rank(ctx));
    }

    /// The item's rank. Precondition: evictable.
    [[nodiscard]] const predictive_rank& rank_of(item_id id) const noexcept {
        KVPOLICY_ASSERT(heap_.contains(id.value));
        return heap_.key(id.value);
    }

private:
    // Recency is a use counter, not ctx.now: several uses can share a tick.
    predictive_rank rank(const access_context& ctx) noexcept {
        return predictive_rank::of(ctx.estimated_lifetime, ctx.sequence_length, ctx.max_length, ++uses_);
    }

    std::uint64_t uses_ = 0;
};

static_assert(eviction_policy<predictive>);

}  // namespace kvpolicy
