// MInference (sparse/minference.hpp) against naive attention
// (tests/support/naive_prefill_attention.hpp): a budget that keeps
// everything is dense causal attention; a planted vertical-slash pattern is
// recovered and its output error stays under the dropped-mass bound; the
// attention mass kept against the budget is printed as a table. The kernels'
// per-thread math (sparse/minference_estimate.hpp, sparse/prefill_tile.hpp)
// is driven over every thread index against the references. Then the
// selector's contract, its errors, and seed 004's layer-wise offload prefill.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/full_attention.hpp>
#include <kvpolicy/sparse/layerwise_prefill.hpp>
#include <kvpolicy/sparse/lse_merge.hpp>
#include <kvpolicy/sparse/minference.hpp>
#include <kvpolicy/sparse/minference_estimate.hpp>
#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/sparse/registry.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/naive_prefill_attention.hpp"
#include "support/random_vertical_slash.hpp"
#include "support/require_throws.hpp"

using namespace kvpolicy;
using kvpolicy::testing::naive_prefill_attention;
using kvpolicy::testing::naive_prefill_shape;

namespace {

constexpr float nan_poison = std::numeric_limits<float>::quiet_NaN();

struct prompt {
    naive_prefill_shape shape;
    std::vector<float> q, k, v;

    prompt(std::uint32_t tokens, std::uint32_t q_heads, std::uint32_t kv_heads, std::uint32_t d)
            : shape{tokens, q_heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d))},
              q(std::size_t{tokens} * q_heads * d),
              k(std::size_t{tokens} * kv_heads * d),
              v(std::size_t{tokens} * kv_heads * d) {}

    [[nodiscard]] prefill_qkv_view view() const {
        return {.q = q,
                .k = k,
                .v = v,
                .num_tokens = shape.num_tokens,
                .num_q_heads = shape.num_q_heads,
                .num_kv_heads = shape.num_kv_heads,
                .head_dim = shape.head_dim,
                .scale = shape.scale};
    }
    [[nodiscard]] std::size_t rows() const { return std::size_t{shape.num_tokens} * shape.num_q_heads; }
};

prompt random_prompt(std::mt19937_64& rng, std::uint32_t tokens, std::uint32_t q_heads, std::uint32_t kv_heads,
                     std::uint32_t d, float spread = 2.0f) {
    prompt p(tokens, q_heads, kv_heads, d);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float& x : p.q) x = spread * g(rng);
    for (float& x : p.k) x = g(rng);
    for (float& x : p.v) x = g(rng);
    return p;
}

struct outputs {
    std::vector<float> o, lse;
    explicit outputs(const prompt& p) : o(p.rows() * p.shape.head_dim, nan_poison), lse(p.rows(), nan_poison) {}
    [[nodiscard]] prefill_output_view view() { return {.o = o, .lse = lse}; }
};

void naive_dense(const prompt& p, std::vector<float>& o, std::vector<float>& lse) {
    naive_prefill_attention(
        p.q, p.k, p.v, p.shape, [](std::uint32_t, std::uint32_t i, std::uint32_t j) { return j <= i; }, o, lse);
}

// Naive attention over the index's keys, spelled out as a mask.
void naive_vertical_slash(const prompt& p, const vertical_slash_index& index, std::vector<float>& o,
                          std::vector<float>& lse) {
    std::vector<std::set<std::uint32_t>> cols(index.num_heads), offs(index.num_heads);
    for (std::uint32_t h = 0; h < index.num_heads; ++h) {
        cols[h].insert(index.vertical(h).begin(), index.vertical(h).end());
        offs[h].insert(index.slash(h).begin(), index.slash(h).end());
    }
    naive_prefill_attention(
        p.q, p.k, p.v, p.shape,
        [&](std::uint32_t h, std::uint32_t i, std::uint32_t j) {
            return j <= i && (cols[h].contains(j) || offs[h].contains(i - j));
        },
        o, lse);
}

// Largest |a - b| over the arrays; both must be finite where compared.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double e = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        REQUIRE(std::isfinite(a[i]));
        e = std::max(e, std::abs(double{a[i]} - double{b[i]}));
    }
    return e;
}

using kvpolicy::testing::random_index;

// Seeded vertical-slash pattern. Per KV head: columns `cols` that every
// query reads (channel 0: q = 1, k = A on those columns) and diagonals
// `offs` (i - j = o): channels 1 .. 59 hold one-hot position codes modulo 17,
// 19 and 23, q_i = B e_{i mod m}, k_j = sum over o of e_{(j + o) mod m}, so
// q_i . k_j = 3B exactly when i - j is a planted offset (the moduli's product
// 7429 exceeds the prompt) and at most 2B otherwise (for the offsets below:
// two planted offsets' codes can add up to three matches elsewhere, e.g. 120
// and 305 at 443). The other channels hold
// small noise. Query heads of one group read the same pattern, scaled.
struct planted_pattern {
    std::vector<std::vector<std::uint32_t>> cols, offs;  // per KV head
};

