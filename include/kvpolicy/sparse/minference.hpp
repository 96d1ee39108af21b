// minference: vertical-slash sparse prefill attention (seed 004).
//
// Long-prompt prefill attention is dominated by a few patterns per head; the
// commonest is vertical-slash: a few key columns that every query reads
// (verticals: sinks, separators) and a few diagonals at fixed distances
// i - j (slashes: local and periodic context). MInference estimates them
// per head and layer from the last `last_q` queries against all keys
// (causal), sums the softmax probabilities per column and per diagonal,
// keeps the top columns and diagonals (always the first `num_sink_tokens`
// columns and the `num_recent_diags` nearest diagonals), and computes
// attention of every query only over that set, the softmax taken over what
// is kept. Use it for prefill of long prompts (tens of thousands of tokens);
// it changes how attention is computed, not what is loaded, so `select`
// returns every block and the layer-wise offload prefill offloads all KV
// (sparse/layerwise_prefill.hpp). Decode is for Quest (supports_decode =
// false).
//
// Jiang et al., "MInference 1.0: Accelerating Pre-filling for Long-Context
// LLMs via Dynamic Sparse Attention", NeurIPS 2024 (Algorithm 2 and the
// authors' `vertical_and_slash_kernel`). Parameters and defaults are seed
// 004's: adaptive_budget = 0.3 keeps ceil(0.3 * tokens) columns and as many
// diagonals; unset, vertical_size = 1000 and slash_size = 6096 (the paper's
// fixed sizes). Departures: the index is estimated per query head (under
// GQA each query head reads its KV head, as the paper's repeated KV does);
// the paper's code clamps the sizes to at least 30 and 50, here to at least
// the sink and recent counts so that those are always kept; a last_q larger
// than the prompt is an error instead of being clamped; ties in the top-k go
// to the lower column (offset). A key that is both a kept column and on a
// kept diagonal counts once. The reference below computes in double; the
// CUDA kernels (kvpolicy/cuda/minference.cuh) run the float math of
// sparse/minference_estimate.hpp and sparse/prefill_tile.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sparse/prefill_attention.hpp"

namespace kvpolicy {

struct minference_config {
    /// Fraction of the prompt's length kept as columns and as diagonals
    /// each; std::nullopt: vertical_size and slash_size instead.
    std::optional<double> adaptive_budget = 0.3;
    std::uint32_t vertical_size = 1000;    ///< columns kept without a budget
    std::uint32_t slash_size = 6096;       ///< diagonals kept without a budget
    std::uint32_t num_sink_tokens = 30;    ///< first columns always kept
    std::uint32_t num_recent_diags = 100;  ///< nearest diagonals (offsets 0 ..) always kept
    std::uint32_t last_q = 64;             ///< queries the index is estimated from

