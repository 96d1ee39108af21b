// queue_aware<Base>: keeps what the waiting queue will read, Belady inside
// the queue, and leaves everything else to Base.
//
// The "Which policy" study found what no recency or frequency rule recovers
// from a trace: when a block comes back. A serving engine knows part of that
// for certain: the requests already in its waiting queue, whose block hashes
// it computed on arrival. tiered_cache::enqueue tells the policy, for each
// cached item a queued request reads, the arrival position of the earliest
// such request (hears_waiting_queue); dequeue, when the request starts or is
// dropped, moves that to the next reader or takes it away.
//
// The rule. An item no queued request reads is next used, if ever, after
// every queued read, so it goes first, in Base's order (Base still ranks the
// future beyond the queue: LRU, session_aware_lru with return hints,
// adaptive_kv...). Only when nothing else is evictable does a queued item go,
// and then the one whose earliest queued read comes last (Belady's rule,
// exact inside the queue), the deepest block of a chain first on ties, since
// a prefix is useful without its tail but not the reverse. The naive rule
// (skip queued items in LRU order, then fall back to recency among them) lost
// most of its gain as the queue grew past the cache, because recency is the
// wrong order among items the queue reads; issue #32's table.
//
// How. A queued item that nobody holds is held in Base (out of its
// candidacy, its state kept) and sits in a max-heap on (position, depth):
// O(log n) per queue change, nothing per access. When the queue lets go of
// it, Base hears a release with the item's last context, as after a request:
// LRU-family bases put it at their most-recent end, position-based ones back
// where it was. With an empty queue every call goes straight to Base, so
// queue_aware<B> with no queue decides exactly as B does (tested).
//
// Cost: 37 bytes per item over Base (state 1, depth 4, position 8, and the
// heap's key 16, place 4 and slot 4), allocated at construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/indexed_heap.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"
#include "kvpolicy/eviction/lru.hpp"

namespace kvpolicy {

namespace detail {
/// "queue_aware_" + Base::name, as a compile-time string.
template <class Base>
struct queue_aware_name {
    static constexpr std::string_view prefix = "queue_aware_";
    static constexpr auto chars = [] {
        std::array<char, prefix.size() + Base::name.size()> a{};
        std::size_t i = 0;
        for (char c : prefix) a[i++] = c;
        for (char c : Base::name) a[i++] = c;
        return a;
    }();
    static constexpr std::string_view value{chars.data(), chars.size()};
};

/// The queued item to evict first: the latest earliest-read, then the deepest.
struct queued_rank {
    std::uint64_t position = 0;  // arrival position of the earliest queued request that reads it
    std::uint32_t depth = 0;     // chunk index in its chain

    // A min-heap's top is the victim, so "less" is "evict sooner".
    struct evict_first {
        constexpr bool operator()(const queued_rank& a, std::uint32_t ia, const queued_rank& b,
                                  std::uint32_t ib) const noexcept {
            if (a.position != b.position) return a.position > b.position;
            if (a.depth != b.depth) return a.depth > b.depth;
            return ia < ib;
        }
    };
};
}  // namespace detail

template <eviction_policy Base>
class queue_aware {
public:
    using config_type = typename Base::config_type;
    using base_type = Base;
    static constexpr auto options = options_of<Base>();  // its config is Base's

    static constexpr std::string_view name = detail::queue_aware_name<Base>::value;
    static constexpr eviction_order order = Base::order;

    explicit queue_aware(std::size_t capacity, const config_type& config = {})
            : base_(capacity, config),
              state_(capacity, 0),
              depth_(capacity, 0),
              position_(capacity, 0),
              queued_(capacity) {}

