// vllm_arc: the exact decisions of vLLM's own ARC cache policy (vLLM 0.30 to
// 0.33, docs/supported-versions.md; `vllm/v1/kv_offload/cpu/policies/arc.py`,
// `ARCCachePolicy`), in C++.
//
// Named so that nobody takes it for the paper's ARC (Megiddo and Modha,
// FAST'03), which kvpolicy ships as `arc`. vLLM's variant departs from the
// paper where a KV offloading tier needs it:
//
// - a new chunk always enters T1, and a ghost (B1/B2) entry of its key is
//   dropped at insertion; the target adapts earlier, when the manager reports
//   the store miss (`adapt_to_ghost`, once per key per request), not by
//   putting a re-stored ghost in T2;
// - a touch of a chunk still being stored keeps it in T1 (moved to T1's
//   most-recent end): a chunk just prepared was not used twice;
// - at a request's end, chunks the request only inserted keep their list and
//   go to its most-recent end; chunks it reused go to T2's;
// - `evict(n, protected)` selects all n victims before changing anything:
//   from T1 while T1's (simulated) size is at least the integer part of the
//   target, else from T2, else from T1; a chunk pinned (ref count not 0) or
//   protected is passed over; it refuses (nothing changed) when fewer than n
//   can go. The scans over T1 and T2 only move forward within one call.
//   Victims enter B1 or B2 as ghosts, and each ghost list is then trimmed to
//   the capacity, oldest first.
//
// Ids are dense slots 0 .. capacity-1 chosen by the caller; ghosts are
// remembered by a 64-bit key the caller derives from the chunk's key (the
// Python adapter passes the key's hash(); two keys whose 64-bit values
// collide would share one ghost, a chance of 2^-64 per pair, which can only
// shift the target once, never lose or confuse a chunk). Complexity: O(1)
// per insert, touch and pin; O(passed) per eviction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/index_list.hpp"

namespace kvpolicy::engine {

class vllm_arc {
public:
    static constexpr std::string_view name = "vllm_arc";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    /// The ghost lists hold `capacity` keys each, as vLLM trims them.
    explicit vllm_arc(std::size_t capacity)
            : capacity_(checked(capacity)),
              links_(capacity),
              state_(capacity, slot_state::absent),
              list_(capacity, which::none),
              ghost_key_(capacity, 0),
              b1_(capacity + 1),  // +1: an eviction appends before it trims
              b2_(capacity + 1) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t size() const noexcept { return t1_.size + t2_.size; }
    [[nodiscard]] std::size_t t1_size() const noexcept { return t1_.size; }
    [[nodiscard]] std::size_t t2_size() const noexcept { return t2_.size; }
    [[nodiscard]] std::size_t b1_size() const noexcept { return b1_.size(); }
    [[nodiscard]] std::size_t b2_size() const noexcept { return b2_.size(); }
    [[nodiscard]] double target_t1_size() const noexcept { return target_; }
    /// Sets the adaptive target (vLLM's public attribute: its tests set it
    /// to stage a scenario). Pre: 0 <= t <= capacity().
    void set_target_t1_size(double t) noexcept { target_ = t; }
    [[nodiscard]] bool contains(std::uint32_t id) const noexcept {
        return id < capacity_ && state_[id] != slot_state::absent;
    }
    [[nodiscard]] bool in_t1(std::uint32_t id) const noexcept { return contains(id) && list_[id] == which::t1; }
    [[nodiscard]] bool in_t2(std::uint32_t id) const noexcept { return contains(id) && list_[id] == which::t2; }
    [[nodiscard]] bool in_b1(std::uint64_t ghost) const noexcept { return b1_.contains(ghost); }
    [[nodiscard]] bool in_b2(std::uint64_t ghost) const noexcept { return b2_.contains(ghost); }

    /// The ids of T1 (or T2), least recent first.
    [[nodiscard]] std::vector<std::uint32_t> t1_order() const { return order_of(t1_); }
    [[nodiscard]] std::vector<std::uint32_t> t2_order() const { return order_of(t2_); }

    /// A new chunk enters T1's most-recent end; its key leaves B1 and B2.
    /// `ready`: its data is complete (ref count >= 0); `evictable`: ref count 0.
    /// Pre: `id` < capacity() and not present.
    void insert(std::uint32_t id, std::uint64_t ghost, bool ready, bool evictable) {
        KVPOLICY_ASSERT(id < capacity_ && !contains(id));
        ghost_key_[id] = ghost;
        state_[id] = evictable ? slot_state::evictable : ready ? slot_state::pinned : slot_state::storing;
        list_[id] = which::t1;
        links_.push_back(t1_, id);
        b1_.erase(ghost);
        b2_.erase(ghost);
    }

    /// Forgets a chunk without a ghost (a failed store). Pre: present.
    void remove(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        links_.remove(list_[id] == which::t1 ? t1_ : t2_, id);
        state_[id] = slot_state::absent;
        list_[id] = which::none;
    }

    /// One touch, keys in the order vLLM walks them (reversed): a ready chunk
    /// in T1 moves to T2's most-recent end, one still storing to T1's; a
    /// chunk in T2 to T2's; an absent key (`id` no_index) adapts the target
    /// if it is a ghost.
    void touch(std::uint32_t id, std::uint64_t ghost) {
        if (id == no_index || !contains(id)) {
            adapt_to_ghost(ghost);
            return;
        }
        if (list_[id] == which::t1) {
            links_.remove(t1_, id);
            if (state_[id] == slot_state::storing) {
                links_.push_back(t1_, id);
            } else {
                list_[id] = which::t2;
                links_.push_back(t2_, id);
            }
        } else {
            links_.move_to_back(t2_, id);
        }
    }

