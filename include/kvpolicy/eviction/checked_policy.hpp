// checked_policy: a dyn_policy (any registered policy, by name) driven over
// dense ids that come from outside (a Python caller, a config, a network),
// with every call checked before anything changes.
//
// The policies have preconditions, not checks, on their hot path (an id in
// range, inserted once, held only while evictable, ...). checked_policy keeps
// each id's state (untracked, evictable, held) beside the policy, checks a
// whole batch against it (the range, the state, an id listed twice), and only
// then makes one batch call into the policy: a call that throws usage_error,
// naming the first bad id and what to do, leaves everything as it was.
// kvpolicy.EvictionPolicy is this type behind the bindings;
// tests/eviction_checked_policy.cpp checks it against a dyn_policy driven
// with valid calls only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/eviction/dyn_policy.hpp"

namespace kvpolicy {

/// Where an id of a checked_policy is.
enum class id_state : std::uint8_t { untracked, evictable, held };

template <class Policies>
class basic_checked_policy {
public:
    using policy_type = basic_dyn_policy<Policies>;
    using config_type = typename policy_type::config_type;

    /// Throws: what basic_dyn_policy's constructor throws.
    basic_checked_policy(std::size_t capacity, const config_type& config)
            : policy_(capacity, config), state_(capacity, id_state::untracked), mark_(capacity, 0) {}

    /// Keys requested that are not tracked (no ids: nothing to check).
    void miss(const item_batch& b) { policy_.miss_batch(b); }
    /// New items, evictable. Throws: usage_error for an id out of range,
    /// tracked, or listed twice, or a column of another length than the ids.
    void insert(const item_batch& b) {
        check_columns(b, "insert");
        check(b.ids, "insert", true, id_state::untracked,
              [](id_state) { return " is already tracked; erase it (or pop it as a victim) first"; });
        policy_.insert_batch(b);
        set(b.ids, id_state::evictable);
    }
    /// Hits on tracked items. Throws: usage_error for an id out of range or
    /// untracked, or a column of another length than the ids.
    void access(const item_batch& b) {
        check_columns(b, "access");
        check(
            b.ids, "access", false, id_state::untracked, [](id_state) { return " is not tracked; insert it first"; },
            /*refuse=*/true);
        policy_.access_batch(b);
    }
    /// Evictable items out of candidacy. Throws: usage_error for an id out
    /// of range, not evictable, or listed twice.
    void hold(std::span<const item_id> ids) {
        check(ids, "hold", true, id_state::evictable, [](id_state s) {
            return s == id_state::held ? " is already held; hold an evictable item once"
                                       : " is not tracked; hold an evictable item once";
        });
        policy_.hold_batch(ids);
        set(ids, id_state::held);
    }
    /// Held items evictable again. Throws: usage_error for an id out of
    /// range, not held, or listed twice, or a column of another length.
    void release(const item_batch& b) {
        check_columns(b, "release");
        check(b.ids, "release", true, id_state::held,
              [](id_state) { return " is not held (released twice, or never held)"; });
        policy_.release_batch(b);
        set(b.ids, id_state::evictable);
    }
    /// Tracked items forgotten. Throws: usage_error for an id out of range,
    /// untracked, or listed twice.
    void erase(std::span<const item_id> ids) {
        check(
            ids, "erase", true, id_state::untracked, [](id_state) { return " is not tracked"; }, /*refuse=*/true);
        policy_.erase_batch(ids);
        set(ids, id_state::untracked);
    }
    /// Up to out.size() victims, removed, into `out`; how many.
    std::size_t pop_victims(std::span<item_id> out, timestamp now) {
        const std::size_t got = policy_.pop_victims(out.first(std::min(out.size(), policy_.evictable_size())), now);
        set(out.first(got), id_state::untracked);
        return got;
    }
    /// Throws: usage_error for an id out of range.
    [[nodiscard]] id_state state(item_id id) const {
        check_range("state", id);
        return state_[id.index()];
    }
    [[nodiscard]] const policy_type& policy() const noexcept { return policy_; }

private:
    // Each id in range, in state `want` (or, `refuse`, in any other), and
    // (`once`) listed once; else a usage_error: "what: id N" + why(state).
    template <class Why>
    void check(std::span<const item_id> ids, const char* what, bool once, id_state want, Why why, bool refuse = false) {
        if (once && ++generation_ == 0) {  // a generation per call marks the ids seen: a repeat is found in O(1)
            std::fill(mark_.begin(), mark_.end(), 0);
            generation_ = 1;
        }
        for (item_id id : ids) {
            check_range(what, id);
            const id_state s = state_[id.index()];
            if ((s == want) == refuse)
                throw usage_error(std::string(what) + ": id " + std::to_string(id.value) + why(s));
            if (!once) continue;
            if (mark_[id.index()] == generation_)
                throw usage_error(std::string(what) + ": id " + std::to_string(id.value) +
                                  " appears twice; list each id once");
            mark_[id.index()] = generation_;
        }
    }
    // Each of the batch's columns (keys, priorities, next uses) absent or one per id.
    static void check_columns(const item_batch& b, const char* what) {
        const auto same = [&](std::size_t n, const char* column) {
            if (n != 0 && n != b.ids.size())
                throw usage_error(std::string(what) + ": " + std::to_string(n) + " " + column + " for " +
                                  std::to_string(b.ids.size()) + " ids; give one per id, or none");
        };
        same(b.keys.size(), "keys");
        same(b.priorities.size(), "priorities");
        same(b.next_use.size(), "next_use values");
    }
    void check_range(const char* what, item_id id) const {
        if (id.index() >= state_.size())
            throw usage_error(std::string(what) + ": id " + std::to_string(id.value) +
                              " is out of range; ids are 0 .. " + std::to_string(state_.size() - 1) +
                              " (the capacity is " + std::to_string(state_.size()) + ")");
    }
    void set(std::span<const item_id> ids, id_state s) noexcept {
        for (item_id id : ids) state_[id.index()] = s;
    }

    policy_type policy_;
    std::vector<id_state> state_;      // [capacity] mirrors the policy's, for the checks
    std::vector<std::uint32_t> mark_;  // [capacity] generation of the last call that listed the id
    std::uint32_t generation_ = 0;
};

/// Any registered policy (eviction/registry.hpp), checked.
using checked_policy = basic_checked_policy<eviction_policies>;

}  // namespace kvpolicy
