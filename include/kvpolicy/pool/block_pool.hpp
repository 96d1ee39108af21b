// block_pool: one tier of the cache (seed 003's BlockPool).
//
// A fixed arena of `capacity` item slots with dense block ids, a free list, a
// key index (block hash -> block id), reference counts, a pinned flag and
// per-slot metadata as flat arrays, plus the tier's eviction policy. The pool
// owns the policy so that one rule holds everywhere: a slot is evictable iff
// it is cached, its reference count is 0 and it is not pinned; exactly the
// evictable slots are candidates of the policy.
//
// Slot lifecycle: free -> take_free() -> reserved -> store() -> cached;
// cached -> pop_victims() or unstore() -> reserved -> free_slot() -> free.
// `reserved` lets the cache copy a victim's bytes out (a planned swap-out) or
// quarantine a slot until the step's copies have run, before reusing it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/core/tier.hpp"
#include "kvpolicy/core/waiting_queue.hpp"

namespace kvpolicy {

/// What a slot remembers about the item it holds.
struct block_meta {
    std::uint64_t parent_key = 0;  ///< key of the previous block of the chain (0 = none)
    session_id owner{};            ///< the session that computed the item
    chunk_index chunk{};
    layer_index layer{};
};

template <eviction_policy Policy>
class block_pool {
public:
    using policy_type = Policy;
    enum class slot_state : std::uint8_t { free, reserved, cached };

    /// Throws: config_error if `capacity` is 0 or 2^30 or more.
    block_pool(tier which, std::size_t capacity, const typename Policy::config_type& policy_config = {})
            : tier_(which),
              policy_(checked_capacity(which, capacity), policy_config),
              index_(capacity),
              state_(capacity, slot_state::free),
              refs_(capacity, 0),
              pinned_(capacity, 0),
              key_(capacity, 0),
              meta_(capacity),
              last_ctx_(capacity),
              victims_(capacity) {
        free_.reserve(capacity);
        for (std::size_t i = capacity; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    }

    // --- queries (seed 003: get_num_free_blocks, get_usage, get_cached_block)

    [[nodiscard]] tier which() const noexcept { return tier_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return state_.size(); }
    [[nodiscard]] std::size_t num_free_blocks() const noexcept { return free_.size(); }
    [[nodiscard]] std::size_t num_cached_blocks() const noexcept { return index_.size(); }
    /// Items that could be evicted now.
    [[nodiscard]] std::size_t num_evictable_blocks() const noexcept { return policy_.evictable_size(); }
    /// Fraction of slots not free (cached, or reserved for an in-flight copy).
    [[nodiscard]] double usage() const noexcept {
        return 1.0 - static_cast<double>(free_.size()) / static_cast<double>(capacity());
    }
    [[nodiscard]] std::optional<block_id> cached_block(std::uint64_t key) const noexcept {
        const std::uint32_t s = index_.find(key);
        return s == no_index ? std::nullopt : std::optional<block_id>{block_id{s}};
    }
    [[nodiscard]] slot_state state(block_id b) const noexcept { return state_[b.index()]; }
    [[nodiscard]] std::uint32_t ref_count(block_id b) const noexcept { return refs_[b.index()]; }
    [[nodiscard]] bool is_pinned(block_id b) const noexcept { return pinned_[b.index()] != 0; }
    [[nodiscard]] std::uint64_t key(block_id b) const noexcept { return key_[b.index()]; }
    [[nodiscard]] const block_meta& meta(block_id b) const noexcept { return meta_[b.index()]; }
    /// What the policy was told at the item's last insert or hit, with
    /// `now` = `at`: releases and moves replay it, so a policy keeps the
    /// request's facts (Belady's next use, a QoS priority) across a hold.
    [[nodiscard]] access_context last_context(block_id b, timestamp at) const noexcept {
        access_context c = last_ctx_[b.index()];
        c.now = at;
        return c;
    }
    [[nodiscard]] bool is_evictable(block_id b) const noexcept {
        return state_[b.index()] == slot_state::cached && refs_[b.index()] == 0 && pinned_[b.index()] == 0;
    }
    [[nodiscard]] const Policy& policy() const noexcept { return policy_; }

    // --- slot lifecycle

    /// A free slot, now reserved; empty when none is free.
    std::optional<block_id> take_free() noexcept {
        if (free_.empty()) return std::nullopt;
        const std::uint32_t s = free_.back();
        free_.pop_back();
        state_[s] = slot_state::reserved;
        return block_id{s};
    }

    /// Seed 003's get_new_blocks: up to out.size() free slots (no eviction).
    std::size_t get_new_blocks(std::span<block_id> out) noexcept {
        std::size_t n = 0;
        while (n < out.size()) {
            auto b = take_free();
            if (!b) break;
            out[n++] = *b;
        }
        return n;
    }

    /// Makes reserved slot `b` hold the item `key`, with `refs` holders.
    /// Precondition: `b` reserved, `key` not cached here.
    void store(block_id b, std::uint64_t key, const block_meta& meta, const access_context& ctx, std::uint32_t refs) {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::reserved && index_.find(key) == no_index);
        state_[b.index()] = slot_state::cached;
        key_[b.index()] = key;
        meta_[b.index()] = meta;
        refs_[b.index()] = refs;
        pinned_[b.index()] = 0;
        last_ctx_[b.index()] = ctx;
        index_.insert(key, b.value);
        policy_.on_insert(item_id{b.value}, ctx);
        if (refs > 0) policy_.on_hold(item_id{b.value});
        if constexpr (hears_waiting_queue<Policy>) {
            if (queue_ != nullptr && !queue_->empty())
                if (const auto position = queue_->next_read(key)) policy_.on_queued(item_id{b.value}, *position);
        }
    }