    friend bool operator==(const minference_config&, const minference_config&) noexcept = default;
};

/// How many columns and diagonals a prompt of `num_tokens` keeps per head.
struct minference_sizes {
    std::uint32_t vertical_count = 0;
    std::uint32_t slash_count = 0;
    friend constexpr bool operator==(const minference_sizes&, const minference_sizes&) noexcept = default;
};

/// Throws: config_error naming the field, for a budget outside (0, 1], a
/// size, last_q or num_recent_diags of 0. Returns `c`.
inline const minference_config& validate_minference_config(const minference_config& c) {
    if (c.adaptive_budget && !(*c.adaptive_budget > 0.0 && *c.adaptive_budget <= 1.0))
        throw config_error("minference: adaptive_budget = " + std::to_string(*c.adaptive_budget) +
                           " is outside (0, 1]; give the fraction of the prompt kept as columns and as diagonals "
                           "(0.3 keeps 30%), or std::nullopt to use vertical_size and slash_size");
    if (c.vertical_size == 0)
        throw config_error("minference: vertical_size is 0; keep at least one column (the paper keeps 1000)");
    if (c.slash_size == 0)
        throw config_error("minference: slash_size is 0; keep at least one diagonal (the paper keeps 6096)");
    if (c.last_q == 0)
        throw config_error("minference: last_q is 0; estimate the index from at least one query (the paper uses 64)");
    if (c.num_recent_diags == 0)
        throw config_error(
            "minference: num_recent_diags is 0, so no query would attend to itself; keep at least "
            "the main diagonal (seed 004 keeps 100)");
    return c;
}

/// Throws: config_error if last_q exceeds the prompt (nothing to estimate from).
inline void check_minference_prompt(const minference_config& c, std::uint32_t num_tokens) {
    if (c.last_q > num_tokens)
        throw config_error("minference: last_q = " + std::to_string(c.last_q) + " is larger than the prompt's " +
                           std::to_string(num_tokens) + " tokens; lower last_q to at most the prompt's length");
}

/// Columns and diagonals kept per head: the budget's ceil(b * n) (at least
/// 1) or the fixed sizes, raised to the sink and recent counts, capped at n.
[[nodiscard]] inline minference_sizes minference_kept_sizes(const minference_config& c,
                                                            std::uint32_t num_tokens) noexcept {
    std::uint64_t v = c.vertical_size, s = c.slash_size;
    if (c.adaptive_budget) {
        const auto b = static_cast<std::uint64_t>(std::ceil(*c.adaptive_budget * static_cast<double>(num_tokens)));
        v = s = std::max<std::uint64_t>(b, 1);
    }
    v = std::min<std::uint64_t>(std::max<std::uint64_t>(v, c.num_sink_tokens), num_tokens);
    s = std::min<std::uint64_t>(std::max<std::uint64_t>(s, c.num_recent_diags), num_tokens);
    return {static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(s)};
}

/// The kept columns and diagonal offsets of every query head.
struct vertical_slash_index {
    std::uint32_t num_heads = 0;
    std::uint32_t num_tokens = 0;
    std::uint32_t vertical_count = 0;
    std::uint32_t slash_count = 0;
    std::vector<std::uint32_t> verticals;  ///< [num_heads][vertical_count] columns, ascending per head
    std::vector<std::uint32_t> slashes;    ///< [num_heads][slash_count] offsets i - j, ascending per head

