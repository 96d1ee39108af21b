// best_of_shadows<Experts...>: follows whichever of several eviction policies
// would hit most on the workload seen lately, measured online by miniature
// simulations (Waldspurger et al., "Cache Modeling and Optimization using
// Miniature Simulations", USENIX ATC'17), over the same cached items.
//
// What it does. Every expert tracks every cached item (each sees every
// insert, access, hold, release and erase) and keeps its own order; victims
// are popped from the expert followed now and erased from the others, so
// switching experts costs nothing and never moves data. Beside them, each
// expert runs a *shadow*: the same policy over a spatial sample of the keys
// (those whose hash falls below rate R = min(1, shadow_items / capacity)), at
// R x capacity items, fed with the sampled keys' references, holds and
// releases as the real cache makes them. The shadows count, for every two
// experts, the sampled references one of them hit and the other missed;
// counts halve every `window` x shadow capacity sampled references. The
// expert whose shadow hits most is followed once its lead over the followed
// one's is significant: more than `switch_sigmas` standard deviations of the
// difference, whose variance, were the two equally good, is the number of
// references exactly one of them hit (McNemar's test for paired outcomes).
// So noise does not make it switch back and forth, and no margin has to
// suit every hit ratio. Sampling keys uniformly keeps each shadow a scaled
// replica of a full-size cache (SHARDS), so which expert leads in the
// shadows is which would lead at full size.
//
// Why. No single order serves every KV workload and capacity (README "Which
// policy"): a long LRFU half-life closes 28% of the LRU -> Belady gap on the
// Mooncake conversation trace at 1% of its blocks and loses 6 points to LRU
// on the agentic trace at 5%. Measuring beats guessing: the shadows answer
// "which order would have hit more here, lately" with the workload's own
// references, and with LRU among the experts the choice falls back to LRU
// where nothing beats it. The shadows count a hit whenever the sampled key is
// cached, not the prefix rule (a hit counts only up to a request's first
// miss); for experts that keep cached sets prefix-closed (lru, lrfu,
// superseded_lru, session_aware_lru) the two agree. (Scoring each shadow by
// the prefix rule over a request's sampled keys left every hit ratio of
// README "Which policy" unchanged to the sixth digit.)
//
// When to use it: when the workload is not known in advance, or changes. The
// preset `adaptive_kv` follows LRU, LRFU at half-lives of 2, 8 and 32
// capacities, superseded_lru or session_aware_lru.
//
// Departures: the paper runs miniature simulations to tune a parameter
// offline or periodically; here they run continuously and the real cache
// keeps every candidate's order live, so a switch acts at the next victim.
// Experts other than the followed one learn a victim as erased, not evicted:
// ghost-keeping experts that skip erased items (ARC, 2Q, S3-FIFO) miss it;
// lrfu keeps an erased item's history, so its order is the same whoever
// chose the victim.
//
// Cost: the experts' costs added (each does every operation) plus R times
// the same for the shadows, a key hash and k^2 counter updates per sampled
// reference (k experts), and 8 bytes per item.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/eviction/item_tracking.hpp"
#include "kvpolicy/eviction/lrfu.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/eviction/session_aware_lru.hpp"
#include "kvpolicy/eviction/superseded_lru.hpp"

namespace kvpolicy {

template <eviction_policy... Experts>
class best_of_shadows {
    static_assert(sizeof...(Experts) >= 2, "best_of_shadows needs at least two experts to choose between");
    static_assert(((Experts::order == eviction_order::static_between_accesses) && ...),
                  "best_of_shadows: every expert must keep its order between accesses (a time-varying expert such "
                  "as retention_value scores every candidate per victim, in every shadow too)");
    static_assert((!uses_future<Experts> && ...),
                  "best_of_shadows: an expert that reads the future (belady, reuse_oracle_lru) cannot run live");

public:
    static constexpr std::size_t expert_count = sizeof...(Experts);

    struct config_type {
        /// Each expert's own configuration, in order.
        std::tuple<typename Experts::config_type...> experts{};
        /// Items each shadow holds at most: keys are sampled at rate
        /// min(1, shadow_items / capacity); >= 1.
        std::size_t shadow_items = 4096;
        /// Shadow hits halve every `window` x shadow capacity sampled
        /// references: how far back "lately" reaches; in (0, 1e9].
        double window = 4.0;
        /// Follow the expert whose shadow hits most when its lead over the
        /// followed one's exceeds this many standard deviations (McNemar);
        /// >= 0 and finite.
        double switch_sigmas = 2.0;
    };