    /// Lets the policy, if it hears the waiting queue (hears_waiting_queue),
    /// learn at each insert whether a queued request reads the item.
    void hear_queue(const waiting_queue* queue) noexcept { queue_ = queue; }
    /// The earliest queued read of item `key` is now `position` (empty: no
    /// queued request reads it): the policy hears it if the item is here.
    void queued_read_changed(std::uint64_t key, std::optional<std::uint64_t> position, timestamp now) {
        if constexpr (hears_waiting_queue<Policy>) {
            const std::uint32_t s = index_.find(key);
            if (s == no_index) return;
            if (position)
                policy_.on_queued(item_id{s}, *position);
            else
                policy_.on_unqueued(item_id{s}, last_context(block_id{s}, now));
        }
    }

    /// Removes cached item `b` without evicting it; the slot becomes reserved.
    void unstore(block_id b) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached);
        policy_.on_erase(item_id{b.value});
        index_.erase(key_[b.index()]);
        state_[b.index()] = slot_state::reserved;
        refs_[b.index()] = 0;
        pinned_[b.index()] = 0;
    }

    /// Returns reserved slot `b` to the free list.
    void free_slot(block_id b) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::reserved);
        state_[b.index()] = slot_state::free;
        free_.push_back(b.value);
    }

    /// Up to out.size() victims chosen by the policy, in its order; each is
    /// unindexed and its slot reserved (its key and meta stay readable until
    /// the slot is stored again).
    std::size_t pop_victims(std::span<block_id> out, timestamp now) {
        std::span<item_id> ids(victims_.data(), std::min(out.size(), victims_.size()));
        const std::size_t n = policy_.pop_victims(ids, now);
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t s = ids[i].value;
            KVPOLICY_ASSERT(is_evictable(block_id{s}));
            index_.erase(key_[s]);
            state_[s] = slot_state::reserved;
            out[i] = block_id{s};
        }
        return n;
    }

    // --- use

    /// The item `ctx` describes is not here and is about to be stored once
    /// room is made: the policy hears of it before choosing victims.
    void note_miss(const access_context& ctx) noexcept { policy_.on_miss(ctx); }

    /// A hit on cached item `b`.
    void touch(block_id b, const access_context& ctx) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached);
        last_ctx_[b.index()] = ctx;
        policy_.on_access(item_id{b.value}, ctx);
    }
    /// One more holder; the first one takes the item out of candidacy.
    void hold(block_id b) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached);
        if (refs_[b.index()]++ == 0 && pinned_[b.index()] == 0) policy_.on_hold(item_id{b.value});
    }
    /// One holder fewer; the last one makes the item a candidate again, as
    /// a use at `now` with the context of its last access.
    /// Precondition: ref_count(b) > 0 (the cache checks and throws first).
    void release(block_id b, timestamp now) noexcept {
        if (last_hold_dropped(b)) policy_.on_release(item_id{b.value}, last_context(b, now));
    }
    /// The same at the end of a request of `by` that generated
    /// `output_tokens` (0 = unknown), whose session the engine expects back
    /// at `expected_return` (0 = no hint): the policy's context says all three.
    void release(block_id b, timestamp now, session_id by, std::uint64_t output_tokens,
                 timestamp expected_return = 0) noexcept {
        if (!last_hold_dropped(b)) return;
        access_context c = last_context(b, now);
        c.session = by;
        c.output_tokens = output_tokens;
        c.expected_return = expected_return;
        policy_.on_release(item_id{b.value}, c);
    }
    /// Tells the policy, if it hears such news (hears_session_ends), that
    /// `session` has ended.
    void session_ended(session_id session, timestamp now) {
        if constexpr (hears_session_ends<Policy>) policy_.on_session_end(session, now);
    }
    /// Tells the policy, if it hears such news (hears_request_ends), that a
    /// request of `session` has ended.
    void request_ended(session_id session, timestamp now) {
        if constexpr (hears_request_ends<Policy>) policy_.on_request_end(session, now);
    }
    /// Names the session that now computes cached item `b` (its data was
    /// lost and is recomputed by `owner`).
    void set_owner(block_id b, session_id owner) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached);
        meta_[b.index()].owner = owner;
    }
    void pin(block_id b) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached && pinned_[b.index()] == 0);
        pinned_[b.index()] = 1;
        if (refs_[b.index()] == 0) policy_.on_hold(item_id{b.value});
    }
    void unpin(block_id b, timestamp now) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached && pinned_[b.index()] == 1);
        pinned_[b.index()] = 0;
        if (refs_[b.index()] == 0) policy_.on_release(item_id{b.value}, last_context(b, now));
    }

