// quest: query-aware block selection for decode, from per-channel key bounds.
//
// When a block is offloaded (`on_offload`, while its keys are still where they
// were produced), Quest records per KV head and per channel the minimum and
// maximum key over the block's valid tokens. At decode time the score of a
// block for a query is, per query head,
//
//     bound(q, block) = sum over channels c of max(q_c * min_c, q_c * max_c)
//
// which is an upper bound of q . k for every key k in the block (each term
// bounds q_c * k_c, whatever the sign of q_c). Under GQA a block's score is
// the sum of the bounds of all query heads, each against its KV head; it
// bounds the summed logits sum_h q_h . k_{t, kv(h)} of every token t. The
// `token_budget / block_size` highest-scoring blocks are loaded, always
// including the sink (first) and the most recent blocks; with few blocks
// (at most `threshold_blocks`, or no more than the budget) everything loads.
// Use it for long-context decode with the KV cache offloaded to the CPU tier
// (seed 004: decode only, so `supports_prefill = false`).
//
// Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML'24. Departures: the bound is the paper's per-channel one
// (a popular open implementation takes the max of q . min and q . max over
// whole vectors, which is no bound, and is not followed here); sink and
// recent blocks are kept outside the top-K (the paper keeps the current
// page); a block with no recorded metadata scores +inf (it cannot be bounded,
// so it is loaded); ties go to the older block. Scores are float, summed
// channel by channel then head by head, so a float q . k summed in the same
// order never exceeds them (rounding is monotone).
// The per-channel min/max and the score are sparse/quest_math.hpp's
// (templated on the key type; this selector is its fp32 instance). The CUDA
// version (kvpolicy/cuda/quest.cuh) runs the same functions on the device,
// over fp32, bf16 or fp16 keys, and is tested against this one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/quest_math.hpp"

namespace kvpolicy {

struct quest_config {
    std::uint32_t num_layers = 1;
    std::uint32_t num_blocks = 0;  ///< CPU-tier block ids 0 .. num_blocks-1 carry metadata
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    std::uint32_t token_budget = 1024;   ///< tokens loaded per layer per decode step
    std::uint32_t threshold_blocks = 4;  ///< at most this many available blocks: load them all
    std::uint32_t sink_blocks = 1;       ///< leading blocks always loaded
    std::uint32_t recent_blocks = 1;     ///< trailing blocks always loaded

    friend constexpr bool operator==(const quest_config&, const quest_config&) noexcept = default;
};

/// Which positions of `available` compete in a Quest selection: positions
/// [middle_begin, middle_end) compete for `middle_keep` places; positions
/// before and after are always loaded. Shared by the host and CUDA versions.
struct quest_plan {
    bool load_all = true;
    std::size_t middle_begin = 0;
    std::size_t middle_end = 0;
    std::size_t middle_keep = 0;
};

/// Blocks a decode step loads: token_budget / block_size, but never fewer
/// than the sink and recent blocks (those are always loaded).
[[nodiscard]] constexpr std::size_t quest_budget_blocks(const quest_config& c, std::uint32_t block_size) noexcept {
    const std::size_t budget = block_size == 0 ? 0 : c.token_budget / block_size;
    return std::max(budget, std::size_t{c.sink_blocks} + c.recent_blocks);
}

[[nodiscard]] constexpr quest_plan plan_quest_selection(std::size_t available, std::uint32_t block_size,
                                                        const quest_config& c) noexcept {
    const std::size_t budget = quest_budget_blocks(c, block_size);
    if (available <= c.threshold_blocks || available <= budget) return {};
    // available > budget >= sink + recent, so the middle is not empty.
    return {.load_all = false,
            .middle_begin = c.sink_blocks,
            .middle_end = available - c.recent_blocks,
            .middle_keep = budget - c.sink_blocks - c.recent_blocks};
}

/// Quest's bound for one query head against one KV head's metadata:
/// sum over c of max(q_c * min_c, q_c * max_c), summed in channel order.
[[nodiscard]] inline float quest_head_bound(std::span<const float> q, std::span<const float> key_min,
                                            std::span<const float> key_max) noexcept {
    float s = 0.0f;
    for (std::size_t c = 0; c < q.size(); ++c) s += std::max(q[c] * key_min[c], q[c] * key_max[c]);
    return s;
}

/// Positions (indexes into `scores`) of the `keep` highest scores, ties to
/// the lower position, written ascending to `out`; returns the count.
/// `scratch` is reused across calls. Precondition: no score is NaN.
inline std::size_t quest_top_positions(std::span<const float> scores, std::size_t keep,
                                       std::vector<std::uint32_t>& scratch, std::span<std::uint32_t> out) {
    const std::size_t n = scores.size();
    keep = std::min(keep, n);
    scratch.resize(n);
    for (std::size_t i = 0; i < n; ++i) scratch[i] = static_cast<std::uint32_t>(i);
    const auto higher_then_older = [&](std::uint32_t a, std::uint32_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    };
    if (keep < n)
        std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(keep), scratch.end(),
                         higher_then_older);
    std::sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(keep));
    std::copy_n(scratch.begin(), keep, out.begin());
    return keep;
}

