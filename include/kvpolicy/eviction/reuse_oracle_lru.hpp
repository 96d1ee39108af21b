// reuse_oracle_lru: LRU told, by the trace, which blocks are never used
// again, and evicting those first. A bound, like Belady: what a perfect
// reuse predictor can add to LRU.
//
// What it does. The backbone is tail_aware_lru's (LRU with vLLM's release
// rule: a finished request's blocks re-enter tail first, so leaves of the
// prefix tree go before their ancestors). Each time an item becomes
// evictable it is placed by the oracle's answer to one yes/no question,
// `ctx.next_use == never`: a block never used again goes to a *dead* FIFO
// that is emptied before the LRU list is touched; every other block keeps
// its LRU place. The order among blocks that do come back stays recency.
//
// Why. Learned prefix caching (NeurIPS'25) and every admission filter
// (TinyLFU, tail_aware_lru's tail rule) try to predict whether a block comes
// back, not when. This policy is that idea with a perfect predictor, so
// `kvpolicy-sim --policy lru,reuse_oracle_lru,belady` splits the LRU ->
// Belady gap into the part any reuse predictor could close (LRU ->
// reuse_oracle_lru) and the part that needs to know *when* blocks come
// back (reuse_oracle_lru -> Belady). README "Which policy" has the tables.
//
// It needs the future, as belady does (`uses_future`): the simulator passes
// each access's next use; in a live engine nothing knows it. Like belady's,
// an item's placement uses the latest next use given (insert, access,
// release). O(1) per operation; about 20 bytes per item.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class reuse_oracle_lru : public tracked_policy<reuse_oracle_lru, eviction_order::static_between_accesses> {
public:
    /// No parameter: the trace supplies the answers.
    struct config_type {};

    static constexpr std::string_view name = "reuse_oracle_lru";
    /// Reads `ctx.next_use`: simulators must pass the trace's next uses.
    static constexpr bool uses_future = true;

    explicit reuse_oracle_lru(std::size_t capacity, const config_type& = {})
            : tracked_policy(capacity), links_(capacity), dead_bit_(capacity, 0) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        place(id.value, ctx);
    }
    void on_access(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_accessed(id);
        if (tracking_.is_evictable(id)) {
            unlink(id.value);
            place(id.value, ctx);
        }
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_released(id);
        place(id.value, ctx);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) unlink(id.value);
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        index_list& from = dead_.empty() ? recency_ : dead_;
        if (from.empty()) return std::nullopt;
        const std::uint32_t v = links_.pop_front(from);
        dead_bit_[v] = 0;
        tracking_.mark_evicted(item_id{v});
        return item_id{v};
    }

    /// Evictable items the oracle says are never used again.
    [[nodiscard]] std::size_t dead_size() const noexcept { return dead_.size; }

private:
    void place(std::uint32_t x, const access_context& ctx) noexcept {
        dead_bit_[x] = ctx.next_use == never ? 1 : 0;
        links_.push_back(dead_bit_[x] ? dead_ : recency_, x);
    }
    void unlink(std::uint32_t x) noexcept {
        links_.remove(dead_bit_[x] ? dead_ : recency_, x);
        dead_bit_[x] = 0;
    }

    index_links links_;                   // [capacity] shared by both lists
    index_list recency_;                  // evictable, used again: least recent first
    index_list dead_;                     // evictable, never used again: oldest first
    std::vector<std::uint8_t> dead_bit_;  // [capacity] 1 while in dead_
};

static_assert(eviction_policy<reuse_oracle_lru>);

}  // namespace kvpolicy
