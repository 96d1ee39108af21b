// session_aware_lru: LRU that also evicts, ahead of LRU's victim, the blocks
// of the session expected back last, when that session is expected back much
// later than LRU's victim has been idle; and evicts request tails that are
// never reused before anything (the tail rule of tail_aware_lru).
//
// What it does. A session is expected back at its latest request + the
// running mean of its gaps (weight `gap_weight` on the newest); once a
// release said how many tokens its request generated (output_tokens), + the
// gap return_gap_model's online fit predicts from that count (agentic trace,
// 1%: 30% -> 48% of the LRU -> Belady gap). A release's expected_return (a
// tool call's timeout; `never` for a closed conversation) replaces that until
// the session's next request (true returns: 96 / 83 / 44% of the gap at 1 /
// 5 / 10%, README "What an engine's hints are worth"). The evictable blocks
// only one session has used (a shared prefix, a system prompt, comes back
// with anyone, so it is nobody's) are kept per session in the order they
// became evictable. A victim is
//   1. an unreused request tail, oldest first, while tails are learned to be
//      dead (tail_reuse_learner, tail_reuse.hpp);
//   2. else the first placed block of the session expected back last, if
//      that session is expected back more than a margin x (now - r of LRU's
//      victim) from now: its wait is longer, by that margin, than the time
//      LRU's victim has already sat unused;
//   3. else LRU's victim (the item that became evictable first). Ties among
//      equal times go to the item placed first: a finished request releases
//      its blocks tail first, so a session loses its deepest blocks first.
// A session whose expected time has passed (it is late: it may have paused
// or ended) is not taken by rule 2 until it comes back; its blocks stay in
// LRU order.
//
// Prefixes: every rule keeps cached sets prefix-closed. The expectation is
// the session's, not its blocks', so an older branch below a re-read inner
// block (placed earlier) goes first, and a block two sessions used is left to
// LRU order (tests/eviction_prefix_closure.cpp, on random forests).
//
// Why. Rule 2 is Belady's rule (evict the farthest next use) with next uses
// predicted by each session's rhythm, as Continuum keeps an agent's KV for
// its tool call's predicted length and KVFlow orders agents by their steps to
// execution. Session gaps are heavy-tailed (agentic trace: median 20 s, p99
// 2450 s), so trusting every prediction lost up to 2.4 points to LRU at 5% of
// the trace's blocks, and no fixed margin serves every capacity (2x: +29% of
// the gap at 1%, -0.95 points at 5%). The margin is learned instead:
// pairwise_margin_tuner scores sampled decisions, taken or not, by which of
// the two candidates the trace asks for first (Belady's own criterion), and
// applies the prediction above the lowest margin whose decisions win,
// starting at `far_factor` (16).
//
// When to use it: requests with a stable session id (agents, chats); without
// one (each request its own session) it is exactly tail_aware_lru.
//
// Departures: no pinning (Continuum pins for a TTL; a full cache evicts).
// The session table keeps `max_sessions` sessions (0: max(capacity, 1024))
// plus those owning evictable blocks; at twice that, the least recently
// arrived that own none are forgotten (no gap until they return twice), O(1)
// amortized; a block placed while its session is not in it is LRU only.
//
// Cost: O(log n) per operation (LRU's order by placement time, O(1) while
// times come in order (time_queue.hpp), an indexed heap over the sessions'
// expected times keyed by each session's first block, a FIFO, per-session
// lists, the learner's ghosts, a hash map of sessions, the tuner's fixed
// table of pairs; a 5x5 solve per request whose output was known).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/core/time_queue.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"
#include "kvpolicy/eviction/pairwise_margin_tuner.hpp"
#include "kvpolicy/eviction/return_gap_model.hpp"
#include "kvpolicy/eviction/tail_reuse.hpp"

