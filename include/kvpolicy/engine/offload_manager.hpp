// The bookkeeping of vLLM V1's scheduler-side OffloadingManager, 0.11 to 0.20
// (vllm/v1/kv_offload/abstract.py and cpu/manager.py), for any engine: one
// store of `num_blocks` slots (vLLM's CPU offloading tier) whose blocks are
// named by 64-bit keys. The Python adapter (kvpolicy.vllm) only translates
// calls; a C++ engine can use it as it is.
//
// A block is `storing` from prepare_store until complete_store, then
// `ready`; only ready blocks count in lookup and may be loaded. A block is
// *pinned* while it is storing or has loads in flight (prepare_load ..
// complete_load); during one prepare_store the blocks of its input are
// *protected*. Neither is ever a victim. The manager's semantics, for every
// order below:
// - a block in prepare_store's input is never that call's victim;
// - completing a store or a load does not move a block in its order (but see
//   `policy_order` for kvpolicy's recency-ordered policies);
// - a prepare_store that cannot make room answers nothing and changes
//   nothing (no ghost, no adaptation, no event);
// - slots are allocated as vLLM allocates them: never-used slots first
//   (0, 1, 2, ...), then the most recently freed (a multi-block eviction
//   frees its victims in eviction order, so the new blocks take them in the
//   reverse order);
// - validate, then mutate: a call that throws changes nothing.
//
// Who decides the victims is the `Order` (the `offload_order` concept):
// - `vllm_legacy_lru_order`, `vllm_legacy_arc_order`
//   (vllm_legacy_orders.hpp): exactly vLLM's LRU and ARC of that API.
// - `policy_order<P>`: any kvpolicy eviction_policy. Pinned and protected
//   blocks are held in the policy (on_hold), which is kvpolicy's way to keep
//   a block from being a victim, and released when the pin or the
//   protection ends. By kvpolicy's hold rule, position-based policies (fifo,
//   clock, sieve, s3fifo, two_q, lfu, round_robin; lirs and checkerboard too,
//   as python/tests/test_vllm.py measures) put a released block back where it
//   was, so for them completion and protection move nothing. The others put
//   it at their most-recent end, as if it were used then: the recency lists
//   (lru and its family, arc, slru, w_tinylfu's window) and the time-varying
//   scores (retention_value, gdsf, lrfu, qos_aware, predictive, adaptive_kv,
//   belady, reuse_oracle_lru), whose release is stamped with its time. Their
//   concept has no way to return an item to an inner place (a pop cannot be
//   undone, and there is no peek), and adding one to every policy is not
//   this header's business: users who need vLLM's places take vllm_lru /
//   vllm_arc.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/engine/vllm_legacy_orders.hpp"

namespace kvpolicy::engine {

/// One offloading event: blocks stored (`removed` false) or evicted.
struct offload_event {
    std::vector<std::uint64_t> hashes;
    std::vector<std::uint32_t> slots;
    bool removed = false;
};

/// What prepare_store decided: the blocks to store (those not already
/// offloaded, in the order given), their slots, and the blocks evicted.
struct store_plan {
    std::vector<std::uint64_t> to_store;
    std::vector<std::uint32_t> positions;  ///< where each of to_store is in the call's list
    std::vector<std::uint32_t> slots;
    std::vector<std::uint64_t> evicted;
    std::vector<std::uint32_t> evicted_slots;  ///< eviction order
};

enum class slot_state : std::uint8_t { free, storing, ready };

/// A kvpolicy eviction policy as an offload order (see the header).
template <eviction_policy Policy>
class policy_order {
public:
    using config_type = typename Policy::config_type;
    using policy_type = Policy;
    static constexpr std::string_view name = Policy::name;

    policy_order(std::size_t num_blocks, const config_type& c) : p_(num_blocks, c) {}