prompt planted_prompt(std::mt19937_64& rng, std::uint32_t n, const planted_pattern& pat, float peak_logit) {
    constexpr std::uint32_t q_heads = 4, kv_heads = 2, d = 64;
    prompt p(n, q_heads, kv_heads, d);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const float scale = p.shape.scale;
    const float a = peak_logit / scale;           // vertical logit = peak
    const float b = peak_logit / (3.0f * scale);  // diagonal logit = 3B * scale = peak
    constexpr std::uint32_t moduli[3] = {17, 19, 23};
    constexpr std::uint32_t base[3] = {1, 18, 37};  // channel of residue 0 in each code; 37 + 23 = 60
    for (std::uint32_t t = 0; t < n; ++t) {
        for (std::uint32_t h = 0; h < q_heads; ++h) {
            float* q = p.q.data() + (std::size_t{t} * q_heads + h) * d;
            const float head_scale = (h % 2 == 0) ? 1.0f : 0.8f;
            q[0] = head_scale;
            for (int m = 0; m < 3; ++m) q[base[m] + t % moduli[m]] = head_scale * b;
            for (std::uint32_t c = 60; c < d; ++c) q[c] = 0.05f * g(rng);
        }
        for (std::uint32_t kv = 0; kv < kv_heads; ++kv) {
            float* k = p.k.data() + (std::size_t{t} * kv_heads + kv) * d;
            if (std::ranges::find(pat.cols[kv], t) != pat.cols[kv].end()) k[0] = a;
            for (std::uint32_t o : pat.offs[kv])
                for (int m = 0; m < 3; ++m) k[base[m] + (t + o) % moduli[m]] += 1.0f;
            for (std::uint32_t c = 60; c < d; ++c) k[c] = 0.05f * g(rng);
            float* v = p.v.data() + (std::size_t{t} * kv_heads + kv) * d;
            for (std::uint32_t c = 0; c < d; ++c) v[c] = g(rng);
        }
    }
    return p;
}

const planted_pattern default_pattern{{{40, 200, 333}, {77, 128, 400}}, {{150, 271}, {120, 300}}};

// Kept share of dense attention mass of each row: exp(lse_sparse - lse_dense).
std::vector<double> kept_mass(const std::vector<float>& lse_sparse, const std::vector<float>& lse_dense) {
    std::vector<double> m(lse_sparse.size());
    for (std::size_t r = 0; r < m.size(); ++r) m[r] = std::exp(double{lse_sparse[r]} - double{lse_dense[r]});
    return m;
}

using kvpolicy::testing::require_throws;

}  // namespace

TEST_CASE("minference: the selector's contract and registration", "[minference][registry]") {
    STATIC_REQUIRE(sparse_selector<minference>);
    STATIC_REQUIRE(prefill_sparse_selector<minference>);
    STATIC_REQUIRE(prefill_sparse_selector<full_attention>);
    STATIC_REQUIRE(!prefill_sparse_selector<quest>);        // decode-only: supports_prefill = false
    STATIC_REQUIRE(!prefill_sparse_selector<sink_window>);  // selects blocks, computes no attention
    STATIC_REQUIRE(!prefill_sparse_selector<minference, memory_space::device>);  // host views only
    STATIC_REQUIRE(minference::supports_prefill);
    STATIC_REQUIRE(!minference::supports_decode);
    STATIC_REQUIRE(!minference::requires_block_selection);
    const minference_config defaults{};
    REQUIRE(defaults.adaptive_budget == 0.3);
    REQUIRE(defaults.vertical_size == 1000);
    REQUIRE(defaults.slash_size == 6096);
    REQUIRE(defaults.num_sink_tokens == 30);
    REQUIRE(defaults.num_recent_diags == 100);
    REQUIRE(defaults.last_q == 64);

    const minference sel;
    std::vector<block_id> available{block_id{5}, block_id{2}, block_id{9}};
    std::vector<block_id> out(3, block_id{0});
    selection_context prefill_ctx{};
    prefill_ctx.is_prefill = true;
    REQUIRE(sel.select(available, prefill_ctx, out) == 3);
    REQUIRE(out == available);
    std::vector<block_id> small(2, block_id{0});
    REQUIRE_THROWS_AS(sel.select(available, selection_context{}, small), usage_error);

    const bool found = visit_by_name<sparse_selectors>(
        "minference", []<class S>() { return prefill_sparse_selector<S> && !S::requires_block_selection; });
    REQUIRE(found);
}

TEST_CASE("minference: kept sizes follow the budget or the fixed sizes, raised to sinks and recents, capped",
          "[minference]") {
    minference_config c{};
    REQUIRE(minference_kept_sizes(c, 10000) == minference_sizes{3000, 3000});
    REQUIRE(minference_kept_sizes(c, 1001) == minference_sizes{301, 301});  // ceil(300.3)
    REQUIRE(minference_kept_sizes(c, 64) == minference_sizes{30, 64});      // raised to 30 sinks; 100 capped at 64
    c.adaptive_budget = std::nullopt;
    REQUIRE(minference_kept_sizes(c, 100000) == minference_sizes{1000, 6096});
    REQUIRE(minference_kept_sizes(c, 5000) == minference_sizes{1000, 5000});
    c.adaptive_budget = 1.0;
    REQUIRE(minference_kept_sizes(c, 777) == minference_sizes{777, 777});
}