    [[nodiscard]] std::span<const std::uint32_t> vertical(std::uint32_t h) const noexcept {
        return std::span(verticals).subspan(std::size_t{h} * vertical_count, vertical_count);
    }
    [[nodiscard]] std::span<const std::uint32_t> slash(std::uint32_t h) const noexcept {
        return std::span(slashes).subspan(std::size_t{h} * slash_count, slash_count);
    }
    [[nodiscard]] vertical_slash_head_view head(std::uint32_t h) const noexcept { return {vertical(h), slash(h)}; }
};

/// Per head, the estimated attention mass of each column and each diagonal.
struct minference_masses {
    std::vector<double> column;    ///< [num_q_heads][num_tokens]; +inf for a sink
    std::vector<double> diagonal;  ///< [num_q_heads][num_tokens] by offset i - j; +inf for a recent one
};

/// Reference estimate: softmax of each of the last last_q queries over its
/// causal keys, in double, two passes; summed per column and per offset.
/// Preconditions: views checked, last_q <= num_tokens.
[[nodiscard]] inline minference_masses minference_masses_reference(const prefill_qkv_view& in,
                                                                   const minference_config& c) {
    const std::size_t n = in.num_tokens, d = in.head_dim;
    const std::uint32_t group = in.num_q_heads / in.num_kv_heads;
    minference_masses m{std::vector<double>(in.num_q_heads * n, 0.0), std::vector<double>(in.num_q_heads * n, 0.0)};
    std::vector<double> p(n);
    for (std::uint32_t h = 0; h < in.num_q_heads; ++h) {
        double* column = m.column.data() + h * n;
        double* diagonal = m.diagonal.data() + h * n;
        for (std::size_t i = n - c.last_q; i < n; ++i) {
            const float* q = in.q.data() + (i * in.num_q_heads + h) * d;
            double big = -std::numeric_limits<double>::infinity();
            for (std::size_t j = 0; j <= i; ++j) {
                const float* k = in.k.data() + (j * in.num_kv_heads + h / group) * d;
                double dot = 0.0;
                for (std::size_t x = 0; x < d; ++x) dot += double{q[x]} * double{k[x]};
                p[j] = dot * double{in.scale};
                big = std::max(big, p[j]);
            }
            double sum = 0.0;
            for (std::size_t j = 0; j <= i; ++j) sum += std::exp(p[j] - big);
            for (std::size_t j = 0; j <= i; ++j) {
                const double prob = std::exp(p[j] - big) / sum;
                column[j] += prob;
                diagonal[i - j] += prob;
            }
        }
        for (std::size_t j = 0; j < std::min<std::size_t>(c.num_sink_tokens, n); ++j)
            column[j] = std::numeric_limits<double>::infinity();
        for (std::size_t o = 0; o < std::min<std::size_t>(c.num_recent_diags, n); ++o)
            diagonal[o] = std::numeric_limits<double>::infinity();
    }
    return m;
}

/// The `keep` highest of `mass` (ties to the lower position), written
/// ascending to out[0, keep). Precondition: keep <= mass.size(), no NaN.
template <class T>
void minference_top_indices(std::span<const T> mass, std::uint32_t keep, std::vector<std::uint32_t>& scratch,
                            std::span<std::uint32_t> out) {
    scratch.resize(mass.size());
    for (std::size_t j = 0; j < mass.size(); ++j) scratch[j] = static_cast<std::uint32_t>(j);
    const auto higher_then_lower = [&](std::uint32_t a, std::uint32_t b) {
        return mass[a] > mass[b] || (mass[a] == mass[b] && a < b);
    };
    if (keep < mass.size()) std::nth_element(scratch.begin(), scratch.begin() + keep, scratch.end(), higher_then_lower);
    std::sort(scratch.begin(), scratch.begin() + keep);
    std::copy_n(scratch.begin(), keep, out.begin());
}

/// Reference index: the top columns and diagonals of the reference masses.
/// Preconditions: views checked, last_q <= num_tokens.
[[nodiscard]] inline vertical_slash_index estimate_vertical_slash_reference(const prefill_qkv_view& in,
                                                                            const minference_config& c) {
    const minference_masses m = minference_masses_reference(in, c);
    const minference_sizes sizes = minference_kept_sizes(c, in.num_tokens);
    vertical_slash_index index{in.num_q_heads,
                               in.num_tokens,
                               sizes.vertical_count,
                               sizes.slash_count,
                               std::vector<std::uint32_t>(std::size_t{in.num_q_heads} * sizes.vertical_count),
                               std::vector<std::uint32_t>(std::size_t{in.num_q_heads} * sizes.slash_count)};
    std::vector<std::uint32_t> scratch;
    const std::size_t n = in.num_tokens;
    for (std::uint32_t h = 0; h < in.num_q_heads; ++h) {
        minference_top_indices(std::span<const double>(m.column).subspan(h * n, n), sizes.vertical_count, scratch,
                               std::span(index.verticals).subspan(std::size_t{h} * sizes.vertical_count));
        minference_top_indices(std::span<const double>(m.diagonal).subspan(h * n, n), sizes.slash_count, scratch,
                               std::span(index.slashes).subspan(std::size_t{h} * sizes.slash_count));
    }
    return index;
}

/// Reference sparse attention: for query i of head h, the keys are the kept
/// columns j <= i and i - o for the kept offsets o <= i (each once); softmax
/// over those in double, two passes. Preconditions: views checked, `index`
/// built for this prompt and head count.
inline void vertical_slash_attention_reference(const prefill_qkv_view& in, const vertical_slash_index& index,
                                               const prefill_output_view& out) {
    const std::size_t n = in.num_tokens, d = in.head_dim;
    const std::uint32_t group = in.num_q_heads / in.num_kv_heads;
    std::vector<std::uint64_t> stamp(n, 0);  // stamp[j] == row + 1: key j already taken for this row
    std::vector<std::uint32_t> keys;
    std::vector<double> logits, acc(d);
    std::uint64_t row_id = 0;
    for (std::uint32_t h = 0; h < in.num_q_heads; ++h) {
        const std::size_t kvh = h / group;
        for (std::size_t i = 0; i < n; ++i) {
            ++row_id;
            keys.clear();
            const auto take = [&](std::size_t j) {
                if (stamp[j] == row_id) return;
                stamp[j] = row_id;
                keys.push_back(static_cast<std::uint32_t>(j));
            };
            for (std::uint32_t col : index.vertical(h))
                if (col <= i) take(col);
            for (std::uint32_t off : index.slash(h))
                if (off <= i) take(i - off);
            const float* q = in.q.data() + (i * in.num_q_heads + h) * d;
            logits.resize(keys.size());
            double big = -std::numeric_limits<double>::infinity();
            for (std::size_t t = 0; t < keys.size(); ++t) {
                const float* k = in.k.data() + (std::size_t{keys[t]} * in.num_kv_heads + kvh) * d;
                double dot = 0.0;
                for (std::size_t x = 0; x < d; ++x) dot += double{q[x]} * double{k[x]};
                logits[t] = dot * double{in.scale};
                big = std::max(big, logits[t]);
            }
            std::ranges::fill(acc, 0.0);
            double sum = 0.0;
            for (std::size_t t = 0; t < keys.size(); ++t) {
                const double p = std::exp(logits[t] - big);
                sum += p;
                const float* v = in.v.data() + (std::size_t{keys[t]} * in.num_kv_heads + kvh) * d;
                for (std::size_t x = 0; x < d; ++x) acc[x] += p * double{v[x]};
            }
            const std::size_t row = i * in.num_q_heads + h;
            for (std::size_t x = 0; x < d; ++x)
                out.o[row * d + x] = keys.empty() ? 0.0f : static_cast<float>(acc[x] / sum);
            out.lse[row] =
                keys.empty() ? -std::numeric_limits<float>::infinity() : static_cast<float>(big + std::log(sum));
        }
    }
}

class minference {
public:
    using config_type = minference_config;

