// The bookkeeping of vLLM V1's scheduler-side OffloadingManager
// (vllm/v1/kv_offload/abstract.py) over any kvpolicy eviction policy.
//
// One store of `num_blocks` slots (vLLM's CPU offloading tier). A block is
// `storing` from prepare_store until complete_store, then `ready`; only ready
// blocks count in lookup and may be loaded. A block is protected from
// eviction while it is storing or has loads in flight (prepare_load ..
// complete_load): the policy holds it (`on_hold`), so the policy never
// offers it as a victim. When the protection ends the policy gets it back
// (`on_release`, by kvpolicy's hold rule: position-based policies put it
// back where it was, the LRU family at the most-recent end).
//
// Where this departs from vLLM's LRUOffloadingManager (an OrderedDict): vLLM
// leaves a protected block where it was in its order; here an LRU-family
// policy puts it at the most-recent end when its store or last load
// completes. With completions that follow their prepares before anything
// else is touched (the pattern bench/python replays), both orders agree:
// complete_load releases the blocks tail first (so the head ends most
// recent, as vLLM's reversed touch leaves it) and complete_store releases
// them in the order they were stored (as vLLM inserted them).
//
// Validate, then mutate: a call that throws changes nothing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include <kvpolicy/core/key_index.hpp>

#include "dyn_policy.hpp"

namespace kvpolicy::python {

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
    std::vector<std::uint32_t> evicted_slots;
};

enum class slot_state : std::uint8_t { free, storing, ready };

template <eviction_policy Policy>
class offload_manager {
public:
    /// Throws: config_error for 0 blocks or a bad policy option.
    /// `events`: record what take_events returns (off, nothing is kept).
    offload_manager(std::size_t num_blocks, const typename Policy::config_type& policy, bool events = true)
        : events_on_(events),
          policy_(checked(num_blocks), policy),
          index_(num_blocks),
          key_(num_blocks, 0),
          loads_(num_blocks, 0),
          state_(num_blocks, slot_state::free),
          seen_(num_blocks, 0) {
        free_.reserve(num_blocks);
        for (std::size_t s = num_blocks; s-- > 0;) free_.push_back(static_cast<std::uint32_t>(s));  // slot 0 first
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return key_.size(); }
    [[nodiscard]] std::size_t num_free() const noexcept { return free_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return capacity() - free_.size(); }
    [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
    /// The slot of a block, or no_index.
    [[nodiscard]] std::uint32_t find(std::uint64_t hash) const noexcept { return index_.find(hash); }
    [[nodiscard]] slot_state state(std::uint32_t slot) const noexcept { return state_[slot]; }
    [[nodiscard]] std::uint32_t loads(std::uint32_t slot) const noexcept { return loads_[slot]; }

    /// The number of leading blocks that are offloaded and ready.
    [[nodiscard]] std::size_t lookup(std::span<const std::uint64_t> hashes) {
        const std::span<const std::uint32_t> slots = slots_of(hashes);
        std::size_t n = 0;
        for (std::uint32_t s : slots) {
            if (s == no_index || state_[s] != slot_state::ready) break;
            ++n;
        }
        return n;
    }

    /// Protects the blocks from eviction until complete_load and writes their
    /// slots to `slots` (size >= hashes.size()). A block listed twice is
    /// loaded twice (two complete_loads end it).
    /// Throws: usage_error if a block is not offloaded or still being stored.
    void prepare_load(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) {
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
            if (loads_[s]++ == 0) policy_.on_hold(item_id{s});
        }
    }