TEST_CASE("minference: a budget that keeps everything is dense causal attention", "[minference]") {
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
    const std::uint32_t q_heads = GENERATE(2u, 4u), kv_heads = 2, d = 32;
    const std::uint32_t n = 150 + static_cast<std::uint32_t>(rng() % 150);
    const prompt p = random_prompt(rng, n, q_heads, kv_heads, d);
    std::vector<float> o_want, lse_want;
    naive_dense(p, o_want, lse_want);
    const float tol = 2e-5f;

    minference sel({.adaptive_budget = 1.0,
                    .num_sink_tokens = 3,
                    .num_recent_diags = 5,
                    .last_q = 1 + static_cast<std::uint32_t>(rng() % 64)});
    outputs got(p);
    sel.sparse_prefill_attention(p.view(), layer_index{0}, got.view());
    REQUIRE(sel.last_index().vertical_count == n);
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        std::vector<std::uint32_t> all(n);
        std::iota(all.begin(), all.end(), 0u);
        REQUIRE(std::ranges::equal(sel.last_index().vertical(h), all));
    }
    REQUIRE(max_abs_diff(got.o, o_want) <= tol);
    REQUIRE(max_abs_diff(got.lse, lse_want) <= tol);

    outputs tiles(p);  // the kernels' float tiles over the same index
    vertical_slash_prefill_attention(p.view(), tiles.view(), [&](std::uint32_t h) { return sel.last_index().head(h); });
    REQUIRE(max_abs_diff(tiles.o, o_want) <= tol);
    REQUIRE(max_abs_diff(tiles.lse, lse_want) <= tol);

    outputs dense(p);  // full_attention's prefill hook
    full_attention{}.sparse_prefill_attention(p.view(), layer_index{3}, dense.view());
    REQUIRE(max_abs_diff(dense.o, o_want) <= tol);
    REQUIRE(max_abs_diff(dense.lse, lse_want) <= tol);
}

TEST_CASE("minference: reference and tile attention over any index equal naive masked attention", "[minference]") {
    std::mt19937_64 rng(GENERATE(11u, 12u, 13u, 14u));
    const std::uint32_t n = 64 + static_cast<std::uint32_t>(rng() % 200), q_heads = 4, kv_heads = 1, d = 32;
    const prompt p = random_prompt(rng, n, q_heads, kv_heads, d);
    // Overlapping columns and diagonals; offset 0 missing sometimes, so some
    // queries may read nothing (o = 0, lse = -inf in all three).
    const auto index = random_index(rng, q_heads, n, 1 + static_cast<std::uint32_t>(rng() % (n / 2)),
                                    1 + static_cast<std::uint32_t>(rng() % (n / 2)));
    std::vector<float> o_want, lse_want;
    naive_vertical_slash(p, index, o_want, lse_want);

    outputs ref(p), tiles(p);
    vertical_slash_attention_reference(p.view(), index, ref.view());
    vertical_slash_prefill_attention(p.view(), tiles.view(), [&](std::uint32_t h) { return index.head(h); });
    for (std::size_t r = 0; r < p.rows(); ++r) {
        REQUIRE(ref.lse[r] == lse_want[r]);  // same double math, one rounding
        if (std::isinf(lse_want[r])) {
            REQUIRE(tiles.lse[r] == lse_want[r]);
            for (std::uint32_t c = 0; c < d; ++c) REQUIRE(tiles.o[r * d + c] == 0.0f);
        } else {
            REQUIRE(std::abs(tiles.lse[r] - lse_want[r]) <= 2e-5f);
        }
    }
    REQUIRE(max_abs_diff(ref.o, o_want) <= 1e-6);
    REQUIRE(max_abs_diff(tiles.o, o_want) <= 2e-5);
}

