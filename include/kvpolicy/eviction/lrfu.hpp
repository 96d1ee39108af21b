// lrfu: evict the item with the least combined recency and frequency: each
// past reference weighs (1/2)^(age / half-life), and the victim is the item
// whose weights sum lowest (Lee et al., "LRFU: A Spectrum of Policies that
// Subsumes the Least Recently Used and Least Frequently Used Policies",
// IEEE Trans. Computers 2001).
//
// What it does. Each item keeps its combined recency-frequency value
// crf = sum over its references of 2^(-(T - t_ref) / half_life); a reference
// at T updates it as crf <- 1 + crf * 2^(-(T - t_last) / half_life). Since
// every value decays at the same rate, crf(T) * 2^(T / half_life) orders the
// items at any T, so the order changes only on a reference, and the log of
// that product is a heap key: O(log n) per operation. A short half-life is
// LRU; a long one is LFU with aging. The history of evicted items (their
// value and time) is kept for the last `ghost_factor` x capacity victims, so
// a block that comes back after eviction keeps its frequency.
//
// Time. T counts block references (inserts and accesses), in steps: every
// reference with the same `ctx.now` (one scheduler step, one request in
// kvpolicy-sim) gets the T of the step's first. The half-life is given in
// multiples of the capacity in references, so one setting means the same
// thing at any capacity, clock unit or request rate.
//
// Why it suits prefix caches. A request that reads a block also reads all of
// its ancestors in the same step, so an ancestor's value is at least any
// descendant's: the order never strands a cached subtree below an evicted
// parent (an evicted inner block would make its cached descendants
// unreachable). Equal values go to the item placed first, and a finished
// request releases its blocks tail first, so a request's deepest blocks go
// first and cached sets stay prefixes, as SGLang's radix tree evicts leaves.
// Shared prefixes (system prompts, documents many requests read) gain value
// with every reader; blocks of requests that never come back sit at value 1.
// Which half-life wins depends on the workload and the capacity (on the
// agentic trace at 5%, 4 capacities loses 6 points to LRU; on the Mooncake
// conversation trace at 1%, 8-32 capacities close 28% of the LRU -> Belady
// gap): best_of_shadows (best_of_shadows.hpp) picks it online.
//
// Departures: the paper keeps no history of evicted blocks; the ghosts here
// do (without them, a long half-life lost up to 4 points of the 10 it gained
// on the conversation trace at 1%), for erased items too: their references
// stay true, and best_of_shadows tells its other experts of a victim by
// erasing it, so every expert keeps the same history and ancestors never
// have less of it than their descendants. Values are kept as doubles, not
// the paper's bounded-precision ones.
//
// Cost: O(log n) per operation (an indexed heap, a ghost list); about 50
// bytes per item plus 66 per remembered victim (ghost_factor 4: 314 per item).
#pragma once

#include <cmath>
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
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

/// `DefaultHalfLife`: the half-life a default configuration starts from, in
/// whole capacities (an integer: clang 14 takes no floating-point template
/// arguments); any positive value can be configured.
template <std::uint32_t DefaultHalfLife = 2>
class basic_lrfu : public tracked_policy<basic_lrfu<DefaultHalfLife>, eviction_order::static_between_accesses> {
    using tracked = tracked_policy<basic_lrfu<DefaultHalfLife>, eviction_order::static_between_accesses>;
    using tracked::tracking_;

public:
    struct config_type {
        /// Half-life of a reference's weight, in multiples of the capacity
        /// counted in block references: > 0 and finite. Small: LRU; large: LFU.
        double half_life = static_cast<double>(DefaultHalfLife);
        /// Victims whose history is remembered, in multiples of the capacity; >= 0.
        double ghost_factor = 4.0;
    };
    static constexpr auto options =
        std::tuple{option{"half_life", &config_type::half_life, non_negative,
                          "half-life of a reference's weight, in capacities of references (small: LRU, large: LFU)"},
                   option{"ghost_factor", &config_type::ghost_factor, non_negative,
                          "victims whose history is remembered, in capacities"}};

    static constexpr std::string_view name = "lrfu";

