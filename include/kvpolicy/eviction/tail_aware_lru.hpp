// tail_aware_lru: LRU over a prefix tree that learns, online, whether the
// last block of each request is ever reused, and evicts those blocks first
// when they are not.
//
// What it does. The backbone is LRU with vLLM's release rule (a finished
// request's blocks re-enter tail first, so the cache evicts leaves of the
// prefix tree before their ancestors, as SGLang's radix tree evicts only
// leaves). On top, each newly inserted item is classed by its position in
// its request: a *tail* (the request's last block, `ctx.chunk + 1 ==
// ctx.session_total_chunks`) or an *inner* block. The policy measures each
// class's first-reuse rate: an item is reused if it is hit while cached or
// inserted again while its key is in the class's ghost list (the keys of the
// last `capacity` evicted, never-reused items of that class). When tails are
// reused at less than `demote_ratio` times the inner rate (after
// `min_samples` insertions of each class), a tail that has not been reused is
// released into a *demoted* FIFO that is evicted before the LRU list; a hit
// moves it back to the LRU list for good. Counts halve every `window`
// insertions of a class, so the decision follows the workload.
//
// Why. An engine that hashes a request's partial last block (Mooncake's
// traces: 1.8% of conversation tails and 10% of synthetic tails are ever seen
// again, against 24-45% of inner blocks) fills an LRU cache with tails that
// the next turn cannot match, since the turn's extra tokens change that
// block's hash. An engine that caches only full blocks (vLLM, the agentic
// trace) sees its last block reused by the next turn. The rate is learned,
// not assumed, so the same policy is plain LRU for the second kind.
// Admission of blocks that never come back (learned prefix caching,
// NeurIPS'25, predicts reuse online from features; this uses one feature,
// position in the request, with ghost-corrected counts like ARC's and
// 2Q's ghosts).
//
// Where it departs: it uses no future knowledge and no per-session model
// (the measurements in the README show why a recency-only backbone stays:
// frequency bonuses and time-to-live rules lost to LRU on some trace and
// capacity). Items whose context leaves `chunk` and `session_total_chunks`
// at their defaults are all tails, so the inner class never reaches
// `min_samples` and the policy is exactly LRU (flat replays, generic callers).
//
// Cost: O(1) per operation (two index lists, two ghost lists); about 120
// bytes per item with the ghosts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"

namespace kvpolicy {

class tail_aware_lru {
public:
    struct config_type {
        /// Demote tails while their reuse rate is below this multiple of the
        /// inner blocks' rate; 0 never demotes (plain LRU).
        double demote_ratio = 0.5;
        /// Insertions of each class needed before the rates are compared.
        std::uint32_t min_samples = 64;
        /// A class's counts halve when its insertions reach this many.
        std::uint32_t window = 4096;
    };

    static constexpr std::string_view name = "tail_aware_lru";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit tail_aware_lru(std::size_t capacity) : tail_aware_lru(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `demote_ratio` is negative or not finite, or `window` is below
    /// 2 x `min_samples` or 2.
    tail_aware_lru(std::size_t capacity, const config_type& config)
        : tracking_(capacity, "tail_aware_lru"), config_(validated(config)), links_(capacity),
          key_(capacity, 0), fresh_(capacity, fresh_none), demoted_bit_(capacity, 0),
          ghosts_{ghost_list(capacity), ghost_list(capacity)} {}

    void on_miss(const access_context&) noexcept {}  // the insert that follows says all

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        const std::uint8_t c = is_tail(ctx) ? tail : inner;
        // A key a ghost remembers was evicted unused and is wanted again:
        // a reuse of its class, which the eviction had cut short.
        for (std::uint8_t g = 0; g < 2; ++g)
            if (ghosts_[g].erase(ctx.key)) ++reused_[g];
        ++inserted_[c];
        if (inserted_[c] >= config_.window) {
            inserted_[c] /= 2;
            reused_[c] /= 2;
        }
        key_[id.index()] = ctx.key;
        fresh_[id.index()] = c;
        place(id.value);
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        settle(id.value);
        if (tracking_.is_evictable(id)) {
            unlink(id.value);
            place(id.value);  // reused: the LRU list's most recent end
        }
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        place(id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) unlink(id.value);
        fresh_[id.index()] = fresh_none;
    }
    std::optional<item_id> pop_victim(timestamp) {
        index_list& from = demoted_.empty() ? recency_ : demoted_;
        if (from.empty()) return std::nullopt;
        const std::uint32_t v = links_.pop_front(from);
        demoted_bit_[v] = 0;
        tracking_.mark_evicted(item_id{v});
        if (const std::uint8_t c = fresh_[v]; c != fresh_none) {
            ghost_list& g = ghosts_[c];
            g.erase(key_[v]);  // a key inserted twice (generic callers) is remembered once
            g.push_back(key_[v]);
            fresh_[v] = fresh_none;
        }
        return item_id{v};
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) { return pop_victims_one_by_one(*this, out, now); }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