TEST_CASE("minference: the estimation math, thread by thread, equals the reference masses", "[minference]") {
    std::mt19937_64 rng(GENERATE(21u, 22u, 23u));
    const std::uint32_t n = 100 + static_cast<std::uint32_t>(rng() % 300), q_heads = 4, kv_heads = 2, d = 32;
    const prompt p = random_prompt(rng, n, q_heads, kv_heads, d, 3.0f);
    const minference_config cfg{.adaptive_budget = 0.1,
                                .num_sink_tokens = 4,
                                .num_recent_diags = 8,
                                .last_q = 1 + static_cast<std::uint32_t>(rng() % 64)};
    const std::uint32_t last_q = cfg.last_q;
    std::vector<float> logits(std::size_t{q_heads} * last_q * n), row_lse(std::size_t{q_heads} * last_q);
    minference_estimate_args a{.q = p.q.data(),
                               .k = p.k.data(),
                               .logits = logits.data(),
                               .row_lse = row_lse.data(),
                               .num_tokens = n,
                               .num_q_heads = q_heads,
                               .num_kv_heads = kv_heads,
                               .head_dim = d,
                               .scale = p.shape.scale,
                               .last_q = last_q,
                               .num_sink_tokens = cfg.num_sink_tokens,
                               .num_recent_diags = cfg.num_recent_diags};
    // Step 1: one thread per (h, r, j).
    for (std::uint32_t h = 0; h < q_heads; ++h)
        for (std::uint32_t r = 0; r < last_q; ++r)
            for (std::uint32_t j = 0; j < n; ++j)
                logits[(std::size_t{h} * last_q + r) * n + j] = estimation_logit(a, h, r, j);
    // Step 2: 128 threads per row, merged in the kernel's tree order.
    std::vector<float> o_dense, lse_dense;
    naive_dense(p, o_dense, lse_dense);
    constexpr std::uint32_t threads = 128;
    for (std::uint32_t h = 0; h < q_heads; ++h)
        for (std::uint32_t r = 0; r < last_q; ++r) {
            softmax_state part[threads];
            for (std::uint32_t t = 0; t < threads; ++t) part[t] = estimation_row_partial(a, h, r, t, threads);
            for (std::uint32_t stride = threads / 2; stride > 0; stride /= 2)
                for (std::uint32_t t = 0; t < stride; ++t) part[t] = combine_softmax_states(part[t], part[t + stride]);
            row_lse[std::size_t{h} * last_q + r] = softmax_lse(part[0]);
            const std::uint32_t i = n - last_q + r;
            REQUIRE(std::abs(row_lse[std::size_t{h} * last_q + r] - lse_dense[std::size_t{i} * q_heads + h]) <= 2e-5f);
        }
    // Step 3: one thread per (h, column) and per (h, offset).
    const minference_masses want = minference_masses_reference(p.view(), cfg);
    std::vector<float> column(std::size_t{q_heads} * n), diagonal(std::size_t{q_heads} * n);
    for (std::uint32_t h = 0; h < q_heads; ++h)
        for (std::uint32_t j = 0; j < n; ++j) {
            column[std::size_t{h} * n + j] = estimation_column_mass(a, h, j);
            diagonal[std::size_t{h} * n + j] = estimation_diagonal_mass(a, h, j);
        }
    for (std::size_t x = 0; x < column.size(); ++x) {
        for (const auto& [got, ref] :
             {std::pair{column[x], want.column[x]}, std::pair{diagonal[x], want.diagonal[x]}}) {
            if (std::isinf(ref)) {
                REQUIRE(std::isinf(got));
            } else {
                REQUIRE(std::abs(double{got} - ref) <= 1e-5 + 1e-4 * ref);
            }
        }
    }
    // Top-k on the float masses keeps as much reference mass as the reference
    // top-k (near-ties may swap places, nothing more).
    const auto ref_index = estimate_vertical_slash_reference(p.view(), cfg);
    std::vector<std::uint32_t> scratch, chosen(n);
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        const auto mass_of = [&](const std::vector<double>& m, std::span<const std::uint32_t> ids) {
            double s = 0.0;
            for (std::uint32_t id : ids)
                if (std::isfinite(m[std::size_t{h} * n + id])) s += m[std::size_t{h} * n + id];
            return s;
        };
        minference_top_indices(std::span<const float>(column).subspan(std::size_t{h} * n, n), ref_index.vertical_count,
                               scratch, chosen);
        REQUIRE(std::abs(mass_of(want.column, std::span(chosen).first(ref_index.vertical_count)) -
                         mass_of(want.column, ref_index.vertical(h))) <= 1e-4);
        minference_top_indices(std::span<const float>(diagonal).subspan(std::size_t{h} * n, n), ref_index.slash_count,
                               scratch, chosen);
        REQUIRE(std::abs(mass_of(want.diagonal, std::span(chosen).first(ref_index.slash_count)) -
                         mass_of(want.diagonal, ref_index.slash(h))) <= 1e-4);
    }
}

TEST_CASE("minference: a planted vertical-slash pattern is recovered, its error under the dropped-mass bound",
          "[minference]") {
    std::mt19937_64 rng(GENERATE(31u, 32u));
    constexpr std::uint32_t n = 512, q_heads = 4;
    const prompt p = planted_prompt(rng, n, default_pattern, 12.0f);
    // Exactly the sinks and the recent diagonals plus the planted ones fit.
    minference sel({.adaptive_budget = std::nullopt, .vertical_size = 30 + 3, .slash_size = 100 + 2});
    outputs got(p);
    sel.sparse_prefill_attention(p.view(), layer_index{0}, got.view());
    const auto& index = sel.last_index();
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        const std::uint32_t kv = h / 2;
        std::vector<std::uint32_t> cols(30), offs(100);
        std::iota(cols.begin(), cols.end(), 0u);
        std::iota(offs.begin(), offs.end(), 0u);
        cols.insert(cols.end(), default_pattern.cols[kv].begin(), default_pattern.cols[kv].end());
        offs.insert(offs.end(), default_pattern.offs[kv].begin(), default_pattern.offs[kv].end());
        REQUIRE(std::ranges::equal(index.vertical(h), cols));
        if (!std::ranges::equal(index.slash(h), offs)) {
            std::string listed;
            for (auto o : index.slash(h)) listed += std::to_string(o) + " ";
            INFO("head " << h << " slashes: " << listed);
            REQUIRE(std::ranges::equal(index.slash(h), offs));
        }
    }
    // Error bound: with kept mass m of the dense softmax, |o - o_dense| <= 2
    // (1 - m) max|v| channel by channel (a theorem); m is what lse says.
    std::vector<float> o_dense, lse_dense;
    naive_dense(p, o_dense, lse_dense);
    const auto mass = kept_mass(got.lse, lse_dense);
    const double v_max = std::abs(double{std::ranges::max(p.v, {}, [](float x) { return std::abs(x); })});
    constexpr std::uint32_t d = 64;
    double worst_last_q = 0.0, mean = 0.0;
    for (std::size_t r = 0; r < p.rows(); ++r) {
        REQUIRE(mass[r] <= 1.0 + 1e-5);
        mean += mass[r] / static_cast<double>(p.rows());
        for (std::uint32_t c = 0; c < d; ++c) {
            const double e = std::abs(double{got.o[r * d + c]} - double{o_dense[r * d + c]});
            REQUIRE(e <= 2.0 * (1.0 - mass[r]) * v_max + 1e-5);
            if (r >= std::size_t{n - 64} * q_heads) worst_last_q = std::max(worst_last_q, e);
        }
        // The last 64 queries, where the index was estimated, keep >= 90% of the mass.
        if (r >= std::size_t{n - 64} * q_heads) REQUIRE(mass[r] >= 0.9);
    }
    REQUIRE(mean >= 0.9);
    REQUIRE(worst_last_q <= 0.2 * v_max);
}