namespace kvpolicy {

class session_aware_lru : public tracked_policy<session_aware_lru, eviction_order::static_between_accesses> {
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
        /// Predicting a session's gap from its latest request's output
        /// tokens (return_gap_model.hpp), when releases carry them; disabled
        /// or before it has learned: the session's mean gap.
        return_gap_model::config_type gaps{};
    };
    static constexpr auto options = std::tuple{
        option{"far_factor", &config_type::far_factor, non_negative,
               "evict a session ahead of LRU when it is expected back this many times later (the start if tuned)"},
        option{"gap_weight", &config_type::gap_weight, {0.0, 1.0}, "weight of the newest gap in a session's mean gap"},
        option{"max_sessions", &config_type::max_sessions, non_negative, "sessions remembered; 0: max(capacity, 1024)"},
        option_fn<config_type, bool>{"tune_margin",
                                     [](const config_type& c) { return c.tuner.enabled; },
                                     [](config_type& c, bool v) { c.tuner.enabled = v; },
                                     {0, 1},
                                     "learn the margin from far_factor; 0: keep far_factor fixed"},
        option_fn<config_type, bool>{"predict_gaps",
                                     [](const config_type& c) { return c.gaps.enabled; },
                                     [](config_type& c, bool v) { c.gaps.enabled = v; },
                                     {0, 1},
                                     "predict a session's gap from its output tokens; 0: mean gaps only"},
        option_fn<config_type, std::uint64_t>{"gap_min_samples",
                                              [](const config_type& c) { return c.gaps.min_samples; },
                                              [](config_type& c, std::uint64_t v) { c.gaps.min_samples = v; },
                                              non_negative, "samples before the gap model predicts"}};

    static constexpr std::string_view name = "session_aware_lru";

    explicit session_aware_lru(std::size_t capacity) : session_aware_lru(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `far_factor` is negative or not finite, `gap_weight` is outside
    /// (0, 1], or the tail rule's settings are refused (tail_reuse.hpp).
    session_aware_lru(std::size_t capacity, const config_type& config)
            : tracked_policy(capacity),
              config_(validated(config)),
              learner_(capacity, config.tails, "session_aware_lru"),
              oldest_(capacity),
              farthest_(capacity),
              links_(capacity),
              own_links_(capacity),
              where_(capacity, in_none),
              session_(capacity, 0),
              shared_(capacity, 0),
              max_sessions_(config.max_sessions != 0 ? config.max_sessions : std::max<std::size_t>(capacity, 1024)),
              forget_at_(2 * max_sessions_),
              tuner_(config.far_factor, config.tuner, "session_aware_lru"),
              gaps_(config.gaps, "session_aware_lru"),
              key_(capacity, 0) {}

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
        const bool evictable = tracking_.is_evictable(id);
        if (evictable) unlink(id.value);  // from the list of the session it had
        // A block another session uses is a shared prefix: its next use is
        // anyone's, not one session's rhythm, so it belongs to no session.
        if (session_[id.index()] != ctx.session.value) shared_[id.index()] = 1;
        session_[id.index()] = ctx.session.value;
        if (evictable) place(id.value, ctx.now);
    }
    void on_hold(item_id id) {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        if (ctx.output_tokens != 0) note_output(ctx);
        if (ctx.expected_return != 0) take_hint(ctx.session, ctx.expected_return);
        place(id.value, ctx.now);
    }
    /// The engine closed `session` (tiered_cache::free_session): it is
    /// expected back never, as a `never` hint at its release would say, until
    /// it makes another request.
    void on_session_end(session_id session, timestamp) { take_hint(session, never); }
    void on_erase(item_id id) {
        if (tracking_.mark_erased(id)) unlink(id.value);
        learner_.erased(id.value);
    }
    std::optional<item_id> pop_victim(timestamp now) {
        std::uint32_t v;
        if (!demoted_.empty()) {
            v = demoted_.front;
        } else if (!oldest_.empty()) {
            v = oldest_.front();
            // The top session is expected back last; if its time has passed,
            // every session's has.
            if (!farthest_.empty() && farthest_.key(farthest_.top()).back > now) {
                const std::uint32_t f = farthest_.top();
                const double idle = static_cast<double>(now - std::min(now, oldest_.time(v)));
                const double wait = static_cast<double>(farthest_.key(f).back - now);
                // Blocks of one session come back together: no lesson there.
                if (session_[f] != session_[v]) tuner_.decision(key_[f], key_[v], wait / idle);
                if (wait > tuner_.margin() * idle) v = f;
            }
        } else {
            return std::nullopt;
        }
        unlink(v);
        tracking_.mark_evicted(item_id{v});
        learner_.evicted(v);
        return item_id{v};
    }