    /// Marks the blocks recently used, the first one most recently (vLLM
    /// touches in reverse). Blocks not offloaded are skipped.
    void touch(std::span<const std::uint64_t> hashes) {
        const access_context c = tick();
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = hashes.size(); i-- > 0;) {
            const std::uint32_t s = found[i];
            if (s == no_index) continue;
            access_context ci = c;
            ci.key = hashes[i];
            policy_.on_access(item_id{s}, ci);
        }
    }

    /// Ends one load of each block; a block with no load left becomes
    /// evictable again (tail first, see the header).
    /// Throws: usage_error if a block has no load in flight.
    void complete_load(std::span<const std::uint64_t> hashes) {
        const std::span<const std::uint32_t> found = slots_of(hashes);
        scratch_.resize(hashes.size());
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint32_t s = found[i];
            // A block listed k times needs k loads in flight: count down on a copy.
            if (s == no_index || loads_[s] == 0 || pending(s) >= loads_[s]) {
                unmark(std::span(scratch_).first(i));
                throw usage_error("complete_load: block hash " + std::to_string(hashes[i]) +
                                  " has no load in flight; call prepare_load first, and complete each load once");
            }
            mark(s);
            scratch_[i] = s;
        }
        unmark(scratch_);
        const access_context c = tick();
        for (std::size_t i = hashes.size(); i-- > 0;) {
            const std::uint32_t s = scratch_[i];
            if (--loads_[s] == 0 && state_[s] == slot_state::ready) release(s, hashes[i], c);
        }
    }

    /// Allocates slots for the blocks not yet offloaded (in order), evicting
    /// as many unprotected blocks as needed, in policy order. Empty (nothing
    /// changed) when too few blocks can be evicted.
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
        const std::size_t need = n > free_.size() ? n - free_.size() : 0;
        if (need > policy_.evictable_size()) return std::nullopt;
        const access_context c = tick();
        ++version_;  // the index changes: slots found before are stale
        plan.slots.reserve(n);
        for (std::uint64_t h : plan.to_store) {
            access_context ci = c;
            ci.key = h;
            policy_.on_miss(ci);
            if (free_.empty()) {
                const std::uint32_t v = policy_.pop_victim(c.now)->value;  // one is evictable: counted above
                plan.evicted.push_back(key_[v]);
                plan.evicted_slots.push_back(v);
                index_.erase(key_[v]);
                state_[v] = slot_state::free;
                free_.push_back(v);
            }
            const std::uint32_t s = free_.back();
            free_.pop_back();
            index_.insert(h, s);
            key_[s] = h;
            state_[s] = slot_state::storing;
            policy_.on_insert(item_id{s}, ci);
            policy_.on_hold(item_id{s});
            plan.slots.push_back(s);
        }
        if (events_on_ && !plan.evicted.empty()) events_.push_back({plan.evicted, plan.evicted_slots, true});
        // complete_store comes next with these blocks: keep their slots.
        memo_keys_ = plan.to_store;
        memo_slots_ = plan.slots;
        memo_version_ = version_;
        return plan;
    }

    /// Ends the stores of the blocks: on success those still storing become
    /// ready (and evictable unless loading); on failure they are removed.
    /// Ready blocks are left as they are, as vLLM does.
    /// Throws: usage_error if a block is not offloaded at all.
    void complete_store(std::span<const std::uint64_t> hashes, bool success) {
        const std::span<const std::uint32_t> found = slots_of(hashes);
        for (std::size_t i = 0; i < hashes.size(); ++i)
            if (found[i] == no_index)
                throw usage_error("complete_store: block hash " + std::to_string(hashes[i]) +
                                  " was never prepared (or its failed store already removed it); "
                                  "complete only what prepare_store returned");
        const access_context c = tick();
        offload_event stored;
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            const std::uint64_t h = hashes[i];
            const std::uint32_t s = found[i];
            if (state_[s] != slot_state::storing) continue;  // ready, or listed twice and done above
            if (success) {
                state_[s] = slot_state::ready;
                release(s, h, c);
                if (events_on_) {
                    stored.hashes.push_back(h);
                    stored.slots.push_back(s);
                }
            } else {
                ++version_;
                policy_.on_erase(item_id{s});
                index_.erase(h);
                state_[s] = slot_state::free;
                free_.push_back(s);
            }
        }
        if (!stored.hashes.empty()) events_.push_back(std::move(stored));
    }

    /// The events since the last call, oldest first.
    std::vector<offload_event> take_events() { return std::exchange(events_, {}); }

