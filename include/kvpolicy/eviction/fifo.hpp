// FIFO: evict the item that became evictable first.
//
// The plainest policy and the baseline every simulator reports. Accesses do
// not reorder. A released item (a request finished with it) re-enters at the
// back, as in vLLM's free-block queue, because the block has just been used.
// Use it as a baseline or where access tracking is too costly; S3-FIFO and
// SIEVE keep FIFO's cheapness with far better hit ratios.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

class fifo {
public:
    struct config_type {};

    static constexpr std::string_view name = "fifo";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit fifo(std::size_t capacity, const config_type& = {})
        : tracking_(capacity, "fifo"), links_(capacity) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        links_.push_back(queue_, id.value);
    }
    void on_access(item_id id, const access_context&) noexcept { tracking_.mark_accessed(id); }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.remove(queue_, id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        links_.push_back(queue_, id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(queue_, id.value);
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (queue_.empty()) return std::nullopt;
        const item_id v{links_.pop_front(queue_)};
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
    index_links links_;   // [capacity] queue links
    index_list queue_;    // evictable items, oldest first
};

static_assert(eviction_policy<fifo>);

}  // namespace kvpolicy
