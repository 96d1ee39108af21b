// predicted_return: evict the block of the session predicted back last.
//
// What it decides. Each item belongs to the session its latest insert, access
// or release named (a release naming none leaves it where it was: an
// engine's manager completing a store does not know the request). A session
// is expected back at its latest request + its predicted gap: an exponential
// average (weight `gap_weight` on the newest) of its own gaps between
// requests, or, before it has shown one, the mean of every gap seen so far in
// any session. A release's `expected_return` (> 0)
// replaces that prediction until the session's next request; `never`, or
// on_session_end (cache_policy_core::end_session), says it will not return.
// The victim is an evictable item of the session expected back last (ended
// sessions first), and within a session the item inserted last (a request
// stores its blocks head first, so its deepest block goes first and what is
// kept stays a prefix). Items of no session (session 0) are LRU among
// themselves and stand against the sessions by their least recent one,
// expected back at its last touch + the mean gap. Ties: the item inserted
// last.
//
// When to use it: a CPU tier behind a GPU prefix cache that stores every
// computed block (vLLM's offloading connector, kvpolicy-sim --mode offload),
// where what pays is keeping the sessions that come back soonest; best with
// session ends known (docs/which-policy.md, "A CPU tier behind vLLM's prefix
// cache"). It is Belady's rule with next uses predicted per session, as
// session_aware_lru's rule 2, but without LRU underneath: in front of a GPU
// prefix cache the recency the CPU tier sees is mostly the GPU's misses.
//
// Where a request starts: where the engine reports request ends
// (on_request_end, engine::cache_policy_core::end_request), at the session's
// first insert or access after its latest request ended; otherwise at an
// insert or access naming the session at a later time than its latest
// request (a simulator's clock, where one request's calls share a time). In
// an engine one request's stores complete a step or more apart, and by time
// alone each would read as a new request with a gap of a step.
//
// Departures: the gap is the session's own average, not return_gap_model's
// fit from output tokens (what was measured); sessions are remembered for the
// policy's lifetime (one entry per session seen). A session that is late (its
// expected time has passed) ranks before every session expected later, so it
// is kept until it ends or comes back.
//
// Storing: evictable_before counts the items that would go before a new
// one (ranks_new_items), so an engine that may store less than it is offered
// (engine::cache_policy_core::admissible) declines a block that would be the
// next victim itself: a session expected back after every one kept is not
// stored over them.
//
// Cost: O(log n) per operation: per session a max-heap of its evictable items
// by insertion order; two indexed heaps over the sessions filed under their
// top item (those with a prediction of their own by expected time, those that
// fall back to the mean gap, with the no-session LRU list's front, by latest
// request, so a new mean moves none of them); a hash map of sessions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class predicted_return : public tracked_policy<predicted_return, eviction_order::static_between_accesses> {
public:
    struct config_type {
        /// Weight of the newest gap in a session's predicted gap, in (0, 1].
        double gap_weight = 0.5;
    };
    static constexpr auto options = std::tuple{option{
        "gap_weight", &config_type::gap_weight, {0.0, 1.0}, "weight of the newest gap in a session's predicted gap"}};

    static constexpr std::string_view name = "predicted_return";

    explicit predicted_return(std::size_t capacity) : predicted_return(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// or `gap_weight` is outside (0, 1].
    predicted_return(std::size_t capacity, const config_type& config)
            : tracked_policy(capacity),
              config_(validated(config)),
              session_(capacity, no_session),
              seq_(capacity, 0),
              touch_(capacity, 0),
              pos_(capacity, no_index),
              links_(capacity),
              known_(capacity),
              fallback_(capacity) {}

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        seq_[id.index()] = ++inserted_;
        touch(id.value, ctx, true);
        place(id.value);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        const bool evictable = tracking_.is_evictable(id);
        if (evictable) unplace(id.value);
        touch(id.value, ctx, true);
        if (evictable) place(id.value);
    }
    void on_hold(item_id id) {
        tracking_.mark_held(id);
        unplace(id.value);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        touch(id.value, ctx, false);
        if (ctx.expected_return != 0 && session_[id.index()] != no_session)
            take_hint(session_[id.index()], ctx.expected_return);
        place(id.value);
    }
    /// The engine closed `session`: its items go first, until it makes
    /// another request.
    void on_session_end(session_id session, timestamp) {
        if (const auto it = index_.find(session.value); it != index_.end()) take_hint(it->second, never);
    }
    /// A request of `session` finished: its next insert or access starts
    /// the next request. From the first such call on, requests are known by
    /// their ends, no longer by time, and the gaps learned by time before it
    /// are forgotten (in an engine they were mostly a step long).
    void on_request_end(session_id session, timestamp) {
        if (!ends_heard_) forget_gaps();
        ends_heard_ = true;
        if (const auto it = index_.find(session.value); it != index_.end()) sessions_[it->second].ended = true;
    }
    void on_erase(item_id id) {
        if (tracking_.mark_erased(id)) unplace(id.value);
    }
    std::optional<item_id> pop_victim(timestamp) {
        std::uint32_t v;
        if (known_.empty() && fallback_.empty()) return std::nullopt;
        if (fallback_.empty()) {
            v = known_.top();
        } else if (known_.empty()) {
            v = fallback_.top();
        } else {
            const std::uint32_t k = known_.top(), f = fallback_.top();
            const double fb = static_cast<double>(fallback_.key(f).base) + mean_gap();
            const double kb = known_.key(k).back;
            v = kb > fb || (kb == fb && seq_[k] > seq_[f]) ? k : f;
        }
        unplace(v);
        tracking_.mark_evicted(item_id{v});
        return item_id{v};
    }

    /// How many evictable items would go before an item inserted now with
    /// `ctx` (ranks_new_items), counted up to `limit`: every item of each
    /// session expected back later than ctx.session will be once this
    /// insert is heard (never its own: the new item is its deepest), and the
    /// no-session items when theirs is the later rank. O(sessions counted).
    [[nodiscard]] std::size_t evictable_before(const access_context& ctx, std::size_t limit) const {
        const arrival a = arrival_of(ctx);
        std::size_t n = a.own == no_session ? unfiled_count_ : 0;  // a new no-session item is their LRU's newest
        // An entry (a session's or the no-session LRU's front) goes before
        // the new item as pop_victim orders them: a later expected return
        // (all its items), or on a tie its items inserted after a.seq.
        auto counted = [&](std::uint32_t top, double back) {
            if (n >= limit) return false;
            const bool later = back > a.back;
            if (!later && !(back == a.back && seq_[top] > a.seq)) return false;
            const std::uint32_t s = session_[top];
            if (s == no_session) {
                n += a.own == no_session ? 0 : unfiled_count_;
            } else if (s != a.own) {
                const std::vector<std::uint32_t>& items = sessions_[s].heap;
                n += later ? items.size()
                           : static_cast<std::size_t>(std::count_if(items.begin(), items.end(),
                                                                    [&](std::uint32_t y) { return seq_[y] > a.seq; }));
            }
            return true;
        };
        known_.visit_top_down([&](std::uint32_t x) { return counted(x, known_.key(x).back); }, scratch_);
        fallback_.visit_top_down(
            [&](std::uint32_t x) { return counted(x, static_cast<double>(fallback_.key(x).base) + a.mean_gap); },
            scratch_);
        return std::min(n, limit);
    }

    /// When `session` is expected back (`+inf`: ended, or hinted `never`);
    /// empty if it is not known.
    [[nodiscard]] std::optional<double> expected_back(session_id session) const noexcept {
        const auto it = index_.find(session.value);
        if (it == index_.end()) return std::nullopt;
        return back_of(sessions_[it->second]);
    }
    /// The mean of every gap between requests seen, in any session; 0 before
    /// the first.
    [[nodiscard]] double mean_gap() const noexcept { return gaps_ == 0 ? 0.0 : gap_sum_ / static_cast<double>(gaps_); }
    /// Sessions remembered.
    [[nodiscard]] std::size_t sessions() const noexcept { return sessions_.size(); }