    /// A ghost hit adapts the target (B1: grow T1, B2: shrink it) and
    /// refreshes the ghost; returns whether `ghost` was one.
    bool adapt_to_ghost(std::uint64_t ghost) {
        if (b1_.contains(ghost)) {
            const double delta = std::max(1.0, static_cast<double>(b2_.size()) / static_cast<double>(b1_.size()));
            target_ = std::min(target_ + delta, static_cast<double>(capacity_));
            b1_.erase(ghost);
            (void)b1_.push_back(ghost);
            return true;
        }
        if (b2_.contains(ghost)) {
            const double delta = std::max(1.0, static_cast<double>(b1_.size()) / static_cast<double>(b2_.size()));
            target_ = std::max(target_ - delta, 0.0);
            b2_.erase(ghost);
            (void)b2_.push_back(ghost);
            return true;
        }
        return false;
    }

    /// One key of a finished request, walked tail to head: `inserted_only`
    /// keeps its list and goes to that list's most-recent end; `reused` goes
    /// to T2's most-recent end; others are left alone.
    void finish(std::uint32_t id, bool inserted_only, bool reused) {
        if (id == no_index || !contains(id)) return;
        if (inserted_only) {
            links_.move_to_back(list_[id] == which::t1 ? t1_ : t2_, id);
        } else if (reused) {
            if (list_[id] == which::t1) {
                links_.remove(t1_, id);
                list_[id] = which::t2;
                links_.push_back(t2_, id);
            } else {
                links_.move_to_back(t2_, id);
            }
        }
    }

    void mark_evictable(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        state_[id] = slot_state::evictable;
    }
    void mark_non_evictable(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        state_[id] = slot_state::pinned;
    }

    /// Selects `n` victims as vLLM does (see the header), removes them into
    /// the ghost lists and trims those; or nothing, changing nothing.
    /// `is_protected(id)` -> bool.
    template <class Protected>
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, Protected&& is_protected) {
        std::vector<std::uint32_t> out;
        if (n == 0) return out;
        out.reserve(n);
        std::vector<bool> from_t1;
        from_t1.reserve(n);
        const auto target = static_cast<std::int64_t>(target_);  // Python's int(): toward zero, target >= 0
        std::int64_t virtual_t1 = t1_.size;
        std::uint32_t t1_at = t1_.front, t2_at = t2_.front;  // the scans' next positions
        const auto next_candidate = [&](std::uint32_t& at) {
            while (at != no_index) {
                const std::uint32_t id = at;
                at = links_.next(id);
                if (state_[id] == slot_state::evictable && !is_protected(id)) return id;
            }
            return no_index;
        };
        for (std::size_t i = 0; i < n; ++i) {
            std::uint32_t id = no_index;
            bool t1 = false;
            if (virtual_t1 >= target) {
                id = next_candidate(t1_at);
                if (id != no_index) {
                    t1 = true;
                    --virtual_t1;
                }
            }
            if (id == no_index) id = next_candidate(t2_at);
            if (id == no_index) {
                id = next_candidate(t1_at);
                if (id == no_index) return std::nullopt;
                t1 = true;
                --virtual_t1;
            }
            out.push_back(id);
            from_t1.push_back(t1);
        }
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t id = out[i];
            links_.remove(from_t1[i] ? t1_ : t2_, id);
            ghost_list& ghosts = from_t1[i] ? b1_ : b2_;
            // vLLM's `b1[key] = None`: a key already there keeps its place
            // (only a 64-bit collision of two live keys can bring that about).
            if (!ghosts.contains(ghost_key_[id])) (void)ghosts.push_back(ghost_key_[id]);
            state_[id] = slot_state::absent;
            list_[id] = which::none;
            // Trim as vLLM does, after all victims: a list over capacity
            // loses its oldest. Appending one at a time and trimming at
            // capacity+1 drops the same keys in the same order.
            trim(from_t1[i] ? b1_ : b2_);
        }
        return out;
    }

    /// Forgets every chunk and ghost; the target returns to 0.
    void clear() {
        for (std::uint32_t id : t1_order()) links_.remove(t1_, id);
        for (std::uint32_t id : t2_order()) links_.remove(t2_, id);
        std::fill(state_.begin(), state_.end(), slot_state::absent);
        std::fill(list_.begin(), list_.end(), which::none);
        b1_.clear();
        b2_.clear();
        target_ = 0.0;
    }

private:
    enum class slot_state : std::uint8_t { absent, storing, pinned, evictable };
    enum class which : std::uint8_t { none, t1, t2 };

    static std::size_t checked(std::size_t capacity) {
        if (capacity == 0) throw config_error("vllm_arc: cache_capacity 0 cannot hold a chunk; give at least 1");
        if (capacity >= no_index - 1) throw config_error("vllm_arc: cache_capacity must be below 2^32-2 chunks");
        return capacity;
    }
    std::vector<std::uint32_t> order_of(const index_list& l) const {
        std::vector<std::uint32_t> ids;
        ids.reserve(l.size);
        for (std::uint32_t id = l.front; id != no_index; id = links_.next(id)) ids.push_back(id);
        return ids;
    }
    void trim(ghost_list& g) noexcept {
        while (g.size() > capacity_) (void)g.pop_front();
    }

    std::size_t capacity_;
    index_links links_;
    index_list t1_, t2_;
    std::vector<slot_state> state_;         // [capacity]
    std::vector<which> list_;               // [capacity]
    std::vector<std::uint64_t> ghost_key_;  // [capacity] the key a victim leaves as a ghost
    ghost_list b1_, b2_;
    double target_ = 0.0;
};

}  // namespace kvpolicy::engine