namespace detail {
// Argument checks shared by the host `quest` and the CUDA `device_quest`
// (`who` names the caller in the messages): one set of rules, one wording.
inline void check_quest_block(const quest_config& config, block_id block, layer_index layer, const char* who,
                              const char* what) {
    if (block.index() >= config.num_blocks || layer.index() >= config.num_layers)
        throw usage_error(std::string(who) + "::" + what + ": block " + std::to_string(block.value) + " layer " +
                          std::to_string(layer.value) + " is outside the config's " +
                          std::to_string(config.num_blocks) + " blocks x " + std::to_string(config.num_layers) +
                          " layers");
}

// The checks of `select` that read no memory behind ctx.query (host and
// device contexts have the same fields), so both versions share them; each
// checks the query's values where they live (`quest_query_thread_nonfinite`).
template <class Context>
void check_quest_selection(const quest_config& config, std::span<const block_id> available, const Context& ctx,
                           std::span<block_id> out, const char* who) {
    const std::string at = std::string(who) + "::select: ";
    if (ctx.is_prefill)
        throw usage_error(at +
                          "called in prefill; Quest is decode-only (supports_prefill = false), "
                          "use full_attention for prefill");
    if (out.size() < available.size())
        throw usage_error(at + "output holds " + std::to_string(out.size()) + " ids for " +
                          std::to_string(available.size()) + " available blocks; size it to available.size()");
    if (ctx.block_size == 0) throw usage_error(at + "block_size is 0; give tokens per block");
    if (ctx.num_kv_heads != config.num_kv_heads || ctx.head_dim != config.head_dim || ctx.num_q_heads == 0 ||
        ctx.num_q_heads % ctx.num_kv_heads != 0)
        throw usage_error(at + "context has " + std::to_string(ctx.num_q_heads) + " query heads, " +
                          std::to_string(ctx.num_kv_heads) + " KV heads, head_dim " + std::to_string(ctx.head_dim) +
                          "; the config says " + std::to_string(config.num_kv_heads) + " KV heads, head_dim " +
                          std::to_string(config.head_dim) + ", and query heads must be a multiple of KV heads");
    if (ctx.query.size() != std::size_t{ctx.num_q_heads} * ctx.head_dim)
        throw usage_error(
            at + "query has " + std::to_string(ctx.query.size()) +
            " values; give num_q_heads x head_dim = " + std::to_string(std::size_t{ctx.num_q_heads} * ctx.head_dim));
    for (block_id b : available) check_quest_block(config, b, ctx.layer, who, "select");
}

[[noreturn]] inline void throw_quest_nonfinite_query(const char* who) {
    throw usage_error(std::string(who) + "::select: the query has a NaN or infinite value");
}
}  // namespace detail