    /// The running mean gap of `session`; 0 until it has shown a gap.
    [[nodiscard]] double mean_gap(session_id session) const noexcept {
        const auto it = sessions_.find(session.value);
        return it == sessions_.end() || !it->second.has_gap ? 0.0 : it->second.mean_gap;
    }
    /// When `session` is expected back: the engine's hint
    /// (access_context::expected_return; `never - 1` for `never`), else its
    /// latest request + its expected gap (from its latest request's output
    /// tokens once the fit has learned, else its mean gap); empty if unknown
    /// or no expectation yet.
    [[nodiscard]] std::optional<timestamp> expected_back(session_id session) const noexcept {
        const auto it = sessions_.find(session.value);
        if (it == sessions_.end() || it->second.expected_gap <= 0.0) return std::nullopt;
        return rank_of(session.value, it->second).back;
    }
    /// Takes what `from` has learned about the workload rather than about
    /// the items it holds: each session's rhythm (latest request, gaps,
    /// output tokens, the engine's hint, expected gap), the return-gap fit,
    /// the margin's tuner and the tails' reuse rates. Meant for a policy that
    /// holds no item yet: best_of_shadows builds a newly followed expert so
    /// from its shadow, which saw every request of the sessions with a
    /// sampled block, and in which, sampled at rate R at R x the capacity,
    /// an item waits about as long to be evicted as here (SHARDS), so the
    /// margin and the tail rates mean the same. Sessions this one already
    /// knows keep their own; the fit, the tuner and the rates are replaced
    /// whenever it is called (best_of_shadows calls it again after replaying
    /// the cached items into the new expert, which heard them as requests).
    /// O(sessions).
    void adopt_learning(const session_aware_lru& from) {
        for (const auto& [id, theirs] : from.sessions_) {
            auto [it, fresh] = sessions_.try_emplace(id);
            if (!fresh) continue;
            session_state& s = it->second;
            s.last = theirs.last;
            s.latest_gap = theirs.latest_gap;
            s.mean_gap = theirs.mean_gap;
            s.has_gap = theirs.has_gap;
            s.output_tokens = theirs.output_tokens;
            s.hint = theirs.hint;
            s.expected_gap = theirs.expected_gap;
        }
        if (sessions_.size() >= forget_at_) forget_sessions();
        gaps_ = from.gaps_;
        tuner_ = from.tuner_;
        learner_.adopt_rates(from.learner_);
    }
    /// Cached item `id` has been used by more than one session (a shared
    /// prefix): it belongs to no session from now, as if a second session
    /// had read it (best_of_shadows rebuilding a newly followed expert).
    void mark_shared(item_id id) {
        const std::uint32_t x = id.value;
        if (!tracking_.contains(id) || shared_[x]) return;
        shared_[x] = 1;
        if (where_[x] != in_oldest_and_own) return;
        leave_own(x);
        where_[x] = in_oldest;
    }
    /// Whether unreused tails are demoted now.
    [[nodiscard]] bool demoting() const noexcept { return learner_.demoting(); }
    /// Sessions remembered now.
    [[nodiscard]] std::size_t sessions() const noexcept { return sessions_.size(); }
    /// The margin rule 2 applies now.
    [[nodiscard]] double far_factor() const noexcept { return tuner_.margin(); }
    /// What the margin was learned from: each bin's scored wins and losses
    /// (tests, diagnostics).
    [[nodiscard]] const pairwise_margin_tuner& margin_tuner() const noexcept { return tuner_; }

private:
    // A session in `farthest_`, filed under its first placed block.
    struct session_rank {
        timestamp back;         // expected back: latest request + mean gap
        std::uint64_t session;  // among equal times, the smaller id first
    };
    struct latest_first {
        bool operator()(const session_rank& a, std::uint32_t, const session_rank& b, std::uint32_t) const noexcept {
            return a.back > b.back || (a.back == b.back && a.session < b.session);
        }
    };
    struct session_state {
        timestamp last = 0;       // latest request's time
        double latest_gap = 0.0;  // the gap that ended at `last`
        double mean_gap = 0.0;    // running mean of the gaps between requests
        bool has_gap = false;
        std::uint64_t output_tokens = 0;  // the latest request's, once released; 0 = unknown
        timestamp hint = 0;               // the engine's expected return for the latest request; 0 = none
        double expected_gap = 0.0;        // from `last` to the next request; 0 = no idea yet
        index_list own;                   // its evictable unshared blocks, placed first first
    };
    // Where an item is.
    static constexpr std::uint8_t in_none = 0, in_demoted = 1, in_oldest = 2, in_oldest_and_own = 3;

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