    static constexpr std::string_view name = "best_of_shadows";
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    explicit best_of_shadows(std::size_t capacity) : best_of_shadows(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `shadow_items` is 0, `window` is outside (0, 1e9] or
    /// `switch_sigmas` is negative or not finite; whatever an expert's
    /// constructor throws for its configuration.
    best_of_shadows(std::size_t capacity, const config_type& config)
        : tracking_(capacity, "best_of_shadows"), config_(validated(config)),
          rate_(std::min(1.0, static_cast<double>(config.shadow_items) / static_cast<double>(capacity))),
          sample_below_(rate_ >= 1.0 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(std::ldexp(rate_, 64))),
          shadow_capacity_(std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(rate_ * static_cast<double>(capacity))))),
          real_(make_experts(capacity, config, std::index_sequence_for<Experts...>{})),
          shadows_(make_shadows(shadow_capacity_, config, std::index_sequence_for<Experts...>{})),
          key_(capacity, 0),
          halve_every_(std::max<std::uint64_t>(16, static_cast<std::uint64_t>(config.window * static_cast<double>(shadow_capacity_)))),
          choose_every_(std::max<std::uint64_t>(16, halve_every_ / 16)) {
        for (std::size_t i = 1; i < expert_count; ++i) set_ordering(i, false);
    }

    void on_miss(const access_context& ctx) {
        std::apply([&](auto&... p) { (p.on_miss(ctx), ...); }, real_);
    }
    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        std::apply([&](auto&... p) { (p.on_insert(id, ctx), ...); }, real_);
        key_[id.index()] = ctx.key;
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        std::apply([&](auto&... p) { (p.on_access(id, ctx), ...); }, real_);
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_hold(item_id id) {
        tracking_.mark_held(id);
        std::apply([&](auto&... p) { (p.on_hold(id), ...); }, real_);
        const std::uint64_t key = key_[id.index()];
        if (sampled(key))
            std::apply([&](auto&... s) { (s.hold(key), ...); }, shadows_);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        std::apply([&](auto&... p) { (p.on_release(id, ctx), ...); }, real_);
        if (sampled(ctx.key))
            std::apply([&](auto&... s) { (s.release(ctx), ...); }, shadows_);
    }
    void on_erase(item_id id) {
        (void)tracking_.mark_erased(id);  // held or not, every expert forgets it
        std::apply([&](auto&... p) { (p.on_erase(id), ...); }, real_);
        const std::uint64_t key = key_[id.index()];
        if (sampled(key))
            std::apply([&](auto&... s) { (s.forget(key), ...); }, shadows_);
    }
    /// Present when an expert hears session ends (session_aware_lru): that
    /// expert and its shadow learn the session will not return, whichever
    /// expert is followed now, so a switch finds its order up to date.
    void on_session_end(session_id session, timestamp now)
        requires(hears_session_ends<Experts> || ...)
    {
        const auto tell = [&](auto& policy) {
            if constexpr (hears_session_ends<std::remove_cvref_t<decltype(policy)>>) policy.on_session_end(session, now);
        };
        std::apply([&](auto&... p) { (tell(p), ...); }, real_);
        std::apply([&](auto&... s) { (tell(s.policy), ...); }, shadows_);
    }
    std::optional<item_id> pop_victim(timestamp now) {
        const std::optional<item_id> v = pop_followed(now, std::index_sequence_for<Experts...>{});
        if (v) tracking_.mark_evicted(*v);
        return v;
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) { return pop_victims_one_by_one(*this, out, now); }

    [[nodiscard]] std::size_t capacity() const noexcept { return tracking_.capacity(); }
    [[nodiscard]] std::size_t size() const noexcept { return tracking_.size(); }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return tracking_.evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const noexcept { return tracking_.contains(id); }
    [[nodiscard]] const policy_counters& counters() const noexcept { return tracking_.counters(); }