class quest {
public:
    using config_type = quest_config;

    static constexpr std::string_view name = "quest";
    static constexpr bool supports_prefill = false;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;

    /// Throws: config_error naming the field if a dimension or the budget is
    /// 0. Complexity: 2 * num_layers * num_blocks * num_kv_heads * head_dim
    /// floats of metadata, allocated here and never again.
    explicit quest(const config_type& config)
            : config_(validate(config)),
              key_min_(metadata_size(config_)),
              key_max_(metadata_size(config_)),
              has_metadata_(std::size_t{config_.num_layers} * config_.num_blocks, 0) {}

    /// Effects: records the per-channel min and max of `keys` over its valid
    /// tokens as the metadata of (`block`, `layer`), replacing any earlier.
    /// Throws: usage_error if the block or layer is out of range, the shape
    /// differs from the config, the view is too short, or a key is not
    /// finite (a bound of inf is no bound); nothing is recorded then.
    void on_offload(block_id block, layer_index layer, const key_block_view& keys) {
        detail::check_quest_block(config_, block, layer, "quest", "on_offload");
        if (keys.num_kv_heads != config_.num_kv_heads || keys.head_dim != config_.head_dim)
            throw usage_error("quest::on_offload: keys have " + std::to_string(keys.num_kv_heads) + " KV heads x " +
                              std::to_string(keys.head_dim) + " channels, the config says " +
                              std::to_string(config_.num_kv_heads) + " x " + std::to_string(config_.head_dim));
        const std::size_t row = std::size_t{config_.num_kv_heads} * config_.head_dim;
        if (keys.tokens == 0 || keys.keys.size() < keys.tokens * row)
            throw usage_error("quest::on_offload: block " + std::to_string(block.value) + " has " +
                              std::to_string(keys.tokens) + " valid tokens and " + std::to_string(keys.keys.size()) +
                              " key values; give at least one token and tokens x kv_heads x head_dim values");
        const auto used = keys.keys.first(keys.tokens * row);
        if (!std::ranges::all_of(used, [](float k) { return std::isfinite(k); }))
            throw usage_error("quest::on_offload: block " + std::to_string(block.value) + " layer " +
                              std::to_string(layer.value) + " has a key that is NaN or infinite");
        (void)quest_block_metadata(used.data(), row, keys.tokens, key_min_.data() + offset(block, layer),
                                   key_max_.data() + offset(block, layer));  // finite: checked above
        has_metadata_[flag_index(block, layer)] = 1;
    }

    /// The block's score for `query` ([num_q_heads][head_dim]): the sum over
    /// query heads h of quest_head_bound(q_h, min/max of KV head h / group),
    /// +inf without metadata. Preconditions: block and layer in range,
    /// num_q_heads a multiple of num_kv_heads, query sized to match.
    [[nodiscard]] float block_score(block_id block, layer_index layer, std::span<const float> query,
                                    std::uint32_t num_q_heads) const noexcept {
        if (!has_metadata(block, layer)) return std::numeric_limits<float>::infinity();
        return quest_block_score(query.data(), key_min(block, layer).data(), key_max(block, layer).data(), num_q_heads,
                                 config_.num_kv_heads, config_.head_dim);
    }

