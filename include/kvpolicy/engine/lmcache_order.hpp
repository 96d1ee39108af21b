// lmcache_order: the policy side of kvpolicy.lmcache (LMCache's
// multiprocess-mode EvictionPolicy and local-backend BaseCachePolicy): any
// registered policy (basic_dyn_policy) over dense ids, whose keys the
// adapter keeps (python/src/lmcache_policy.cpp: Python keys in dicts).
//
// LMCache names victims without removing them: a victim stays resident, and
// may be used again, until LMCache says it is gone. kvpolicy's policies pop a
// victim when they name it. The adapter's *front* reconciles the two: a key
// the policy popped (`pop`, its id freed) but LMCache still holds waits
// there, ahead of every key the policy still orders; used again it comes
// back as a new id (`insert`); removed it is forgotten (`erase` for an id).
// Capacity: the policy orders at most `capacity` ids; a new key beyond that
// first pops one victim to the front (`full`), so the policy still decides
// who goes and no key is dropped untracked.
//
// One call's keys, in order, are runs: consecutive accesses, or consecutive
// inserts (a miss then an insert each), each run one batch call into the
// policy at one tick of the clock, a run cut where an id repeats in it, so a
// key touched twice is touched twice. Each id remembers the sequence number
// of its last event (`by_last_event`: LMCache's checkpoint order).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kvpolicy/eviction/dyn_policy.hpp"

namespace kvpolicy::engine {

template <class Policies>
class basic_lmcache_order {
public:
    using policy_type = basic_dyn_policy<Policies>;

    /// Throws: what basic_dyn_policy's constructor throws.
    basic_lmcache_order(std::size_t capacity, const typename policy_type::config_type& config)
            : policy_(capacity, config), free_(capacity), in_use_(capacity, 0), last_(capacity, 0), mark_(capacity, 0) {
        std::iota(free_.rbegin(), free_.rend(), 0u);
    }

    /// Starts a call (its first run is of accesses).
    void begin() { begin_run(false); }
    /// An access to the id in use `id`.
    void access(std::uint32_t id) {
        if (inserting_ || mark_[id] == generation_) begin_run(false);
        add(id, 0);
    }
    /// Whether every id is in use (pop one before an insert).
    [[nodiscard]] bool full() const noexcept { return free_.empty(); }
    /// The id the next insert takes. Pre: !full().
    [[nodiscard]] std::uint32_t next_id() const noexcept { return free_.back(); }
    /// A new key, `key` its 64-bit hash (what ghost lists remember), under
    /// next_id(), which it returns. Pre: !full().
    std::uint32_t insert(std::uint64_t key) {
        if (!inserting_) begin_run(true);
        const std::uint32_t id = free_.back();
        free_.pop_back();
        in_use_[id] = 1;
        add(id, key);
        return id;
    }
    /// Ends a call: its last run reaches the policy.
    void end() { flush(); }
    /// Forgets ids in use (no ghost), freeing them in order.
    void erase(std::span<const item_id> ids) {
        for (item_id id : ids) {
            in_use_[id.index()] = 0;
            free_.push_back(id.value);
        }
        if (!ids.empty()) policy_.erase_batch(ids);
    }
    /// Up to `n` victims in the policy's order, after what the call has
    /// given so far; their ids are freed.
    std::vector<item_id> pop(std::size_t n) {
        begin_run(true);
        std::vector<item_id> got(std::min(n, policy_.evictable_size()));
        got.resize(policy_.pop_victims(got, ++now_));
        for (item_id id : got) {
            in_use_[id.index()] = 0;
            free_.push_back(id.value);
        }
        return got;
    }
    /// The ids in use, by their last event, oldest first.
    [[nodiscard]] std::vector<std::uint32_t> by_last_event() const {
        std::vector<std::uint32_t> ids;
        for (std::uint32_t id = 0; id < in_use_.size(); ++id)
            if (in_use_[id]) ids.push_back(id);
        std::stable_sort(ids.begin(), ids.end(), [&](std::uint32_t a, std::uint32_t b) { return last_[a] < last_[b]; });
        return ids;
    }
    [[nodiscard]] const policy_type& policy() const noexcept { return policy_; }

private:
    void begin_run(bool inserting) {
        flush();
        inserting_ = inserting;
        if (++generation_ == 0) {
            std::fill(mark_.begin(), mark_.end(), 0);
            generation_ = 1;
        }
    }
    void add(std::uint32_t id, std::uint64_t key) {
        mark_[id] = generation_;
        run_.push_back(item_id{id});
        if (inserting_) keys_.push_back(key);
    }
    void flush() {
        if (run_.empty()) return;
        const item_batch b{
            .ids = run_,
            .keys = inserting_ ? std::span<const std::uint64_t>(keys_) : std::span<const std::uint64_t>(),
            .now = ++now_};
        if (inserting_) {
            policy_.miss_batch({.keys = keys_, .now = now_});
            policy_.insert_batch(b);
        } else {
            policy_.access_batch(b);
        }
        for (item_id id : run_) last_[id.index()] = ++seq_;  // in the order applied
        run_.clear();
        keys_.clear();
    }

    policy_type policy_;
    std::vector<std::uint32_t> free_;   // ids not in use, the next at the back
    std::vector<std::uint8_t> in_use_;  // [capacity]
    std::vector<std::uint64_t> last_;   // [capacity] sequence number of the id's last event
    std::vector<std::uint32_t> mark_;   // [capacity] generation of the run that last listed the id
    std::uint32_t generation_ = 0;
    std::vector<item_id> run_;         // the run being gathered
    std::vector<std::uint64_t> keys_;  // its keys (a run of inserts)
    bool inserting_ = false;
    timestamp now_ = 0;
    std::uint64_t seq_ = 0;
};

/// Any registered policy (eviction/registry.hpp).
using lmcache_order = basic_lmcache_order<eviction_policies>;

}  // namespace kvpolicy::engine