private:
    static constexpr std::uint32_t no_session = no_index;          // session 0: no session
    static constexpr std::uint32_t unseen_session = no_index - 1;  // a session with no entry yet (no items)

    struct session_state {
        timestamp last = 0;               // latest request
        bool ended = false;               // its latest request ended (on_request_end)
        double gap = 0.0;                 // the average of its gaps
        bool has_gap = false;             // it has shown a gap
        timestamp hint = 0;               // the engine's expected return; 0: none; never: ended
        std::vector<std::uint32_t> heap;  // its evictable items, max-heap by insertion order
        std::uint32_t filed = no_index;   // the item it is filed under in known_ or fallback_
        bool filed_known = false;         // in known_ (else fallback_)
    };
    // known_: sessions with a prediction of their own, by expected time.
    struct known_rank {
        double back = 0.0;
        std::uint64_t seq = 0;
    };
    // fallback_: sessions expected back at base + mean_gap() (no gap of their
    // own yet), and the no-session LRU front (base: its last touch).
    struct fallback_rank {
        timestamp base = 0;
        std::uint64_t seq = 0;
    };
    // A min-heap's top is the victim, so "less" is "evict sooner".
    template <class Rank, auto Field>
    struct later_first {
        bool operator()(const Rank& a, std::uint32_t, const Rank& b, std::uint32_t) const noexcept {
            return a.*Field > b.*Field || (a.*Field == b.*Field && a.seq > b.seq);
        }
    };

    static config_type validated(const config_type& c) {
        if (!(c.gap_weight > 0.0 && c.gap_weight <= 1.0))
            throw config_error("predicted_return: gap_weight " + std::to_string(c.gap_weight) +
                               " must be in (0, 1] (the weight of the newest gap in a session's predicted gap; "
                               "0.5 is the default)");
        return c;
    }

    // Where an item inserted now with ctx would rank: its session's expected
    // return once the insert is heard (touch: it may start a request, whose
    // gap moves the mean too; no session: the rank that no-session items
    // stand at until it is their front), the mean gap then, and its session.
    struct arrival {
        double back = 0.0;
        double mean_gap = 0.0;
        std::uint32_t own = no_session;
        std::uint64_t seq = std::numeric_limits<std::uint64_t>::max();  // ties: the new item, inserted last, first
    };
    [[nodiscard]] arrival arrival_of(const access_context& ctx) const noexcept {
        const double now = static_cast<double>(ctx.now), mean = mean_gap();
        if (ctx.session.value == 0) {
            // The no-session LRU's newest: it goes after every older one, and
            // so after each session that goes before their front.
            if (unfiled_.front == no_index) return {now + mean, mean, no_session};
            // A session expected back exactly at their front's rank takes
            // turns with the no-session items touched at that time, by
            // insertion order: its items inserted after the earliest of
            // those go before the new one.
            const timestamp t = touch_[unfiled_.front];
            std::uint64_t first = seq_[unfiled_.front];
            for (std::uint32_t y = links_.next(unfiled_.front); y != no_index && touch_[y] == t; y = links_.next(y))
                first = std::min(first, seq_[y]);
            return {static_cast<double>(t) + mean, mean, no_session, first};
        }
        const auto it = index_.find(ctx.session.value);
        if (it == index_.end()) return {now + mean, mean, unseen_session};  // filed at its first request + the mean
        const session_state& s = sessions_[it->second];
        if (ends_heard_ ? !s.ended : ctx.now <= s.last) return {back_of(s), mean, it->second};
        const double gap = ctx.now > s.last ? static_cast<double>(ctx.now - s.last) : 0.0;
        const double own_gap = s.has_gap ? s.gap + config_.gap_weight * (gap - s.gap) : gap;
        return {now + own_gap, (gap_sum_ + gap) / static_cast<double>(gaps_ + 1), it->second};
    }

    [[nodiscard]] static bool has_own(const session_state& s) noexcept { return s.hint != 0 || s.has_gap; }
    [[nodiscard]] double back_of(const session_state& s) const noexcept {
        if (s.hint == never) return std::numeric_limits<double>::infinity();
        if (s.hint != 0) return static_cast<double>(s.hint);
        return static_cast<double>(s.last) + (s.has_gap ? s.gap : mean_gap());
    }

    // Item x is touched by ctx: it belongs to ctx.session from now (a release
    // naming none leaves it); an insert or access (`request`) that starts a
    // request of the session (see the header) is a gap.
    void touch(std::uint32_t x, const access_context& ctx, bool request) {
        touch_[x] = ctx.now;
        if (ctx.session.value == 0) {
            if (request) session_[x] = no_session;
            return;
        }
        const auto [it, fresh] = index_.try_emplace(ctx.session.value, static_cast<std::uint32_t>(sessions_.size()));
        session_[x] = it->second;
        if (fresh) {
            sessions_.emplace_back().last = ctx.now;
            return;
        }
        session_state& s = sessions_[it->second];
        if (!request) return;
        if (ends_heard_ ? !s.ended : ctx.now <= s.last) return;
        s.ended = false;
        const double gap = ctx.now > s.last ? static_cast<double>(ctx.now - s.last) : 0.0;
        s.gap = s.has_gap ? s.gap + config_.gap_weight * (gap - s.gap) : gap;
        s.has_gap = true;
        s.last = ctx.now;
        s.hint = 0;
        gap_sum_ += gap;
        ++gaps_;
        refile(it->second);
    }
    void forget_gaps() {
        gap_sum_ = 0.0;
        gaps_ = 0;
        for (std::uint32_t i = 0; i < sessions_.size(); ++i) {
            session_state& s = sessions_[i];
            if (!s.has_gap) continue;
            s.has_gap = false;
            s.gap = 0.0;
            refile(i);
        }
    }
    void take_hint(std::uint32_t session, timestamp hint) {
        session_state& s = sessions_[session];
        if (s.hint == hint) return;
        s.hint = hint;
        refile(session);
    }

    // Files the session under its top item, in the heap its prediction
    // belongs to (after the top, the prediction or the class changed).
    void refile(std::uint32_t session) {
        session_state& s = sessions_[session];
        if (s.filed != no_index) {
            if (s.filed_known)
                known_.erase(s.filed);
            else
                fallback_.erase(s.filed);
        }
        s.filed = no_index;
        if (s.heap.empty()) return;
        s.filed = s.heap.front();
        s.filed_known = has_own(s);
        if (s.filed_known)
            known_.push(s.filed, {back_of(s), seq_[s.filed]});
        else
            fallback_.push(s.filed, {s.last, seq_[s.filed]});
    }
    void refile_unfiled() {
        if (unfiled_filed_ != no_index) fallback_.erase(unfiled_filed_);
        unfiled_filed_ = unfiled_.front;
        if (unfiled_filed_ != no_index) fallback_.push(unfiled_filed_, {touch_[unfiled_filed_], seq_[unfiled_filed_]});
    }

    // x becomes evictable.
    void place(std::uint32_t x) {
        if (session_[x] == no_session) {
            links_.push_back(unfiled_, x);
            ++unfiled_count_;
            if (unfiled_.front == x) refile_unfiled();
            return;
        }
        session_state& s = sessions_[session_[x]];
        pos_[x] = static_cast<std::uint32_t>(s.heap.size());
        s.heap.push_back(x);
        sift_up(s.heap, pos_[x]);
        if (s.heap.front() == x) refile(session_[x]);
    }
    // x stops being evictable (held, erased or evicted). Pre: placed.
    void unplace(std::uint32_t x) {
        if (session_[x] == no_session) {
            const bool front = unfiled_.front == x;
            links_.remove(unfiled_, x);
            --unfiled_count_;
            if (front) refile_unfiled();
            return;
        }
        session_state& s = sessions_[session_[x]];
        const bool top = s.heap.front() == x;
        const std::uint32_t p = pos_[x];
        const std::uint32_t last = s.heap.back();
        s.heap.pop_back();
        pos_[x] = no_index;
        if (last != x) {
            s.heap[p] = last;
            pos_[last] = p;
            sift_up(s.heap, p);
            sift_down(s.heap, pos_[last]);
        }
        if (top) refile(session_[x]);
    }
    // The per-session heaps: the item inserted last on top.
    void sift_up(std::vector<std::uint32_t>& h, std::uint32_t p) noexcept {
        const std::uint32_t x = h[p];
        while (p > 0) {
            const std::uint32_t parent = (p - 1) / 2;
            if (seq_[h[parent]] >= seq_[x]) break;
            h[p] = h[parent];
            pos_[h[p]] = p;
            p = parent;
        }
        h[p] = x;
        pos_[x] = p;
    }
    void sift_down(std::vector<std::uint32_t>& h, std::uint32_t p) noexcept {
        const std::uint32_t x = h[p];
        const auto n = static_cast<std::uint32_t>(h.size());
        for (;;) {
            std::uint32_t c = 2 * p + 1;
            if (c >= n) break;
            if (c + 1 < n && seq_[h[c + 1]] > seq_[h[c]]) ++c;
            if (seq_[h[c]] <= seq_[x]) break;
            h[p] = h[c];
            pos_[h[p]] = p;
            p = c;
        }
        h[p] = x;
        pos_[x] = p;
    }

    config_type config_;
    std::vector<std::uint32_t> session_;      // [capacity] index into sessions_ of its session; no_session: none
    std::vector<std::uint64_t> seq_;          // [capacity] insertion order (1, 2, ...)
    std::vector<timestamp> touch_;            // [capacity] time of its latest insert, access or release
    std::vector<std::uint32_t> pos_;          // [capacity] place in its session's heap
    index_links links_;                       // [capacity] the no-session LRU list's links
    index_list unfiled_;                      // evictable items of no session, least recently touched first
    std::uint32_t unfiled_filed_ = no_index;  // unfiled_'s front as filed in fallback_
    std::size_t unfiled_count_ = 0;           // items in unfiled_
    std::vector<session_state> sessions_;
    std::unordered_map<std::uint64_t, std::uint32_t> index_;  // session id -> sessions_ index
    indexed_heap<known_rank, later_first<known_rank, &known_rank::back>> known_;
    indexed_heap<fallback_rank, later_first<fallback_rank, &fallback_rank::base>> fallback_;
    std::uint64_t inserted_ = 0;
    bool ends_heard_ = false;  // requests are known by their ends (on_request_end)
    double gap_sum_ = 0.0;
    std::uint64_t gaps_ = 0;
    mutable std::vector<std::uint32_t> scratch_;  // evictable_before's walk over the heaps
};

static_assert(eviction_policy<predicted_return>);
static_assert(hears_session_ends<predicted_return>);
static_assert(hears_request_ends<predicted_return>);
static_assert(ranks_new_items<predicted_return>);

}  // namespace kvpolicy