    /// Index (into Experts...) of the expert whose victims are taken now.
    [[nodiscard]] std::size_t followed() const noexcept { return followed_; }
    /// How many times the followed expert changed.
    [[nodiscard]] std::uint64_t switches() const noexcept { return switches_; }
    /// Each shadow's decayed hit count, in expert order.
    [[nodiscard]] std::array<double, expert_count> shadow_hits() const {
        std::array<double, expert_count> out{};
        std::size_t i = 0;
        std::apply([&](const auto&... s) { ((out[i++] = s.hits), ...); }, shadows_);
        return out;
    }
    /// Keys are sampled into the shadows at this rate.
    [[nodiscard]] double sample_rate() const noexcept { return rate_; }
    /// Items each shadow holds at most.
    [[nodiscard]] std::size_t shadow_capacity() const noexcept { return shadow_capacity_; }
    /// Expert `I`, as it orders the cached items (tests).
    template <std::size_t I>
    [[nodiscard]] const auto& expert() const noexcept { return std::get<I>(real_); }

private:
    // One expert over the sampled keys, as a flat cache that holds and
    // releases them as the real cache does.
    template <class P>
    struct shadow {
        P policy;
        key_index where;                     // key -> slot
        std::vector<std::uint64_t> key_of;   // [slots] key in each slot
        std::vector<std::uint8_t> held;      // [slots] 1 while the real cache holds the key
        std::vector<std::uint32_t> freed;    // slots of keys the real cache erased
        std::uint32_t used = 0;
        double hits = 0.0;

        shadow(std::size_t capacity, const typename P::config_type& config)
            : policy(capacity, config), where(capacity), key_of(capacity, 0), held(capacity, 0) {}

        // Returns whether the key was cached.
        bool reference(const access_context& ctx) {
            std::uint32_t slot = where.find(ctx.key);
            if (slot != no_index) {
                hits += 1.0;
                policy.on_access(item_id{slot}, ctx);
                return true;
            }
            policy.on_miss(ctx);
            if (!freed.empty()) {
                slot = freed.back();
                freed.pop_back();
            } else if (used < key_of.size()) {
                slot = used++;
            } else {
                const std::optional<item_id> v = policy.pop_victim(ctx.now);
                if (!v) return false;  // every slot held: served, not cached
                slot = v->value;
                where.erase(key_of[slot]);
            }
            where.insert(ctx.key, slot);
            key_of[slot] = ctx.key;
            policy.on_insert(item_id{slot}, ctx);
            return false;
        }
        void hold(std::uint64_t key) {
            const std::uint32_t slot = where.find(key);
            if (slot == no_index || held[slot]) return;
            held[slot] = 1;
            policy.on_hold(item_id{slot});
        }
        void release(const access_context& ctx) {
            const std::uint32_t slot = where.find(ctx.key);
            if (slot == no_index || !held[slot]) return;
            held[slot] = 0;
            policy.on_release(item_id{slot}, ctx);
        }
        // The real cache erased the key (its session was freed, its copy
        // failed): the shadow loses it too, held or not.
        void forget(std::uint64_t key) {
            const std::uint32_t slot = where.erase(key);
            if (slot == no_index) return;
            held[slot] = 0;
            policy.on_erase(item_id{slot});
            freed.push_back(slot);
        }
    };

    static config_type validated(const config_type& c) {
        if (c.shadow_items == 0)
            throw config_error("best_of_shadows: shadow_items 0 leaves the shadows nothing to measure; give at least 1 "
                               "(4096 samples keys at 4096 / capacity)");
        if (!(c.window > 0.0) || !(c.window <= 1e9))
            throw config_error("best_of_shadows: window " + std::to_string(c.window) +
                               " must be in (0, 1e9] (shadow hits halve every window x shadow capacity references)");
        if (!(c.switch_sigmas >= 0.0) || !std::isfinite(c.switch_sigmas))
            throw config_error("best_of_shadows: switch_sigmas " + std::to_string(c.switch_sigmas) +
                               " must be finite and >= 0 (2: follow an expert whose shadow leads by two standard "
                               "deviations)");
        return c;
    }
    template <std::size_t... I>
    static std::tuple<Experts...> make_experts(std::size_t capacity, const config_type& c, std::index_sequence<I...>) {
        return std::tuple<Experts...>(Experts(capacity, std::get<I>(c.experts))...);
    }
    template <std::size_t... I>
    static std::tuple<shadow<Experts>...> make_shadows(std::size_t capacity, const config_type& c, std::index_sequence<I...>) {
        return std::tuple<shadow<Experts>...>(shadow<Experts>(capacity, std::get<I>(c.experts))...);
    }

