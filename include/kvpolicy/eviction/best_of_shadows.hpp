// best_of_shadows<Experts...>: follows whichever of several eviction policies
// would hit most on the workload seen lately, measured online by miniature
// simulations (Waldspurger et al., "Cache Modeling and Optimization using
// Miniature Simulations", USENIX ATC'17), over the same cached items.
//
// What it does. Every expert tracks every cached item (each sees every
// insert, access, hold, release and erase) and keeps its own order; victims
// are popped from the expert followed now and erased from the others, so
// switching experts costs nothing and never moves data. Beside them, each
// expert runs a *shadow* (shadow_cache.hpp): the same policy over a spatial
// sample of the keys (those whose hash falls below rate R = min(sample_rate,
// shadow_items / capacity)), at R x capacity items, fed with the sampled
// keys' references, holds and releases as the real cache makes them. A
// tally of the shadows' hits (shadow_tally.hpp) names the expert to follow:
// the one whose shadow hits most lately, once its lead over the followed
// one's is significant (McNemar's test, `switch_sigmas`) and at least
// `switch_gain` of the window's references: with leader_only a switch
// rebuilds the leader over every cached item, which experts that hit alike
// are not worth.
//
// Why. No single order serves every KV workload and capacity (README "Which
// policy"): a long LRFU half-life closes 28% of the LRU -> Belady gap on the
// Mooncake conversation trace at 1% of its blocks and loses 6 points to LRU
// on the agentic trace at 5%. Measuring beats guessing: the shadows answer
// "which order would have hit more here, lately" with the workload's own
// references, and with LRU among the experts the choice falls back to LRU
// where nothing beats it.
//
// When to use it: when the workload is not known in advance, or changes. The
// preset `adaptive_kv` (adaptive_kv.hpp) follows LRU, LRFU at half-lives of
// 2, 8 and 32 capacities, superseded_lru or session_aware_lru.
//
// Departures: the paper runs miniature simulations to tune a parameter
// offline or periodically; here they run continuously and the real cache
// keeps every candidate's order live, so a switch acts at the next victim.
// Experts other than the followed one learn a victim as erased, not evicted:
// ghost-keeping experts that skip erased items (ARC, 2Q, S3-FIFO) miss it;
// lrfu keeps an erased item's history, so its order is the same whoever
// chose the victim.
//
// Leader-only state (config leader_only, adaptive_kv's default): only the
// followed expert exists over the cached items; a switch builds the new one
// from what item_history.hpp keeps per item (32 bytes), as lrfu's
// resume_order rebuilds its heap. LRU's order comes back exactly. What a
// switch would lose is carried where the new leader can take it: an LRFU
// replacing another LRFU takes its values, times and ghosts
// (lrfu::adopt_history; only the half-life changes), and session_aware_lru
// takes from its own shadow what it learned about the workload rather than
// the items: the sessions' rhythms, the return-gap fit, the margin's tuner
// and the tails' reuse rates (session_aware_lru::adopt_learning; the shadow
// saw the same sessions' requests, and in a shadow at R x capacity an item
// waits about as long to be evicted as at full size, so the margin and rates
// mean the same). An LRFU built after another expert starts from reference
// counts without ghosts. Without the carry the rebuilt leaders lost up to
// 0.043 of hit ratio (agentic trace at 1%: the margin, relearned from 16
// after each of 211 switches); with it, within 0.005 of the full state in
// every cell of README "Which policy" (docs/performance.md).
//
// Cost: full state: the experts' costs added (each does every operation) plus
// R times the same for the shadows, a key hash and k^2 counter updates per
// sampled reference (k experts), and 8 bytes per item. leader_only: the
// followed expert's cost, a 32-byte record per item touched on every
// reference (while LRU leads, a cache miss about as dear as LRU's own at
// 10^5 items and more: docs/performance.md), R times the experts' costs for
// the shadows, and an O(n log n) rebuild per switch.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/eviction/item_history.hpp"
#include "kvpolicy/eviction/shadow_cache.hpp"
#include "kvpolicy/eviction/shadow_tally.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

/// The defaults of best_of_shadows' own options (config_type below says
/// what each means); a preset states its own with designated initializers.
struct best_of_shadows_defaults {
    std::size_t shadow_items = 4096;
    double sample_rate = 1.0;
    double window = 4.0;
    double switch_sigmas = 2.0;
    double switch_gain = 0.0;
    bool leader_only = false;
    std::size_t large_capacity = std::numeric_limits<std::size_t>::max();
    std::size_t large_shadow_items = 4096;
};