    void insert(std::uint32_t slot, std::uint64_t key, timestamp now) {
        p_.on_insert(item_id{slot}, ctx(key, now));
        p_.on_hold(item_id{slot});  // storing
    }
    void erase(std::uint32_t slot) { p_.on_erase(item_id{slot}); }
    void pin(std::uint32_t slot) { p_.on_hold(item_id{slot}); }
    void unpin(std::uint32_t slot, std::uint64_t key, timestamp now) { p_.on_release(item_id{slot}, ctx(key, now)); }
    void touch(std::uint32_t slot, std::uint64_t key, timestamp now) {
        if (slot != no_index) p_.on_access(item_id{slot}, ctx(key, now));
    }
    /// Room for `to_store` (on_miss each), `n` victims popped in policy
    /// order with the `shielded` (slot, key) blocks held meanwhile; false,
    /// with nothing changed, when too few are evictable.
    bool make_room(std::size_t n, std::span<const std::uint64_t> to_store,
                   std::span<const std::pair<std::uint32_t, std::uint64_t>> shielded, timestamp now,
                   std::vector<std::uint32_t>& out) {
        if (n + shielded.size() > p_.evictable_size()) return false;
        for (std::uint64_t k : to_store) p_.on_miss(ctx(k, now));
        if (n == 0) return true;
        for (const auto& [s, k] : shielded) p_.on_hold(item_id{s});
        for (std::size_t i = 0; i < n; ++i) out.push_back(p_.pop_victim(now)->value);  // counted above
        for (const auto& [s, k] : shielded) p_.on_release(item_id{s}, ctx(k, now));
        return true;
    }
    [[nodiscard]] const Policy& policy() const noexcept { return p_; }

private:
    static access_context ctx(std::uint64_t key, timestamp now) noexcept {
        access_context c;
        c.now = now;
        c.key = key;
        return c;
    }
    Policy p_;
};

template <class T>
inline constexpr bool is_policy_order = false;
template <class P>
inline constexpr bool is_policy_order<policy_order<P>> = true;

/// What offload_manager asks of its order: one of the vLLM orders or a
/// policy_order.
template <class O>
concept offload_order =
    is_policy_order<O> || std::same_as<O, vllm_legacy_lru_order> || std::same_as<O, vllm_legacy_arc_order>;
static_assert(offload_order<vllm_legacy_lru_order>);
static_assert(offload_order<vllm_legacy_arc_order>);
static_assert(!offload_order<int>);

template <offload_order Order>
class offload_manager {
public:
    using order_type = Order;

    /// Throws: config_error for 0 blocks or a bad policy option.
    /// `events`: record what take_events returns (off, nothing is kept).
    offload_manager(std::size_t num_blocks, const typename Order::config_type& config = {}, bool events = true)
            : events_on_(events),
              order_(checked(num_blocks), config),
              index_(num_blocks),
              key_(num_blocks, 0),
              loads_(num_blocks, 0),
              state_(num_blocks, slot_state::free),
              seen_(num_blocks, 0),
              shield_(num_blocks, 0) {
        freed_.reserve(num_blocks);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return key_.size(); }
    [[nodiscard]] std::size_t num_free() const noexcept { return freed_.size() + capacity() - fresh_; }
    [[nodiscard]] std::size_t size() const noexcept { return capacity() - num_free(); }
    [[nodiscard]] const Order& order() const noexcept { return order_; }
    [[nodiscard]] Order& order() noexcept { return order_; }
    /// The slot of a block, or no_index.
    [[nodiscard]] std::uint32_t find(std::uint64_t hash) const noexcept { return index_.find(hash); }
    /// find() of each of `hashes` into `slots` (the first min of both
    /// sizes), the probes pipelined: each is a cache miss in a large tier.
    void find_all(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) const noexcept {
        constexpr std::size_t ahead = 8;
        const std::size_t n = std::min(hashes.size(), slots.size());
        for (std::size_t i = 0; i < std::min(ahead, n); ++i) index_.prefetch(hashes[i]);
        for (std::size_t i = 0; i < n; ++i) {
            if (i + ahead < n) index_.prefetch(hashes[i + ahead]);
            slots[i] = index_.find(hashes[i]);
        }
    }
    [[nodiscard]] slot_state state(std::uint32_t slot) const noexcept { return state_[slot]; }
    [[nodiscard]] std::uint32_t loads(std::uint32_t slot) const noexcept { return loads_[slot]; }
    [[nodiscard]] std::uint64_t key(std::uint32_t slot) const noexcept { return key_[slot]; }