private:
    static std::size_t checked(std::size_t n) {
        if (n == 0) throw config_error("OffloadingManager: num_blocks 0 cannot hold a block; give at least 1");
        return n;
    }
    access_context tick() noexcept {
        access_context c;
        c.now = ++now_;
        return c;
    }
    void release(std::uint32_t s, std::uint64_t h, access_context c) {
        c.key = h;
        policy_.on_release(item_id{s}, c);
    }
    static void check_distinct(const std::vector<std::uint64_t>& keys) {
        const auto twice = [](std::uint64_t h) {
            return usage_error("prepare_store: block hash " + std::to_string(h) + " appears twice; list each block once");
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

    // complete_load's count of a slot's occurrences so far in one call.
    std::uint32_t pending(std::uint32_t s) const noexcept { return seen_[s]; }
    void mark(std::uint32_t s) noexcept { ++seen_[s]; }
    void unmark(std::span<const std::uint32_t> slots) noexcept {
        for (std::uint32_t s : slots) seen_[s] = 0;
    }

    bool events_on_;
    Policy policy_;
    key_index index_;                 // block hash -> slot
    std::vector<std::uint64_t> key_;  // [slot] block hash
    std::vector<std::uint32_t> loads_;  // [slot] loads in flight
    std::vector<slot_state> state_;     // [slot]
    std::vector<std::uint32_t> seen_;   // [slot] scratch of complete_load, all 0 between calls
    std::vector<std::uint32_t> free_;   // free slots, the next one at the back
    std::vector<std::uint32_t> scratch_;
    std::vector<offload_event> events_;
    timestamp now_ = 0;
    std::uint64_t version_ = 1;                // bumped whenever the index changes
    std::uint64_t memo_version_ = 0;           // the version memo_slots_ were found at
    std::vector<std::uint64_t> memo_keys_;     // the last list slots_of probed
    std::vector<std::uint32_t> memo_slots_;    // [memo_keys_.size()] their slots
};

/// An offload_manager whose policy is chosen by name: one virtual call per
/// call, the per-block loop inside the concrete manager.
class any_offload_manager {
public:
    virtual ~any_offload_manager() = default;
    [[nodiscard]] virtual std::size_t capacity() const noexcept = 0;
    [[nodiscard]] virtual std::size_t num_free() const noexcept = 0;
    [[nodiscard]] virtual std::size_t size() const noexcept = 0;
    [[nodiscard]] virtual std::uint32_t find(std::uint64_t hash) const noexcept = 0;
    [[nodiscard]] virtual slot_state state(std::uint32_t slot) const noexcept = 0;
    [[nodiscard]] virtual std::uint32_t loads(std::uint32_t slot) const noexcept = 0;
    [[nodiscard]] virtual std::string_view policy_name() const noexcept = 0;
    [[nodiscard]] virtual std::size_t lookup(std::span<const std::uint64_t> hashes) = 0;
    virtual void prepare_load(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) = 0;
    virtual void touch(std::span<const std::uint64_t> hashes) = 0;
    virtual void complete_load(std::span<const std::uint64_t> hashes) = 0;
    virtual std::optional<store_plan> prepare_store(std::span<const std::uint64_t> hashes) = 0;
    virtual void complete_store(std::span<const std::uint64_t> hashes, bool success) = 0;
    virtual std::vector<offload_event> take_events() = 0;

    /// Throws: unknown_name_error listing every policy; config_error for 0
    /// blocks or a bad option.
    static std::unique_ptr<any_offload_manager> make(std::size_t num_blocks, const std::string& policy,
                                                     const policy_options& options, bool events);
};

template <eviction_policy Policy>
class offload_manager_model final : public any_offload_manager {
public:
    offload_manager_model(std::size_t n, const typename Policy::config_type& c, bool events) : m_(n, c, events) {}
    [[nodiscard]] std::size_t capacity() const noexcept override { return m_.capacity(); }
    [[nodiscard]] std::size_t num_free() const noexcept override { return m_.num_free(); }
    [[nodiscard]] std::size_t size() const noexcept override { return m_.size(); }
    [[nodiscard]] std::uint32_t find(std::uint64_t h) const noexcept override { return m_.find(h); }
    [[nodiscard]] slot_state state(std::uint32_t s) const noexcept override { return m_.state(s); }
    [[nodiscard]] std::uint32_t loads(std::uint32_t s) const noexcept override { return m_.loads(s); }
    [[nodiscard]] std::string_view policy_name() const noexcept override { return Policy::name; }
    [[nodiscard]] std::size_t lookup(std::span<const std::uint64_t> h) override { return m_.lookup(h); }
    void prepare_load(std::span<const std::uint64_t> h, std::span<std::uint32_t> s) override { m_.prepare_load(h, s); }
    void touch(std::span<const std::uint64_t> h) override { m_.touch(h); }
    void complete_load(std::span<const std::uint64_t> h) override { m_.complete_load(h); }
    std::optional<store_plan> prepare_store(std::span<const std::uint64_t> h) override { return m_.prepare_store(h); }
    void complete_store(std::span<const std::uint64_t> h, bool ok) override { m_.complete_store(h, ok); }
    std::vector<offload_event> take_events() override { return m_.take_events(); }

private:
    offload_manager<Policy> m_;
};

inline std::unique_ptr<any_offload_manager> any_offload_manager::make(std::size_t num_blocks, const std::string& policy,
                                                                      const policy_options& options, bool events) {
    return visit_by_name<eviction_policies>(
        policy,
        [&]<class P>() -> std::unique_ptr<any_offload_manager> {
            return std::make_unique<offload_manager_model<P>>(num_blocks, make_config<P>(options), events);
        },
        "eviction policy");
}

}  // namespace kvpolicy::python
