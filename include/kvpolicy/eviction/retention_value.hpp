// retention_value: evict the item with the lowest recompute cost per unit of
// idle time, the policy of Pensieve (Yu et al., "Stateful Large Language
// Model Serving with Pensieve", EuroSys'25, §4.3.1), in the form a prefix
// cache can honour.
//
//     retention = cost / time_inactive
//     cost      = layer_weight(layer, num_layers)
//               * position_weight(chunk, session_total_chunks)
//               * loss(chunk)
//     loss      = what evicting the item costs if it must be recomputed:
//       chunk_and_dependents (default): the chunk and every later chunk of
//           its session, (total - chunk) chunks at the mean of the first's
//           and the last's base_cost, which is their sum exactly for a
//           linear base_cost (pensieve_linear);
//       chunk: base_cost(context_length), the chunk alone (seed 000).
//
// An item that is cheap to lose and long idle goes first. Use it for
// multi-turn serving in a prefix cache (vLLM's, SGLang's, tiered_cache's),
// where a request is served only the cached prefix of its blocks: a chunk is
// no use without those before it, so its loss takes every later chunk with
// it, and the leading chunks weigh most. The default weights are uniform.
//
// Seed 000's form weighs the other way, and measures worse than LRU on the
// time it claims to save (docs/which-policy.md, "Retention value on its own
// figure"; bench/retention_study): `seed000_retention_value`, each chunk
// priced alone (`retention_loss::chunk`), `pipelined_depth` (back layers
// first) and `session_relative` (leading chunks first). Its position weight is right
// only for an engine that recomputes a dropped leading chunk in place and
// keeps the later ones (Pensieve §4.3.4), and its cost grows toward the back
// of a session, so both evict what later chunks need. Its layer weight is
// right about a CPU copy (a back layer's reload hides behind the front
// layers' compute) but not about a drop, which costs the whole chunk's
// forward pass whichever layer went: with a CPU tier that drops, it parks
// back layers on a tier that loses them and keeps front layers of chunks
// that are already lost.
//
// The order changes as time passes (`eviction_order::time_varying`), so no
// structure can keep it: a scan scores every evictable item at `now` in one
// pass over dense arrays (ids, cost, last use, kept compact by swap-removal
// with a position map) and hands the scores to `Selector`, which selects the
// k lowest, ties broken by id. `pop_victims(out, now)` scans once for the
// whole batch. A scan also chooses the next victims, up to `scan_fraction`
// of the candidates (default 1%), kept in score order and handed out by the
// following pops as long as each is still a candidate untouched since the
// scan (a hit, hold or erase drops it from the reserve), the way engines
// free a fraction of the tier per scan at a watermark: O(1 / scan_fraction)
// scored items per victim instead of O(n) (bench/retention_bench: 10^6
// items). The price: a victim is chosen by the scores at its scan, not at
// its pop (an item inserted since the scan waits for the next one).
// `scan_fraction = 0` scans at every pop: the exact rule, as the reference
// model (tests/support/reference_policies.hpp) and Pensieve state it.
//
// Edges, as tested:
// - cost is computed when an item is inserted, accessed or released, from
//   that call's `access_context` (so a session that grows re-weights the
//   chunks it touches through `session_total_chunks`), in the order
//   (layer_weight * position_weight) * loss; a reference model that repeats
//   the order gets bit-identical scores. With `.loss = retention_loss::chunk`,
//   `unit_cost` and uniform weights it is LRU, ties in last use by id (at
//   O(n) per pop instead of O(1)).
// - time_inactive = now - last use, in clock ticks; a release counts as a use
//   at `ctx.now`. time_inactive = 0 (used at `now`, or `now` earlier than the
//   last use) scores +inf: such an item is never chosen while an idle one is
//   evictable, and among only such items the lowest cost goes first.
// - equal scores (and equal costs among just-used items): lowest id first.
// - a held item (`on_hold`) is no candidate; accesses while held are
//   superseded by the release.
// - bad cost parameters are rejected when the cost model is constructed
//   (`pensieve_linear` throws config_error naming the parameter), so no
//   policy with a NaN or negative cost exists; a custom model that still
//   returns NaN makes the selector throw usage_error, and the pop then
//   removes nothing.
// Departures from the paper: Pensieve scores whole chunks; seed 000 scores
// each (session, chunk, layer) separately and adds the layer and position
// weights; the default loss prices a chunk's dependents, which Pensieve's
// in-place recovery does not lose. Pensieve's time is wall time; here it is
// the caller's ticks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/cost/pipelined_depth.hpp"
#include "kvpolicy/cost/session_relative.hpp"
#include "kvpolicy/cost/uniform_weights.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"
#include "kvpolicy/select/nth_element_selector.hpp"

