// Seed 002's batch API: given every candidate sequence and the number of
// blocks needed, choose which whole sequences to evict.
//
// The incremental policies (lru.hpp, lfu.hpp, ...) keep an order as items
// come and go. Some engines instead assemble a candidate list when memory
// runs short (vLLM's and SGLang's schedulers preempting sequences, seed
// 002's `select_victims`): `victim_batch_selector<Rule>` serves them. It
// orders the unpinned candidates by the rule's rank — the same rank value the
// incremental policy of that name documents (`lfu_rank`, `qos_rank`,
// `predictive_rank`) — with ties broken by sequence id, and evicts the
// shortest prefix of that order whose blocks reach `required_blocks`.
//
// Rules: `lru` (oldest last_access_time), `lfu` (fewest accesses, then
// oldest), `fifo` (lowest sequence id: engines number sequences in arrival
// order, and a candidate carries no arrival time), `qos_aware` (lowest
// priority, then oldest; a candidate's priority is its effective one, there
// is no expiry here) and `predictive` (`predictive_rank`'s three tiers).
//
// Selection is partial: one pass keeps a max-heap of the best candidates
// seen so far and drops its top while the rest still reach the requirement,
// so it costs O(n + k log k · log n) for k victims (expected, for candidates
// in arbitrary order) instead of a full sort's O(n log n); duplicate ids are
// found with an open-addressing table. Scratch space is reused, so after the
// first call only the returned vector allocates.
//
// Metrics (seed 002's EvictionMetrics), from what the selector sees:
// - total_evictions: sequences returned by select_victims, summed.
// - average_selection_us: wall time inside select_victims, per call.
// - re_prefill_rate: evictions followed by a request for the same sequence
//   (an `update_access` after it was evicted: its KV must be prefilled
//   again), divided by total_evictions.
// - fairness: Jain's index (sum x)^2 / (n * sum x^2) over the sequences that
//   were requested at least once, where a sequence's service x is the share
//   of its requests that found its KV still cached (requests that were not
//   re-prefills). 1 = every sequence served alike; 1/n = one sequence got
//   everything. 1 when no sequence has been requested, or all got nothing.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/core/type_list.hpp"
#include "kvpolicy/eviction/fifo.hpp"
#include "kvpolicy/eviction/lfu.hpp"
#include "kvpolicy/eviction/lru.hpp"
#include "kvpolicy/eviction/predictive.hpp"
#include "kvpolicy/eviction/qos_aware.hpp"

namespace kvpolicy {

/// One sequence that could be evicted (seed 002's EvictionCandidate).
struct eviction_candidate {
    std::uint64_t sequence_id = 0;
    /// The blocks the sequence holds; only their number is read. A view, so
    /// an engine can point into its block table without copying.
    std::span<const block_id> block_ids{};
    timestamp last_access_time = 0;
    std::uint64_t access_count = 0;
    /// Higher is kept longer (0 = low, 1 = normal, 2 = high in seed 002).
    std::int32_t priority = default_priority;
    /// Never chosen (a running sequence, a shared prefix still referenced).
    bool pinned = false;
    /// Seconds the sequence is expected to live on; NaN = unknown.
    double estimated_lifetime = std::numeric_limits<double>::quiet_NaN();
    std::uint64_t sequence_length = 0;
    /// 0 = unknown.
    std::uint64_t max_length = 0;
};

/// What select_victims decided (seed 002's EvictionResult).
struct victim_batch {
    /// Sequence ids to evict, in eviction order.
    std::vector<std::uint64_t> evicted;
    /// Blocks those sequences hold.
    std::size_t freed_blocks = 0;
    /// required_blocks - freed_blocks when the unpinned candidates cannot
    /// free enough (then `evicted` is every unpinned candidate); else 0.
    std::size_t shortfall = 0;
};

/// Seed 002's EvictionMetrics; see the header comment for each definition.
struct victim_batch_metrics {
    std::uint64_t selections = 0;
    std::uint64_t total_evictions = 0;
    double average_selection_us = 0.0;
    std::uint64_t re_prefills = 0;
    double re_prefill_rate = 0.0;
    double fairness = 1.0;
};

/// How a rule ranks a candidate: `batch_rule<R>::rank(c)` returns a value
/// ordered by `<`, smaller evicted first. Specialised for the policies below.
template <class Rule>
struct batch_rule;

template <>
struct batch_rule<lru> {
    [[nodiscard]] static constexpr timestamp rank(const eviction_candidate& c) noexcept { return c.last_access_time; }
};
template <>
struct batch_rule<fifo> {
    [[nodiscard]] static constexpr std::uint64_t rank(const eviction_candidate& c) noexcept { return c.sequence_id; }
};
template <>
struct batch_rule<lfu> {
    [[nodiscard]] static constexpr lfu_rank rank(const eviction_candidate& c) noexcept {
        return {c.access_count, c.last_access_time};
    }
};
template <>
struct batch_rule<qos_aware> {
    [[nodiscard]] static constexpr qos_rank rank(const eviction_candidate& c) noexcept {
        return {c.priority, c.last_access_time};
    }
};
template <>
struct batch_rule<predictive> {
    [[nodiscard]] static predictive_rank rank(const eviction_candidate& c) noexcept {
        return predictive_rank::of(c.estimated_lifetime, c.sequence_length, c.max_length, c.last_access_time);
    }
};

template <class Rule>
concept has_batch_rule = requires(const eviction_candidate& c) {
    { batch_rule<Rule>::rank(c) < batch_rule<Rule>::rank(c) } -> std::convertible_to<bool>;
};

template <class Rule>
class victim_batch_selector {
    static_assert(has_batch_rule<Rule>,
                  "victim_batch_selector needs a batch_rule<Rule> specialisation; available: lru, lfu, fifo, "
                  "qos_aware, predictive");

public:
    using rank_type = decltype(batch_rule<Rule>::rank(std::declval<const eviction_candidate&>()));

