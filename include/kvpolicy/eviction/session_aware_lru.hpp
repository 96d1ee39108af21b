// session_aware_lru: LRU that also evicts, ahead of LRU's victim, the blocks
// of the session expected back last, when that session is expected back much
// later than LRU's victim has been idle; and evicts request tails that are
// never reused before anything (the tail rule of tail_aware_lru).
//
// What it does. Each session's gap between consecutive requests is tracked
// as a running mean (weight `gap_weight` on the newest gap). When an item
// becomes evictable (released, or hit or inserted while unheld) at time r it
// is predicted back at r + its session's mean gap, if the session has shown a
// gap and no other session has used the item since it was inserted (a shared
// prefix, a system prompt, comes back with anyone, so it gets no prediction).
// A victim is
//   1. an unreused request tail, oldest first, while tails are learned to be
//      dead (tail_reuse_learner, tail_reuse.hpp);
//   2. else the item predicted back last, if it is predicted back more than
//      a margin x (now - r of LRU's victim) from now: its wait is longer,
//      by that margin, than the time LRU's victim has already sat unused;
//   3. else LRU's victim (the item that became evictable first). Ties among
//      equal times go to the item placed first: a finished request releases
//      its blocks tail first, so a session loses its deepest blocks first.
// A prediction whose time has passed is dropped (the session is late: it
// may have paused or ended); the item stays in LRU order.
//
// Prefixes: rule 3 keeps cached sets prefix-closed, rule 2 does not always.
// A prediction is made when an item is placed, so when a session's later
// request reads an inner block but not an older branch below it, the inner
// block is predicted back later than the branch and rule 2 can evict it
// first, leaving the branch cached but unreachable until LRU reaches it
// (tests/eviction_prefix_closure.cpp finds such cases on random forests;
// lru, lrfu, superseded_lru and adaptive_kv keep every cached set a prefix).
//
// Why. Rule 2 is Belady's rule (evict the farthest next use) with next uses
// predicted by each session's rhythm, as Continuum keeps an agent's KV for
// the predicted length of its tool call and KVFlow orders agents by their
// distance to the next step. Session gaps are heavy-tailed (on the agentic
// trace: median 20 s, 90th percentile 133 s, 99th 2450 s; consecutive gaps
// of a session correlate weakly), so a prediction alone is a poor guide:
// evicting the farthest-predicted item whenever it is farther than LRU's
// victim's idle time, or keeping every session until its predicted return,
// lost 0.5-2.4 points to LRU at 5% of the trace's blocks in prototype
// replays, while gaining up to 4.7 at 1%. No fixed margin serves every
// capacity (on the agentic trace, 2x closes 29% of the LRU -> Belady gap at
// 1% and loses 0.95 points at 5%; 16x closes 5% and 1%), so the margin is
// learned: pairwise_margin_tuner (pairwise_margin_tuner.hpp) scores sampled
// decisions, taken or not, by which of the two candidates the trace asks for
// first, Belady's own criterion, and applies the prediction only above the
// lowest margin whose decisions win. It starts at `far_factor` (16).
//
// When to use it: requests that carry a stable session id (agents, chats).
// Without session ids (every request its own session) no session shows a gap
// and it is exactly tail_aware_lru. Pop times must not decrease (the cache's
// clock), since predictions that passed are dropped for good.
//
// Departures: no pinning (Continuum pins for a TTL; here a full cache still
// evicts). The session table keeps at most `max_sessions` sessions (0:
// max(capacity, 1024)); when it holds twice that many, those that arrived
// least recently are forgotten (they show no gap until they return twice),
// O(1) amortized.
//
// Cost: O(log n) per operation (three indexed heaps over times, a FIFO, the
// learner's ghosts, a hash map of sessions, the tuner's fixed table of
// pairs); about 240 bytes per item.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"
#include "kvpolicy/eviction/pairwise_margin_tuner.hpp"
#include "kvpolicy/eviction/tail_reuse.hpp"

namespace kvpolicy {

class session_aware_lru {
public:
    struct config_type {
        /// Rule 2 applies when the farthest predicted wait exceeds this many
        /// times LRU's victim's idle time (0: whenever some prediction is
        /// ahead; large: never, LRU with the tail rule). The margin to start
        /// from when `tuner.enabled` (the default), else the fixed margin.
        double far_factor = 16.0;
        /// Weight of the newest gap in a session's running mean, in (0, 1].
        double gap_weight = 0.25;
        /// Sessions remembered; 0 = max(capacity, 1024).
        std::size_t max_sessions = 0;
        /// The tail rule (tail_reuse.hpp).
        tail_reuse_learner::config_type tails{};
        /// Learning the margin (pairwise_margin_tuner.hpp); `far_factor` is
        /// where it starts.
        pairwise_margin_tuner::config_type tuner{};
    };