    void on_miss(const access_context& ctx) { base_.on_miss(ctx); }
    void on_insert(item_id id, const access_context& ctx) {
        base_.on_insert(id, ctx);
        state_[id.index()] = 0;
        depth_[id.index()] = ctx.chunk.value;
    }
    void on_access(item_id id, const access_context& ctx) { base_.on_access(id, ctx); }
    void on_hold(item_id id) {
        if (queued_.contains(id.value))
            queued_.erase(id.value);  // Base holds it already
        else
            base_.on_hold(id);
        state_[id.index()] |= held_bit;
    }
    void on_release(item_id id, const access_context& ctx) {
        state_[id.index()] &= static_cast<std::uint8_t>(~held_bit);
        if (state_[id.index()] & queued_bit)
            queued_.push(id.value, rank(id));  // Base keeps holding it for the queue
        else
            base_.on_release(id, ctx);
    }
    void on_erase(item_id id) {
        if (queued_.contains(id.value)) queued_.erase(id.value);
        base_.on_erase(id);
        state_[id.index()] = 0;
    }
    std::optional<item_id> pop_victim(timestamp now) {
        if (auto v = base_.pop_victim(now)) {
            state_[v->index()] = 0;
            return v;
        }
        if (queued_.empty()) return std::nullopt;
        const item_id v{queued_.pop()};
        base_.on_erase(v);  // Base held it for the queue; it forgets it without a ghost
        state_[v.index()] = 0;
        ++queued_evictions_;
        return v;
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) { return pop_victims_one_by_one(*this, out, now); }

    /// A queued request reads tracked item `id`; the earliest has `position`.
    void on_queued(item_id id, std::uint64_t position) {
        KVPOLICY_ASSERT(base_.contains(id));
        position_[id.index()] = position;
        std::uint8_t& s = state_[id.index()];
        if (s & queued_bit) {
            if (queued_.contains(id.value)) queued_.update(id.value, rank(id));
            return;
        }
        s |= queued_bit;
        if (s & held_bit) return;  // pushed when released
        base_.on_hold(id);
        queued_.push(id.value, rank(id));
    }
    /// No queued request reads `id` any more; `ctx`: its last access's context.
    void on_unqueued(item_id id, const access_context& ctx) {
        std::uint8_t& s = state_[id.index()];
        if (!(s & queued_bit)) return;
        s &= static_cast<std::uint8_t>(~queued_bit);
        if (!queued_.contains(id.value)) return;  // held: Base hears the release later
        queued_.erase(id.value);
        base_.on_release(id, ctx);
    }

    void on_session_end(session_id session, timestamp now) requires hears_session_ends<Base> {
        base_.on_session_end(session, now);
    }
    void on_request_end(session_id session, timestamp now) requires hears_request_ends<Base> {
        base_.on_request_end(session, now);
    }

    /// Base's count (ranks_new_items): an item no queued request reads goes
    /// before every queued one.
    [[nodiscard]] std::size_t evictable_before(const access_context& ctx,
                                               std::size_t limit) const requires ranks_new_items<Base> {
        return base_.evictable_before(ctx, limit);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return base_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return base_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return base_.evictable_size() + queued_.size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return base_.contains(id); }
    /// Base's counters, with the queued items evicted counted as evictions
    /// (Base heard them as erasures).
    [[nodiscard]] const policy_counters& counters() const noexcept {
        counters_ = base_.counters();
        counters_.evictions += queued_evictions_;
        counters_.erasures -= queued_evictions_;
        return counters_;
    }
    /// Evictable items a queued request reads.
    [[nodiscard]] std::size_t queued_evictable() const noexcept { return queued_.size(); }
    /// Whether a queued request reads tracked item `id`.
    [[nodiscard]] bool is_queued(item_id id) const noexcept { return (state_[id.index()] & queued_bit) != 0; }
    [[nodiscard]] const Base& base() const noexcept { return base_; }

private:
    static constexpr std::uint8_t queued_bit = 1, held_bit = 2;

    [[nodiscard]] detail::queued_rank rank(item_id id) const noexcept {
        return {position_[id.index()], depth_[id.index()]};
    }

    Base base_;
    std::vector<std::uint8_t> state_;      // [capacity] queued_bit | held_bit (held by the cache or pinned)
    std::vector<std::uint32_t> depth_;     // [capacity] chunk index, for ties
    std::vector<std::uint64_t> position_;  // [capacity] earliest queued read, while queued
    indexed_heap<detail::queued_rank, detail::queued_rank::evict_first> queued_;  // queued, not held
    std::uint64_t queued_evictions_ = 0;
    mutable policy_counters counters_;
};

static_assert(eviction_policy<queue_aware<lru>> && hears_waiting_queue<queue_aware<lru>>);
static_assert(queue_aware<lru>::name == "queue_aware_lru");

}  // namespace kvpolicy