TEST_CASE("minference: attention mass kept against the budget (table)", "[minference][recall]") {
    std::mt19937_64 rng(41);
    constexpr std::uint32_t n = 512;
    const prompt planted = planted_prompt(rng, n, default_pattern, 8.0f);
    const prompt noise = random_prompt(rng, n, 4, 2, 64, 2.0f);
    std::printf(
        "\nMInference kept attention mass vs budget (n = %u, 4 q heads, 2 KV heads, d = 64, 4 sinks, 16 "
        "recent diagonals, last_q 64):\n",
        n);
    std::printf("%-8s %-8s %12s %12s %14s\n", "prompt", "budget", "mean mass", "min mass", "max |o err|");
    for (const auto* p : {&planted, &noise}) {
        std::vector<float> o_dense, lse_dense;
        naive_dense(*p, o_dense, lse_dense);
        std::vector<double> last(p->rows(), 0.0);
        for (double budget : {0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0}) {
            minference sel({.adaptive_budget = budget, .num_sink_tokens = 4, .num_recent_diags = 16});
            outputs got(*p);
            sel.sparse_prefill_attention(p->view(), layer_index{0}, got.view());
            const auto mass = kept_mass(got.lse, lse_dense);
            double mean = 0.0, low = 1.0;
            for (std::size_t r = 0; r < mass.size(); ++r) {
                REQUIRE(mass[r] >= last[r] - 1e-5);  // top-k sets are nested: more budget, more mass
                last[r] = mass[r];
                mean += mass[r] / static_cast<double>(mass.size());
                low = std::min(low, mass[r]);
            }
            const double err = max_abs_diff(got.o, o_dense);
            std::printf("%-8s %-8.2f %12.4f %12.4f %14.2e\n", p == &planted ? "planted" : "random", budget, mean, low,
                        err);
            if (budget == 1.0) {
                REQUIRE(low >= 1.0 - 1e-5);
                REQUIRE(err <= 2e-5);
            }
        }
    }
}

TEST_CASE("minference: bad configuration and bad calls throw with the exact message and change nothing",
          "[minference][bad_input]") {
    require_throws<config_error>([] { minference({.adaptive_budget = 0.0}); },
                                 "minference: adaptive_budget = 0.000000 is outside (0, 1]; give the fraction of the "
                                 "prompt kept as columns and as diagonals (0.3 keeps 30%), or std::nullopt to use "
                                 "vertical_size and slash_size");
    require_throws<config_error>([] { minference({.adaptive_budget = 1.5}); },
                                 "minference: adaptive_budget = 1.500000 is outside (0, 1]; give the fraction of the "
                                 "prompt kept as columns and as diagonals (0.3 keeps 30%), or std::nullopt to use "
                                 "vertical_size and slash_size");
    REQUIRE_THROWS_AS(minference({.adaptive_budget = std::nan("")}), config_error);
    require_throws<config_error>([] { minference({.adaptive_budget = std::nullopt, .vertical_size = 0}); },
                                 "minference: vertical_size is 0; keep at least one column (the paper keeps 1000)");
    require_throws<config_error>([] { minference({.slash_size = 0}); },
                                 "minference: slash_size is 0; keep at least one diagonal (the paper keeps 6096)");
    require_throws<config_error>(
        [] { minference({.last_q = 0}); },
        "minference: last_q is 0; estimate the index from at least one query (the paper uses 64)");
    require_throws<config_error>([] { minference({.num_recent_diags = 0}); },
                                 "minference: num_recent_diags is 0, so no query would attend to itself; keep at "
                                 "least the main diagonal (seed 004 keeps 100)");

    // A call that fails leaves the selector and the outputs as they were.
    std::mt19937_64 rng(51);
    const prompt first = random_prompt(rng, 80, 2, 1, 32);
    minference sel({.num_sink_tokens = 2, .num_recent_diags = 4});
    outputs out1(first);
    sel.sparse_prefill_attention(first.view(), layer_index{0}, out1.view());
    const vertical_slash_index before = sel.last_index();
    const minference_config config_before = sel.config();

    const prompt short_prompt = random_prompt(rng, 40, 2, 1, 32);
    outputs out2(short_prompt);
    std::ranges::fill(out2.o, 7.0f);
    std::ranges::fill(out2.lse, 7.0f);
    require_throws<config_error>(
        [&] { sel.sparse_prefill_attention(short_prompt.view(), layer_index{0}, out2.view()); },
        "minference: last_q = 64 is larger than the prompt's 40 tokens; lower last_q to at most the prompt's length");
    auto bad_view = short_prompt.view();
    bad_view.num_kv_heads = 3;
    require_throws<usage_error>([&] { sel.sparse_prefill_attention(bad_view, layer_index{0}, out2.view()); },
                                "minference::sparse_prefill_attention: shape has 2 query heads, 3 KV heads, head_dim "
                                "32; give head_dim and KV heads >= 1 and query heads a multiple of KV heads");
    require_throws<usage_error>(
        [&] {
            sel.sparse_prefill_attention(short_prompt.view(), layer_index{0},
                                         {.o = std::span(out2.o).first(10), .lse = out2.lse});
        },
        "minference::sparse_prefill_attention: o and lse hold 10 and 80 values; give [tokens][q_heads][head_dim] = "
        "2560 and [tokens][q_heads] = 80");
    REQUIRE(std::ranges::all_of(out2.o, [](float x) { return x == 7.0f; }));
    REQUIRE(std::ranges::all_of(out2.lse, [](float x) { return x == 7.0f; }));
    REQUIRE(sel.config() == config_before);
    REQUIRE(sel.last_index().verticals == before.verticals);
    REQUIRE(sel.last_index().slashes == before.slashes);
}

