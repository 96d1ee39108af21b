// The bookkeeping every eviction policy shares: which ids are tracked, which
// of those are held, and the counters. Policies keep their own ordering
// structures and call these marks from their `on_*` members, so the
// tracked / evictable / held rules of `eviction_policy` live in one place.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"

namespace kvpolicy {

class item_tracking {
public:
    enum class state : std::uint8_t { untracked, evictable, held };

    item_tracking() = default;

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit item_tracking(std::size_t capacity, std::string_view policy_name) {
        if (capacity == 0)
            throw config_error(std::string(policy_name) + ": capacity 0 cannot hold any item; give at least 1");
        if (capacity >= 0xffffffffULL)
            throw config_error(std::string(policy_name) + ": capacity must be below 2^32-1 items");
        states_.assign(capacity, state::untracked);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return states_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return size_ - held_; }
    [[nodiscard]] bool contains(item_id id) const noexcept {
        return id.index() < states_.size() && states_[id.index()] != state::untracked;
    }
    [[nodiscard]] bool is_evictable(item_id id) const noexcept {
        return id.index() < states_.size() && states_[id.index()] == state::evictable;
    }
    [[nodiscard]] bool is_held(item_id id) const noexcept {
        return id.index() < states_.size() && states_[id.index()] == state::held;
    }
    [[nodiscard]] const policy_counters& counters() const noexcept { return counters_; }
    [[nodiscard]] policy_counters& counters() noexcept { return counters_; }

    void mark_inserted(item_id id) noexcept {
        KVPOLICY_ASSERT(id.index() < states_.size() && !contains(id) && size_ < states_.size());
        states_[id.index()] = state::evictable;
        ++size_;
        ++counters_.insertions;
    }
    void mark_accessed(item_id id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        (void)id;
        ++counters_.hits;
    }
    void mark_held(item_id id) noexcept {
        KVPOLICY_ASSERT(is_evictable(id));
        states_[id.index()] = state::held;
        ++held_;
    }
    void mark_released(item_id id) noexcept {
        KVPOLICY_ASSERT(is_held(id));
        states_[id.index()] = state::evictable;
        --held_;
    }
    /// Returns whether the item was evictable (so the caller knows whether to
    /// unlink it from its ordering structure).
    bool mark_erased(item_id id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        const bool was_evictable = states_[id.index()] == state::evictable;
        if (!was_evictable) --held_;
        states_[id.index()] = state::untracked;
        --size_;
        ++counters_.erasures;
        return was_evictable;
    }
    void mark_evicted(item_id id) noexcept {
        KVPOLICY_ASSERT(is_evictable(id));
        states_[id.index()] = state::untracked;
        --size_;
        ++counters_.evictions;
    }

private:
    std::vector<state> states_;  // [capacity]
    std::size_t size_ = 0;
    std::size_t held_ = 0;
    policy_counters counters_;
};

/// `pop_victims` in terms of `pop_victim`, for policies whose victims come one
/// at a time anyway.
template <class Policy>
std::size_t pop_victims_one_by_one(Policy& p, std::span<item_id> out, timestamp now) {
    std::size_t n = 0;
    while (n < out.size()) {
        auto v = p.pop_victim(now);
        if (!v) break;
        out[n++] = *v;
    }
    return n;
}

}  // namespace kvpolicy