namespace kvpolicy {

/// What evicting an item loses, if it must be recomputed (the header
/// comment has the formulas).
enum class retention_loss : std::uint8_t {
    chunk_and_dependents,  ///< the chunk and every later chunk of its session: a prefix cache's loss
    chunk,                 ///< the chunk alone: seed 000's rule
};

/// The three models a `retention_value` policy multiplies, as values (a
/// calibrated `pensieve_linear`, a `measured_table` with its points), and
/// what a loss counts (`DefaultLoss` unless set).
template <cost_model Cost, layer_weight LayerWeight, position_weight PositionWeight,
          retention_loss DefaultLoss = retention_loss::chunk_and_dependents>
struct retention_value_config {
    Cost cost{};
    LayerWeight layer_weighting{};
    PositionWeight position_weighting{};
    retention_loss loss = DefaultLoss;
    /// Share of the candidates one scan chooses, as engines free a fraction
    /// of the tier when it crosses a watermark: a pop that finds no victim
    /// chosen before scans, takes what it needs, and keeps the rest of the
    /// lowest `scan_fraction` of the candidates, in score order, for the
    /// pops that follow (each still a candidate, untouched since the scan).
    /// 0: every pop scans (the exact rule at every pop, O(n) per pop).
    /// Default 1%: ~100 items scored per victim, whatever the tier's size.
    double scan_fraction = 0.01;
};

// time_varying: an item's value depends on the time now, so the victim
// order moves between accesses.
template <cost_model Cost = pensieve_linear, layer_weight LayerWeight = uniform_layer_weight,
          position_weight PositionWeight = uniform_position_weight, victim_selector Selector = nth_element_selector,
          retention_loss DefaultLoss = retention_loss::chunk_and_dependents>
class retention_value : public tracked_policy<retention_value<Cost, LayerWeight, PositionWeight, Selector, DefaultLoss>,
                                              eviction_order::time_varying> {
    using tracked = tracked_policy<retention_value<Cost, LayerWeight, PositionWeight, Selector, DefaultLoss>,
                                   eviction_order::time_varying>;
    using tracked::tracking_;

public:
    using config_type = retention_value_config<Cost, LayerWeight, PositionWeight, DefaultLoss>;
    using cost_type = Cost;
    using layer_weight_type = LayerWeight;
    using position_weight_type = PositionWeight;
    using selector_type = Selector;
    /// The cost model's parameters (pensieve_linear: alpha, beta,
    /// const_non_attention), set by rebuilding `cost`, which validates them.
    static constexpr auto options = options_through<&config_type::cost, Cost>();

    static constexpr std::string_view name = "retention_value";
    /// Its victims are sheltered in a CPU tier and it weighs what losing one
    /// costs in time, not in hits: a one-tier prefix cache's hit ratio ranks
    /// it low (docs/which-policy.md, "Retention value on its own figure").
    static constexpr std::string_view built_for =
        "the GPU tier over a CPU tier, judged by ready time (--mode tiered --cpu-capacity N)";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    /// Complexity: O(capacity) memory, about 33 bytes per item plus the
    /// selector's scratch.
    explicit retention_value(std::size_t capacity, const config_type& config = {})
            : tracked(capacity),
              config_(checked(config)),
              pos_(capacity, no_index),
              scores_(capacity),
              version_(capacity, 0) {
        ids_.reserve(capacity);
        cost_.reserve(capacity);
        last_use_.reserve(capacity);
    }

    /// The cost this policy gives an item described by `ctx`:
    /// (layer_weight * position_weight) * loss, in that order (reference
    /// models repeat it to get bit-identical scores). With
    /// `chunk_and_dependents` the loss is after * ((cost(first) +
    /// cost(last)) / 2): `after` = session_total_chunks - chunk (at least 1),
    /// first = context_length, last = first + block * (after - 1), `block`
    /// the context's block_tokens, or context_length / chunk where that is 0
    /// (for chunk 0 as well: then every chunk is priced at the first's).
    [[nodiscard]] double item_cost(const access_context& ctx) const noexcept(nothrow_cost) {
        const double weight = config_.layer_weighting.weight(ctx.layer, ctx.num_layers) *
                              config_.position_weighting.weight(ctx.chunk, ctx.session_total_chunks);
        if (config_.loss == retention_loss::chunk) return weight * config_.cost.cost(ctx.context_length);
        const std::uint32_t after =
            ctx.session_total_chunks > ctx.chunk.value ? ctx.session_total_chunks - ctx.chunk.value : 1;
        const std::uint64_t block = ctx.block_tokens > 0  ? ctx.block_tokens
                                    : ctx.chunk.value > 0 ? ctx.context_length / ctx.chunk.value
                                                          : 0;
        const double first = config_.cost.cost(ctx.context_length);
        const double last = config_.cost.cost(ctx.context_length + block * (after - 1));
        return weight * (static_cast<double>(after) * ((first + last) / 2));
    }

    /// An evictable item's retention value at `now` (+inf when used at
    /// `now`); empty for an item that is held or not tracked.
    [[nodiscard]] std::optional<double> retention(item_id id, timestamp now) const noexcept {
        if (!tracking_.is_evictable(id)) return std::nullopt;
        const std::uint32_t p = pos_[id.index()];
        return score(cost_[p], last_use_[p], now);
    }

    void on_insert(item_id id, const access_context& ctx) noexcept(nothrow_cost) {
        const double c = checked_cost(ctx);
        tracking_.mark_inserted(id);
        ++version_[id.index()];
        add_candidate(id, c, ctx.now);
    }
    void on_access(item_id id, const access_context& ctx) noexcept(nothrow_cost) {
        if (tracking_.is_evictable(id)) {
            const double c = checked_cost(ctx);
            const std::uint32_t p = pos_[id.index()];
            cost_[p] = c;
            last_use_[p] = ctx.now;
        }
        ++version_[id.index()];
        tracking_.mark_accessed(id);
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        ++version_[id.index()];
        remove_candidate(id);
    }
    void on_release(item_id id, const access_context& ctx) noexcept(nothrow_cost) {
        const double c = checked_cost(ctx);
        tracking_.mark_released(id);
        ++version_[id.index()];
        add_candidate(id, c, ctx.now);
    }
    void on_erase(item_id id) noexcept {
        ++version_[id.index()];
        if (tracking_.mark_erased(id)) remove_candidate(id);
    }

    /// Effects: removes and returns the evictable item with the lowest
    /// retention value at `now`. Complexity: O(evictable).
    /// Throws: what the selector throws (usage_error on a NaN score); nothing
    /// is removed then.
    std::optional<item_id> pop_victim(timestamp now) {
        item_id v{};
        if (pop_victims(std::span<item_id>(&v, 1), now) == 0) return std::nullopt;
        return v;
    }

    /// Effects: removes the min(out.size(), evictable_size()) items with the
    /// lowest retention values at `now` and writes them to `out` in ascending
    /// order (the order repeated pop_victim(now) calls would give).
    /// Complexity: one scoring pass, plus the selector (nth_element: O(n + k
    /// log k)), plus a second pass only when fewer than k items are idle.
    /// Throws: what the selector throws; nothing is removed then.
    std::size_t pop_victims(std::span<item_id> out, timestamp now) {
        const std::size_t k = std::min(out.size(), ids_.size());
        if (k == 0) return 0;
        // Victims the last scan chose, in its order, while still valid; if
        // they do not cover the whole batch, a new scan chooses all of it
        // (nothing is removed before a scan that may throw).
        std::size_t got = 0;
        std::size_t i = next_reserved_;
        for (; got < k && i < reserve_.size(); ++i) {
            const reserved r = reserve_[i];
            if (version_[r.id.index()] == r.version && pos_[r.id.index()] != no_index) out[got++] = r.id;
        }
        if (got == k) {
            next_reserved_ = i;
            for (std::size_t j = 0; j < k; ++j) evict(out[j]);
            return k;
        }
        const std::size_t n = ids_.size();
        const auto batch = static_cast<std::size_t>(std::ceil(config_.scan_fraction * static_cast<double>(n)));
        scan_out_.resize(std::min(n, std::max(k, batch)));
        const std::size_t s = scan(std::span<item_id>(scan_out_), now);
        reserve_.clear();
        next_reserved_ = 0;
        for (std::size_t j = 0; j < s; ++j) {
            if (j < k)
                out[j] = scan_out_[j];
            else
                reserve_.push_back({scan_out_[j], version_[scan_out_[j].index()]});
        }
        for (std::size_t j = 0; j < k; ++j) evict(out[j]);
        return k;
    }

    [[nodiscard]] const config_type& config() const noexcept { return config_; }

private:
    static constexpr bool nothrow_cost = noexcept(std::declval<const Cost&>().cost(std::uint64_t{}))&& noexcept(
        std::declval<const LayerWeight&>().weight(
            layer_index{}, std::uint32_t{}))&& noexcept(std::declval<const PositionWeight&>().weight(chunk_index{},
                                                                                                     std::uint32_t{}));

    /// The k lowest at `now` (k = out.size()), in order; removes nothing.
    std::size_t scan(std::span<item_id> out, timestamp now) {
        const std::size_t n = ids_.size();
        const std::size_t k = std::min(out.size(), n);
        if (k == 0) return 0;
        for (std::size_t i = 0; i < n; ++i) scores_[i] = score(cost_[i], last_use_[i], now);
        if (const std::size_t got = select_by_sampled_threshold(n, out.first(k)); got > 0) return got;
        const std::size_t got = selector_.select_lowest(std::span<const double>(scores_.data(), n),
                                                        std::span<const item_id>(ids_.data(), n), out.first(k));
        std::size_t idle = got;
        while (idle > 0 && std::isinf(scores_[pos_[out[idle - 1].index()]])) --idle;
        if (idle < got) {
            fresh_cost_.clear();
            fresh_ids_.clear();
            for (std::size_t i = 0; i < n; ++i)
                if (std::isinf(scores_[i])) {
                    fresh_cost_.push_back(cost_[i]);
                    fresh_ids_.push_back(ids_[i]);
                }
            selector_.select_lowest(std::span<const double>(fresh_cost_), std::span<const item_id>(fresh_ids_),
                                    out.subspan(idle, got - idle));
        }
        return got;
    }

    /// The k lowest of scores_[0, n) without handing all n to the selector:
    /// a threshold from a sample of 1024 scores at about twice the wanted
    /// quantile, then the selector over the items at or below it. Every
    /// item left out scores above every item kept, and at least k are kept,
    /// so the k lowest (ties by id) are the same as the full selection's.
    /// 0 when it does not apply (few items, a threshold among just-used
    /// items, fewer than k at or below it): the caller selects from all.
    std::size_t select_by_sampled_threshold(std::size_t n, std::span<item_id> out) {
        const std::size_t k = out.size();
        constexpr std::size_t samples = 1024;
        if (n < 4 * samples || 8 * k > n) return 0;
        sample_.resize(samples);
        for (std::size_t j = 0; j < samples; ++j) sample_[j] = scores_[j * n / samples];
        const std::size_t at = std::min(samples - 1, 2 * k * samples / n + 16);
        std::nth_element(sample_.begin(), sample_.begin() + static_cast<std::ptrdiff_t>(at), sample_.end());
        const double threshold = sample_[at];
        if (std::isinf(threshold)) return 0;
        below_scores_.clear();
        below_ids_.clear();
        for (std::size_t i = 0; i < n; ++i)
            if (scores_[i] <= threshold) {
                below_scores_.push_back(scores_[i]);
                below_ids_.push_back(ids_[i]);
            }
        if (below_scores_.size() < k) return 0;
        return selector_.select_lowest(std::span<const double>(below_scores_), std::span<const item_id>(below_ids_),
                                       out);
    }

    void evict(item_id id) noexcept {
        remove_candidate(id);
        tracking_.mark_evicted(id);
        ++version_[id.index()];
    }

    static const config_type& checked(const config_type& c) {
        if (!(c.scan_fraction >= 0.0 && c.scan_fraction <= 1.0))
            throw config_error("retention_value: scan_fraction = " + std::to_string(c.scan_fraction) +
                               " is not a share of the candidates; give a value in [0, 1] (0: scan at every pop)");
        return c;
    }

    [[nodiscard]] static double score(double cost, timestamp last_use, timestamp now) noexcept {
        return last_use < now ? cost / static_cast<double>(now - last_use) : std::numeric_limits<double>::infinity();
    }

    [[nodiscard]] double checked_cost(const access_context& ctx) const noexcept(nothrow_cost) {
        const double c = item_cost(ctx);
        // A negative or infinite cost breaks the order (+inf reads as "just
        // used"). NaN passes on to the selector, which rejects it with an
        // error that names the item.
        KVPOLICY_ASSERT(!(c < 0.0) && !(c > std::numeric_limits<double>::max()));
        return c;
    }

    // The dense arrays never outgrow their reserved capacity, so push_back
    // does not allocate.
    void add_candidate(item_id id, double c, timestamp t) noexcept {
        pos_[id.index()] = static_cast<std::uint32_t>(ids_.size());
        ids_.push_back(id);
        cost_.push_back(c);
        last_use_.push_back(t);
    }
    void remove_candidate(item_id id) noexcept {
        const std::uint32_t p = pos_[id.index()];
        KVPOLICY_ASSERT(p != no_index && ids_[p] == id);
        const std::size_t last = ids_.size() - 1;
        if (p != last) {
            ids_[p] = ids_[last];
            cost_[p] = cost_[last];
            last_use_[p] = last_use_[last];
            pos_[ids_[p].index()] = p;
        }
        ids_.pop_back();
        cost_.pop_back();
        last_use_.pop_back();
        pos_[id.index()] = no_index;
    }

    config_type config_;
    [[no_unique_address]] Selector selector_{};
    std::vector<std::uint32_t> pos_;   // [capacity] index in the dense arrays, or no_index
    std::vector<item_id> ids_;         // [evictable] dense candidates
    std::vector<double> cost_;         // [evictable] cost, parallel to ids_
    std::vector<timestamp> last_use_;  // [evictable] last use, parallel to ids_
    std::vector<double> scores_;       // [capacity] scratch: scores at the last pop
    std::vector<double> fresh_cost_;   // scratch: costs of just-used items
    std::vector<item_id> fresh_ids_;   // scratch: their ids
    struct reserved {
        item_id id;
        std::uint32_t version;  // the item's version at the scan: any event since voids the choice
    };
    std::vector<std::uint32_t> version_;  // [capacity] bumped by every event on the slot
    std::vector<reserved> reserve_;       // victims the last scan chose beyond its pop, in order
    std::size_t next_reserved_ = 0;
    std::vector<item_id> scan_out_;     // scratch: one scan's choice
    std::vector<double> sample_;        // scratch: sampled scores for the threshold
    std::vector<double> below_scores_;  // scratch: items at or below it
    std::vector<item_id> below_ids_;
};

static_assert(eviction_policy<retention_value<>>);

/// Seed 000's retention value: back layers and leading chunks first, each
/// chunk priced alone (the header comment says where that departs from a
/// prefix cache).
using seed000_retention_value =
    retention_value<pensieve_linear, pipelined_depth, session_relative, nth_element_selector, retention_loss::chunk>;
static_assert(eviction_policy<seed000_retention_value>);

}  // namespace kvpolicy
