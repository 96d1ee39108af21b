// superseded_lru: LRU that first evicts the blocks their session has moved on
// from.
//
// What it does. Each cached block belongs to the session that used it last.
// When a session makes a request (a reference at a later `now` than its
// blocks were placed at), its evictable blocks are *superseded*: they go, in
// the order they were placed, to a FIFO that is evicted before LRU's list;
// the ones the request uses come back out of it as they are referenced. A
// block two sessions have used is a shared prefix (a system prompt, a
// document) and is never superseded: one session moving on says nothing of
// the others. Everything else is LRU.
//
// Why. A conversation or an agent that continues repeats its history, so a
// request of a session reads every block of that session still worth
// keeping; what it leaves out was left behind: the previous request's partial
// last block, a sub-agent's branch once the main agent resumes, history an
// agent compacted away. On the agentic trace 15% of superseded blocks are
// ever used again (a sub-agent's parent resumes), against every block a
// session's next request reads. Unlike tail_aware_lru's learned tail rule it
// needs no learning and covers every branch a session abandons, not only the
// last block; it needs session ids (the simulator derives them when a trace
// has none). Where superseded blocks do come back, best_of_shadows' shadows
// find out and follow another expert (preset adaptive_kv).
//
// Time: `now` must not decrease (the cache's clock), so each session's list
// is in placement order and a reference supersedes a prefix of it.
//
// Ties and prefixes: a finished request releases its blocks tail first, so
// both lists hold a request's deepest blocks ahead of their ancestors, and a
// request that reads an ancestor but not its descendant leaves only the
// descendant superseded: cached sets stay prefixes.
//
// Cost: O(1) amortized per operation (a superseded block moved once per
// placement) plus a hash lookup of the session; about 48 bytes per item and
// one session entry per session with evictable, unshared blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class superseded_lru : public tracked_policy<superseded_lru, eviction_order::static_between_accesses> {
public:
    struct config_type {};

    static constexpr std::string_view name = "superseded_lru";

    explicit superseded_lru(std::size_t capacity, const config_type& = {})
            : tracked_policy(capacity),
              links_(capacity),
              session_links_(capacity),
              owner_(capacity, 0),
              shared_(capacity, 0),
              list_(capacity, in_none),
              placed_(capacity, 0) {}

    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        note_reference(ctx);
        owner_[id.index()] = ctx.session.value;
        shared_[id.index()] = 0;
        place(id.value, ctx.now);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        note_reference(ctx);
        const bool evictable = tracking_.is_evictable(id);
        if (evictable) unlink(id.value);  // under its old owner
        if (owner_[id.index()] != ctx.session.value) shared_[id.index()] = 1;
        owner_[id.index()] = ctx.session.value;
        if (evictable) place(id.value, ctx.now);
    }
    void on_hold(item_id id) {
        tracking_.mark_held(id);
        unlink(id.value);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        place(id.value, ctx.now);
    }
    void on_erase(item_id id) {
        if (tracking_.mark_erased(id)) unlink(id.value);
    }
    std::optional<item_id> pop_victim(timestamp) {
        std::uint32_t v;
        if (!superseded_.empty())
            v = superseded_.front;
        else if (!recency_.empty())
            v = recency_.front;
        else
            return std::nullopt;
        unlink(v);
        tracking_.mark_evicted(item_id{v});
        return item_id{v};
    }

    /// Evictable items their session has moved on from.
    [[nodiscard]] std::size_t superseded_size() const noexcept { return superseded_.size; }
    /// Sessions with evictable, unshared items (the session table's size).
    [[nodiscard]] std::size_t sessions() const noexcept { return sessions_.size(); }

private:
    static constexpr std::uint8_t in_none = 0, in_recency = 1, in_superseded = 2;

    // A reference by ctx.session at ctx.now supersedes the session's items
    // placed at an earlier `now`: the front of its list, placed in order.
    // The entry goes with its last item.
    void note_reference(const access_context& ctx) {
        const auto it = sessions_.find(ctx.session.value);
        if (it == sessions_.end()) return;
        index_list& live = it->second;
        while (!live.empty() && placed_[live.front] < ctx.now) {
            const std::uint32_t x = session_links_.pop_front(live);
            links_.remove(recency_, x);
            links_.push_back(superseded_, x);
            list_[x] = in_superseded;
        }
        if (live.empty()) sessions_.erase(it);
    }
    void place(std::uint32_t x, timestamp now) {
        links_.push_back(recency_, x);
        list_[x] = in_recency;
        placed_[x] = now;
        if (!shared_[x]) session_links_.push_back(sessions_[owner_[x]], x);
    }
    void unlink(std::uint32_t x) {
        if (list_[x] == in_superseded) {
            links_.remove(superseded_, x);
        } else if (list_[x] == in_recency) {
            links_.remove(recency_, x);
            if (!shared_[x]) {
                const auto it = sessions_.find(owner_[x]);
                session_links_.remove(it->second, x);
                if (it->second.empty()) sessions_.erase(it);
            }
        }
        list_[x] = in_none;
    }

    index_links links_;                 // [capacity] recency and superseded lists (an item is in one)
    index_links session_links_;         // [capacity] each session's live list
    index_list recency_;                // evictable, not superseded: least recent first
    index_list superseded_;             // superseded: first superseded first
    std::vector<std::uint64_t> owner_;  // [capacity] session that used it last
    std::vector<std::uint8_t> shared_;  // [capacity] 1 once two sessions used it
    std::vector<std::uint8_t> list_;    // [capacity] in_none (held or untracked), in_recency, in_superseded
    std::vector<timestamp> placed_;     // [capacity] `now` it last became evictable at
    std::unordered_map<std::uint64_t, index_list> sessions_;  // session -> its live list, placed first first
};

static_assert(eviction_policy<superseded_lru>);

}  // namespace kvpolicy
