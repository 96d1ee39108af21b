// ARC: Adaptive Replacement Cache (Megiddo & Modha, "ARC: A Self-Tuning, Low
// Overhead Replacement Cache", FAST'03, Fig. 4).
//
// Resident items live in T1 (seen once recently) or T2 (seen at least twice);
// the ghost lists B1 and B2 remember the keys (`access_context::key`, since
// item ids are reused slots) of items evicted from T1 and T2. A miss on a key
// in B1 says T1 was too small and raises the real-valued target p by
// max(|B2|/|B1|, 1); a miss on a key in B2 lowers it by max(|B1|/|B2|, 1).
// REPLACE evicts the LRU of T1 when |T1| > p (or |T1| = p and the missed key
// is in B2), else the LRU of T2. Use it where recency and frequency both
// matter and the mix shifts: it resists scans and one-time blocks that flush
// LRU, with no parameter to tune. (Seed 002's "ARC" keeps two lists and
// nudges p once per eviction; it has no ghosts and no adaptation on ghost
// hits, so it is not ARC.)
//
// Mapping to the protocol. The paper sees the missed key before REPLACE; the
// cache calls `pop_victim` before `on_insert`, so the policy learns the key
// too late. `on_miss(ctx)` closes the gap: a caller that announces the miss
// first (lookup missed -> on_miss -> pop_victim while full -> on_insert) gets
// the paper's cases II/III exactly (p adapted before REPLACE, the x-in-B2 tie
// rule) and case IV's ghost trimming, which is what libCacheSim's ARC does,
// so flat-mode miss ratios match libCacheSim's. Without `on_miss`, REPLACE
// runs case IV (trim, then the plain |T1| > p rule) and the ghost hit adapts
// p at `on_insert`, one eviction late. Either way a ghost hit goes to T2.
//
// Holds and releases: a held item leaves its list but keeps its T1/T2 tag and
// still counts in |T1| or |T2| (it is resident). REPLACE takes the list the
// rule names if it has an evictable item, else the other one. A hit while
// held moves the tag to T2. T1 and T2 are recency-ordered (the LRU family of
// concepts.hpp's hold/release rule): a release refreshes recency in the item's own
// list (MRU of T1 or T2) but is not a second reference: the request that
// held the block was already counted by on_insert / on_access, and counting
// its end again would send every block to T2 and cost ARC its scan
// resistance. An erasure forgets the item without a ghost.
//
// Departures from the paper: B1 and B2 hold at most c keys each (the paper's
// bounds whenever the cache is full; after erasures leave it part-empty the
// oldest key is dropped instead of growing a list past c); a key evicted
// while a ghost of the same key exists replaces that ghost. O(1) per
// operation; about 19 bytes per item, plus about 63 bytes per ghost key in
// each of B1 and B2 (bench/eviction_bench.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class arc : public tracked_policy<arc, eviction_order::static_between_accesses> {
public:
    /// ARC has no knob: c is the capacity and p starts at 0, as in the paper.
    struct config_type {};

    static constexpr std::string_view name = "arc";

    /// Throws: config_error if `capacity` is 0 or 2^30 or more.
    explicit arc(std::size_t capacity, const config_type& = {})
            : tracked_policy(capacity),
              links_(capacity),
              in_t2_(capacity, 0),
              keys_(capacity, 0),
              b1_(capacity),
              b2_(capacity) {}

    /// The lookup of `ctx.key` missed and an `on_insert` with this key
    /// follows, after the `pop_victim` calls that make room. Runs the
    /// paper's case II / III adaptation now, so REPLACE sees it. Effects: if
    /// the key is in B1 (B2), p rises (falls) and the key leaves the ghost
    /// list. Complexity: O(1).
    void on_miss(const access_context& ctx) noexcept {
        pending_ = pending_miss{.key = ctx.key, .where = adapt(ctx.key)};
    }

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        keys_[id.index()] = ctx.key;
        const ghost g = (pending_ && pending_->key == ctx.key) ? pending_->where : adapt(ctx.key);
        pending_.reset();
        if (g != ghost::none) ++tracking_.counters().ghost_hits;
        in_t2_[id.index()] = g != ghost::none ? 1 : 0;
        ++(g != ghost::none ? t2_count_ : t1_count_);
        links_.push_back(g != ghost::none ? t2_ : t1_, id.value);
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        const bool evictable = tracking_.is_evictable(id);
        if (in_t2_[id.index()] == 0) {
            in_t2_[id.index()] = 1;
            --t1_count_;
            ++t2_count_;
            if (evictable) links_.move_to_back(t1_, t2_, id.value);
        } else if (evictable) {
            links_.move_to_back(t2_, t2_, id.value);
        }
    }

    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.remove(list_of(id), id.value);
    }

    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        links_.push_back(list_of(id), id.value);
    }

    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(list_of(id), id.value);
        --(in_t2_[id.index()] != 0 ? t2_count_ : t1_count_);
    }

    /// REPLACE, preceded by case IV's ghost trimming unless `on_miss`
    /// announced a ghost hit. Complexity: O(1).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        if (pending_ && pending_->where != ghost::none) return replace(pending_->where == ghost::b2);
        const std::size_t c = capacity();
        if (t1_count_ + b1_.size() >= c) {  // case IV(A): L1 = T1 u B1 holds c pages
            if (!b1_.empty()) {
                b1_.pop_front();
            } else if (!t1_.empty()) {  // |T1| = c: evict its LRU without a ghost
                const item_id v{links_.pop_front(t1_)};
                --t1_count_;
                tracking_.mark_evicted(v);
                return v;
            }
        } else if (t1_count_ + t2_count_ + b1_.size() + b2_.size() >= 2 * c && !b2_.empty()) {  // case IV(B)
            b2_.pop_front();
        }
        return replace(false);
    }

    /// The adaptive target size of T1, in [0, capacity()].
    [[nodiscard]] double target() const noexcept { return p_; }
    /// Resident items (held ones included) in T1 and T2; keys in B1 and B2.
    [[nodiscard]] std::size_t t1_size() const noexcept { return t1_count_; }
    [[nodiscard]] std::size_t t2_size() const noexcept { return t2_count_; }
    [[nodiscard]] std::size_t b1_size() const noexcept { return b1_.size(); }
    [[nodiscard]] std::size_t b2_size() const noexcept { return b2_.size(); }