    /// Effects: writes to `out` the blocks of `available` (taken in sequence
    /// order, oldest first) that a decode step of `ctx` loads, in sequence
    /// order, and returns their count (see the header paragraph).
    /// Throws: usage_error in prefill (Quest is decode-only: use
    /// full_attention there), or if `out` is too short, the context's shape
    /// differs from the config, the query is not [num_q_heads][head_dim] of
    /// finite values, or a block is out of range; nothing is written then.
    std::size_t select(std::span<const block_id> available, const selection_context& ctx, std::span<block_id> out) {
        detail::check_quest_selection(config_, available, ctx, out, "quest");
        if (!std::ranges::all_of(ctx.query, [](float q) { return std::isfinite(q); }))
            detail::throw_quest_nonfinite_query("quest");
        const quest_plan plan = plan_quest_selection(available.size(), ctx.block_size, config_);
        if (plan.load_all) {
            std::ranges::copy(available, out.begin());
            return available.size();
        }
        const std::size_t m = plan.middle_end - plan.middle_begin;
        scores_.resize(m);
        for (std::size_t i = 0; i < m; ++i)
            scores_[i] = block_score(available[plan.middle_begin + i], ctx.layer, ctx.query, ctx.num_q_heads);
        chosen_.resize(m);
        const std::size_t kept = quest_top_positions(scores_, plan.middle_keep, order_, chosen_);
        std::size_t n = 0;
        for (std::size_t i = 0; i < plan.middle_begin; ++i) out[n++] = available[i];
        for (std::size_t i = 0; i < kept; ++i) out[n++] = available[plan.middle_begin + chosen_[i]];
        for (std::size_t i = plan.middle_end; i < available.size(); ++i) out[n++] = available[i];
        return n;
    }

    /// Forgets every block's metadata (a new sequence starts).
    void reset() noexcept { std::ranges::fill(has_metadata_, std::uint8_t{0}); }

    [[nodiscard]] bool has_metadata(block_id block, layer_index layer) const noexcept {
        return block.index() < config_.num_blocks && layer.index() < config_.num_layers &&
               has_metadata_[flag_index(block, layer)] != 0;
    }
    /// [num_kv_heads][head_dim]. Precondition: block and layer in range.
    [[nodiscard]] std::span<const float> key_min(block_id block, layer_index layer) const noexcept {
        return {key_min_.data() + offset(block, layer), std::size_t{config_.num_kv_heads} * config_.head_dim};
    }
    [[nodiscard]] std::span<const float> key_max(block_id block, layer_index layer) const noexcept {
        return {key_max_.data() + offset(block, layer), std::size_t{config_.num_kv_heads} * config_.head_dim};
    }
    [[nodiscard]] const config_type& config() const noexcept { return config_; }

    /// Returns `c`. Throws: config_error naming the field if a dimension or
    /// the budget is 0 (shared with the CUDA version).
    [[nodiscard]] static config_type validate(const config_type& c) {
        const auto need = [](std::uint32_t v, const char* field) {
            if (v == 0)
                throw config_error(std::string("quest: ") + field +
                                   " is 0; give the model's shape and the CPU tier's block count (all at least 1)");
        };
        need(c.num_layers, "num_layers");
        need(c.num_blocks, "num_blocks");
        need(c.num_kv_heads, "num_kv_heads");
        need(c.head_dim, "head_dim");
        need(c.token_budget, "token_budget");
        return c;
    }

private:
    [[nodiscard]] static std::size_t metadata_size(const config_type& c) noexcept {
        return std::size_t{c.num_layers} * c.num_blocks * c.num_kv_heads * c.head_dim;
    }
    [[nodiscard]] std::size_t flag_index(block_id block, layer_index layer) const noexcept {
        return layer.index() * config_.num_blocks + block.index();
    }
    [[nodiscard]] std::size_t offset(block_id block, layer_index layer) const noexcept {
        return flag_index(block, layer) * config_.num_kv_heads * config_.head_dim;
    }

    config_type config_;
    std::vector<float> key_min_;              // [num_layers][num_blocks][num_kv_heads][head_dim]
    std::vector<float> key_max_;              // [num_layers][num_blocks][num_kv_heads][head_dim]
    std::vector<std::uint8_t> has_metadata_;  // [num_layers][num_blocks]
    std::vector<float> scores_;               // scratch: [middle blocks]
    std::vector<std::uint32_t> order_;        // scratch: [middle blocks]
    std::vector<std::uint32_t> chosen_;       // scratch: [middle blocks]
};

static_assert(sparse_selector<quest>);

}  // namespace kvpolicy