    /// The number of leading blocks that are offloaded and ready. O(n).
    [[nodiscard]] std::size_t lookup(std::span<const std::uint64_t> hashes) {
        const std::span<const std::uint32_t> slots = slots_of(hashes);
        std::size_t n = 0;
        for (std::uint32_t s : slots) {
            if (s == no_index || state_[s] != slot_state::ready) break;
            ++n;
        }
        return n;
    }

    /// Pins the blocks until complete_load and writes their slots to `slots`
    /// (size >= hashes.size()). A block listed twice is loaded twice (two
    /// complete_loads end it). Nothing moves in the order. O(n).
    /// Throws: usage_error if a block is not offloaded or still being stored.
    void prepare_load(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) {
        if (slots.size() < hashes.size())
            throw usage_error("prepare_load: " + std::to_string(slots.size()) + " slots for " +
                              std::to_string(hashes.size()) + " blocks; pass one slot per block");
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint32_t s = found[i];
            if (s == no_index)
                throw usage_error("prepare_load: block hash " + std::to_string(hashes[i]) +
                                  " is not offloaded; load only the blocks lookup() counted");
            if (state_[s] != slot_state::ready)
                throw usage_error("prepare_load: block hash " + std::to_string(hashes[i]) +
                                  " is still being stored; load it after complete_store");
            slots[i] = s;
        }
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint32_t s = slots[i];
            if (loads_[s]++ == 0) {
                if constexpr (is_policy_order<Order>) order_.pin(s);
            }
        }
    }

    /// Marks the blocks used, the first one most recently (vLLM touches in
    /// reverse). Keys not offloaded are skipped (vllm_arc adapts on a ghost).
    void touch(std::span<const std::uint64_t> hashes) {
        const timestamp now = ++now_;
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = hashes.size(); i-- > 0;) {
            const std::uint32_t s = found[i];
            if constexpr (is_policy_order<Order>)
                order_.touch(s, hashes[i], now);
            else
                order_.touch(s, hashes[i], s != no_index && state_[s] == slot_state::ready);
        }
    }

    /// Ends one load of each block; nothing moves in the order. O(n).
    /// Throws: usage_error if a block has no load in flight.
    void complete_load(std::span<const std::uint64_t> hashes) {
        const std::span<const std::uint32_t> found = slots_of(hashes);
        scratch_.resize(hashes.size());
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint32_t s = found[i];
            // A block listed k times needs k loads in flight: count down on a copy.
            if (s == no_index || loads_[s] == 0 || seen_[s] >= loads_[s]) {
                unmark(std::span(scratch_).first(i));
                throw usage_error("complete_load: block hash " + std::to_string(hashes[i]) +
                                  " has no load in flight; call prepare_load first, and complete each load once");
            }
            ++seen_[s];
            scratch_[i] = s;
        }
        unmark(scratch_);
        const timestamp now = ++now_;
        for (std::size_t i = hashes.size(); i-- > 0;) {  // tail first: an LRU-family release leaves the head newest
            const std::uint32_t s = scratch_[i];
            if (--loads_[s] == 0) {
                if constexpr (is_policy_order<Order>) order_.unpin(s, hashes[i], now);
            }
        }
    }

    /// Allocates slots for the blocks not yet offloaded (in order), evicting
    /// as many blocks as needed, in the order's order, never a pinned one nor
    /// one in `hashes`. Empty (nothing changed) when too few can be evicted.
    /// O(n + victims + blocks stepped over).
    /// Throws: usage_error for a new block listed twice.
    std::optional<store_plan> prepare_store(std::span<const std::uint64_t> hashes) {
        store_plan plan;
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = 0; i < hashes.size(); ++i)
            if (found[i] == no_index) {
                plan.to_store.push_back(hashes[i]);
                plan.positions.push_back(static_cast<std::uint32_t>(i));
            }
        check_distinct(plan.to_store);
        const std::size_t n = plan.to_store.size();
        if (n == 0) return plan;
        const std::size_t need = n > num_free() ? n - num_free() : 0;
        const timestamp now = ++now_;
        ++epoch_;  // this call's protection marks
        if (need > 0)
            for (std::uint32_t s : found)
                if (s != no_index) shield_[s] = epoch_;
        std::vector<std::uint32_t>& victims = plan.evicted_slots;
        if constexpr (is_policy_order<Order>) {
            // The protected blocks the policy could choose: present, ready,
            // not loading (held blocks are out of its reach already), each once.
            shielded_.clear();
            if (need > 0)
                for (std::size_t i = 0; i < hashes.size(); ++i) {
                    const std::uint32_t s = found[i];
                    if (s != no_index && shield_[s] == epoch_ && state_[s] == slot_state::ready && loads_[s] == 0) {
                        shielded_.emplace_back(s, hashes[i]);
                        shield_[s] = epoch_ - 1;  // listed once
                    }
                }
            if (!order_.make_room(need, plan.to_store, shielded_, now, victims)) return std::nullopt;
        } else if (need > 0) {
            const auto evictable = [this](std::uint32_t s) {
                return state_[s] == slot_state::ready && loads_[s] == 0 && shield_[s] != epoch_;
            };
            bool ok = false;
            if constexpr (std::same_as<Order, vllm_legacy_arc_order>)
                ok = order_.evict(
                    need, evictable, [this](std::uint32_t s) { return key_[s]; }, victims);
            else
                ok = order_.evict(need, evictable, victims);
            if (!ok) return std::nullopt;
        }
        ++version_;  // the index changes: slots found before are stale
        for (std::uint32_t v : victims) {
            plan.evicted.push_back(key_[v]);
            index_.erase(key_[v]);
            state_[v] = slot_state::free;
            freed_.push_back(v);
        }
        if (events_on_ && !plan.evicted.empty()) events_.push_back({plan.evicted, plan.evicted_slots, true});
        plan.slots.reserve(n);
        for (std::uint64_t h : plan.to_store) {
            std::uint32_t s;
            if (fresh_ < capacity()) {
                s = static_cast<std::uint32_t>(fresh_++);
            } else {
                s = freed_.back();
                freed_.pop_back();
            }
            index_.insert(h, s);
            key_[s] = h;
            state_[s] = slot_state::storing;
            if constexpr (is_policy_order<Order>)
                order_.insert(s, h, now);
            else
                order_.insert(s, h);
            plan.slots.push_back(s);
        }
        // complete_store comes next with these blocks: keep their slots.
        memo_keys_ = plan.to_store;
        memo_slots_ = plan.slots;
        memo_version_ = version_;
        return plan;
    }

    /// Ends the stores of the blocks: on success those still storing become
    /// ready (evictable unless loading), in place; on failure they are
    /// removed (no ghost) and their slots freed. Ready blocks are left as
    /// they are, as vLLM does. O(n).
    /// Throws: usage_error if a block is not offloaded at all.
    void complete_store(std::span<const std::uint64_t> hashes, bool success) {
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = 0; i < hashes.size(); ++i)
            if (found[i] == no_index)
                throw usage_error("complete_store: block hash " + std::to_string(hashes[i]) +
                                  " was never prepared (or its failed store already removed it); "
                                  "complete only what prepare_store returned");
        const timestamp now = ++now_;
        offload_event stored;
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint64_t h = hashes[i];
            const std::uint32_t s = found[i];
            if (state_[s] != slot_state::storing) continue;  // ready, or listed twice and done above
            if (success) {
                state_[s] = slot_state::ready;
                if constexpr (is_policy_order<Order>) order_.unpin(s, h, now);
                if (events_on_) {
                    stored.hashes.push_back(h);
                    stored.slots.push_back(s);
                }
            } else {
                ++version_;
                if constexpr (is_policy_order<Order>)
                    order_.erase(s);
                else
                    order_.erase(s, h);
                index_.erase(h);
                state_[s] = slot_state::free;
                freed_.push_back(s);
            }
        }
        if (!stored.hashes.empty()) events_.push_back(std::move(stored));
    }

    /// The events since the last call, oldest first.
    std::vector<offload_event> take_events() { return std::exchange(events_, {}); }