    static constexpr std::string_view name = Rule::name;

    /// Effects: chooses the shortest prefix of the unpinned candidates, in
    /// rule order, whose blocks reach `required_blocks` (nothing for 0); when
    /// even all of them fall short, all of them and the shortfall. Records
    /// the evictions for metrics().
    /// Throws: usage_error naming the id if a sequence id appears twice;
    /// nothing is recorded then.
    /// Complexity: O(n) expected plus O(k log k) for k victims.
    victim_batch select_victims(std::span<const eviction_candidate> candidates, std::size_t required_blocks) {
        const auto start = std::chrono::steady_clock::now();
        // One pass both checks ids and selects: the candidates are read once.
        // Selection touches only the scratch heap, so a duplicate found late
        // still leaves the selector as it was.
        clear_seen(candidates.size());
        heap_.clear();
        std::size_t kept_blocks = 0;
        for (std::size_t i = 0; i < candidates.size(); ++i) {
            const eviction_candidate& c = candidates[i];
            if (!mark_seen(c.sequence_id)) throw duplicate_error(candidates, i);
            if (c.pinned || required_blocks == 0) continue;
            const entry e{batch_rule<Rule>::rank(c), c.sequence_id, c.block_ids.size()};
            // Once the kept set reaches the requirement, only a candidate
            // that precedes its last member can change it.
            if (kept_blocks >= required_blocks && !before(e, heap_.front())) continue;
            heap_.push_back(e);
            std::push_heap(heap_.begin(), heap_.end(), before);
            kept_blocks += e.blocks;
            while (kept_blocks - heap_.front().blocks >= required_blocks) {
                kept_blocks -= heap_.front().blocks;
                std::pop_heap(heap_.begin(), heap_.end(), before);
                heap_.pop_back();
            }
        }
        victim_batch out;
        std::sort_heap(heap_.begin(), heap_.end(), before);
        out.evicted.reserve(heap_.size());
        for (const entry& e : heap_) out.evicted.push_back(e.sequence_id);
        out.freed_blocks = kept_blocks;
        out.shortfall = kept_blocks < required_blocks ? required_blocks - kept_blocks : 0;

        const auto elapsed = std::chrono::steady_clock::now() - start;
        selection_ns_ +=
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
        ++selections_;
        total_evictions_ += out.evicted.size();
        for (std::uint64_t id : out.evicted) records_[id].evicted = true;
        return out;
    }

    /// Effects: records a request for `sequence_id` at `now`; if the sequence
    /// was evicted since its last request, it counts as a re-prefill.
    void update_access(std::uint64_t sequence_id, timestamp now) {
        sequence_record& r = records_[sequence_id];
        ++r.requests;
        r.last_access = now;
        if (r.evicted) {
            r.evicted = false;
            ++r.re_prefills;
            ++re_prefills_;
        }
    }

    /// Effects: drops a finished sequence's record; its service still counts
    /// toward fairness.
    void forget(std::uint64_t sequence_id) {
        const auto it = records_.find(sequence_id);
        if (it == records_.end()) return;
        if (it->second.requests > 0) retired_.add(service_of(it->second));
        records_.erase(it);
    }

    /// The last `update_access` time and count of a sequence, for engines
    /// that keep no access history of their own to fill candidates from.
    [[nodiscard]] std::optional<timestamp> last_access(std::uint64_t sequence_id) const {
        const auto it = records_.find(sequence_id);
        if (it == records_.end() || it->second.requests == 0) return std::nullopt;
        return it->second.last_access;
    }
    [[nodiscard]] std::uint64_t access_count(std::uint64_t sequence_id) const {
        const auto it = records_.find(sequence_id);
        return it == records_.end() ? 0 : it->second.requests;
    }