    [[nodiscard]] static session_rank rank_of(std::uint64_t session, const session_state& s) noexcept {
        const double back = static_cast<double>(s.last) + s.expected_gap;
        return {back >= 1.8e19 ? never - 1 : static_cast<timestamp>(back), session};
    }
    // Files the session under its first block (if it has one and an
    // expected gap), or refiles it after its expected time or first block
    // changed.
    void refile(std::uint64_t session, const session_state& s) {
        if (s.own.empty() || s.expected_gap <= 0.0) return;
        if (farthest_.contains(s.own.front))
            farthest_.update(s.own.front, rank_of(session, s));
        else
            farthest_.push(s.own.front, rank_of(session, s));
    }

    // sessions_'s entry for `session`, or nullptr.
    session_state* find_session(std::uint64_t session) {
        if (last_session_.state != nullptr && last_session_.id == session) return last_session_.state;
        const auto it = sessions_.find(session);
        if (it == sessions_.end()) return nullptr;
        last_session_.remember(session, &it->second);
        return &it->second;
    }
    // A request of ctx.session at ctx.now: every block of one request shares
    // its time, so only the first that is later than the session's last
    // request is a new arrival.
    void note_arrival(const access_context& ctx) {
        bool fresh = false;
        session_state* found = find_session(ctx.session.value);
        if (found == nullptr) {
            found = &sessions_.try_emplace(ctx.session.value).first->second;
            fresh = true;
            last_session_.remember(ctx.session.value, found);
        }
        session_state& s = *found;
        if (fresh) {
            s.last = ctx.now;
            if (sessions_.size() >= forget_at_) forget_sessions();
            return;
        }
        if (ctx.now <= s.last) return;
        const double gap = static_cast<double>(ctx.now - s.last);
        if (s.output_tokens != 0)
            gaps_.observe(return_gap_model::features_of(s.output_tokens, s.has_gap, s.latest_gap, s.mean_gap), gap);
        s.mean_gap = s.has_gap ? s.mean_gap + config_.gap_weight * (gap - s.mean_gap) : gap;
        s.latest_gap = gap;
        s.has_gap = true;
        s.last = ctx.now;
        s.output_tokens = 0;
        s.hint = 0;
        s.expected_gap = s.mean_gap;
        refile(ctx.session.value, s);
    }
    // The request of ctx.session finished having generated
    // ctx.output_tokens: its gap is predicted from them (once per request:
    // each of its blocks is released with the same count).
    void note_output(const access_context& ctx) {
        session_state* const found = find_session(ctx.session.value);
        if (found == nullptr || found->output_tokens == ctx.output_tokens) return;
        session_state& s = *found;
        s.output_tokens = ctx.output_tokens;
        if (!gaps_.ready() || s.hint != 0) return;  // the engine's hint knows better
        s.expected_gap =
            gaps_.predict(return_gap_model::features_of(s.output_tokens, s.has_gap, s.latest_gap, s.mean_gap));
        refile(ctx.session.value, s);
    }
    // The engine expects `session` back at `hint`: that is its expected
    // time until its next request, whatever the fit says (a hint at or
    // before its latest request means at once; `never`, rank_of's never - 1,
    // ranks it past every other).
    void take_hint(session_id session, timestamp hint) {
        session_state* const found = find_session(session.value);
        if (found == nullptr || found->hint == hint) return;
        session_state& s = *found;
        s.hint = hint;
        s.expected_gap = hint == never ? 2e19 : hint > s.last ? static_cast<double>(hint - s.last) : 1.0;
        refile(session.value, s);
    }
    // Keeps the sessions that arrived most recently (those at or after the
    // max_sessions_-th latest arrival time) and those that own blocks. The
    // next pass comes max_sessions_ arrivals later at the soonest.
    void forget_sessions() {
        scratch_.clear();
        for (const auto& kv : sessions_) scratch_.push_back(kv.second.last);
        const auto cut = scratch_.begin() + static_cast<std::ptrdiff_t>(max_sessions_ - 1);
        std::nth_element(scratch_.begin(), cut, scratch_.end(), [](timestamp a, timestamp b) { return a > b; });
        const timestamp keep_from = *cut;
        last_session_.forget();
        std::erase_if(sessions_, [&](const auto& kv) { return kv.second.last < keep_from && kv.second.own.empty(); });
        forget_at_ = std::max(2 * max_sessions_, sessions_.size() + max_sessions_);
    }
    // An item becoming evictable at `now`.
    void place(std::uint32_t x, timestamp now) {
        if (learner_.fresh_tail(x) && learner_.demoting()) {
            links_.push_back(demoted_, x);
            where_[x] = in_demoted;
            return;
        }
        oldest_.push(x, now);
        where_[x] = in_oldest;
        if (shared_[x]) return;
        session_state* const s = find_session(session_[x]);
        if (s == nullptr) return;
        own_links_.push_back(s->own, x);
        where_[x] = in_oldest_and_own;
        if (s->own.size == 1) refile(session_[x], *s);
    }
    // x (in_oldest_and_own) leaves its session's own list; the session is
    // refiled when x was its first block.
    void leave_own(std::uint32_t x) {
        session_state& s = *find_session(session_[x]);  // kept while it owns blocks
        const bool first = s.own.front == x;
        own_links_.remove(s.own, x);
        if (first) {
            if (farthest_.contains(x)) farthest_.erase(x);
            refile(session_[x], s);
        }
    }
    void unlink(std::uint32_t x) {
        switch (where_[x]) {
            case in_demoted:
                links_.remove(demoted_, x);
                break;
            case in_oldest_and_own:
                leave_own(x);
                oldest_.erase(x);
                break;
            case in_oldest:
                oldest_.erase(x);
                break;
            default:
                break;
        }
        where_[x] = in_none;
    }