    static constexpr std::string_view name = "minference";
    static constexpr bool supports_prefill = true;
    static constexpr bool supports_decode = false;
    static constexpr bool requires_block_selection = false;

    minference() = default;

    /// Throws: config_error (validate_minference_config).
    explicit minference(const config_type& config) : config_(validate_minference_config(config)) {}

    /// Every available block: MInference changes how prefill attention is
    /// computed, not what is loaded (seed 004).
    /// Throws: usage_error if `out` is shorter than `available` (nothing written).
    std::size_t select(std::span<const block_id> available, const selection_context&, std::span<block_id> out) const {
        if (out.size() < available.size())
            throw usage_error("minference::select: output holds " + std::to_string(out.size()) + " ids for " +
                              std::to_string(available.size()) + " available blocks; size it to available.size()");
        std::ranges::copy(available, out.begin());
        return available.size();
    }

    /// Nothing to record: the index is estimated from each prompt itself.
    void on_offload(block_id, layer_index, const key_block_view&) const noexcept {}

    /// Effects: estimates the vertical-slash index of this layer's prompt
    /// (kept as last_index()) and writes sparse attention's o and lse for
    /// every query (the double reference). The layer does not change the
    /// method: every layer is estimated afresh.
    /// Throws: usage_error for views that disagree in shape, config_error if
    /// last_q exceeds the prompt; nothing written then.
    void sparse_prefill_attention(const prefill_qkv_view& in, layer_index, const prefill_output_view& out) {
        detail::check_prefill_views("minference::sparse_prefill_attention", in, out);
        check_minference_prompt(config_, in.num_tokens);
        index_ = estimate_vertical_slash_reference(in, config_);
        vertical_slash_attention_reference(in, index_, out);
    }

    /// The index the last sparse_prefill_attention used.
    [[nodiscard]] const vertical_slash_index& last_index() const noexcept { return index_; }
    [[nodiscard]] const config_type& config() const noexcept { return config_; }

private:
    config_type config_{};
    vertical_slash_index index_{};
};

static_assert(sparse_selector<minference>);
static_assert(prefill_sparse_selector<minference>);

}  // namespace kvpolicy