private:
    static std::size_t checked(std::size_t n) {
        if (n == 0) throw config_error("OffloadingManager: num_blocks 0 cannot hold a block; give at least 1");
        if (n >= no_index)
            throw config_error("OffloadingManager: num_blocks " + std::to_string(n) +
                               " does not fit 32-bit slots; give fewer than 2^32 - 1");
        return n;
    }
    static void check_distinct(const std::vector<std::uint64_t>& keys) {
        const auto twice = [](std::uint64_t h) {
            return usage_error("prepare_store: block hash " + std::to_string(h) +
                               " appears twice; list each block once");
        };
        if (keys.size() <= 32) {  // a short list: scan it
            for (std::size_t i = 0; i < keys.size(); ++i)
                for (std::size_t j = i + 1; j < keys.size(); ++j)
                    if (keys[i] == keys[j]) throw twice(keys[i]);
            return;
        }
        std::vector<std::uint64_t> sorted(keys);
        std::sort(sorted.begin(), sorted.end());
        const auto d = std::adjacent_find(sorted.begin(), sorted.end());
        if (d != sorted.end()) throw twice(*d);
    }
    // The slots of `hashes` (no_index where absent). vLLM's connector hands
    // one request's hashes to lookup, touch, prepare_load and complete_load in
    // turn (whole, or the hit prefix, or the tail to store): the slots found
    // for the last list are kept until the index next changes, so a call over
    // the same list, a prefix or a suffix of it costs one compare instead of
    // a hash probe per block. The span is valid until the next call.
    std::span<const std::uint32_t> slots_of(std::span<const std::uint64_t> hashes) {
        const std::size_t n = hashes.size();
        if (memo_version_ == version_ && n > 0 && n <= memo_keys_.size()) {
            const std::size_t bytes = n * sizeof(std::uint64_t), tail = memo_keys_.size() - n;
            if (std::memcmp(hashes.data(), memo_keys_.data(), bytes) == 0) return {memo_slots_.data(), n};
            if (std::memcmp(hashes.data(), memo_keys_.data() + tail, bytes) == 0) return {memo_slots_.data() + tail, n};
        }
        memo_keys_.assign(hashes.begin(), hashes.end());
        memo_slots_.resize(n);
        constexpr std::size_t ahead = 8;  // probes in flight: each is a cache miss in a large tier
        for (std::size_t i = 0; i < std::min(ahead, n); ++i) index_.prefetch(hashes[i]);
        for (std::size_t i = 0; i < n; ++i) {
            if (i + ahead < n) index_.prefetch(hashes[i + ahead]);
            memo_slots_[i] = index_.find(hashes[i]);
        }
        memo_version_ = version_;
        return memo_slots_;
    }
    void unmark(std::span<const std::uint32_t> slots) noexcept {
        for (std::uint32_t s : slots) seen_[s] = 0;
    }

    bool events_on_;
    Order order_;
    key_index index_;                    // block hash -> slot
    std::vector<std::uint64_t> key_;     // [slot] block hash
    std::vector<std::uint32_t> loads_;   // [slot] loads in flight
    std::vector<slot_state> state_;      // [slot]
    std::vector<std::uint32_t> seen_;    // [slot] scratch of complete_load, all 0 between calls
    std::vector<std::uint64_t> shield_;  // [slot] == epoch_: in the current prepare_store's input
    std::size_t fresh_ = 0;              // slots fresh_.. capacity-1 were never used
    std::vector<std::uint32_t> freed_;   // freed slots, the next one at the back
    std::vector<std::uint32_t> scratch_;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> shielded_;
    std::vector<offload_event> events_;
    timestamp now_ = 0;
    std::uint64_t epoch_ = 0;
    std::uint64_t version_ = 1;              // bumped whenever the index changes
    std::uint64_t memo_version_ = 0;         // the version memo_slots_ were found at
    std::vector<std::uint64_t> memo_keys_;   // the last list slots_of probed
    std::vector<std::uint32_t> memo_slots_;  // [memo_keys_.size()] their slots
};

}  // namespace kvpolicy::engine