    config_type config_;
    tail_reuse_learner learner_;
    time_queue oldest_;                                  // evictable, not demoted: by placement time
    indexed_heap<session_rank, latest_first> farthest_;  // sessions with a gap and own blocks, by first block
    index_links links_;                                  // [capacity] the demoted FIFO's links
    index_list demoted_;                                 // evictable unreused tails, oldest first
    index_links own_links_;                              // [capacity] the sessions' own lists
    std::vector<std::uint8_t> where_;                    // [capacity] in_none, in_demoted, ...
    std::vector<std::uint64_t> session_;                 // [capacity] session of the last touch
    std::vector<std::uint8_t> shared_;                   // [capacity] 1 once two sessions used it
    std::unordered_map<std::uint64_t, session_state> sessions_;
    // The session looked up last (a request's blocks ask for theirs one after
    // another; a hash lookup among thousands is a cache miss or two). A pointer
    // into sessions_ survives rehashing; forget_sessions, the only erase, drops
    // it, and a copy or move starts without it (it would point into the other's).
    struct session_cache {
        std::uint64_t id = 0;
        session_state* state = nullptr;
        session_cache() = default;
        session_cache(const session_cache&) noexcept {}
        session_cache& operator=(const session_cache&) noexcept {
            forget();
            return *this;
        }
        void remember(std::uint64_t session, session_state* s) noexcept {
            id = session;
            state = s;
        }
        void forget() noexcept { state = nullptr; }
    };
    session_cache last_session_;
    std::size_t max_sessions_;
    std::size_t forget_at_;
    std::vector<timestamp> scratch_;
    pairwise_margin_tuner tuner_;
    return_gap_model gaps_;
    std::vector<std::uint64_t> key_;  // [capacity] stable key of each item
};

static_assert(eviction_policy<session_aware_lru>);
static_assert(hears_session_ends<session_aware_lru>);

}  // namespace kvpolicy