namespace {

// Selectors that write down what the layer-wise prefill asks of them.
struct recording_prefill {
    static constexpr std::string_view name = "recording_prefill";
    static constexpr bool supports_prefill = true;
    static constexpr bool supports_decode = false;
    static constexpr bool requires_block_selection = false;
    std::vector<std::string>* log;
    std::size_t select(std::span<const block_id> a, const selection_context&, std::span<block_id> out) const {
        std::ranges::copy(a, out.begin());
        return a.size();
    }
    void on_offload(block_id, layer_index, const key_block_view&) const { log->push_back("prefill on_offload"); }
    void sparse_prefill_attention(const prefill_qkv_view& in, layer_index layer, const prefill_output_view&) const {
        log->push_back("attention layer " + std::to_string(layer.value) + " tokens " + std::to_string(in.num_tokens));
    }
};
static_assert(prefill_sparse_selector<recording_prefill>);

struct recording_hooks {
    static constexpr std::string_view name = "recording_hooks";
    static constexpr bool supports_prefill = false;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;
    std::vector<std::string>* log;
    const std::vector<float>* cpu_k;  // the CPU tier: must not hold the block yet
    std::size_t select(std::span<const block_id> a, const selection_context&, std::span<block_id> out) const {
        std::ranges::copy(a, out.begin());
        return a.size();
    }
    void on_offload(block_id b, layer_index layer, const key_block_view& keys) const {
        const bool copied = (*cpu_k)[b.index() * 4 * 2 * 8] == keys.keys[0];
        log->push_back("offload block " + std::to_string(b.value) + " layer " + std::to_string(layer.value) +
                       " tokens " + std::to_string(keys.tokens) + (copied ? " (already copied)" : ""));
    }
};
static_assert(sparse_selector<recording_hooks>);

}  // namespace

TEST_CASE("layer-wise offload prefill: attention through the hook, then every block offloaded after on_offload",
          "[minference][layerwise]") {
    std::mt19937_64 rng(61);
    constexpr std::uint32_t n = 13, block_size = 4, kv_heads = 2, d = 8;
    const prompt p = random_prompt(rng, n, 4, kv_heads, d);
    std::vector<float> cpu_k(10 * block_size * kv_heads * d, -99.0f), cpu_v = cpu_k;
    const std::vector<block_id> blocks{block_id{7}, block_id{3}, block_id{9}, block_id{0}};
    std::vector<std::string> log;
    recording_prefill pre{&log};
    recording_hooks hooks{&log, &cpu_k};
    outputs out(p);
    layerwise_offload_prefill_layer(pre, hooks, layer_index{5}, p.view(), blocks,
                                    {.k = cpu_k, .v = cpu_v, .block_size = block_size}, out.view());
    REQUIRE(log == std::vector<std::string>{"attention layer 5 tokens 13", "offload block 7 layer 5 tokens 4",
                                            "offload block 3 layer 5 tokens 4", "offload block 9 layer 5 tokens 4",
                                            "offload block 0 layer 5 tokens 1"});
}