private:
    enum class ghost : std::uint8_t { none, b1, b2 };
    struct pending_miss {
        std::uint64_t key;
        ghost where;
    };

    [[nodiscard]] index_list& list_of(item_id id) noexcept { return in_t2_[id.index()] != 0 ? t2_ : t1_; }

    // Cases II and III: delta is computed with the key still in its list.
    ghost adapt(std::uint64_t key) noexcept {
        const auto c = static_cast<double>(capacity());
        if (b1_.contains(key)) {
            const double delta = std::max(static_cast<double>(b2_.size()) / static_cast<double>(b1_.size()), 1.0);
            p_ = std::min(p_ + delta, c);
            b1_.erase(key);
            return ghost::b1;
        }
        if (b2_.contains(key)) {
            const double delta = std::max(static_cast<double>(b1_.size()) / static_cast<double>(b2_.size()), 1.0);
            p_ = std::max(p_ - delta, 0.0);
            b2_.erase(key);
            return ghost::b2;
        }
        return ghost::none;
    }

    // Precondition: some item is evictable.
    item_id replace(bool key_in_b2) noexcept {
        const auto t1 = static_cast<double>(t1_count_);
        const bool rule_t1 = t1 > p_ || (t1 == p_ && key_in_b2);
        const bool from_t1 = !t1_.empty() && (rule_t1 || t2_.empty());
        const item_id v{links_.pop_front(from_t1 ? t1_ : t2_)};
        --(from_t1 ? t1_count_ : t2_count_);
        remember(from_t1 ? b1_ : b2_, keys_[v.index()]);
        tracking_.mark_evicted(v);
        return v;
    }

    // A key lives in at most one ghost list; a repeated key (callers that
    // leave ctx.key at 0) replaces its older ghost.
    void remember(ghost_list& to, std::uint64_t key) noexcept {
        b1_.erase(key);
        b2_.erase(key);
        to.push_back(key);
    }

    index_links links_;                        // [capacity] T1 / T2 links of evictable items
    index_list t1_, t2_;                       // evictable items, LRU first
    std::vector<std::uint8_t> in_t2_;          // [capacity] 1 if the item is in T2 (kept while held)
    std::vector<std::uint64_t> keys_;          // [capacity] ctx.key at insert: what the ghosts remember
    std::size_t t1_count_ = 0, t2_count_ = 0;  // resident, held included
    ghost_list b1_, b2_;
    double p_ = 0.0;
    std::optional<pending_miss> pending_;
};

static_assert(eviction_policy<arc>);

}  // namespace kvpolicy
