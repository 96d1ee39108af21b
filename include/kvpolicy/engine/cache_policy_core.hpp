// cache_policy_core: any kvpolicy eviction policy behind the cache-policy
// seam vLLM loads by module path (0.30 to 0.33, docs/supported-versions.md;
// `vllm/v1/kv_offload/cpu/policies/base.py`,
// `CachePolicy`), where the engine's manager owns ref counts and slots and
// asks the policy only for order and victims.
//
// The seam's calls map onto `eviction_policy` (core/concepts.hpp):
// - `insert`: a store miss, then a new item (`on_miss`, `on_insert`), held
//   while its data is not complete or a load is in flight;
// - `touch`: a hit on each present item (`on_access`), absent ones skipped;
// - `mark_non_evictable` / `mark_evictable`: the manager's ref count left or
//   reached 0: `on_hold` / `on_release`;
// - `remove`: a failed store, forgotten without a ghost (`on_erase`);
// - `evict(n, protected)`: atomic. Only evictable items not protected are
//   candidates; if fewer than n exist nothing changes. Otherwise the
//   protected evictable items are held for the duration of the pops, so the
//   policy passes over them, and released after.
//
// - `finish_request`: a request's end, walked tail to head: a chunk it
//   reused is a hit; every evictable chunk it used is held and released with
//   the request's session and hints (`expected_return`), as
//   tiered_cache::release does, so session_aware_lru and adaptive_kv hear
//   when the session comes back; a session's end (`on_session_end`) reaches
//   the policies that hear it.
//
// - `enqueue` / `dequeue`: the engine's waiting queue (a connector hears it:
//   engine/request_lifecycle.hpp). A policy that hears it (queue_aware)
//   learns, for every present chunk a queued request reads, the earliest
//   such request's arrival position, and again when that changes or a chunk
//   arrives that the queue already reads; for any other policy both are no
//   calls at all, so it decides exactly as without a queue.
//
// - `end_request`: a request's end, after its keys' `finish`; heard by a
//   policy that learns each session's gaps (predicted_return), which then
//   marks the session's next request at its next insert or access, not by
//   a later time (inside an engine one request's stores complete steps
//   apart).
//
// Time: the caller's clock (`access_context::now`, never decreasing; the
// Python adapter passes milliseconds), so an expected return is a time.
//
// Where this departs from vLLM's manager semantics, and why: a release is
// kvpolicy's hold rule, so position-based policies (fifo, clock, sieve,
// s3fifo, 2Q's A1in, lfu, round_robin) put a completed or protected item
// back where it was, while recency-ordered ones (the LRU family) put it at
// their most-recent end. For vLLM's exact order use vllm_lru / vllm_arc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/core/waiting_queue.hpp"

namespace kvpolicy::engine {

template <eviction_policy Policy>
class cache_policy_core {
public:
    cache_policy_core(std::size_t capacity, const typename Policy::config_type& config)
            : policy_(checked(capacity), config), held_(capacity, 0), key_(capacity, 0) {
        if constexpr (hears_queue) present_ = key_index(capacity);
    }

    /// Whether enqueue / dequeue reach the policy.
    static constexpr bool hears_queue = hears_waiting_queue<Policy>;