    explicit basic_lrfu(std::size_t capacity) : basic_lrfu(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `half_life` is not positive and finite, or `ghost_factor` is negative,
    /// not finite or asks for 2^30 ghosts or more.
    basic_lrfu(std::size_t capacity, const config_type& config)
            : tracked(capacity),
              config_(validated(config, capacity)),
              per_reference_(1.0 / (config.half_life * static_cast<double>(capacity))),
              heap_(capacity),
              crf_(capacity, 0.0),
              time_(capacity, 0),
              placed_(capacity, 0),
              key_(capacity, 0),
              ghosts_(static_cast<std::size_t>(config.ghost_factor * static_cast<double>(capacity))),
              ghost_crf_(ghosts_.capacity(), 0.0),
              ghost_time_(ghosts_.capacity(), 0) {}

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        const std::uint64_t t = reference(ctx);
        double crf = 1.0;
        if (const std::uint32_t g = ghosts_.slot_of(ctx.key); g != no_index) {
            crf += decayed(ghost_crf_[g], ghost_time_[g], t);
            ghosts_.erase(ctx.key);
        }
        crf_[id.index()] = crf;
        time_[id.index()] = t;
        key_[id.index()] = ctx.key;
        place(id.value);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        const std::uint64_t t = reference(ctx);
        crf_[id.index()] = 1.0 + decayed(crf_[id.index()], time_[id.index()], t);
        time_[id.index()] = t;
        if (!tracking_.is_evictable(id)) return;
        placed_[id.index()] = stamp_++;
        if (ordered_) heap_.update(id.value, rank_of(id.value));
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        if (ordered_) heap_.erase(id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        place(id.value);
    }
    void on_erase(item_id id) {
        if (tracking_.mark_erased(id) && ordered_) heap_.erase(id.value);
        remember(id.value);
    }
    /// A suspended order is rebuilt first (resume_order).
    std::optional<item_id> pop_victim(timestamp) {
        resume_order();
        if (heap_.empty()) return std::nullopt;
        const std::uint32_t v = heap_.pop();
        remember(v);
        tracking_.mark_evicted(item_id{v});
        return item_id{v};
    }

    /// Stops keeping the victim order: every operation still updates each
    /// item's value, time and placement stamp in O(1), but no heap, until
    /// resume_order() or pop_victim() rebuilds the heap from them in O(n).
    /// best_of_shadows suspends the experts it does not follow, which
    /// saves two or three heap updates per block operation, and resumes one
    /// when it switches to it: the victims are the same as if it had kept
    /// its order all along (the order is strict: equal values are ranked by
    /// placement stamp, which is kept either way).
    void suspend_order() noexcept {
        ordered_ = false;
        heap_.clear();
    }
    void resume_order() {
        if (ordered_) return;
        ordered_ = true;
        std::vector<std::uint32_t> evictable;
        evictable.reserve(tracking_.evictable_size());
        for (std::uint32_t x = 0; x < crf_.size(); ++x)
            if (tracking_.is_evictable(item_id{x})) evictable.push_back(x);
        heap_.assign(evictable, [&](std::uint32_t x) { return rank_of(x); });
    }
    /// Takes `from`'s items and their history as its own: each item's value
    /// and placement, the reference clock, and the remembered victims (if
    /// both remember as many); this one must hold no item and have `from`'s
    /// capacity. Every value (a ghost's too) is decayed at `from`'s rate to
    /// the current step and from there decays at this one's: the order at
    /// the switch is `from`'s, and a request's ancestors still never rank
    /// below its descendants (a value summed at one half-life and decayed
    /// at another from each item's own last reference would break that).
    /// best_of_shadows switching from one LRFU to another carries the
    /// history so (a rebuild would know only how often each cached item
    /// was referenced). O(n).
    /// Throws: usage_error if this one holds items or the capacities differ
    /// (nothing changed).
    template <std::uint32_t H>
    void adopt_history(const basic_lrfu<H>& from) {
        if (tracking_.size() != 0 || from.capacity() != this->capacity())
            throw usage_error("lrfu::adopt_history: this lrfu holds " + std::to_string(tracking_.size()) +
                              " items at capacity " + std::to_string(this->capacity()) + ", the other has capacity " +
                              std::to_string(from.capacity()) + "; adopt only into an empty lrfu of the same capacity");
        tracking_ = from.tracking_;
        crf_ = from.crf_;
        time_ = from.time_;
        placed_ = from.placed_;
        key_ = from.key_;
        if (from.ghosts_.capacity() == ghosts_.capacity()) {
            ghosts_ = from.ghosts_;
            ghost_crf_ = from.ghost_crf_;
            ghost_time_ = from.ghost_time_;
        }
        references_ = from.references_;
        step_start_ = from.step_start_;
        step_now_ = from.step_now_;
        started_ = from.started_;
        stamp_ = from.stamp_;
        const std::uint64_t now = step_start_;  // every time kept is at or before it
        for (std::size_t x = 0; x < crf_.size(); ++x) {
            crf_[x] = from.decayed(crf_[x], time_[x], now);
            time_[x] = now;
        }
        for (std::size_t g = 0; g < ghost_crf_.size(); ++g) {
            ghost_crf_[g] = from.decayed(ghost_crf_[g], ghost_time_[g], now);
            ghost_time_[g] = now;
        }
        ordered_ = false;
        resume_order();
    }
    [[nodiscard]] bool keeps_order() const noexcept { return ordered_; }

    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    /// The combined recency-frequency value of tracked item `id` at its last
    /// reference (tests; the order compares these scaled to one time).
    [[nodiscard]] double value(item_id id) const noexcept { return crf_[id.index()]; }

private:
    template <std::uint32_t>
    friend class basic_lrfu;
    struct rank {
        double score;         // log2(crf) + T / (half_life x capacity): crf scaled to one time
        std::uint64_t stamp;  // placement order: the earlier first among equal scores
    };
    struct lowest_first {
        bool operator()(const rank& a, std::uint32_t, const rank& b, std::uint32_t) const noexcept {
            return a.score < b.score || (a.score == b.score && a.stamp < b.stamp);
        }
    };

    static config_type validated(const config_type& c, std::size_t capacity) {
        if (!(c.half_life > 0.0) || !std::isfinite(c.half_life))
            throw config_error("lrfu: half_life " + std::to_string(c.half_life) +
                               " must be finite and > 0 (in multiples of the capacity, counted in block references; "
                               "0.25 is close to LRU, 32 close to LFU)");
        if (!(c.ghost_factor >= 0.0) || !std::isfinite(c.ghost_factor) ||
            c.ghost_factor * static_cast<double>(capacity) >= static_cast<double>(std::size_t{1} << 30))
            throw config_error("lrfu: ghost_factor " + std::to_string(c.ghost_factor) +
                               " must be finite, >= 0 and below 2^30 / capacity (victims remembered per cached "
                               "item; 0 forgets a victim's history)");
        return c;
    }

    // The T of a reference at ctx.now: the reference count when its step began.
    std::uint64_t reference(const access_context& ctx) noexcept {
        if (!started_ || ctx.now != step_now_) {
            started_ = true;
            step_now_ = ctx.now;
            step_start_ = references_;
        }
        ++references_;
        return step_start_;
    }
    [[nodiscard]] double decayed(double crf, std::uint64_t then, std::uint64_t t) const noexcept {
        return crf * std::exp2(-per_reference_ * static_cast<double>(t - then));
    }
    [[nodiscard]] rank rank_of(std::uint32_t x) const noexcept {
        return {std::log2(crf_[x]) + per_reference_ * static_cast<double>(time_[x]), placed_[x]};
    }
    void place(std::uint32_t x) noexcept {
        placed_[x] = stamp_++;
        if (ordered_) heap_.push(x, rank_of(x));
    }
    void remember(std::uint32_t x) {
        if (ghosts_.capacity() == 0) return;
        ghosts_.erase(key_[x]);  // a key inserted twice (generic callers) is remembered once
        ghosts_.push_back(key_[x]);
        const std::uint32_t g = ghosts_.back_slot();
        ghost_crf_[g] = crf_[x];
        ghost_time_[g] = time_[x];
    }

    config_type config_;
    double per_reference_;                   // 1 / (half_life x capacity): halvings per reference
    indexed_heap<rank, lowest_first> heap_;  // evictable items, lowest value first
    std::vector<double> crf_;                // [capacity] value at the last reference
    std::vector<std::uint64_t> time_;        // [capacity] T of the last reference
    std::vector<std::uint64_t> placed_;      // [capacity] stamp of the last placement in the order
    std::vector<std::uint64_t> key_;         // [capacity] stable key
    ghost_list ghosts_;                      // keys of recent victims
    std::vector<double> ghost_crf_;          // [ghost slot] value at the victim's last reference
    std::vector<std::uint64_t> ghost_time_;  // [ghost slot] T of that reference
    std::uint64_t references_ = 0;
    std::uint64_t step_start_ = 0;
    timestamp step_now_ = 0;
    bool started_ = false;
    std::uint64_t stamp_ = 0;
    bool ordered_ = true;  // the heap holds every evictable item (suspend_order)
};

/// LRFU with a half-life of two capacities (the best single setting on the
/// Mooncake traces at 5-10%; README "Which policy").
using lrfu = basic_lrfu<>;
static_assert(eviction_policy<lrfu>);

}  // namespace kvpolicy