    static constexpr std::string_view name = "session_aware_lru";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit session_aware_lru(std::size_t capacity) : session_aware_lru(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `far_factor` is negative or not finite, `gap_weight` is outside
    /// (0, 1], or the tail rule's settings are refused (tail_reuse.hpp).
    session_aware_lru(std::size_t capacity, const config_type& config)
        : tracking_(capacity, "session_aware_lru"), config_(validated(config)),
          learner_(capacity, config.tails, "session_aware_lru"), oldest_(capacity), soonest_(capacity),
          farthest_(capacity), links_(capacity), session_(capacity, 0), shared_(capacity, 0),
          max_sessions_(config.max_sessions != 0 ? config.max_sessions : std::max<std::size_t>(capacity, 1024)),
          tuner_(config.far_factor, config.tuner, "session_aware_lru"), key_(capacity, 0) {}

    void on_miss(const access_context&) noexcept {}  // the insert that follows says all

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        learner_.inserted(id.value, ctx);
        tuner_.requested(ctx.key);
        key_[id.index()] = ctx.key;
        note_arrival(ctx);
        session_[id.index()] = ctx.session.value;
        shared_[id.index()] = 0;
        place(id.value, ctx.now);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        learner_.hit(id.value);
        tuner_.requested(ctx.key);
        note_arrival(ctx);
        // A block another session uses is a shared prefix: its next use is
        // anyone's, not one session's rhythm, so it is never predicted.
        if (session_[id.index()] != ctx.session.value) shared_[id.index()] = 1;
        session_[id.index()] = ctx.session.value;
        if (tracking_.is_evictable(id)) {
            unlink(id.value);
            place(id.value, ctx.now);
        }
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        place(id.value, ctx.now);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) unlink(id.value);
        learner_.erased(id.value);
    }
    std::optional<item_id> pop_victim(timestamp now) {
        std::uint32_t v;
        if (!demoted_.empty()) {
            v = links_.pop_front(demoted_);
        } else if (!oldest_.empty()) {
            // Predictions whose time has passed are dropped.
            while (!soonest_.empty() && soonest_.key(soonest_.top()).time <= now) {
                const std::uint32_t x = soonest_.top();
                soonest_.erase(x);
                farthest_.erase(x);
            }
            v = oldest_.top();
            if (!farthest_.empty()) {
                const std::uint32_t f = farthest_.top();
                const double idle = static_cast<double>(now - std::min(now, oldest_.key(v).time));
                const double wait = static_cast<double>(farthest_.key(f).time - now);
                // Blocks of one session come back together: no lesson there.
                if (session_[f] != session_[v]) tuner_.decision(key_[f], key_[v], wait / idle);
                if (wait > tuner_.margin() * idle) v = f;
            }
            unlink(v);
        } else {
            return std::nullopt;
        }
        tracking_.mark_evicted(item_id{v});
        learner_.evicted(v);
        return item_id{v};
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) { return pop_victims_one_by_one(*this, out, now); }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

    /// The running mean gap of `session`; 0 until it has shown a gap.
    [[nodiscard]] double mean_gap(session_id session) const noexcept {
        const auto it = sessions_.find(session.value);
        return it == sessions_.end() || !it->second.has_gap ? 0.0 : it->second.mean_gap;
    }
    /// Whether unreused tails are demoted now.
    [[nodiscard]] bool demoting() const noexcept { return learner_.demoting(); }
    /// Sessions remembered now.
    [[nodiscard]] std::size_t sessions() const noexcept { return sessions_.size(); }
    /// The margin rule 2 applies now.
    [[nodiscard]] double far_factor() const noexcept { return tuner_.margin(); }

private:
    struct time_rank {
        timestamp time;
        std::uint64_t stamp;  // placement order: the earlier first among equal times
    };
    struct earliest_first {
        bool operator()(const time_rank& a, std::uint32_t, const time_rank& b, std::uint32_t) const noexcept {
            return a.time < b.time || (a.time == b.time && a.stamp < b.stamp);
        }
    };
    struct latest_first {
        bool operator()(const time_rank& a, std::uint32_t, const time_rank& b, std::uint32_t) const noexcept {
            return a.time > b.time || (a.time == b.time && a.stamp < b.stamp);
        }
    };
    struct session_state {
        timestamp last = 0;     // latest request's time
        double mean_gap = 0.0;  // running mean of the gaps between requests
        bool has_gap = false;
    };