    [[nodiscard]] bool sampled(std::uint64_t key) const noexcept {
        return rate_ >= 1.0 || mix64(key) < sample_below_;
    }
    void shadow_reference(const access_context& ctx) {
        std::array<bool, expert_count> hit{};
        std::size_t i = 0;
        std::apply([&](auto&... s) { ((hit[i++] = s.reference(ctx)), ...); }, shadows_);
        for (std::size_t x = 0; x < expert_count; ++x)
            for (std::size_t y = 0; y < expert_count; ++y)
                if (hit[x] && !hit[y]) only_[x][y] += 1.0;
        if (++references_ % choose_every_ == 0) choose();
        if (references_ % halve_every_ == 0) {
            std::apply([](auto&... s) { ((s.hits *= 0.5), ...); }, shadows_);
            for (auto& row : only_)
                for (double& n : row) n *= 0.5;
        }
    }
    void choose() {
        const std::array<double, expert_count> hits = shadow_hits();
        std::size_t best = followed_;
        for (std::size_t i = 0; i < expert_count; ++i)
            if (hits[i] > hits[best]) best = i;
        const double lead = only_[best][followed_] - only_[followed_][best];
        const double discordant = only_[best][followed_] + only_[followed_][best];
        if (best != followed_ && lead > config_.switch_sigmas * std::sqrt(discordant)) {
            set_ordering(best, true);
            set_ordering(followed_, false);
            followed_ = best;
            ++switches_;
        }
    }
    // Only the followed expert's order is ever popped: the others that can
    // rebuild theirs on demand stop keeping it until they are followed.
    void set_ordering(std::size_t expert, bool on) {
        std::size_t i = 0;
        const auto set = [&](auto& policy) {
            if constexpr (orders_on_demand<std::remove_cvref_t<decltype(policy)>>) {
                if (i == expert) on ? policy.resume_order() : policy.suspend_order();
            }
            ++i;
        };
        std::apply([&](auto&... p) { (set(p), ...); }, real_);
    }
    template <std::size_t... I>
    std::optional<item_id> pop_followed(timestamp now, std::index_sequence<I...>) {
        std::optional<item_id> v;
        ((I == followed_ ? (void)(v = std::get<I>(real_).pop_victim(now)) : void()), ...);
        if (v) ((I != followed_ ? std::get<I>(real_).on_erase(*v) : void()), ...);
        return v;
    }

    item_tracking tracking_;
    config_type config_;
    double rate_;                        // share of keys sampled into the shadows
    std::uint64_t sample_below_;         // a key is sampled if mix64(key) is below this
    std::size_t shadow_capacity_;
    std::tuple<Experts...> real_;        // every expert over every cached item
    std::tuple<shadow<Experts>...> shadows_;
    std::vector<std::uint64_t> key_;     // [capacity] stable key of each item
    std::uint64_t halve_every_;          // sampled references between halvings of the hit counts
    std::uint64_t choose_every_;         // sampled references between choices
    std::uint64_t references_ = 0;       // sampled references so far
    // [x][y] sampled references shadow x hit and shadow y missed, halved with the hits
    std::array<std::array<double, expert_count>, expert_count> only_{};
    std::size_t followed_ = 0;
    std::uint64_t switches_ = 0;
};

/// The policy to pick when the workload is not known (README "Which
/// policy"): whichever of LRU, LRFU at half-lives of 2, 8 and 32 capacities
/// (recency, then more and more frequency), superseded_lru (what sessions
/// moved on from first) and session_aware_lru (the session expected back
/// last) hits most in the shadows lately. With session_aware_lru among the
/// experts, what a release says (output tokens, an engine's return hint) and
/// session ends reach the choice: given exact return hints, adaptive_kv
/// comes within 0.005 of session_aware_lru's hit ratio in 7 of README
/// "Which policy"'s 9 cells.
class adaptive_kv
    : public best_of_shadows<lru, basic_lrfu<2>, basic_lrfu<8>, basic_lrfu<32>, superseded_lru, session_aware_lru> {
public:
    static constexpr std::string_view name = "adaptive_kv";
    using best_of_shadows::best_of_shadows;
};
static_assert(eviction_policy<adaptive_kv>);
static_assert(hears_session_ends<adaptive_kv>);
static_assert(eviction_policy<best_of_shadows<lru, lrfu>>);
static_assert(!hears_session_ends<best_of_shadows<lru, lrfu>>);

}  // namespace kvpolicy
