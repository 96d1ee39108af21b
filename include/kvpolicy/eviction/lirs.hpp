// LIRS: Low Inter-reference Recency Set (Jiang & Zhang, "LIRS: An Efficient
// Low Inter-reference Recency Set Replacement Policy to Improve Buffer Cache
// Performance", SIGMETRICS'02).
//
// Blocks with a short reuse distance are LIR and stay; the rest are HIR. A
// recency stack S holds every LIR block and the HIR blocks (resident or not)
// referenced since the least recent LIR block, which is always S's bottom
// (stack pruning removes HIR entries from the bottom). Resident HIR blocks,
// 1% of the capacity (at least one), wait in a FIFO queue Q, whose front is
// the victim. A HIR block referenced while it is in S has a reuse distance
// below the LIR set's worst, so it becomes LIR and the bottom LIR block of S
// drops to the end of Q. A victim still in S stays there as a non-resident
// entry, remembered by key (`access_context::key`): a miss on it is a ghost
// hit and brings the block back as LIR. Use it where reuse distance matters
// more than recency: loops and scans a little larger than the cache, where
// LRU misses every time; it adapts without a parameter beyond the 1% share.
//
// Mapping to the protocol: pop_victim takes Q's front (the paper's "remove
// the HIR resident block at the front of Q"), on_insert loads the block (the
// paper's case 3a/3b), so no key is needed before the pop. While the LIR set
// is below its share (at warm-up, or after erasures removed LIR blocks) every
// referenced block becomes LIR, as the paper does at warm-up.
//
// Holds and releases (recency-ordered: the LRU family of concepts.hpp's
// hold/release rule): holds only touch Q (S is a record of references, not
// of candidacy): a held resident HIR block leaves Q, a hit while held acts
// as any hit, and a release puts a resident HIR block back at Q's end. A
// release is not a reference, so it does not move the block in S: the
// request that held it was counted by on_insert / on_access, and counting
// its end again would make every block LIR. If Q has no evictable block, the
// bottom LIR block of S is moved to Q as the paper does after a LIR-making
// hit, until an evictable one lands there.
//
// Departures from the paper: non-resident entries are bounded by
// `max_nonresident` (default: the capacity); when a new one would exceed the
// bound, the entry that became non-resident earliest is forgotten. The paper
// leaves S unbounded. O(1) amortized per operation (each S entry is pruned
// at most once per push); about 28 bytes per item plus about 72 per
// non-resident entry (bench/eviction_bench.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class lirs : public tracked_policy<lirs, eviction_order::static_between_accesses> {
public:
    struct config_type {
        /// Share of the capacity for resident HIR blocks (paper: 1%, at least one block).
        double hir_fraction = 0.01;
        /// Non-resident HIR entries kept in S; 0 = the capacity.
        std::size_t max_nonresident = 0;
    };
    static constexpr auto options = std::tuple{
        option{"hir_fraction", &config_type::hir_fraction, {0.0, 1.0}, "share of the capacity for resident HIR blocks"},
        option{"max_nonresident",
               &config_type::max_nonresident,
               {0, (1 << 30) - 1},
               "non-resident HIR entries kept; 0: the capacity"}};

    static constexpr std::string_view name = "lirs";

    explicit lirs(std::size_t capacity) : lirs(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0, `hir_fraction` is outside
    /// [0, 1] or NaN, or `max_nonresident` is 2^30 or more.
    lirs(std::size_t capacity, const config_type& config)
            : tracked_policy(capacity),
              hir_target_(hir_target_for(capacity, config.hir_fraction)),
              lir_target_(capacity - hir_target_),
              max_ghosts_(ghosts_for(capacity, config.max_nonresident)),
              s_links_(capacity + max_ghosts_),
              q_links_(capacity),
              lir_(capacity, 0),
              keys_(capacity, 0),
              ghost_keys_(max_ghosts_, 0),
              ghost_links_(max_ghosts_),
              ghost_table_(std::bit_ceil(std::max<std::size_t>(2 * max_ghosts_, 4)), table_entry{}) {
        free_ghosts_.reserve(max_ghosts_);
        for (std::size_t g = max_ghosts_; g-- > 0;) free_ghosts_.push_back(static_cast<std::uint32_t>(g));
    }

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        keys_[id.index()] = ctx.key;
        const std::uint32_t g = find_ghost(ctx.key);
        if (g != no_index) {  // case 3a: a non-resident HIR block in S
            ++tracking_.counters().ghost_hits;
            forget_ghost(g);
            make_lir_on_top(id.value);
        } else if (lir_count_ < lir_target_) {  // warm-up: every block is LIR
            make_lir_on_top(id.value);
        } else {  // case 3b: a resident HIR block
            lir_[id.index()] = 0;
            s_links_.push_back(stack_, id.value);
            q_links_.push_back(queue_, id.value);
            prune();
        }
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        const std::uint32_t x = id.value;
        if (lir_[x] != 0) {  // case 1
            const bool was_bottom = stack_.front == x;
            s_links_.move_to_back(stack_, stack_, x);
            if (was_bottom) prune();
            return;
        }
        const bool evictable = tracking_.is_evictable(id);
        if (s_links_.is_linked(x) || lir_count_ < lir_target_) {  // case 2a
            if (evictable) q_links_.remove(queue_, x);
            if (s_links_.is_linked(x)) s_links_.remove(stack_, x);
            make_lir_on_top(x);
        } else {  // case 2b
            s_links_.push_back(stack_, x);
            if (evictable) q_links_.move_to_back(queue_, queue_, x);
            prune();
        }
    }

    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        if (lir_[id.index()] == 0) q_links_.remove(queue_, id.value);
    }

    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        if (lir_[id.index()] == 0) q_links_.push_back(queue_, id.value);
    }

    void on_erase(item_id id) noexcept {
        const std::uint32_t x = id.value;
        if (tracking_.mark_erased(id) && lir_[x] == 0) q_links_.remove(queue_, x);
        if (lir_[x] != 0) --lir_count_;
        if (s_links_.is_linked(x)) {
            s_links_.remove(stack_, x);
            prune();
        }
    }

    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        while (queue_.empty()) demote_bottom_lir();  // only LIR blocks are evictable
        const std::uint32_t v = q_links_.pop_front(queue_);
        if (s_links_.is_linked(v)) leave_ghost(v);
        const item_id victim{v};
        tracking_.mark_evicted(victim);
        return victim;
    }

    /// Whether a tracked item has LIR status.
    [[nodiscard]] bool is_lir(item_id id) const noexcept { return contains(id) && lir_[id.index()] != 0; }
    [[nodiscard]] std::size_t lir_size() const noexcept { return lir_count_; }
    /// Entries in S (resident and not) and non-resident entries alone.
    [[nodiscard]] std::size_t stack_size() const noexcept { return stack_.size; }
    [[nodiscard]] std::size_t nonresident_size() const noexcept { return ghost_order_.size; }

