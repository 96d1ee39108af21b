// LRU: evict the least recently used item.
//
// What vLLM's prefix cache and most serving engines do. An access moves the
// item to the most-recent end. Recency-ordered (the LRU family of
// concepts.hpp's hold/release rule): a release is not a new reference but,
// as in vLLM, re-enters at the most-recent end, so a finished request's
// tail, released first, is evicted first.
// One index-linked list: O(1) per operation, 9 bytes per item. Weak on scans
// and on items used once (see ARC, S3-FIFO, W-TinyLFU for those).
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class lru : public tracked_policy<lru, eviction_order::static_between_accesses> {
public:
    struct config_type {};

    static constexpr std::string_view name = "lru";

    explicit lru(std::size_t capacity, const config_type& = {}) : tracked_policy(capacity), links_(capacity) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        links_.push_back(recency_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        if (tracking_.is_evictable(id)) links_.move_to_back(recency_, id.value);
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.remove(recency_, id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        links_.push_back(recency_, id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(recency_, id.value);
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (recency_.empty()) return std::nullopt;
        const item_id v{links_.pop_front(recency_)};
        tracking_.mark_evicted(v);
        return v;
    }

private:
    index_links links_;   // [capacity] recency links
    index_list recency_;  // evictable items, least recent first
};

static_assert(eviction_policy<lru>);

}  // namespace kvpolicy
