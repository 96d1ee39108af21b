// FIFO: evict the item inserted first.
//
// The plainest policy and the baseline every simulator reports. Hits do not
// reorder, and neither do holds: a block a request held and released keeps
// its place in the insertion order, so under a serving engine's
// hold-use-release pattern FIFO stays FIFO (releasing to the back would turn
// it into LRU). Exact order across holds costs a heap keyed by insertion
// number: O(log n) per operation, 17 bytes per item. Use it as a baseline or
// where access tracking is too costly; S3-FIFO and SIEVE keep FIFO's
// cheapness with far better hit ratios.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

class fifo {
public:
    struct config_type {};

    static constexpr std::string_view name = "fifo";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit fifo(std::size_t capacity, const config_type& = {})
        : tracking_(capacity, "fifo"), queue_(capacity), inserted_(capacity) {}

void on_miss(const access_context&) noexcept {}  // learns nothing from a miss
    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        inserted_[id.index()] = next_++;
        queue_.push(id.value, inserted_[id.index()]);
    }
    void on_access(item_id id, const access_context&) noexcept { tracking_.mark_accessed(id); }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        queue_.erase(id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        queue_.push(id.value, inserted_[id.index()]);  // back to its place
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) queue_.erase(id.value);
    }
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (queue_.empty()) return std::nullopt;
        const item_id v{queue_.pop()};
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
    indexed_heap<std::uint64_t> queue_;   // evictable items by insertion number
    std::vector<std::uint64_t> inserted_; // [capacity] insertion number of each item
    std::uint64_t next_ = 0;
};

static_assert(eviction_policy<fifo>);

}  // namespace kvpolicy
