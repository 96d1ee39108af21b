// QoS-aware: the lowest priority class goes first, LRU within a class; a
// priority may lapse back to the default at a given time.
//
// Seed 002's QoS rule (evict low-priority sequences first, LRU among equals)
// with TensorRT-LLM's retention priorities: a request may mark its blocks
// with a priority that holds only until `ctx.priority_until`, after which the
// block is an ordinary `default_priority` block again (a system prompt kept
// hot for a minute, a batch job's blocks marked cheap for its duration). Use
// it for multi-tenant serving where some traffic must keep its prefix cache
// under pressure from other traffic.
//
// Exactly: every use carries its request's retention, so on_insert,
// on_access and on_release all set the item's (priority, priority_until)
// from the context — the latest use wins, as in TensorRT-LLM where "new
// priority values always override the previous value" — and each moves the
// item to the most-recent end of its class. Expiry is evaluated only by
// pop_victim(now) / pop_victims(out, now), before choosing: every evictable
// item whose priority is not the default and whose priority_until <= now
// moves to the most-recent end of the default class, in order of
// (priority_until, id); that is where TensorRT-LLM's refresh() puts expired
// blocks too. Between pops an item stays in the class it was given. A held
// item is in no class; its release sets its retention anew. Classes are
// recency-ordered (the LRU family of concepts.hpp's hold/release rule): a
// release re-enters at the most-recent end of its class.
//
// Source: NVIDIA TensorRT-LLM, KvCacheRetentionConfig and
// batch_manager/evictionPolicy.cpp (priorities 1..100 in per-priority LRU
// queues, an expiry heap refreshed before eviction). Departures: any int32 is
// a priority (seed 002 uses 0 = low, 1 = normal, 2 = high); the expiry is an
// absolute time in the caller's clock rather than a duration started at
// release. Structure: a small array of the live classes sorted by priority,
// each an index-linked LRU list, and a min-heap of expiry times. A pop is
// O(log n) per expired item plus O(k) to retire an emptied class, k being the
// number of live priorities (3 in seed 002, at most 100 in TensorRT-LLM);
// other operations are O(log k + log n), plus O(k) when a class is created.
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

/// QoS order as a value: lower priority first, then the older last use.
/// `victim_batch_selector<qos_aware>` sorts candidates by it.
struct qos_rank {
    std::int32_t priority = default_priority;
    timestamp last_use = 0;

    friend constexpr auto operator<=>(const qos_rank&, const qos_rank&) noexcept = default;
};

class qos_aware : public tracked_policy<qos_aware, eviction_order::static_between_accesses> {
public:
    struct config_type {};

    static constexpr std::string_view name = "qos_aware";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit qos_aware(std::size_t capacity, const config_type& = {})
            : tracked_policy(capacity),
              links_(capacity),
              priority_(capacity, default_priority),
              until_(capacity, never),
              expiry_(capacity) {
        // At most one live class per evictable item, plus the default class
        // an expiry may create: inserting never reallocates.
        classes_.reserve(capacity + 1);
    }

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        set_retention(id.value, ctx);
        link(id.value);
    }
    void on_access(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_accessed(id);
        const bool evictable = tracking_.is_evictable(id);
        if (evictable) unlink(id.value);
        set_retention(id.value, ctx);
        if (evictable) link(id.value);
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_released(id);
        set_retention(id.value, ctx);
        link(id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) unlink(id.value);
    }

    /// Effects: first demotes every priority that has expired at `now`, then
    /// pops the least recent item of the lowest class.
    std::optional<item_id> pop_victim(timestamp now) noexcept {
        expire(now);
        if (classes_.empty()) return std::nullopt;
        const item_id v{classes_.front().items.front};
        unlink(v.value);
        tracking_.mark_evicted(v);
        return v;
    }

    /// The priority the item has now (expiry applied at the last pop).
    /// Precondition: contains(id).
    [[nodiscard]] std::int32_t priority_of(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return priority_[id.value];
    }
    /// Live classes (priorities with an evictable item).
    [[nodiscard]] std::size_t class_count() const noexcept { return classes_.size(); }

private:
    struct priority_class {
        std::int32_t priority;
        index_list items;  // least recent first
    };

    void set_retention(std::uint32_t id, const access_context& ctx) noexcept {
        priority_[id] = ctx.priority;
        until_[id] = ctx.priority_until;
    }

    [[nodiscard]] std::vector<priority_class>::iterator class_at_or_after(std::int32_t p) noexcept {
        return std::lower_bound(classes_.begin(), classes_.end(), p,
                                [](const priority_class& c, std::int32_t q) { return c.priority < q; });
    }

    void link(std::uint32_t id) noexcept {
        const std::int32_t p = priority_[id];
        auto it = class_at_or_after(p);
        if (it == classes_.end() || it->priority != p) it = classes_.insert(it, priority_class{p, {}});
        links_.push_back(it->items, id);
        // A default priority has nothing to fall back from.
        if (p != default_priority && until_[id] != never) expiry_.push(id, until_[id]);
    }

    void unlink(std::uint32_t id) noexcept {
        const auto it = class_at_or_after(priority_[id]);
        KVPOLICY_ASSERT(it != classes_.end() && it->priority == priority_[id]);
        links_.remove(it->items, id);
        if (it->items.empty()) classes_.erase(it);
        if (expiry_.contains(id)) expiry_.erase(id);
    }

    void expire(timestamp now) noexcept {
        while (!expiry_.empty() && expiry_.key(expiry_.top()) <= now) {
            const std::uint32_t id = expiry_.top();
            unlink(id);
            priority_[id] = default_priority;
            until_[id] = never;
            link(id);
        }
    }

    index_links links_;                    // [capacity] links within a class
    std::vector<priority_class> classes_;  // live classes, ascending priority
    std::vector<std::int32_t> priority_;   // [capacity]
    std::vector<timestamp> until_;         // [capacity] when priority_ lapses; never = it holds
    indexed_heap<timestamp> expiry_;       // evictable items whose priority will lapse
};

static_assert(eviction_policy<qos_aware>);

}  // namespace kvpolicy