private:
    // One holder fewer; whether the item is a candidate now.
    bool last_hold_dropped(block_id b) noexcept {
        KVPOLICY_ASSERT(state_[b.index()] == slot_state::cached && refs_[b.index()] > 0);
        return --refs_[b.index()] == 0 && pinned_[b.index()] == 0;
    }
    static std::size_t checked_capacity(tier which, std::size_t capacity) {
        if (capacity == 0 || capacity >= (std::size_t{1} << 30))
            throw config_error(std::string(to_string(which)) + " tier: capacity " + std::to_string(capacity) +
                               " blocks is impossible; give 1 to 2^30-1 blocks");
        return capacity;
    }

    tier tier_;
    Policy policy_;                         // candidates: cached, ref 0, unpinned
    key_index index_;                       // key -> slot, cached slots only
    std::vector<slot_state> state_;         // [capacity]
    std::vector<std::uint32_t> refs_;       // [capacity] holders
    std::vector<std::uint8_t> pinned_;      // [capacity]
    const waiting_queue* queue_ = nullptr;  // the cache's, when its policy hears it
    std::vector<std::uint64_t> key_;        // [capacity] item key (block hash, or layer-chunk key)
    std::vector<block_meta> meta_;          // [capacity]
    std::vector<access_context> last_ctx_;  // [capacity] context of the last insert or hit
    std::vector<std::uint32_t> free_;       // free slots, a stack
    std::vector<item_id> victims_;          // [capacity] scratch for pop_victims
};

}  // namespace kvpolicy