TEST_CASE(
    "layer-wise offload prefill with MInference: its output, all KV in the CPU tier, Quest's metadata "
    "as if gathered directly",
    "[minference][layerwise]") {
    std::mt19937_64 rng(GENERATE(71u, 72u));
    constexpr std::uint32_t block_size = 16, kv_heads = 2, d = 32, layers = 3, cpu_blocks = 40;
    const std::uint32_t n = 200 + static_cast<std::uint32_t>(rng() % 150);
    const prompt p = random_prompt(rng, n, 4, kv_heads, d);
    const std::uint32_t blocks_needed = (n + block_size - 1) / block_size;
    std::vector<std::uint32_t> ids(cpu_blocks);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<block_id> blocks;
    for (std::uint32_t i = 0; i < blocks_needed; ++i) blocks.push_back(block_id{ids[i]});
    const std::size_t block_floats = std::size_t{block_size} * kv_heads * d;
    std::vector<float> cpu_k(cpu_blocks * block_floats, -1.0f), cpu_v = cpu_k;
    const quest_config qc{.num_layers = layers, .num_blocks = cpu_blocks, .num_kv_heads = kv_heads, .head_dim = d};
    quest in_pass(qc), direct(qc);
    const minference_config mc{.adaptive_budget = 0.2, .num_sink_tokens = 8, .num_recent_diags = 16};
    minference sel(mc), alone(mc);
    const layer_index layer{1};

    // Bad input first: nothing is done.
    outputs out(p);
    const auto short_blocks = std::span<const block_id>(blocks).first(blocks_needed - 1);
    require_throws<usage_error>(
        [&] {
            layerwise_offload_prefill_layer(sel, in_pass, layer, p.view(), short_blocks,
                                            {.k = cpu_k, .v = cpu_v, .block_size = block_size}, out.view());
        },
        "layerwise_offload_prefill_layer: " + std::to_string(blocks_needed - 1) + " CPU blocks for " +
            std::to_string(n) + " tokens in blocks of 16; give " + std::to_string(blocks_needed));
    auto twice = blocks;
    twice.back() = twice.front();
    require_throws<usage_error>(
        [&] {
            layerwise_offload_prefill_layer(sel, in_pass, layer, p.view(), twice,
                                            {.k = cpu_k, .v = cpu_v, .block_size = block_size}, out.view());
        },
        "layerwise_offload_prefill_layer: block " + std::to_string(twice.front().value) +
            " is given twice; give each token range its own CPU block");
    REQUIRE(std::ranges::all_of(cpu_k, [](float x) { return x == -1.0f; }));
    REQUIRE(std::ranges::all_of(out.lse, [](float x) { return std::isnan(x); }));
    for (block_id b : blocks) REQUIRE_FALSE(in_pass.has_metadata(b, layer));

    layerwise_offload_prefill_layer(sel, in_pass, layer, p.view(), blocks,
                                    {.k = cpu_k, .v = cpu_v, .block_size = block_size}, out.view());
    outputs want(p);
    alone.sparse_prefill_attention(p.view(), layer, want.view());
    REQUIRE(out.o == want.o);
    REQUIRE(out.lse == want.lse);
    for (std::uint32_t i = 0; i < blocks_needed; ++i) {
        const std::uint32_t tokens = std::min(block_size, n - i * block_size);
        const std::size_t row = std::size_t{kv_heads} * d;
        const auto src_k = std::span(p.k).subspan(i * block_size * row, tokens * row);
        const auto src_v = std::span(p.v).subspan(i * block_size * row, tokens * row);
        REQUIRE(std::ranges::equal(src_k, std::span(cpu_k).subspan(blocks[i].index() * block_floats, tokens * row)));
        REQUIRE(std::ranges::equal(src_v, std::span(cpu_v).subspan(blocks[i].index() * block_floats, tokens * row)));
        direct.on_offload(blocks[i], layer, {.keys = src_k, .tokens = tokens, .num_kv_heads = kv_heads, .head_dim = d});
    }
    for (std::uint32_t b = 0; b < cpu_blocks; ++b) {
        REQUIRE(in_pass.has_metadata(block_id{b}, layer) == direct.has_metadata(block_id{b}, layer));
        if (!direct.has_metadata(block_id{b}, layer)) continue;
        REQUIRE(std::ranges::equal(in_pass.key_min(block_id{b}, layer), direct.key_min(block_id{b}, layer)));
        REQUIRE(std::ranges::equal(in_pass.key_max(block_id{b}, layer), direct.key_max(block_id{b}, layer)));
    }
    // Quest then selects for decode from that metadata as it would have.
    std::vector<float> query(4 * d);
    for (float& x : query) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
    const selection_context ctx{.layer = layer,
                                .block_size = block_size,
                                .total_kv_len = n,
                                .num_q_heads = 4,
                                .num_kv_heads = kv_heads,
                                .head_dim = d,
                                .query = query};
    std::vector<block_id> a(blocks.size()), b(blocks.size());
    a.resize(in_pass.select(blocks, ctx, a));
    b.resize(direct.select(blocks, ctx, b));
    REQUIRE(a == b);

    // The dense baseline through the same loop: full_attention == naive dense.
    full_attention full;
    quest again(qc);
    outputs dense(p);
    layerwise_offload_prefill_layer(full, again, layer_index{0}, p.view(), blocks,
                                    {.k = cpu_k, .v = cpu_v, .block_size = block_size}, dense.view());
    std::vector<float> o_naive, lse_naive;
    naive_dense(p, o_naive, lse_naive);
    REQUIRE(max_abs_diff(dense.o, o_naive) <= 2e-5);
}

TEST_CASE("minference: o and lse compose with the LSE merge (chunked prefill of the kept set)", "[minference]") {
    // Attention over the kept keys of a query equals the merge of attention
    // over the kept keys in [0, split) and in [split, i]: run the reference
    // on two index halves made disjoint by position, then merge.
    std::mt19937_64 rng(81);
    constexpr std::uint32_t n = 160, q_heads = 2, d = 32;
    const prompt p = random_prompt(rng, n, q_heads, 1, d);
    minference sel({.adaptive_budget = 0.15, .num_sink_tokens = 4, .num_recent_diags = 8, .last_q = 32});
    outputs whole(p);
    sel.sparse_prefill_attention(p.view(), layer_index{0}, whole.view());
    const auto& index = sel.last_index();
    constexpr std::uint32_t split = 70;
    std::vector<std::set<std::uint32_t>> cols(q_heads), offs(q_heads);
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        cols[h].insert(index.vertical(h).begin(), index.vertical(h).end());
        offs[h].insert(index.slash(h).begin(), index.slash(h).end());
    }
    const auto kept = [&](std::uint32_t h, std::uint32_t i, std::uint32_t j) {
        return j <= i && (cols[h].contains(j) || offs[h].contains(i - j));
    };
    std::vector<float> o_a, lse_a, o_b, lse_b;
    naive_prefill_attention(
        p.q, p.k, p.v, p.shape,
        [&](std::uint32_t h, std::uint32_t i, std::uint32_t j) { return j < split && kept(h, i, j); }, o_a, lse_a);
    naive_prefill_attention(
        p.q, p.k, p.v, p.shape,
        [&](std::uint32_t h, std::uint32_t i, std::uint32_t j) { return j >= split && kept(h, i, j); }, o_b, lse_b);
    merge_attention_state(o_a, lse_a, o_b, lse_b, d);
    REQUIRE(max_abs_diff(whole.o, o_a) <= 1e-5);
    REQUIRE(max_abs_diff(whole.lse, lse_a) <= 1e-5);
}