    [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
    [[nodiscard]] Policy& policy() noexcept { return policy_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return held_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return policy_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return policy_.evictable_size(); }
    [[nodiscard]] bool contains(std::uint32_t id) const noexcept { return policy_.contains(item_id{id}); }

    /// A new item. `ctx` carries its key (ghost-keeping policies remember it),
    /// session and hints. Pre: `id` < capacity() and not present.
    void insert(std::uint32_t id, const access_context& ctx, bool evictable) {
        KVPOLICY_ASSERT(id < capacity() && !contains(id));
        const access_context c = stamped(ctx);
        policy_.on_miss(c);
        policy_.on_insert(item_id{id}, c);
        key_[id] = c.key;
        if constexpr (hears_queue) {
            // Keys are the engine's hashes: two present chunks of one key (a
            // 64-bit collision) leave the second out of the queue's reach.
            if (present_.find(c.key) == no_index) {
                present_.insert(c.key, id);
                if (const auto position = queue_.next_read(c.key)) policy_.on_queued(item_id{id}, *position);
            }
        }
        if (!evictable) hold(id);
    }

    void remove(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        policy_.on_erase(item_id{id});
        forget(id);
        held_[id] = 0;
    }

    /// Request `request` (unique among queued ones) of `session` is queued
    /// and will read `keys`. Throws: usage_error, changing nothing, if it is
    /// queued already (waiting_queue::enqueue).
    void enqueue(std::uint64_t request, session_id session, std::span<const std::uint64_t> keys) {
        if constexpr (hears_queue) {
            queue_.enqueue(request, session, keys, [&](std::uint64_t key, std::uint64_t position) {
                if (const std::uint32_t id = present_.find(key); id != no_index)
                    policy_.on_queued(item_id{id}, position);
            });
        } else {
            (void)request, (void)session, (void)keys;
        }
    }

    /// Request `request` left the queue (started, finished or aborted).
    /// Throws: usage_error, changing nothing, for a request not queued.
    void dequeue(std::uint64_t request, const access_context& ctx) {
        if constexpr (hears_queue) {
            const access_context c = stamped(ctx);
            queue_.dequeue(request, [&](std::uint64_t key, std::optional<std::uint64_t> next) {
                const std::uint32_t id = present_.find(key);
                if (id == no_index) return;
                if (next) {
                    policy_.on_queued(item_id{id}, *next);
                } else {
                    access_context r = c;
                    r.key = key;
                    policy_.on_unqueued(item_id{id}, r);
                }
            });
        } else {
            (void)request, (void)ctx;
        }
    }

    /// Empties the cache (every chunk forgotten, the policy as new with
    /// `config`) and keeps the waiting queue: an engine's cache reset drops
    /// what is stored, not the requests still queued, whose reads count
    /// again for the chunks stored after it.
    void reset(const typename Policy::config_type& config) {
        cache_policy_core fresh(capacity(), config);
        if constexpr (hears_queue) fresh.queue_ = std::move(queue_);
        *this = std::move(fresh);
    }

    /// Requests queued (0 for a policy that does not hear the queue).
    [[nodiscard]] std::size_t queued_requests() const noexcept {
        if constexpr (hears_queue)
            return queue_.size();
        else
            return 0;
    }

    /// A hit on `id` (no_index or absent: skipped).
    void touch(std::uint32_t id, const access_context& ctx) {
        if (id == no_index || !contains(id)) return;
        access_context c = stamped(ctx);
        c.key = key_[id];
        policy_.on_access(item_id{id}, c);
    }

    void mark_non_evictable(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        if (!held_[id]) hold(id);
    }
    void mark_evictable(std::uint32_t id, const access_context& ctx) {
        KVPOLICY_ASSERT(contains(id));
        if (held_[id]) release(id, ctx);
    }

    /// One key of a finished request, walked tail to head (`ctx`: its
    /// session, `expected_return`). `reused`: the request read it (a hit).
    void finish(std::uint32_t id, bool reused, const access_context& ctx) {
        if (id == no_index || !contains(id)) return;
        access_context c = stamped(ctx);
        c.key = key_[id];
        if (reused) policy_.on_access(item_id{id}, c);
        if (held_[id]) return;  // a store or load is in flight: released by its completion
        policy_.on_hold(item_id{id});
        policy_.on_release(item_id{id}, c);
    }

    /// The engine closed `session`: it will not come back.
    void end_session(session_id session, const access_context& ctx) {
        if constexpr (requires(Policy & p) { p.on_session_end(session, timestamp{}); })
            policy_.on_session_end(session, stamped(ctx).now);
    }

    /// A request of `session` finished, after its keys' finish calls: a
    /// policy that hears request ends (predicted_return) starts the
    /// session's next request at its next insert or access. Session 0 (none)
    /// is no call.
    void end_request(session_id session, const access_context& ctx) {
        if constexpr (hears_request_ends<Policy>) {
            if (session.value != 0) policy_.on_request_end(session, stamped(ctx).now);
        } else {
            (void)session, (void)ctx;
        }
    }

    /// How many of `fresh` (chunks not present, in the order offered: a
    /// request's, head first) to store, with `free` slots free and
    /// `shielded` present chunks of the same offer (never victims). All of
    /// them for a policy that cannot rank an item before it exists
    /// (ranks_new_items); otherwise, past the free room, each only while it
    /// would not be the next victim itself (Belady's MIN with bypass, on the
    /// policy's prediction), one that a queued request reads while any item
    /// can go. A prefix: a chunk past one declined would never be read (an
    /// engine's lookup stops at the first chunk missing).
    [[nodiscard]] std::size_t admissible(std::span<const std::uint64_t> fresh, std::size_t free, std::size_t shielded,
                                         const access_context& ctx) const {
        if constexpr (!ranks_new_items<Policy>) {
            (void)free, (void)shielded, (void)ctx;
            return fresh.size();
        } else {
            if constexpr (requires { policy_.ranks_new(); })  // dyn_policy: the concrete policy's
                if (!policy_.ranks_new()) return fresh.size();
            if (fresh.size() <= free) return fresh.size();
            const std::size_t evictable = policy_.evictable_size() - std::min(shielded, policy_.evictable_size());
            access_context c = ctx;
            if (c.now < now_) c.now = now_;
            const std::size_t before = std::min(policy_.evictable_before(c, fresh.size() - free), evictable);
            std::size_t n = free;
            for (; n < fresh.size() && n - free < evictable; ++n) {
                if (n - free < before) continue;
                if constexpr (hears_queue) {
                    if (queue_.next_read(fresh[n])) continue;
                }
                break;
            }
            return n;
        }
    }

    /// `n` victims in policy order, none of them in `protected_ids`; or
    /// nothing, changing nothing, if fewer than n can go.
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, std::span<const std::uint32_t> protected_ids,
                                                    const access_context& ctx) {
        std::vector<std::uint32_t> out;
        if (n == 0) return out;
        // The protected items the policy could offer: held for this call only
        // (marked 2 first, so that a key listed twice is held once).
        std::vector<std::uint32_t> shield;
        for (std::uint32_t id : protected_ids)
            if (id != no_index && contains(id) && !held_[id]) {
                held_[id] = 2;
                shield.push_back(id);
            }
        if (policy_.evictable_size() < shield.size() + n) {
            for (std::uint32_t id : shield) held_[id] = 0;
            return std::nullopt;
        }
        for (std::uint32_t id : shield) policy_.on_hold(item_id{id});
        std::vector<item_id> victims(n);
        const access_context c = stamped(ctx);
        const std::size_t got = policy_.pop_victims(std::span(victims), c.now);
        KVPOLICY_ASSERT(got == n);
        out.reserve(got);
        for (std::size_t i = 0; i < got; ++i) {
            out.push_back(victims[i].value);
            forget(victims[i].value);
        }
        for (std::uint32_t id : shield) release(id, c);
        return out;
    }

private:
    static std::size_t checked(std::size_t capacity) {
        if (capacity == 0)
            throw config_error(std::string(Policy::name) + ": cache_capacity 0 cannot hold a chunk; give at least 1");
        return capacity;
    }
    access_context stamped(const access_context& ctx) noexcept {
        access_context c = ctx;
        if (c.now < now_) c.now = now_;  // a clock that stepped back: time stands still
        now_ = c.now;
        return c;
    }
    void forget(std::uint32_t id) noexcept {
        if constexpr (hears_queue) {
            if (present_.find(key_[id]) == id) present_.erase(key_[id]);
        } else {
            (void)id;
        }
    }
    void hold(std::uint32_t id) noexcept {
        policy_.on_hold(item_id{id});
        held_[id] = 1;
    }
    void release(std::uint32_t id, const access_context& ctx) {
        access_context c = stamped(ctx);
        c.key = key_[id];
        policy_.on_release(item_id{id}, c);
        held_[id] = 0;
    }

    Policy policy_;
    std::vector<std::uint8_t> held_;  // [capacity] 1: held by the manager's pin; 2: by evict, for its call
    std::vector<std::uint64_t> key_;  // [capacity] the item's key, for the policy's hooks
    timestamp now_ = 0;
    // Only where the policy hears the queue: the present chunks by key, and
    // the queued requests' reads.
    [[no_unique_address]] std::conditional_t<hears_queue, key_index, std::monostate> present_;
    [[no_unique_address]] std::conditional_t<hears_queue, waiting_queue, std::monostate> queue_;
};

}  // namespace kvpolicy::engine
