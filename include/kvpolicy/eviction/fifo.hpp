// FIFO: evict the item inserted first.
//
// The plainest policy and the baseline every simulator reports. Hits do not
// reorder, and neither do holds: a block a request held and released keeps
// its place in the insertion order, so under a serving engine's
// hold-use-release pattern FIFO stays FIFO (releasing to the back would turn
// it into LRU). The queue keeps held items at their places and a cursor on
// the oldest evictable one (core/place_queue.hpp): O(1) per operation, a pop
// also walking past held items at the front; 13 bytes per item. Use it as a baseline or
// where access tracking is too costly; S3-FIFO and SIEVE keep FIFO's
// cheapness with far better hit ratios.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/place_queue.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class fifo : public tracked_policy<fifo, eviction_order::static_between_accesses> {
public:
    struct config_type {};

    static constexpr std::string_view name = "fifo";

    explicit fifo(std::size_t capacity, const config_type& = {}) : tracked_policy(capacity), links_(capacity) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        links_.push_back(queue_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept { tracking_.mark_accessed(id); }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.hold(queue_, id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        links_.release(queue_, id.value);  // back to its place
    }
    void on_erase(item_id id) noexcept {
        (void)tracking_.mark_erased(id);
        links_.remove(queue_, id.value);  // held or not
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (queue_.empty()) return std::nullopt;
        const item_id v{links_.pop_front(queue_)};
        tracking_.mark_evicted(v);
        return v;
    }

private:
    place_links links_;  // [capacity] links and insertion places
    place_queue queue_;  // every tracked item, held ones at their places, oldest first
};

static_assert(eviction_policy<fifo>);

}  // namespace kvpolicy
