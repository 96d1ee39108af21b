// The block orders of vLLM's CPU offloading manager, 0.11 to 0.20
// (vllm/v1/kv_offload/cpu/policies/{lru,arc}.py of 0.19.1 and 0.20.2, whose
// decisions are the same; only the names of the Python API differ): the
// orders an `offload_manager` keeps when it must decide exactly as vLLM's
// own manager does, registered as "vllm_0_11_lru" and "vllm_0_11_arc"
// (engine/vllm_orders.hpp; the OffloadingManager also takes "vllm_lru" and
// "vllm_arc" for them).
//
// - `vllm_legacy_lru_order`: one recency list of every offloaded block,
//   storing and loading ones included. A block enters at the most-recent end
//   when its store is prepared; touch moves a block (in any state) there;
//   completing a store or a load moves nothing. A victim is the oldest block
//   that is ready, has no load in flight and is not in the current
//   prepare_store's input.
// - `vllm_legacy_arc_order`: vLLM's ARC, which is not the paper's (kvpolicy's
//   `arc` is): a new block always enters T1 (a ghost hit there only forgets
//   the ghost); the target adapts only when touch meets a ghost (by
//   max(1, |B2|/|B1|) up on B1, max(1, |B1|/|B2|) down on B2, kept in
//   [0, capacity], as a double); a touch moves a ready T1 block to T2's
//   recent end and a still-storing one to T1's recent end, and a T2 block to
//   T2's recent end. Eviction, per victim: from T1 when the number of T1
//   blocks not yet chosen is at least int(target) and T1 has an evictable
//   block, else from T2; when T2 has none either the whole eviction fails,
//   changing nothing. Victims go to the ghost lists in choice order, each
//   list keeping its newest `capacity` keys.
//
// Both keep pinned blocks (storing, loading) and the input's blocks in their
// lists and step over them when choosing: a choice costs O(1) plus the
// blocks stepped over, which are at most the blocks in flight and the
// input's (vLLM rescans its lists from the oldest end for every victim: each
// pass here resumes where the last one stopped, since a victim is always the
// oldest unchosen evictable block of its list). Every other call is O(1) per
// block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/index_list.hpp"

namespace kvpolicy::engine {

/// vLLM's LRUCachePolicy (0.11 to 0.20) over dense slots.
class vllm_legacy_lru_order {
public:
    struct config_type {};
    static constexpr std::string_view name = "vllm_0_11_lru";

    vllm_legacy_lru_order(std::size_t num_blocks, const config_type& = {}) : links_(num_blocks) {}

    /// A block whose store was just prepared: the most recent. O(1).
    void insert(std::uint32_t slot, std::uint64_t) noexcept { links_.push_back(order_, slot); }
    /// A failed store: forgotten. O(1).
    void erase(std::uint32_t slot, std::uint64_t) noexcept { links_.remove(order_, slot); }
    /// A touched block (any state; no_index: not offloaded, ignored). O(1).
    void touch(std::uint32_t slot, std::uint64_t, bool) noexcept {
        if (slot != no_index) links_.move_to_back(order_, slot);
    }

    /// Chooses `n` victims among the blocks for which `evictable(slot)`,
    /// oldest first, removes them and appends them to `out`; false (nothing
    /// changed, `out` as it was) when fewer than `n` are evictable.
    template <class Evictable>
    bool evict(std::size_t n, Evictable&& evictable, std::vector<std::uint32_t>& out) {
        const std::size_t first = out.size();
        for (std::uint32_t s = order_.front; s != no_index && out.size() - first < n; s = links_.next(s))
            if (evictable(s)) out.push_back(s);
        if (out.size() - first < n) {
            out.resize(first);
            return false;
        }
        for (std::size_t i = first; i < out.size(); ++i) links_.remove(order_, out[i]);
        return true;
    }

    /// The slots, oldest first (for tests and introspection).
    [[nodiscard]] std::vector<std::uint32_t> slots() const {
        std::vector<std::uint32_t> v;
        for (std::uint32_t s = order_.front; s != no_index; s = links_.next(s)) v.push_back(s);
        return v;
    }

private:
    index_links links_;
    index_list order_;
};

/// vLLM's ARCCachePolicy (0.11 to 0.20) over dense slots (see the header).
class vllm_legacy_arc_order {
public:
    struct config_type {};
    static constexpr std::string_view name = "vllm_0_11_arc";

    vllm_legacy_arc_order(std::size_t num_blocks, const config_type& = {})
            : capacity_(num_blocks), links_(num_blocks), in_t2_(num_blocks, 0), b1_(num_blocks), b2_(num_blocks) {}

    /// A block whose store was just prepared: T1's most recent; its key
    /// leaves the ghost lists (the target does not move). O(1).
    void insert(std::uint32_t slot, std::uint64_t key) noexcept {
        links_.push_back(t1_, slot);
        in_t2_[slot] = 0;
        b1_.erase(key);
        b2_.erase(key);
    }
    /// A failed store: forgotten, no ghost. O(1).
    void erase(std::uint32_t slot, std::uint64_t) noexcept { links_.remove(list_of(slot), slot); }