private:
    struct table_entry {
        std::uint64_t key = 0;
        std::uint32_t ghost = no_index;  // no_index = empty
    };

    static std::size_t hir_target_for(std::size_t capacity, double fraction) {
        if (!(fraction >= 0.0 && fraction <= 1.0))
            throw config_error("lirs: hir_fraction " + std::to_string(fraction) +
                               " must lie in [0, 1]; the paper uses 0.01");
        const auto share = static_cast<std::size_t>(static_cast<double>(capacity) * fraction);
        return std::clamp<std::size_t>(share, 1, std::max<std::size_t>(capacity, 1));
    }
    static std::size_t ghosts_for(std::size_t capacity, std::size_t max_nonresident) {
        const std::size_t n = max_nonresident == 0 ? capacity : max_nonresident;
        if (n >= (std::size_t{1} << 30))
            throw config_error("lirs: max_nonresident " + std::to_string(n) + " must be below 2^30");
        return n;
    }

    [[nodiscard]] bool is_ghost_node(std::uint32_t node) const noexcept { return node >= capacity(); }

    void make_lir_on_top(std::uint32_t x) noexcept {
        lir_[x] = 1;
        ++lir_count_;
        s_links_.push_back(stack_, x);
        if (lir_count_ > lir_target_) demote_bottom_lir();
    }

    // The bottom of S is LIR (the invariant prune keeps); it becomes resident HIR at Q's end.
    void demote_bottom_lir() noexcept {
        const std::uint32_t b = s_links_.pop_front(stack_);
        KVPOLICY_ASSERT(b != no_index && !is_ghost_node(b) && lir_[b] != 0);
        lir_[b] = 0;
        --lir_count_;
        if (tracking_.is_evictable(item_id{b})) q_links_.push_back(queue_, b);
        prune();
    }

    // Stack pruning: S's bottom must be LIR (or S empty).
    void prune() noexcept {
        for (std::uint32_t b = stack_.front; b != no_index; b = stack_.front) {
            if (is_ghost_node(b)) {
                forget_ghost(b - static_cast<std::uint32_t>(capacity()));
            } else if (lir_[b] == 0) {
                s_links_.remove(stack_, b);
            } else {
                break;
            }
        }
    }

    // The victim `v` (in S) becomes a non-resident entry at its place in S.
    void leave_ghost(std::uint32_t v) noexcept {
        if (max_ghosts_ == 0) {
            s_links_.remove(stack_, v);
            return;
        }
        const std::uint64_t key = keys_[v];
        if (const std::uint32_t dup = find_ghost(key); dup != no_index) forget_ghost(dup);  // keys left at 0
        if (free_ghosts_.empty()) forget_ghost(ghost_order_.front);
        // Only now: forgetting may have unlinked the entry right below v.
        const std::uint32_t below = s_links_.prev(v);
        s_links_.remove(stack_, v);
        const std::uint32_t g = free_ghosts_.back();
        free_ghosts_.pop_back();
        ghost_keys_[g] = key;
        ghost_links_.push_back(ghost_order_, g);
        table_insert(key, g);
        const std::uint32_t node = static_cast<std::uint32_t>(capacity()) + g;
        if (below == no_index)
            s_links_.push_front(stack_, node);
        else
            s_links_.insert_after(stack_, below, node);
    }

    void forget_ghost(std::uint32_t g) noexcept {
        s_links_.remove(stack_, static_cast<std::uint32_t>(capacity()) + g);
        ghost_links_.remove(ghost_order_, g);
        table_erase(ghost_keys_[g]);
        free_ghosts_.push_back(g);
    }

    // Open addressing, linear probing, backward-shift deletion: key -> ghost slot.
    [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
        return static_cast<std::size_t>(mix64(key)) & (ghost_table_.size() - 1);
    }
    [[nodiscard]] std::uint32_t find_ghost(std::uint64_t key) const noexcept {
        const std::size_t mask = ghost_table_.size() - 1;
        for (std::size_t i = home(key);; i = (i + 1) & mask) {
            if (ghost_table_[i].ghost == no_index) return no_index;
            if (ghost_table_[i].key == key) return ghost_table_[i].ghost;
        }
    }
    void table_insert(std::uint64_t key, std::uint32_t g) noexcept {
        const std::size_t mask = ghost_table_.size() - 1;
        std::size_t i = home(key);
        while (ghost_table_[i].ghost != no_index) i = (i + 1) & mask;
        ghost_table_[i] = {key, g};
    }
    void table_erase(std::uint64_t key) noexcept {
        const std::size_t mask = ghost_table_.size() - 1;
        std::size_t i = home(key);
        while (ghost_table_[i].key != key || ghost_table_[i].ghost == no_index) i = (i + 1) & mask;
        for (std::size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
            const table_entry e = ghost_table_[j];
            if (e.ghost == no_index) break;
            const std::size_t h = home(e.key);
            // Move entry j into hole i unless its home lies cyclically in (i, j].
            const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
            if (!stays) {
                ghost_table_[i] = e;
                i = j;
            }
        }
        ghost_table_[i] = {};
    }

    std::size_t hir_target_;  // resident HIR blocks the cache aims for
    std::size_t lir_target_;  // capacity - hir_target_
    std::size_t max_ghosts_;
    std::size_t lir_count_ = 0;              // held ones included
    index_links s_links_;                    // [capacity + max_ghosts] stack S over items, then ghost nodes
    index_list stack_;                       // S: front = bottom (least recent), back = top
    index_links q_links_;                    // [capacity] queue Q
    index_list queue_;                       // evictable resident HIR blocks, front = next victim
    std::vector<std::uint8_t> lir_;          // [capacity] 1 = LIR
    std::vector<std::uint64_t> keys_;        // [capacity] ctx.key at insert
    std::vector<std::uint64_t> ghost_keys_;  // [max_ghosts] key of each non-resident entry
    index_links ghost_links_;                // [max_ghosts] order in which entries became non-resident
    index_list ghost_order_;
    std::vector<std::uint32_t> free_ghosts_;  // unused ghost slots
    std::vector<table_entry> ghost_table_;    // [pow2 >= 2*max_ghosts] key -> ghost slot
};

static_assert(eviction_policy<lirs>);

}  // namespace kvpolicy