TEST_CASE("vertical_slash_keys: each kept key once, in order of the lists, never beyond the query", "[minference]") {
    std::mt19937_64 rng(91);
    for (int round = 0; round < 200; ++round) {
        const std::uint32_t n = 1 + static_cast<std::uint32_t>(rng() % 80);
        const auto index = random_index(rng, 1, n, 1 + static_cast<std::uint32_t>(rng() % n),
                                        1 + static_cast<std::uint32_t>(rng() % n));
        for (std::uint32_t i = 0; i < n; ++i) {
            const auto keys = vertical_slash_keys::make(index.verticals.data(), index.vertical_count,
                                                        index.slashes.data(), index.slash_count, i);
            std::multiset<std::uint32_t> got;
            for (std::uint32_t c = 0; c < keys.count(); ++c) {
                std::uint32_t key = 0;
                if (keys.key(c, key)) got.insert(key);
            }
            std::multiset<std::uint32_t> want;
            for (std::uint32_t j = 0; j <= i; ++j)
                if (std::ranges::find(index.verticals, j) != index.verticals.end() ||
                    std::ranges::find(index.slashes, i - j) != index.slashes.end())
                    want.insert(j);
            REQUIRE(got == want);
        }
    }
    // Unsorted lists (a device index left unfinished after a NaN): no live
    // key lies beyond the query.
    const std::vector<std::uint32_t> cols{9, 2, 7}, offs{5, 0, 8};
    for (std::uint32_t i = 0; i < 10; ++i) {
        const auto keys = vertical_slash_keys::make(cols.data(), 3, offs.data(), 3, i);
        for (std::uint32_t c = 0; c < keys.count(); ++c) {
            std::uint32_t key = 0;
            if (keys.key(c, key)) REQUIRE(key <= i);
        }
    }
}

TEST_CASE("prefill tiles, lane by lane as the kernel's warp runs them, equal the reference", "[minference]") {
    // The CUDA kernel gives each (query, head) one warp: lane l scores
    // candidate begin + l of each tile, then every lane folds the tile into
    // its channels l, l + 32, ... This replays that for every lane of every
    // warp and compares with the double reference.
    std::mt19937_64 rng(GENERATE(101u, 102u));
    constexpr std::uint32_t n = 150, q_heads = 4, kv_heads = 2, d = 64, lanes = 32, per_lane = d / lanes;
    const prompt p = random_prompt(rng, n, q_heads, kv_heads, d);
    const auto index = random_index(rng, q_heads, n, 40, 30);
    outputs want(p), got(p);
    vertical_slash_attention_reference(p.view(), index, want.view());
    const std::size_t kv_row = std::size_t{kv_heads} * d;
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        const std::uint32_t kvh = h / (q_heads / kv_heads);
        for (std::uint32_t i = 0; i < n; ++i) {
            const auto keys = vertical_slash_keys::make(index.vertical(h).data(), index.vertical_count,
                                                        index.slash(h).data(), index.slash_count, i);
            const float* q = p.q.data() + (std::size_t{i} * q_heads + h) * d;
            std::vector<softmax_state> state(lanes);
            std::vector<float> acc(std::size_t{lanes} * per_lane, 0.0f);
            for (std::uint32_t begin = 0; begin < keys.count(); begin += prefill_tile_keys) {
                float scores[prefill_tile_keys];
                std::uint32_t tile[prefill_tile_keys];
                for (std::uint32_t lane = 0; lane < lanes; ++lane) {  // each lane scores its candidate
                    std::uint32_t key = 0;
                    float score = -INFINITY;
                    if (begin + lane < keys.count() && keys.key(begin + lane, key))
                        score = prefill_logit(q, p.k.data() + key * kv_row + kvh * d, d, p.shape.scale);
                    scores[lane] = score;
                    tile[lane] = key;
                }
                const std::uint32_t count = std::min(prefill_tile_keys, keys.count() - begin);
                for (std::uint32_t lane = 0; lane < lanes; ++lane)  // each lane folds its channels
                    online_softmax_tile(state[lane], acc.data() + lane * per_lane, scores, tile, count,
                                        p.v.data() + kvh * d, kv_row, lane, lanes, per_lane);
            }
            const std::size_t row = std::size_t{i} * q_heads + h;
            for (std::uint32_t lane = 0; lane < lanes; ++lane) {
                const float lse = finish_online_softmax(state[lane], acc.data() + lane * per_lane, per_lane);
                if (lane == 0) got.lse[row] = lse;
                REQUIRE((lse == got.lse[row] || (std::isnan(lse) && std::isnan(got.lse[row]))));  // lanes agree
                for (std::uint32_t j = 0; j < per_lane; ++j)
                    got.o[row * d + lane + lanes * j] = acc[lane * per_lane + j];
            }
        }
    }
    for (std::size_t r = 0; r < p.rows(); ++r) {
        if (std::isinf(want.lse[r])) {
            REQUIRE(got.lse[r] == want.lse[r]);
        } else {
            REQUIRE(std::abs(got.lse[r] - want.lse[r]) <= 2e-5f);
        }
    }
    for (std::size_t x = 0; x < want.o.size(); ++x) REQUIRE(std::abs(got.o[x] - want.o[x]) <= 2e-5f);
}