    /// One touched key (the manager walks a touch's keys last to first):
    /// a block (`slot`, `ready`) or, with slot no_index, maybe a ghost. O(1).
    void touch(std::uint32_t slot, std::uint64_t key, bool ready) {
        if (slot != no_index) {
            if (in_t2_[slot] != 0) {
                links_.move_to_back(t2_, slot);
            } else if (!ready) {
                links_.move_to_back(t1_, slot);  // just prepared: not a second use
            } else {
                links_.move_to_back(t1_, t2_, slot);
                in_t2_[slot] = 1;
            }
        } else if (b1_.contains(key)) {
            const double delta = std::max(1.0, static_cast<double>(b2_.size()) / static_cast<double>(b1_.size()));
            target_ = std::min(target_ + delta, static_cast<double>(capacity_));
            b1_.erase(key);
            b1_.push_back(key);
        } else if (b2_.contains(key)) {
            const double delta = std::max(1.0, static_cast<double>(b1_.size()) / static_cast<double>(b2_.size()));
            target_ = std::max(target_ - delta, 0.0);
            b2_.erase(key);
            b2_.push_back(key);
        }
    }

    /// Chooses `n` victims (see the header), removes them, remembers their
    /// keys (`key_of(slot)`) as ghosts and appends them to `out`; false
    /// (nothing changed, `out` as it was) when they cannot all be found.
    template <class Evictable, class KeyOf>
    bool evict(std::size_t n, Evictable&& evictable, KeyOf&& key_of, std::vector<std::uint32_t>& out) {
        const std::size_t first = out.size();
        std::size_t virtual_t1 = t1_.size;
        const auto target = static_cast<std::size_t>(target_);  // Python's int(): truncation, target >= 0
        std::uint32_t c1 = t1_.front, c2 = t2_.front;           // resume points: everything before is chosen or pinned
        for (std::size_t i = 0; i < n; ++i) {
            std::uint32_t v = no_index;
            if (virtual_t1 >= target) {
                while (c1 != no_index && !evictable(c1)) c1 = links_.next(c1);
                if (c1 != no_index) {
                    v = c1;
                    c1 = links_.next(c1);
                    --virtual_t1;
                }
            }
            if (v == no_index) {
                while (c2 != no_index && !evictable(c2)) c2 = links_.next(c2);
                if (c2 == no_index) {
                    out.resize(first);
                    return false;
                }
                v = c2;
                c2 = links_.next(c2);
            }
            out.push_back(v);
        }
        for (std::size_t i = first; i < out.size(); ++i) {
            const std::uint32_t v = out[i];
            const bool from_t2 = in_t2_[v] != 0;
            links_.remove(from_t2 ? t2_ : t1_, v);
            in_t2_[v] = 0;
            // A full ghost list drops its oldest key first: the same keys as
            // vLLM's append-all-then-trim-to-capacity.
            (void)(from_t2 ? b2_ : b1_).push_back(key_of(v));
        }
        return true;
    }

    [[nodiscard]] double target() const noexcept { return target_; }
    /// Sets the T1 target (vLLM's tests set `target_t1_size` directly).
    /// Throws: usage_error, changing nothing, unless 0 <= t <= capacity.
    void set_target(double t) {
        if (!(t >= 0.0 && t <= static_cast<double>(capacity_)))
            throw usage_error("vllm_arc target_t1_size " + std::to_string(t) + " is outside [0, " +
                              std::to_string(capacity_) + "]; give a value in that range");
        target_ = t;
    }
    /// T1's and T2's slots, oldest first; the ghost lists' keys, oldest first.
    [[nodiscard]] std::vector<std::uint32_t> t1_slots() const { return slots_of(t1_); }
    [[nodiscard]] std::vector<std::uint32_t> t2_slots() const { return slots_of(t2_); }
    [[nodiscard]] std::vector<std::uint64_t> b1_keys() const { return keys_of(b1_); }
    [[nodiscard]] std::vector<std::uint64_t> b2_keys() const { return keys_of(b2_); }

private:
    index_list& list_of(std::uint32_t slot) noexcept { return in_t2_[slot] != 0 ? t2_ : t1_; }
    std::vector<std::uint32_t> slots_of(const index_list& l) const {
        std::vector<std::uint32_t> v;
        for (std::uint32_t s = l.front; s != no_index; s = links_.next(s)) v.push_back(s);
        return v;
    }
    static std::vector<std::uint64_t> keys_of(const ghost_list& g) {
        ghost_list copy = g;
        std::vector<std::uint64_t> v;
        while (!copy.empty()) v.push_back(copy.pop_front());
        return v;
    }

    std::size_t capacity_;
    double target_ = 0.0;  // vLLM's target_t1_size, a Python float
    index_links links_;    // T1 and T2 over slots
    index_list t1_, t2_;
    std::vector<std::uint8_t> in_t2_;  // [slot] 1 in T2, 0 in T1 (or not offloaded)
    ghost_list b1_, b2_;               // evicted keys, oldest first, at most capacity each
};

}  // namespace kvpolicy::engine