    /// Whether unreused tails are demoted now.
    [[nodiscard]] bool demoting() const noexcept {
        if (inserted_[tail] < config_.min_samples || inserted_[inner] < config_.min_samples) return false;
        // reused_t / inserted_t < ratio x reused_i / inserted_i, without division.
        return static_cast<double>(reused_[tail]) * static_cast<double>(inserted_[inner]) <
               config_.demote_ratio * static_cast<double>(reused_[inner]) * static_cast<double>(inserted_[tail]);
    }
    /// Evictable items waiting in the demoted FIFO.
    [[nodiscard]] std::size_t demoted_size() const noexcept { return demoted_.size; }

private:
    static constexpr std::uint8_t inner = 0, tail = 1, fresh_none = 2;

    static bool is_tail(const access_context& ctx) noexcept {
        return std::uint64_t{ctx.chunk.value} + 1 >= ctx.session_total_chunks;
    }
    static config_type validated(const config_type& c) {
        if (!(c.demote_ratio >= 0.0) || c.demote_ratio > 1e9)
            throw config_error("tail_aware_lru: demote_ratio " + std::to_string(c.demote_ratio) +
                               " must be finite and >= 0 (0.5 demotes tails reused at under half the inner rate)");
        if (c.window < 2 || c.window < 2ULL * c.min_samples)
            throw config_error("tail_aware_lru: window " + std::to_string(c.window) + " must be at least 2 and 2 x min_samples (" +
                               std::to_string(c.min_samples) + ")");
        return c;
    }
    // The first reuse of a fresh item: count it for its class.
    void settle(std::uint32_t x) noexcept {
        if (fresh_[x] != fresh_none) {
            ++reused_[fresh_[x]];
            fresh_[x] = fresh_none;
        }
    }
    // An item becoming evictable: the demoted FIFO for an unreused tail while
    // tails are demoted, else the most recent end of the LRU list.
    void place(std::uint32_t x) noexcept {
        demoted_bit_[x] = fresh_[x] == tail && demoting() ? 1 : 0;
        links_.push_back(demoted_bit_[x] ? demoted_ : recency_, x);
    }
    // Takes an evictable item out of whichever list holds it.
    void unlink(std::uint32_t x) noexcept {
        links_.remove(demoted_bit_[x] ? demoted_ : recency_, x);
        demoted_bit_[x] = 0;
    }

    item_tracking tracking_;
    config_type config_;
    index_links links_;                 // [capacity] shared by both lists
    index_list recency_;                // evictable, least recent first
    index_list demoted_;                // evictable unreused tails, oldest first
    std::vector<std::uint64_t> key_;    // [capacity]
    std::vector<std::uint8_t> fresh_;   // [capacity] class while not yet reused, else fresh_none
    std::vector<std::uint8_t> demoted_bit_;  // [capacity] 1 while in demoted_
    ghost_list ghosts_[2];              // per class: keys evicted before any reuse
    std::uint64_t inserted_[2] = {0, 0};
    std::uint64_t reused_[2] = {0, 0};
};

static_assert(eviction_policy<tail_aware_lru>);

}  // namespace kvpolicy
