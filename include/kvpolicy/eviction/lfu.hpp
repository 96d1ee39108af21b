// LFU: evict the item used the fewest times while cached; among equal counts,
// the least recently used.
//
// Seed 002's second strategy. Use it where popularity is stable (shared
// system prompts, few-shot templates): a block used often stays however long
// ago its last use was. Its weakness is the other side of that: an item that
// was hot once keeps its count after the burst ends (W-TinyLFU ages counts;
// this LFU deliberately does not).
//
// Counting, exactly: on_insert starts at 1 (a re-inserted item starts again
// at 1: counts live only while cached, as in the O(1) LFU paper); every
// on_access adds 1, whether the item is evictable or held; on_release adds 1
// too, because the release ends a use, as for LRU. The tie-break "least
// recently used" needs no timestamps: every use moves the item to a new
// count, so the order in which items entered their count's bucket is the
// order of their last uses.
//
// Structure (Shah, Mitra, Matani, "An O(1) algorithm for implementing the LFU
// cache eviction scheme", 2010): a chain of frequency buckets in ascending
// count, each an index-linked list of items, oldest first. Buckets come from
// a pool of capacity+1 nodes, so nothing allocates after construction.
// Departure from the paper, for held items: a held item leaves its bucket's
// list but keeps the bucket alive (a per-bucket held count), so its release
// lands next to its count in O(1) without searching. Victims come from a
// second chain that threads only buckets with evictable items, so a pop is
// O(1) however many in-use items sit at low counts; the price is on_release,
// which walks back over buckets that hold only in-use items (one step per
// distinct count among them) to link a bucket that just became evictable.
// Every other operation is O(1).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

/// LFU's order as a value: fewer uses first, then the older last use.
/// `victim_batch_selector<lfu>` sorts candidates by it.
struct lfu_rank {
    std::uint64_t count = 0;
    timestamp last_use = 0;

    friend constexpr auto operator<=>(const lfu_rank&, const lfu_rank&) noexcept = default;
};

class lfu {
public:
    struct config_type {};

    static constexpr std::string_view name = "lfu";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit lfu(std::size_t capacity, const config_type& = {})
        : tracking_(capacity, "lfu"),
          item_links_(capacity),
          node_of_(capacity, no_index),
          node_count_(capacity + 1, 0),
          node_items_(capacity + 1),
          node_held_(capacity + 1, 0),
          chain_links_(capacity + 1),
          ready_links_(capacity + 1) {
        free_nodes_.reserve(capacity + 1);
        for (std::size_t n = capacity + 1; n-- > 0;) free_nodes_.push_back(static_cast<std::uint32_t>(n));
    }

void on_miss(const access_context&) noexcept {}  // learns nothing from a miss
    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        std::uint32_t n = chain_.front;
        if (n == no_index || node_count_[n] != 1) {
            n = alloc_node(1);
            chain_links_.push_front(chain_, n);
        }
        // Count 1 is the lowest there is: its bucket heads the ready chain.
        push_evictable(id.value, n, no_index);
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        const std::uint32_t n = node_of_[id.value];
        const std::uint32_t next = bucket_after(n);
        if (tracking_.is_evictable(id)) {
            item_links_.remove(node_items_[n], id.value);
            std::uint32_t pred = n;
            if (node_items_[n].empty()) {
                pred = ready_links_.prev(n);
                ready_links_.remove(ready_, n);
            }
            push_evictable(id.value, next, pred);
        } else {
            --node_held_[n];
            ++node_held_[next];
            node_of_[id.value] = next;
        }
        free_if_unused(n);
    }

    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        const std::uint32_t n = node_of_[id.value];
        unlink_evictable(id.value);
        ++node_held_[n];
    }

    /// The release counts as a use: the count goes up by one.
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        const std::uint32_t n = node_of_[id.value];
        const std::uint32_t next = bucket_after(n);
        --node_held_[n];
        std::uint32_t pred = no_index;
        if (node_items_[next].empty()) {
            pred = n;
            while (pred != no_index && node_items_[pred].empty()) pred = chain_links_.prev(pred);
        }
        push_evictable(id.value, next, pred);
        free_if_unused(n);
    }

    void on_erase(item_id id) noexcept {
        const std::uint32_t n = node_of_[id.value];
        if (tracking_.mark_erased(id)) unlink_evictable(id.value);
        else --node_held_[n];
        node_of_[id.value] = no_index;
        free_if_unused(n);
    }

    /// Complexity: O(1).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (ready_.empty()) return std::nullopt;
        const std::uint32_t n = ready_.front;
        const item_id v{node_items_[n].front};
        unlink_evictable(v.value);
        node_of_[v.value] = no_index;
        free_if_unused(n);
        tracking_.mark_evicted(v);
        return v;
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) noexcept {
        return pop_victims_one_by_one(*this, out, now);
    }

    /// Uses counted since the item was inserted. Precondition: contains(id).
    [[nodiscard]] std::uint64_t count(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return node_count_[node_of_[id.value]];
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

private:
    std::uint32_t alloc_node(std::uint64_t count) noexcept {
        KVPOLICY_ASSERT(!free_nodes_.empty());
        const std::uint32_t n = free_nodes_.back();
        free_nodes_.pop_back();
        node_count_[n] = count;
        return n;
    }

    // The bucket of count(n)+1, created right after n if missing. n stays
    // alive through the call, so at most capacity+1 buckets ever exist.
    std::uint32_t bucket_after(std::uint32_t n) noexcept {
        const std::uint32_t next = chain_links_.next(n);
        if (next != no_index && node_count_[next] == node_count_[n] + 1) return next;
        const std::uint32_t m = alloc_node(node_count_[n] + 1);
        chain_links_.insert_after(chain_, n, m);
        return m;
    }

    // Appends `id` to bucket n; if n had no evictable item it joins the ready
    // chain right after `ready_pred` (a ready bucket of lower count, or
    // no_index for the front).
    void push_evictable(std::uint32_t id, std::uint32_t n, std::uint32_t ready_pred) noexcept {
        if (node_items_[n].empty()) {
            if (ready_pred == no_index) ready_links_.push_front(ready_, n);
            else ready_links_.insert_after(ready_, ready_pred, n);
        }
        item_links_.push_back(node_items_[n], id);
        node_of_[id] = n;
    }

    void unlink_evictable(std::uint32_t id) noexcept {
        const std::uint32_t n = node_of_[id];
        item_links_.remove(node_items_[n], id);
        if (node_items_[n].empty()) ready_links_.remove(ready_, n);
    }

    void free_if_unused(std::uint32_t n) noexcept {
        if (!node_items_[n].empty() || node_held_[n] != 0) return;
        chain_links_.remove(chain_, n);
        free_nodes_.push_back(n);
    }

    item_tracking tracking_;
    index_links item_links_;                // [capacity] links within a bucket
    std::vector<std::uint32_t> node_of_;    // [capacity] bucket of each tracked item
    std::vector<std::uint64_t> node_count_;  // [capacity+1] the count a bucket stands for
    std::vector<index_list> node_items_;    // [capacity+1] evictable items, least recent first
    std::vector<std::uint32_t> node_held_;  // [capacity+1] held items whose count this is
    index_links chain_links_;               // [capacity+1] every live bucket
    index_list chain_;                      //   ascending count
    index_links ready_links_;               // [capacity+1] buckets with an evictable item
    index_list ready_;                      //   ascending count
    std::vector<std::uint32_t> free_nodes_;  // unused bucket nodes
};

static_assert(eviction_policy<lfu>);

}  // namespace kvpolicy