    /// Complexity: O(number of sequences recorded).
    [[nodiscard]] victim_batch_metrics metrics() const {
        victim_batch_metrics m;
        m.selections = selections_;
        m.total_evictions = total_evictions_;
        m.average_selection_us =
            selections_ == 0 ? 0.0 : static_cast<double>(selection_ns_) / static_cast<double>(selections_) / 1000.0;
        m.re_prefills = re_prefills_;
        m.re_prefill_rate =
            total_evictions_ == 0 ? 0.0 : static_cast<double>(re_prefills_) / static_cast<double>(total_evictions_);
        service_sums all = retired_;
        for (const auto& [id, r] : records_)
            if (r.requests > 0) all.add(service_of(r));
        m.fairness = all.sum_sq == 0.0 ? 1.0 : all.sum * all.sum / (static_cast<double>(all.n) * all.sum_sq);
        return m;
    }

private:
    struct entry {
        rank_type rank;
        std::uint64_t sequence_id;
        std::size_t blocks;
    };
    // Rule order, ties by sequence id: a strict total order on distinct ids.
    static bool before(const entry& a, const entry& b) noexcept {
        if (a.rank < b.rank) return true;
        if (b.rank < a.rank) return false;
        return a.sequence_id < b.sequence_id;
    }

    struct sequence_record {
        std::uint64_t requests = 0;
        std::uint64_t re_prefills = 0;
        timestamp last_access = 0;
        bool evicted = false;
    };
    struct service_sums {
        std::uint64_t n = 0;
        double sum = 0.0;
        double sum_sq = 0.0;
        void add(double x) noexcept {
            ++n;
            sum += x;
            sum_sq += x * x;
        }
    };
    static double service_of(const sequence_record& r) noexcept {
        return static_cast<double>(r.requests - r.re_prefills) / static_cast<double>(r.requests);
    }

    // Open addressing over the ids themselves (Fibonacci hashing, linear
    // probing); the all-ones id, which marks an empty slot, is tracked apart.
    static constexpr std::uint64_t empty_id_ = ~std::uint64_t{0};

    void clear_seen(std::size_t n) {
        const std::size_t size = std::bit_ceil(std::max<std::size_t>(2 * n, 16));
        seen_.assign(size, empty_id_);
        seen_shift_ = 64 - std::countr_zero(size);
        seen_all_ones_ = false;
    }
    // False if `id` was already seen.
    [[nodiscard]] bool mark_seen(std::uint64_t id) noexcept {
        if (id == empty_id_) return !std::exchange(seen_all_ones_, true);
        const std::size_t mask = seen_.size() - 1;
        for (std::size_t s = static_cast<std::size_t>((id * 0x9e3779b97f4a7c15ULL) >> seen_shift_);;
             s = (s + 1) & mask) {
            if (seen_[s] == id) return false;
            if (seen_[s] == empty_id_) {
                seen_[s] = id;
                return true;
            }
        }
    }
    static usage_error duplicate_error(std::span<const eviction_candidate> candidates, std::size_t second) {
        const std::uint64_t id = candidates[second].sequence_id;
        std::size_t first = 0;
        while (candidates[first].sequence_id != id) ++first;
        return usage_error("select_victims: sequence " + std::to_string(id) +
                           " appears twice among the candidates (at " + std::to_string(first) + " and " +
                           std::to_string(second) + "); pass each sequence once");
    }

    std::vector<entry> heap_;          // kept candidates, a max-heap in rule order
    std::vector<std::uint64_t> seen_;  // ids seen in this call, open addressing
    int seen_shift_ = 64;
    bool seen_all_ones_ = false;
    std::unordered_map<std::uint64_t, sequence_record> records_;
    service_sums retired_;  // forgotten sequences' service
    std::uint64_t selections_ = 0;
    std::uint64_t selection_ns_ = 0;
    std::uint64_t total_evictions_ = 0;
    std::uint64_t re_prefills_ = 0;
};

/// The rules victim_batch_selector has (a batch_rule each), to choose by name.
using batch_rules = type_list<lru, lfu, fifo, qos_aware, predictive>;

template <class Rule>
class batch_selector_model;

/// Candidates as columns, one entry per sequence (an engine's struct of
/// arrays, NumPy's): the ids and block counts, and any other field as a
/// column or absent (eviction_candidate's default for every sequence).
struct candidate_columns {
    template <class T>
    using column = std::optional<std::span<const T>>;
    std::span<const std::uint64_t> sequence_ids{};
    std::span<const std::uint64_t> num_blocks{};
    column<timestamp> last_access{};
    column<std::uint64_t> access_count{};
    column<std::int32_t> priority{};
    column<std::uint8_t> pinned{};  ///< nonzero: pinned
    column<double> estimated_lifetime{};
    column<std::uint64_t> sequence_length{};
    column<std::uint64_t> max_length{};
};

/// A victim_batch_selector whose rule is chosen by name at run time: one
/// virtual call per call, the per-sequence loops inside the concrete one.
class any_batch_selector {
public:
    virtual ~any_batch_selector() = default;
    virtual victim_batch select_victims(std::span<const eviction_candidate> candidates,
                                        std::size_t required_blocks) = 0;

