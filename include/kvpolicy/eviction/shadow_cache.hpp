// shadow_cache<P>: one eviction policy run as a miniature cache over a
// sample of the keys, to tell whether each sampled reference would have hit
// (miniature simulations: Waldspurger et al., "Cache Modeling and
// Optimization using Miniature Simulations", USENIX ATC'17).
//
// What it does. The shadow is a flat cache of `capacity` slots over policy P,
// fed the sampled keys' references, holds, releases and erases as the real
// cache makes them: a reference to a cached key is a hit (P::on_access), any
// other is a miss that takes a free slot or P's victim (P::on_miss,
// pop_victim, on_insert); a key the real cache holds is held here too, and
// one the real cache erases is forgotten. With every slot held a miss is
// served and not cached, as in the real cache. best_of_shadows runs one
// shadow per expert, all over the same sample, at R x capacity slots for a
// sample rate R: sampling keys uniformly keeps each shadow a scaled replica
// of a full-size cache (SHARDS), so which expert leads in the shadows is
// which would lead at full size.
//
// Hits. A shadow counts a hit whenever the sampled key is cached, not the
// prefix rule (a hit counts only up to a request's first miss); for policies
// that keep cached sets prefix-closed (lru, lrfu, superseded_lru,
// session_aware_lru) the two agree. (Scoring each shadow by the prefix rule
// over a request's sampled keys left every hit ratio of README "Which
// policy" unchanged to the sixth digit.)
//
// The sample and prefix structure. Keys are sampled one by one (a block,
// not its chain): every expert's reuse distances, the LRFU values and the
// reference counts are per key, so a sampled shadow at R x capacity sees each
// sampled key's reuses at R x the distance on average, whatever chain it is
// in. Whether that estimate is close to the full-size hit ratio depends on
// how evenly references spread over keys: a block every request reads (a
// shared system prompt) is in the sample or not, and moves every shadow's
// hit ratio by up to its share of the references / R. On the Mooncake
// conversation trace at 1% that made every shadow's hit ratio about 0.4 too
// high at R = 0.05 (docs/performance.md, bench/adaptive_kv_sweep). A choice
// that reads only differences between shadows is not moved by it: such a
// block is a hit in all of them, so it shifts every shadow alike; sampling
// whole chains by their root would put every request reading it in or out
// together, worse.
//
// Cost: P's cost per sampled operation plus a key_index lookup; 13 bytes per
// slot besides P's own state.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"

namespace kvpolicy {

template <eviction_policy P>
class shadow_cache {
public:
    /// Throws: whatever P's constructor throws for `capacity` and `config`;
    /// config_error if `capacity` is 2^30 or more (key_index).
    shadow_cache(std::size_t capacity, const typename P::config_type& config)
            : policy_(capacity, config), where_(capacity), key_of_(capacity, 0), held_(capacity, 0) {}

    /// The sampled key ctx.key is referenced. Returns: whether it was cached
    /// (a hit); a miss caches it, evicting P's victim when every slot is used.
    bool reference(const access_context& ctx) {
        std::uint32_t slot = where_.find(ctx.key);
        if (slot != no_index) {
            ++total_hits_;
            policy_.on_access(item_id{slot}, ctx);
            return true;
        }
        policy_.on_miss(ctx);
        if (!freed_.empty()) {
            slot = freed_.back();
            freed_.pop_back();
        } else if (used_ < key_of_.size()) {
            slot = used_++;
        } else {
            const std::optional<item_id> v = policy_.pop_victim(ctx.now);
            if (!v) return false;  // every slot held: served, not cached
            slot = v->value;
            where_.erase(key_of_[slot]);
        }
        where_.insert(ctx.key, slot);
        key_of_[slot] = ctx.key;
        policy_.on_insert(item_id{slot}, ctx);
        return false;
    }
    /// The real cache holds `key`: held here too, if cached.
    void hold(std::uint64_t key) {
        const std::uint32_t slot = where_.find(key);
        if (slot == no_index || held_[slot]) return;
        held_[slot] = 1;
        policy_.on_hold(item_id{slot});
    }
    /// The real cache released ctx.key.
    void release(const access_context& ctx) {
        const std::uint32_t slot = where_.find(ctx.key);
        if (slot == no_index || !held_[slot]) return;
        held_[slot] = 0;
        policy_.on_release(item_id{slot}, ctx);
    }
    /// The real cache erased `key` (its session was freed, its copy failed):
    /// the shadow loses it too, held or not.
    void forget(std::uint64_t key) {
        const std::uint32_t slot = where_.erase(key);
        if (slot == no_index) return;
        held_[slot] = 0;
        policy_.on_erase(item_id{slot});
        freed_.push_back(slot);
    }

    /// The policy, over the shadow's slots.
    [[nodiscard]] P& policy() noexcept { return policy_; }
    [[nodiscard]] const P& policy() const noexcept { return policy_; }
    /// Hits since construction.
    [[nodiscard]] std::uint64_t total_hits() const noexcept { return total_hits_; }

private:
    P policy_;
    key_index where_;                    // key -> slot
    std::vector<std::uint64_t> key_of_;  // [slots] key in each slot
    std::vector<std::uint8_t> held_;     // [slots] 1 while the real cache holds the key
    std::vector<std::uint32_t> freed_;   // slots of keys the real cache erased
    std::uint32_t used_ = 0;             // slots [0, used_) have been filled once
    std::uint64_t total_hits_ = 0;
};

}  // namespace kvpolicy