    static config_type validated(const config_type& c) {
        if (!(c.far_factor >= 0.0) || !std::isfinite(c.far_factor))
            throw config_error("session_aware_lru: far_factor " + std::to_string(c.far_factor) +
                               " must be finite and >= 0 (16 evicts a session ahead of LRU when it is expected "
                               "back more than 16x later than LRU's victim has been idle)");
        if (!(c.gap_weight > 0.0 && c.gap_weight <= 1.0))
            throw config_error("session_aware_lru: gap_weight " + std::to_string(c.gap_weight) +
                               " must be in (0, 1] (the weight of the newest gap in the running mean)");
        return c;
    }

    // A request of ctx.session at ctx.now: every block of one request shares
    // its time, so only the first that is later than the session's last
    // request is a new arrival.
    void note_arrival(const access_context& ctx) {
        auto [it, fresh] = sessions_.try_emplace(ctx.session.value, session_state{ctx.now, 0.0, false});
        if (fresh) {
            if (sessions_.size() >= 2 * max_sessions_) forget_sessions();
            return;
        }
        session_state& s = it->second;
        if (ctx.now <= s.last) return;
        const double gap = static_cast<double>(ctx.now - s.last);
        s.mean_gap = s.has_gap ? s.mean_gap + config_.gap_weight * (gap - s.mean_gap) : gap;
        s.has_gap = true;
        s.last = ctx.now;
    }
    // Keeps the sessions that arrived most recently: those at or after the
    // max_sessions_-th latest arrival time.
    void forget_sessions() {
        scratch_.clear();
        for (const auto& kv : sessions_) scratch_.push_back(kv.second.last);
        const auto cut = scratch_.begin() + static_cast<std::ptrdiff_t>(max_sessions_ - 1);
        std::nth_element(scratch_.begin(), cut, scratch_.end(), [](timestamp a, timestamp b) { return a > b; });
        const timestamp keep_from = *cut;
        std::erase_if(sessions_, [&](const auto& kv) { return kv.second.last < keep_from; });
    }
    // An item becoming evictable at `now`.
    void place(std::uint32_t x, timestamp now) {
        if (learner_.fresh_tail(x) && learner_.demoting()) {
            links_.push_back(demoted_, x);
            return;
        }
        const std::uint64_t stamp = stamp_++;
        oldest_.push(x, {now, stamp});
        const double gap = shared_[x] ? 0.0 : mean_gap(session_id{session_[x]});
        if (gap > 0.0) {
            const double back = static_cast<double>(now) + gap;
            const time_rank r{back >= 1.8e19 ? never - 1 : static_cast<timestamp>(back), stamp};
            if (r.time > now) {
                soonest_.push(x, r);
                farthest_.push(x, r);
            }
        }
    }
    void unlink(std::uint32_t x) noexcept {
        if (in_demoted(x)) {
            links_.remove(demoted_, x);
            return;
        }
        oldest_.erase(x);
        if (soonest_.contains(x)) {
            soonest_.erase(x);
            farthest_.erase(x);
        }
    }
    // links_ threads only the demoted FIFO, so being linked is membership.
    [[nodiscard]] bool in_demoted(std::uint32_t x) const noexcept { return links_.is_linked(x); }

    item_tracking tracking_;
    config_type config_;
    tail_reuse_learner learner_;
    indexed_heap<time_rank, earliest_first> oldest_;    // evictable, not demoted: by placement time
    indexed_heap<time_rank, earliest_first> soonest_;   // those with a prediction still ahead
    indexed_heap<time_rank, latest_first> farthest_;    // the same, farthest first
    index_links links_;                                 // [capacity] the demoted FIFO's links
    index_list demoted_;                                // evictable unreused tails, oldest first
    std::vector<std::uint64_t> session_;                // [capacity] session of the last touch
    std::vector<std::uint8_t> shared_;                  // [capacity] 1 once two sessions used it
    std::unordered_map<std::uint64_t, session_state> sessions_;
    std::size_t max_sessions_;
    std::vector<timestamp> scratch_;
    std::uint64_t stamp_ = 0;
    pairwise_margin_tuner tuner_;
    std::vector<std::uint64_t> key_;  // [capacity] stable key of each item
};

static_assert(eviction_policy<session_aware_lru>);

}  // namespace kvpolicy