/// A preset is a name (the registry's) and the defaults of config_type;
/// this one is the plain family's.
struct best_of_shadows_preset {
    static constexpr std::string_view name = "best_of_shadows";
    static constexpr best_of_shadows_defaults defaults{};
};

/// best_of_shadows under a preset's name and defaults. The preset is a
/// type, not a configuration value, because each preset is its own policy
/// in the registry (its `name`, its default config_type): two presets over
/// the same experts must be two types. Capacity and option errors name
/// best_of_shadows, the validator, whichever the preset.
template <class Preset, eviction_policy... Experts>
class basic_best_of_shadows
        : public tracked_policy<basic_best_of_shadows<Preset, Experts...>, eviction_order::static_between_accesses> {
    using tracked = tracked_policy<basic_best_of_shadows<Preset, Experts...>, eviction_order::static_between_accesses>;
    using tracked::tracking_;

    static_assert(
        requires {
            std::string_view{Preset::name};
            best_of_shadows_defaults{Preset::defaults};
        },
        "best_of_shadows: a preset gives `name` (a string_view) and `defaults` (a best_of_shadows_defaults)");

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
        /// min(sample_rate, shadow_items / capacity) (large_shadow_items
        /// above large_capacity, below); >= 1.
        std::size_t shadow_items = Preset::defaults.shadow_items;
        /// The most keys sampled into the shadows, as a share: in (0, 1].
        /// Each shadow holds rate x capacity items (SHARDS' scaled size), so
        /// its cost per block operation is about rate x the expert's. 1 with
        /// shadow_items >= capacity: every key, each shadow a full-size
        /// replica of its expert.
        double sample_rate = Preset::defaults.sample_rate;
        /// Shadow hits halve every `window` x shadow capacity sampled
        /// references: how far back "lately" reaches; in (0, 1e9].
        double window = Preset::defaults.window;
        /// Follow the expert whose shadow hits most when its lead over the
        /// followed one's exceeds this many standard deviations (McNemar);
        /// >= 0 and finite.
        double switch_sigmas = Preset::defaults.switch_sigmas;
        /// ... and when that lead, per sampled reference of the window, is
        /// at least this share (a hit-ratio difference): in [0, 1). Experts
        /// that hit alike lead each other by noise, and the best of several
        /// passes any significance test now and then; with leader_only each
        /// such switch rebuilds the leader over every cached item and
        /// drops what it had learned, for nothing. 0: significance alone.
        double switch_gain = Preset::defaults.switch_gain;
        /// Only the followed expert keeps per-item state; the others exist
        /// only in their shadows, and a switch builds the new expert over
        /// the cached items, replayed in the order of their last reference
        /// (what it needs kept here: 32 bytes per item). False: every expert keeps
        /// its order over every cached item, and a switch costs nothing.
        bool leader_only = Preset::defaults.leader_only;
        /// A cache of more than `large_capacity` items samples its shadows
        /// down to `large_shadow_items` items instead of shadow_items. A
        /// shadow's bytes and time are the same at any capacity, so at
        /// large capacities they are a small sample's price per cached item;
        /// small caches need the larger sample (adaptive_kv). Default: no
        /// cache counts as large.
        std::size_t large_capacity = Preset::defaults.large_capacity;
        /// Items each shadow holds at most in a cache of more than
        /// large_capacity items; >= 1.
        std::size_t large_shadow_items = Preset::defaults.large_shadow_items;
    };
    // The experts keep their own defaults; the options tune the choice.
    static constexpr auto options = std::tuple{
        option{"shadow_items", &config_type::shadow_items, at_least(1), "items each shadow holds at most"},
        option{
            "window", &config_type::window, {0.0, 1e9}, "shadow hits halve every window x shadow capacity references"},
        option{"switch_sigmas", &config_type::switch_sigmas, non_negative,
               "standard deviations of lead that make the choice switch experts"},
        option{"switch_gain", &config_type::switch_gain, {0.0, 1.0}, "the least hit-ratio lead worth a switch"},
        option{"large_capacity", &config_type::large_capacity, non_negative,
               "above this many items, shadows hold large_shadow_items"},
        option{"large_shadow_items", &config_type::large_shadow_items, at_least(1),
               "items each shadow holds above large_capacity"}};

    static constexpr std::string_view name = Preset::name;

    explicit basic_best_of_shadows(std::size_t capacity) : basic_best_of_shadows(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids,
    /// `shadow_items` is 0, `sample_rate` is outside (0, 1], `window` is
    /// outside (0, 1e9] or
    /// `switch_sigmas` is negative or not finite; whatever an expert's
    /// constructor throws for its configuration.
    basic_best_of_shadows(std::size_t capacity, const config_type& config)
            : tracked(capacity, "best_of_shadows"),
              config_(validated(config)),
              rate_(std::min({1.0, config.sample_rate,
                              static_cast<double>(capacity > config.large_capacity ? config.large_shadow_items
                                                                                   : config.shadow_items) /
                                  static_cast<double>(capacity)})),
              sample_below_(rate_ >= 1.0 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(std::ldexp(rate_, 64))),
              shadow_capacity_(std::max<std::size_t>(
                  1, static_cast<std::size_t>(std::llround(rate_ * static_cast<double>(capacity))))),
              real_(make_experts(capacity, config, std::index_sequence_for<Experts...>{})),
              shadows_(make_shadows(shadow_capacity_, config, std::index_sequence_for<Experts...>{})),
              items_(capacity),
              tally_(config.window, shadow_capacity_, config.switch_sigmas, config.switch_gain) {
        if (!config_.leader_only)
            for (std::size_t i = 1; i < expert_count; ++i) set_ordering(i, false);
    }

    void on_miss(const access_context& ctx) {
        each_real([&](auto& p) { p.on_miss(ctx); });
    }
    void on_insert(item_id id, const access_context& ctx) {
        tracking_.mark_inserted(id);
        each_real([&](auto& p) { p.on_insert(id, ctx); });
        items_.set_key(id, ctx.key);
        note_reference(id, ctx, true, 1);
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_access(item_id id, const access_context& ctx) {
        tracking_.mark_accessed(id);
        each_real([&](auto& p) { p.on_access(id, ctx); });
        note_reference(id, ctx, tracking_.is_evictable(id), 2);
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_hold(item_id id) {
        tracking_.mark_held(id);
        each_real([&](auto& p) { p.on_hold(id); });
        const std::uint64_t key = items_.key(id);
        if (sampled(key)) std::apply([&](auto&... s) { (s.hold(key), ...); }, shadows_);
    }
    void on_release(item_id id, const access_context& ctx) {
        tracking_.mark_released(id);
        each_real([&](auto& p) { p.on_release(id, ctx); });
        note_reference(id, ctx, true);
        if (sampled(ctx.key)) std::apply([&](auto&... s) { (s.release(ctx), ...); }, shadows_);
    }
    void on_erase(item_id id) {
        (void)tracking_.mark_erased(id);  // held or not, every expert forgets it
        each_real([&](auto& p) { p.on_erase(id); });
        const std::uint64_t key = items_.key(id);
        if (sampled(key)) std::apply([&](auto&... s) { (s.forget(key), ...); }, shadows_);
    }
    /// Present when an expert hears session ends (session_aware_lru): that
    /// expert and its shadow learn the session will not return, whichever
    /// expert is followed now, so a switch finds its order up to date.
    void on_session_end(session_id session, timestamp now) requires(hears_session_ends<Experts> || ...) {
        each_expert_and_shadow([&](auto& policy) {
            if constexpr (hears_session_ends<std::remove_cvref_t<decltype(policy)>>)
                policy.on_session_end(session, now);
        });
    }
    /// Present when an expert hears request ends (predicted_return), for the
    /// same reason.
    void on_request_end(session_id session, timestamp now) requires(hears_request_ends<Experts> || ...) {
        each_expert_and_shadow([&](auto& policy) {
            if constexpr (hears_request_ends<std::remove_cvref_t<decltype(policy)>>)
                policy.on_request_end(session, now);
        });
    }
    std::optional<item_id> pop_victim(timestamp now) {
        const std::optional<item_id> v = pop_followed(now, std::index_sequence_for<Experts...>{});
        if (v) tracking_.mark_evicted(*v);
        return v;
    }

    /// Index (into Experts...) of the expert whose victims are taken now.
    [[nodiscard]] std::size_t followed() const noexcept { return followed_; }
    /// How many times the followed expert changed.
    [[nodiscard]] std::uint64_t switches() const noexcept { return switches_; }
    /// Each shadow's decayed hit count, in expert order.
    [[nodiscard]] std::array<double, expert_count> shadow_hits() const { return tally_.hits(); }
    /// Keys are sampled into the shadows at this rate.
    [[nodiscard]] double sample_rate() const noexcept { return rate_; }
    /// Items each shadow holds at most.
    [[nodiscard]] std::size_t shadow_capacity() const noexcept { return shadow_capacity_; }
    /// Whether every expert keeps state over the cached items
    /// (config leader_only false) or only the followed one.
    [[nodiscard]] bool leader_only() const noexcept { return config_.leader_only; }
    /// Expert `I`, as it orders the cached items (tests); with leader_only,
    /// an expert not followed exists only as its shadow's policy, over the
    /// sampled keys, and that is what this returns.
    template <std::size_t I>
    [[nodiscard]] const auto& expert() const noexcept {
        const auto& real = std::get<I>(real_);
        return real ? *real : std::get<I>(shadows_).policy();
    }
    /// Each shadow's hits and sampled references since the start, not
    /// halved: hits / references is the shadow's hit ratio, an estimate of
    /// its expert's hit ratio at full size (tests, bench/shadow_error).
    [[nodiscard]] std::array<std::uint64_t, expert_count> shadow_total_hits() const {
        std::array<std::uint64_t, expert_count> out{};
        std::size_t i = 0;
        std::apply([&](const auto&... s) { ((out[i++] = s.total_hits()), ...); }, shadows_);
        return out;
    }
    [[nodiscard]] std::uint64_t shadow_references() const noexcept { return tally_.references(); }

    /// leader_only: renumbers the cached items' placement stamps (kept for
    /// a rebuild) as 1..n in the same order, so the 32-bit counter goes on
    /// from n. Done when the counter would wrap, once per 2^32 placements;
    /// it changes no decision (tests call it to check that). O(n log n).
    void renumber_stamps() { items_.renumber(tracking_); }

private:
    static config_type validated(const config_type& c) {
        if (c.shadow_items == 0)
            throw config_error(
                "best_of_shadows: shadow_items 0 leaves the shadows nothing to measure; give at least 1 "
                "(4096 samples keys at 4096 / capacity)");
        if (c.large_shadow_items == 0)
            throw config_error(
                "best_of_shadows: large_shadow_items 0 leaves the shadows of a cache above "
                "large_capacity nothing to measure; give at least 1 (adaptive_kv: 1024)");
        if (!(c.sample_rate > 0.0) || !(c.sample_rate <= 1.0))
            throw config_error("best_of_shadows: sample_rate " + std::to_string(c.sample_rate) +
                               " must be in (0, 1] (the most keys sampled into the shadows, as a share; 1: up to "
                               "shadow_items keys, 0.05: one key in 20)");
        if (!(c.window > 0.0) || !(c.window <= 1e9))
            throw config_error("best_of_shadows: window " + std::to_string(c.window) +
                               " must be in (0, 1e9] (shadow hits halve every window x shadow capacity references)");
        if (!(c.switch_gain >= 0.0) || !(c.switch_gain < 1.0))
            throw config_error("best_of_shadows: switch_gain " + std::to_string(c.switch_gain) +
                               " must be in [0, 1) (the least hit-ratio lead worth a switch; 0.002: a fifth of a "
                               "point)");
        if (!(c.switch_sigmas >= 0.0) || !std::isfinite(c.switch_sigmas))
            throw config_error("best_of_shadows: switch_sigmas " + std::to_string(c.switch_sigmas) +
                               " must be finite and >= 0 (2: follow an expert whose shadow leads by two standard "
                               "deviations)");
        return c;
    }
    // Every expert, or with leader_only the first (followed first).
    template <std::size_t... I>
    static std::tuple<std::optional<Experts>...> make_experts(std::size_t capacity, const config_type& c,
                                                              std::index_sequence<I...>) {
        std::tuple<std::optional<Experts>...> out;
        ((!c.leader_only || I == 0 ? (void)std::get<I>(out).emplace(capacity, std::get<I>(c.experts)) : void()), ...);
        return out;
    }
    template <std::size_t... I>
    static std::tuple<shadow_cache<Experts>...> make_shadows(std::size_t capacity, const config_type& c,
                                                             std::index_sequence<I...>) {
        return std::tuple<shadow_cache<Experts>...>(shadow_cache<Experts>(capacity, std::get<I>(c.experts))...);
    }
    // `f` on every expert and every shadow's policy.
    template <class F>
    void each_expert_and_shadow(F&& f) {
        each_real(f);
        std::apply([&](auto&... s) { (f(s.policy()), ...); }, shadows_);
    }
    // `f` on every expert that keeps state now.
    template <class F>
    void each_real(F&& f) {
        std::apply([&](auto&... p) { ((p ? (void)f(*p) : void()), ...); }, real_);
    }
    // leader_only: what a rebuild needs of the reference (item_history::note).
    void note_reference(item_id id, const access_context& ctx, bool placed, std::uint32_t use = 0) noexcept {
        if (config_.leader_only) items_.note(id, ctx, placed, use, tracking_);
    }

    [[nodiscard]] bool sampled(std::uint64_t key) const noexcept { return rate_ >= 1.0 || mix64(key) < sample_below_; }
    void shadow_reference(const access_context& ctx) {
        std::array<bool, expert_count> hit{};
        std::size_t i = 0;
        std::apply([&](auto&... s) { ((hit[i++] = s.reference(ctx)), ...); }, shadows_);
        if (const std::optional<std::size_t> best = tally_.record(hit, followed_)) follow(*best);
    }
    void follow(std::size_t best) {
        if (config_.leader_only) {
            rebuild(best, std::index_sequence_for<Experts...>{});
        } else {
            set_ordering(best, true);
            set_ordering(followed_, false);
        }
        followed_ = best;
        ++switches_;
    }
    // Only the followed expert's order is ever popped: the others that can
    // rebuild theirs on demand stop keeping it until they are followed.
    void set_ordering(std::size_t expert, bool on) {
        std::size_t i = 0;
        const auto set = [&](auto& policy) {
            if constexpr (orders_on_demand<std::remove_cvref_t<decltype(*policy)>>) {
                if (i == expert) on ? policy->resume_order() : policy->suspend_order();
            }
            ++i;
        };
        std::apply([&](auto&... p) { (set(p), ...); }, real_);
    }
    // leader_only: expert `to` is built over the cached items
    // (item_history::replay); the followed expert is dropped. An LRFU after
    // an LRFU takes the outgoing one's history instead; session_aware_lru
    // first takes its shadow's learning. O(n log n).
    template <std::size_t... I>
    void rebuild(std::size_t to, std::index_sequence<I...>) {
        const std::vector<std::uint32_t> cached = items_.by_placement(tracking_);
        const auto build = [&](auto& slot, const auto& config, const auto& shadow_policy) {
            auto& p = slot.emplace(tracking_.capacity(), config);
            // What the expert learned about the workload, not about the
            // items (session_aware_lru's sessions' rhythms), its shadow has
            // learned from the same requests: carried over.
            if constexpr (requires { p.adopt_learning(shadow_policy); }) p.adopt_learning(shadow_policy);
            // From one LRFU to another: the outgoing one's values, times and
            // ghosts, not counts.
            bool carried = false;
            const auto carry = [&](const auto& from) {
                if constexpr (requires { p.adopt_history(*from); }) {
                    p.adopt_history(*from);
                    carried = true;
                }
            };
            ((I == followed_ ? carry(std::get<I>(real_)) : void()), ...);
            if (carried) return;
            items_.replay(p, cached, tracking_);
            // The replay's inserts are no requests, but the expert heard them
            // as such: its margin tuner scored each pending decision whose
            // block is cached here as that block coming back (raising the
            // margin until the session rule stopped acting: conversation trace
            // at 5% with the waiting queue, 0.35 -> 0.24), and its gap fit
            // and tails' rates saw arrivals. Taking the shadow's learning
            // again undoes that (sessions it already took are kept as the
            // replay left them).
            if constexpr (requires { p.adopt_learning(shadow_policy); }) p.adopt_learning(shadow_policy);
        };
        ((I == to ? build(std::get<I>(real_), std::get<I>(config_.experts), std::get<I>(shadows_).policy()) : void()),
         ...);
        ((I == followed_ ? std::get<I>(real_).reset() : void()), ...);
    }
    template <std::size_t... I>
    std::optional<item_id> pop_followed(timestamp now, std::index_sequence<I...>) {
        std::optional<item_id> v;
        ((I == followed_ ? (void)(v = std::get<I>(real_)->pop_victim(now)) : void()), ...);
        if (v) ((I != followed_ && std::get<I>(real_) ? std::get<I>(real_)->on_erase(*v) : void()), ...);
        return v;
    }

    config_type config_;
    double rate_;                 // share of keys sampled into the shadows
    std::uint64_t sample_below_;  // a key is sampled if mix64(key) is below this
    std::size_t shadow_capacity_;
    std::tuple<std::optional<Experts>...> real_;  // every expert over every cached item, or the followed one
    std::tuple<shadow_cache<Experts>...> shadows_;
    item_history items_;                // each item's key; with leader_only what a rebuild needs
    shadow_tally<expert_count> tally_;  // the shadows' hits, and which expert to follow
    std::size_t followed_ = 0;
    std::uint64_t switches_ = 0;
};

/// best_of_shadows over any experts, with the plain defaults.
template <eviction_policy... Experts>
using best_of_shadows = basic_best_of_shadows<best_of_shadows_preset, Experts...>;

}  // namespace kvpolicy