    /// select_victims over columns. Throws: usage_error naming the first
    /// column whose length is not the ids', nothing recorded.
    victim_batch select_victims(const candidate_columns& c, std::size_t required_blocks) {
        const std::size_t n = c.sequence_ids.size();
        const auto check = [n](const auto& column, const char* name) {
            if (column && column->size() != n)
                throw usage_error("select_victims: " + std::string(name) + ": " + std::to_string(column->size()) +
                                  " values for " + std::to_string(n) + " sequences; give one per sequence");
        };
        check(std::optional(c.num_blocks), "num_blocks");
        check(c.last_access, "last_access");
        check(c.access_count, "access_count");
        check(c.priority, "priority");
        check(c.pinned, "pinned");
        check(c.estimated_lifetime, "estimated_lifetime");
        check(c.sequence_length, "sequence_length");
        check(c.max_length, "max_length");
        // Only a candidate's block count is read: every view points into one zero buffer.
        const std::uint64_t most = n == 0 ? 0 : std::ranges::max(c.num_blocks);
        if (zeros_.size() < most) zeros_.resize(most);
        candidates_.assign(n, eviction_candidate{});
        for (std::size_t i = 0; i < n; ++i) {
            eviction_candidate& e = candidates_[i];
            e.sequence_id = c.sequence_ids[i];
            e.block_ids = std::span<const block_id>(zeros_.data(), c.num_blocks[i]);
            if (c.last_access) e.last_access_time = (*c.last_access)[i];
            if (c.access_count) e.access_count = (*c.access_count)[i];
            if (c.priority) e.priority = (*c.priority)[i];
            if (c.pinned) e.pinned = (*c.pinned)[i] != 0;
            if (c.estimated_lifetime) e.estimated_lifetime = (*c.estimated_lifetime)[i];
            if (c.sequence_length) e.sequence_length = (*c.sequence_length)[i];
            if (c.max_length) e.max_length = (*c.max_length)[i];
        }
        return select_victims(std::span<const eviction_candidate>(candidates_), required_blocks);
    }

    /// update_access(ids[i], now[i]) for each i; one time in `now` is every id's.
    /// Throws: usage_error for another count of times, nothing recorded.
    virtual void update_access(std::span<const std::uint64_t> ids, std::span<const timestamp> now) = 0;
    virtual void forget(std::span<const std::uint64_t> ids) = 0;
    [[nodiscard]] virtual victim_batch_metrics metrics() const = 0;
    [[nodiscard]] virtual std::string_view rule() const noexcept = 0;

    /// A selector of rule `rule` (a name of `Rules`). Throws:
    /// unknown_name_error listing the rules.
    template <class Rules = batch_rules>
    static std::unique_ptr<any_batch_selector> make(std::string_view rule) {
        return visit_by_name<Rules>(
            rule,
            []<class R>() -> std::unique_ptr<any_batch_selector> {
                return std::make_unique<batch_selector_model<R>>();
            },
            "batch rule");
    }

private:
    std::vector<eviction_candidate> candidates_;  // select_victims(columns)' scratch, reused
    std::vector<block_id> zeros_;
};

template <class Rule>
class batch_selector_model final : public any_batch_selector {
public:
    using any_batch_selector::select_victims;
    victim_batch select_victims(std::span<const eviction_candidate> c, std::size_t required) override {
        return s_.select_victims(c, required);
    }
    void update_access(std::span<const std::uint64_t> ids, std::span<const timestamp> now) override {
        if (now.size() != ids.size() && now.size() != 1)
            throw usage_error("update_access: " + std::to_string(now.size()) + " times for " +
                              std::to_string(ids.size()) + " sequences; give one time, or one per sequence");
        for (std::size_t i = 0; i < ids.size(); ++i) s_.update_access(ids[i], now[now.size() == 1 ? 0 : i]);
    }
    void forget(std::span<const std::uint64_t> ids) override {
        for (std::uint64_t id : ids) s_.forget(id);
    }
    [[nodiscard]] victim_batch_metrics metrics() const override { return s_.metrics(); }
    [[nodiscard]] std::string_view rule() const noexcept override { return Rule::name; }

private:
    victim_batch_selector<Rule> s_;
};

}  // namespace kvpolicy
