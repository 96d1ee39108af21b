// tail_aware_lru: LRU over a prefix tree that learns, online, whether the
// last block of each request is ever reused, and evicts those blocks first
// when they are not.
//
// What it does. The backbone is LRU with vLLM's release rule (a finished
// request's blocks re-enter tail first, so the cache evicts leaves of the
// prefix tree before their ancestors, as SGLang's radix tree evicts only
// leaves). On top, each newly inserted item is classed by its position in
// its request: a *tail* (the request's last block) or an *inner* block, and
// `tail_reuse_learner` (tail_reuse.hpp) measures each class's first-reuse
// rate, ghost-corrected. When tails are reused at less than `demote_ratio`
// times the inner rate, a tail that has not been reused is placed in a
// *demoted* FIFO that is evicted before the LRU list; a hit moves it to the
// LRU list for good.
//
// Why. An engine that hashes a request's partial last block (Mooncake's
// traces: 1.8% of conversation tails and 10% of synthetic tails are ever seen
// again, against 24-45% of inner blocks) fills an LRU cache with tails that
// the next turn cannot match, since the turn's extra tokens change that
// block's hash. An engine that caches only full blocks (vLLM, the agentic
// trace) sees its last block reused by the next turn. The rate is learned,
// not assumed, so the same policy is plain LRU for the second kind.
// Admission of blocks that never come back (learned prefix caching,
// NeurIPS'25, predicts reuse online from features; this uses one feature,
// position in the request, with ghost-corrected counts like ARC's and
// 2Q's ghosts).
//
// Where it departs: no future knowledge and no per-session model
// (session_aware_lru adds one). In prototypes on the traces of
// ../shared/traces, frequency bonuses and SLRU-style protection of reused
// blocks each gained on some cells and lost 0.7-1.5 points to LRU on others,
// so the backbone stays recency. Items whose context leaves `chunk` and
// `session_total_chunks` at their defaults are all tails, so the inner class
// never reaches `min_samples` and the policy is exactly LRU (flat replays,
// generic callers).
//
// Cost: O(1) per operation (two index lists, the learner's two ghost
// lists); about 120 bytes per item with the ghosts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"
#include "kvpolicy/eviction/tail_reuse.hpp"

namespace kvpolicy {

class tail_aware_lru : public tracked_policy<tail_aware_lru, eviction_order::static_between_accesses> {
public:
    using config_type = tail_reuse_learner::config_type;

    static constexpr std::string_view name = "tail_aware_lru";

    explicit tail_aware_lru(std::size_t capacity) : tail_aware_lru(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `demote_ratio` is negative or not finite, or `window` is below
    /// 2 x `min_samples` or 2.
    tail_aware_lru(std::size_t capacity, const config_type& config)
            : tracked_policy(capacity),
              learner_(capacity, config, "tail_aware_lru"),
              links_(capacity),
              demoted_bit_(capacity, 0) {}

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        learner_.inserted(id.value, ctx);
        place(id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        learner_.hit(id.value);
        if (tracking_.is_evictable(id)) {
            unlink(id.value);
            place(id.value);  // reused: the LRU list's most recent end
        }
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        place(id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) unlink(id.value);
        learner_.erased(id.value);
    }
    std::optional<item_id> pop_victim(timestamp) {
        index_list& from = demoted_.empty() ? recency_ : demoted_;
        if (from.empty()) return std::nullopt;
        const std::uint32_t v = links_.pop_front(from);
        demoted_bit_[v] = 0;
        tracking_.mark_evicted(item_id{v});
        learner_.evicted(v);
        return item_id{v};
    }

    /// Whether unreused tails are demoted now.
    [[nodiscard]] bool demoting() const noexcept { return learner_.demoting(); }
    /// Evictable items waiting in the demoted FIFO.
    [[nodiscard]] std::size_t demoted_size() const noexcept { return demoted_.size; }

private:
    // An item becoming evictable: the demoted FIFO for an unreused tail while
    // tails are demoted, else the most recent end of the LRU list.
    void place(std::uint32_t x) noexcept {
        demoted_bit_[x] = learner_.fresh_tail(x) && learner_.demoting() ? 1 : 0;
        links_.push_back(demoted_bit_[x] ? demoted_ : recency_, x);
    }
    // Takes an evictable item out of whichever list holds it.
    void unlink(std::uint32_t x) noexcept {
        links_.remove(demoted_bit_[x] ? demoted_ : recency_, x);
        demoted_bit_[x] = 0;
    }

    tail_reuse_learner learner_;
    index_links links_;                      // [capacity] shared by both lists
    index_list recency_;                     // evictable, least recent first
    index_list demoted_;                     // evictable unreused tails, oldest first
    std::vector<std::uint8_t> demoted_bit_;  // [capacity] 1 while in demoted_
};

static_assert(eviction_policy<tail_aware_lru>);

}  // namespace kvpolicy
