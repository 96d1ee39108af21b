// kvpolicy's sparse selections as paged-KV index arrays
// (sparse/paged_kv_indices.hpp) against naive references on long random
// inputs: Quest's chosen blocks -> pages in position order, checked entry by
// entry and by attention (sparse/paged_attention_reference.hpp over the
// pages equals naive attention over the chosen tokens gathered by position;
// GQA, ragged last pages, every block chosen, budgets beyond the context);
// MInference's vertical-slash index -> the two launches (slash pages, causal,
// diagonal last; vertical columns, no mask) whose merged attention equals the
// block semantics computed from their definition, equals the per-row
// reference where blocks are single rows, and covers every row's own keys.
// Then bad input, refused before anything is built.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/minference.hpp>
#include <kvpolicy/sparse/paged_attention_reference.hpp>
#include <kvpolicy/sparse/paged_kv_indices.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/random_floats.hpp"
#include "support/random_vertical_slash.hpp"

using namespace kvpolicy;
using kvpolicy::testing::random_floats;

namespace {

void require_close(double got, double want, double tol) {
    if (std::isinf(want)) {
        REQUIRE(got == want);
        return;
    }
    REQUIRE(std::abs(got - want) <= tol * std::max(1.0, std::abs(want)));
}

// --- Quest ----------------------------------------------------------------

struct quest_case {
    std::uint32_t page_size = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, pool_pages = 0;
    std::vector<std::vector<std::int32_t>> tables;
    std::vector<std::uint64_t> lengths;
    std::vector<std::vector<std::uint32_t>> chosen;
    std::vector<float> k, v, q;  // k, v: [pool_pages][page_size][kv_heads][dim]; q: [batch][q_heads][dim]

    [[nodiscard]] std::vector<quest_request_pages> requests() const {
        std::vector<quest_request_pages> r;
        for (std::size_t b = 0; b < tables.size(); ++b) r.push_back({tables[b], lengths[b], chosen[b]});
        return r;
    }
};

quest_case random_quest_case(std::mt19937_64& rng) {
    quest_case c;
    const std::uint32_t sizes[] = {1, 3, 16};
    const std::uint32_t groups[] = {1, 2, 4};
    c.page_size = sizes[rng() % 3];
    c.num_kv_heads = 1 + static_cast<std::uint32_t>(rng() % 3);
    c.num_q_heads = c.num_kv_heads * groups[rng() % 3];
    c.head_dim = 4 + static_cast<std::uint32_t>(rng() % 5);
    c.pool_pages = 96;
    const std::size_t batch = 1 + rng() % 6;
    std::vector<std::int32_t> pool(c.pool_pages);
    std::iota(pool.begin(), pool.end(), 0);
    for (std::size_t b = 0; b < batch; ++b) {
        const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(rng() % 40);
        std::shuffle(pool.begin(), pool.end(), rng);
        c.tables.emplace_back(pool.begin(), pool.begin() + blocks);
        c.lengths.push_back(std::uint64_t{blocks - 1} * c.page_size + 1 + rng() % c.page_size);
        // A budget of blocks (beyond the context now and then: all chosen).
        std::vector<std::uint32_t> all(blocks);
        std::iota(all.begin(), all.end(), 0u);
        std::shuffle(all.begin(), all.end(), rng);
        const std::uint32_t budget = 1 + static_cast<std::uint32_t>(rng() % (blocks + 4));
        all.resize(std::min(budget, blocks));
        c.chosen.push_back(all);
    }
    const std::size_t kv = std::size_t{c.pool_pages} * c.page_size * c.num_kv_heads * c.head_dim;
    c.k = random_floats(rng, kv, 1.5f);
    c.v = random_floats(rng, kv, 1.5f);
    c.q = random_floats(rng, batch * c.num_q_heads * c.head_dim, 1.5f);
    return c;
}

}  // namespace

TEST_CASE("quest_paged_kv_indices: the chosen blocks' pages in position order, the ragged tail last") {
    std::mt19937_64 rng(46);
    for (int trial = 0; trial < 2000; ++trial) {
        const quest_case c = random_quest_case(rng);
        const paged_kv_indices x = quest_paged_kv_indices(c.requests(), c.page_size);
        REQUIRE(x.page_size == c.page_size);
        REQUIRE(x.batch_size() == c.tables.size());
        REQUIRE(x.indptr.front() == 0);
        for (std::size_t b = 0; b < c.tables.size(); ++b) {
            // Naive: walk the positions, keep the chosen ones.
            const std::set<std::uint32_t> kept(c.chosen[b].begin(), c.chosen[b].end());
            std::vector<std::int32_t> want;
            for (std::uint32_t pos = 0; pos < c.tables[b].size(); ++pos)
                if (kept.contains(pos)) want.push_back(c.tables[b][pos]);
            const auto got = x.pages(b);
            REQUIRE(std::vector<std::int32_t>(got.begin(), got.end()) == want);
            const std::uint32_t last = static_cast<std::uint32_t>(c.tables[b].size()) - 1;
            const std::uint64_t tail = c.lengths[b] - std::uint64_t{last} * c.page_size;
            REQUIRE(static_cast<std::uint64_t>(x.last_page_len[b]) == (kept.contains(last) ? tail : c.page_size));
            // Tokens the kernel attends: the chosen blocks' own tokens.
            std::uint64_t tokens = 0;
            for (std::uint32_t pos : kept) tokens += pos == last ? tail : c.page_size;
            REQUIRE(x.kv_len(b) == tokens);
        }
    }
}

TEST_CASE("quest_paged_kv_indices: attention over the pages is attention over the chosen tokens (GQA)") {
    std::mt19937_64 rng(4646);
    for (int trial = 0; trial < 300; ++trial) {
        const quest_case c = random_quest_case(rng);
        const paged_kv_indices x = quest_paged_kv_indices(c.requests(), c.page_size);
        const std::size_t batch = c.tables.size(), d = c.head_dim, hq = c.num_q_heads;
        const strided_kv_view kv{.k = c.k,
                                 .v = c.v,
                                 .num_kv_heads = c.num_kv_heads,
                                 .head_dim = c.head_dim,
                                 .stride_page = std::int64_t{c.page_size} * c.num_kv_heads * c.head_dim,
                                 .stride_token = std::int64_t{c.num_kv_heads} * c.head_dim,
                                 .stride_head = c.head_dim};
        std::vector<std::int32_t> qo(batch + 1);
        std::iota(qo.begin(), qo.end(), 0);
        const double scale = 1.0 / std::sqrt(static_cast<double>(d));
        std::vector<double> o(batch * hq * d), lse(batch * hq);
        paged_attention_reference(c.q, c.num_q_heads, qo, kv, x, /*causal=*/true, scale, o, lse);
        // Naive: gather each chosen block's tokens through the page table.
        const std::uint32_t group = c.num_q_heads / c.num_kv_heads;
        for (std::size_t b = 0; b < batch; ++b) {
            std::vector<std::uint32_t> order = c.chosen[b];
            std::ranges::sort(order);
            for (std::size_t j = 0; j < hq; ++j) {
                const std::size_t h = j / group;
                std::vector<double> logit, acc(d, 0.0);
                std::vector<const float*> values;
                for (std::uint32_t pos : order) {
                    const std::uint64_t len =
                        pos + 1 == c.tables[b].size() ? c.lengths[b] - std::uint64_t{pos} * c.page_size : c.page_size;
                    for (std::uint64_t t = 0; t < len; ++t) {
                        const std::size_t at =
                            ((std::size_t(c.tables[b][pos]) * c.page_size + t) * c.num_kv_heads + h) * d;
                        double dot = 0.0;
                        for (std::size_t e = 0; e < d; ++e)
                            dot += double{c.q[(b * hq + j) * d + e]} * double{c.k[at + e]};
                        logit.push_back(dot * scale);
                        values.push_back(c.v.data() + at);
                    }
                }
                const double big = *std::ranges::max_element(logit);
                double sum = 0.0;
                for (std::size_t t = 0; t < logit.size(); ++t) {
                    const double p = std::exp(logit[t] - big);
                    sum += p;
                    for (std::size_t e = 0; e < d; ++e) acc[e] += p * double{values[t][e]};
                }
                for (std::size_t e = 0; e < d; ++e) require_close(o[(b * hq + j) * d + e], acc[e] / sum, 1e-12);
                require_close(lse[b * hq + j], big + std::log(sum), 1e-12);
            }
        }
    }
}

TEST_CASE("quest_paged_kv_indices: bad input is refused, naming the request") {
    const std::vector<std::int32_t> table{7, 3, 9};
    const std::vector<std::uint32_t> ok{0, 2}, out_of_range{3}, twice{1, 1}, none{};
    const std::vector<std::int32_t> negative{7, -1, 9};
    auto one = [](std::span<const std::int32_t> t, std::uint64_t len, std::span<const std::uint32_t> c) {
        return std::vector<quest_request_pages>{{t, len, c}};
    };
    REQUIRE(quest_paged_kv_indices(one(table, 40, ok), 16).indices == std::vector<std::int32_t>{7, 9});
    REQUIRE_THROWS_WITH(quest_paged_kv_indices(one(table, 40, ok), 0),
                        "quest_paged_kv_indices: page_size is 0; give the engine's tokens per KV page");
    REQUIRE_THROWS_WITH(
        quest_paged_kv_indices(one(table, 49, ok), 16),
        "quest_paged_kv_indices: request 0: kv_len 49 needs 4 pages of 16 tokens but its page table has 3");
    REQUIRE_THROWS_WITH(
        quest_paged_kv_indices(one(table, 0, ok), 16),
        "quest_paged_kv_indices: request 0: kv_len 0 needs 0 pages of 16 tokens but its page table has 3");
    REQUIRE_THROWS_WITH(
        quest_paged_kv_indices(one(table, 40, none), 16),
        "quest_paged_kv_indices: request 0: no block chosen; keep at least one (attention over no key has no value)");
    REQUIRE_THROWS_WITH(quest_paged_kv_indices(one(table, 40, out_of_range), 16),
                        "quest_paged_kv_indices: request 0: chosen block 3 is outside its 3 blocks");
    REQUIRE_THROWS_WITH(quest_paged_kv_indices(one(table, 40, twice), 16),
                        "quest_paged_kv_indices: request 0: block 1 is chosen twice; give each block once");
    REQUIRE_THROWS_WITH(quest_paged_kv_indices(one(negative, 40, ok), 16),
                        "quest_paged_kv_indices: request 0: page id -1 is negative");
    REQUIRE(quest_paged_kv_indices({}, 16).batch_size() == 0);
}

// --- MInference -------------------------------------------------------------

namespace {

struct prefill_case {
    std::uint32_t n = 0, hq = 0, hkv = 0, d = 0, query_block = 0, page_size = 0;
    std::vector<float> q, k, v;
    vertical_slash_index index;

    [[nodiscard]] prefill_qkv_view view() const {
        return {.q = q,
                .k = k,
                .v = v,
                .num_tokens = n,
                .num_q_heads = hq,
                .num_kv_heads = hkv,
                .head_dim = d,
                .scale = 1.0f / std::sqrt(static_cast<float>(d))};
    }
};

prefill_case random_prefill_case(std::mt19937_64& rng, std::uint32_t query_block, std::uint32_t page_size,
                                 std::uint32_t hkv, std::uint32_t group) {
    prefill_case c;
    c.n = 1 + static_cast<std::uint32_t>(rng() % 120);
    c.hkv = hkv;
    c.hq = hkv * group;
    c.d = 4 + static_cast<std::uint32_t>(rng() % 4);
    c.query_block = query_block;
    c.page_size = page_size;
    c.q = random_floats(rng, std::size_t{c.n} * c.hq * c.d, 1.5f);
    c.k = random_floats(rng, std::size_t{c.n} * c.hkv * c.d, 1.5f);
    c.v = random_floats(rng, std::size_t{c.n} * c.hkv * c.d, 1.5f);
    const auto nv = static_cast<std::uint32_t>(rng() % (c.n + 1)), ns = static_cast<std::uint32_t>(rng() % (c.n + 1));
    c.index = testing::random_index(rng, c.hq, c.n, nv, ns);
    return c;
}

// Attention of both launches merged by log-sum-exp, back in the prompt's
// [tokens][q_heads][dim] layout.
void attend_through_indices(const prefill_case& c, const sparse_prefill_indices& x, std::vector<double>& o,
                            std::vector<double>& lse) {
    const std::uint32_t group = c.hq / c.hkv;
    const std::size_t n = c.n, d = c.d;
    std::vector<float> qh(c.q.size());  // head-major [hkv][n][group][d]
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < c.hq; ++j)
            std::copy_n(c.q.begin() + static_cast<std::ptrdiff_t>((i * c.hq + j) * d), d,
                        qh.begin() + static_cast<std::ptrdiff_t>((((j / group) * n + i) * group + j % group) * d));
    const vertical_slash_page_strides s = vertical_slash_strides(c.hkv, c.d);
    const strided_kv_view kv{.k = c.k,
                             .v = c.v,
                             .num_kv_heads = 1,
                             .head_dim = c.d,
                             .stride_page = s.page,
                             .stride_token = s.token,
                             .stride_head = s.head};
    const double scale = double{1.0f / std::sqrt(static_cast<float>(c.d))};
    std::vector<double> o1(qh.size()), l1(qh.size() / d), o2(qh.size()), l2(qh.size() / d);
    paged_attention_reference(qh, group, x.qo_indptr, kv, x.slashes, /*causal=*/true, scale, o1, l1);
    paged_attention_reference(qh, group, x.qo_indptr, kv, x.verticals, /*causal=*/false, scale, o2, l2);
    o.assign(qh.size(), 0.0);
    lse.assign(qh.size() / d, 0.0);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < c.hq; ++j) {
            const std::size_t hm = ((j / group) * n + i) * group + j % group, row = i * c.hq + j;
            const double m = std::max(l1[hm], l2[hm]);
            const double w1 = std::exp(l1[hm] - m), w2 = std::isinf(l2[hm]) ? 0.0 : std::exp(l2[hm] - m);
            lse[row] = m + std::log(w1 + w2);
            for (std::size_t e = 0; e < d; ++e)
                o[row * d + e] = (w1 * o1[hm * d + e] + w2 * o2[hm * d + e]) / (w1 + w2);
        }
}

}  // namespace

TEST_CASE("minference_sparse_prefill_indices: merged attention equals the block semantics from their definition") {
    std::mt19937_64 rng(404);
    const std::uint32_t shapes[][2] = {{1, 1}, {4, 1}, {4, 2}, {8, 4}, {16, 16}, {12, 3}};
    for (int trial = 0; trial < 240; ++trial) {
        const auto* shape = shapes[trial % 6];
        const std::uint32_t hkv = 1 + static_cast<std::uint32_t>(rng() % 3), group = 1u << (rng() % 3);
        const prefill_case c = random_prefill_case(rng, shape[0], shape[1], hkv, group);
        const sparse_prefill_indices x = minference_sparse_prefill_indices(c.index, c.hkv, c.query_block, c.page_size);
        std::vector<double> o, lse;
        attend_through_indices(c, x, o, lse);
        std::vector<double> want_o(o.size()), want_lse(lse.size());
        vertical_slash_block_attention_reference(c.view(), c.index, c.query_block, c.page_size, want_o, want_lse);
        for (std::size_t r = 0; r < lse.size(); ++r) require_close(lse[r], want_lse[r], 1e-10);
        for (std::size_t e = 0; e < o.size(); ++e) require_close(o[e], want_o[e], 1e-10);
    }
}

TEST_CASE("minference_sparse_prefill_indices: blocks of one row are the per-row vertical-slash attention") {
    std::mt19937_64 rng(4040);
    for (int trial = 0; trial < 150; ++trial) {
        const std::uint32_t heads = 1 + static_cast<std::uint32_t>(rng() % 4);
        prefill_case c = random_prefill_case(rng, 1, 1, heads, 1);
        // MInference always keeps offset 0 (num_recent_diags >= 1): the
        // diagonal the query block attends to is the row's own key.
        c.index = testing::random_index(rng, c.hq, c.n, c.index.vertical_count,
                                        std::max<std::uint32_t>(1, c.index.slash_count));
        for (std::uint32_t h = 0; h < c.hq; ++h) c.index.slashes[std::size_t{h} * c.index.slash_count] = 0;
        const sparse_prefill_indices x = minference_sparse_prefill_indices(c.index, c.hkv, 1, 1);
        std::vector<double> o, lse;
        attend_through_indices(c, x, o, lse);
        std::vector<float> want_o(o.size()), want_lse(lse.size());
        vertical_slash_attention_reference(c.view(), c.index, {.o = want_o, .lse = want_lse});
        for (std::size_t r = 0; r < lse.size(); ++r) require_close(lse[r], want_lse[r], 1e-5);
        for (std::size_t e = 0; e < o.size(); ++e) require_close(o[e], want_o[e], 1e-5);
    }
}

TEST_CASE("minference_sparse_prefill_indices: layout, diagonal last, and every row's own keys covered") {
    std::mt19937_64 rng(4004);
    for (int trial = 0; trial < 400; ++trial) {
        const std::uint32_t page_sizes[] = {1, 2, 4, 8};
        const std::uint32_t p = page_sizes[rng() % 4], r = p * (1 + static_cast<std::uint32_t>(rng() % 4));
        const prefill_case c =
            random_prefill_case(rng, r, p, 1 + static_cast<std::uint32_t>(rng() % 3), 1u << (rng() % 3));
        const sparse_prefill_indices x = minference_sparse_prefill_indices(c.index, c.hkv, r, p);
        const std::uint32_t blocks = x.num_query_blocks(), group = c.hq / c.hkv;
        REQUIRE(x.qo_indptr.size() == std::size_t{blocks} * c.hkv + 1);
        REQUIRE(x.slashes.batch_size() == std::size_t{blocks} * c.hkv);
        REQUIRE(x.verticals.batch_size() == x.slashes.batch_size());
        for (std::uint32_t h = 0; h < c.hkv; ++h)
            for (std::uint32_t b = 0; b < blocks; ++b) {
                const std::size_t req = std::size_t{h} * blocks + b;
                const std::uint32_t r0 = b * r, r1 = std::min(c.n, r0 + r);
                REQUIRE(x.qo_indptr[req] == static_cast<std::int32_t>(h * c.n + r0));
                REQUIRE(x.qo_indptr[req + 1] == static_cast<std::int32_t>(h * c.n + r1));
                // Decode each page id back to (key block, head).
                std::set<std::uint32_t> seen_keys;
                const auto pages = x.slashes.pages(req);
                const std::uint32_t diag = (r1 - r0 + p - 1) / p;
                REQUIRE(pages.size() >= diag);
                for (std::size_t e = 0; e < pages.size(); ++e) {
                    REQUIRE(pages[e] % static_cast<std::int32_t>(c.hkv) == static_cast<std::int32_t>(h));
                    const auto kb = static_cast<std::uint32_t>(pages[e]) / (p * c.hkv);
                    REQUIRE(static_cast<std::uint32_t>(pages[e]) == kb * p * c.hkv + h);
                    if (e + diag < pages.size()) {
                        REQUIRE((kb + 1) * p <= r0);  // before the query block, ascending
                        if (e > 0) REQUIRE(pages[e - 1] < pages[e]);
                    } else {
                        REQUIRE(kb == r0 / p + (e + diag - pages.size()));  // the diagonal, in order, last
                    }
                    for (std::uint32_t t = kb * p; t < std::min(c.n, (kb + 1) * p); ++t) seen_keys.insert(t);
                }
                REQUIRE(x.slashes.kv_len(req) == std::uint64_t{pages.size() - diag} * p + (r1 - r0));
                const auto cols = x.verticals.pages(req);
                REQUIRE(x.verticals.kv_len(req) == cols.size());
                for (std::size_t e = 0; e < cols.size(); ++e) {
                    REQUIRE(cols[e] % static_cast<std::int32_t>(c.hkv) == static_cast<std::int32_t>(h));
                    const auto key = static_cast<std::uint32_t>(cols[e]) / c.hkv;
                    REQUIRE(key < r0);
                    REQUIRE(!seen_keys.contains(key));  // not also in a slash page
                    if (e > 0) REQUIRE(cols[e - 1] < cols[e]);
                }
                for (std::size_t e = 0; e < cols.size(); ++e)
                    seen_keys.insert(static_cast<std::uint32_t>(cols[e]) / c.hkv);
                // Every row's own kept keys (any head of the group) are seen.
                for (std::uint32_t g = h * group; g < (h + 1) * group; ++g)
                    for (std::uint32_t i = r0; i < r1; ++i) {
                        for (std::uint32_t col : c.index.vertical(g))
                            if (col <= i) REQUIRE(seen_keys.contains(col));
                        for (std::uint32_t off : c.index.slash(g))
                            if (off <= i) REQUIRE(seen_keys.contains(i - off));
                    }
            }
    }
}

TEST_CASE("minference_sparse_prefill_indices: bad input is refused before anything is built") {
    std::mt19937_64 rng(7);
    const vertical_slash_index idx = testing::random_index(rng, 4, 50, 5, 6);
    REQUIRE_THROWS_WITH(minference_sparse_prefill_indices(idx, 2, 0, 1),
                        "minference_sparse_prefill_indices: query_block 0 and page_size 1: both must be positive and "
                        "query_block a multiple of page_size (64 and 16)");
    REQUIRE_THROWS_WITH(minference_sparse_prefill_indices(idx, 2, 12, 8),
                        "minference_sparse_prefill_indices: query_block 12 and page_size 8: both must be positive and "
                        "query_block a multiple of page_size (64 and 16)");
    REQUIRE_THROWS_WITH(minference_sparse_prefill_indices(idx, 3, 16, 4),
                        "minference_sparse_prefill_indices: 4 query heads do not group over 3 KV heads; give the "
                        "model's KV head count");
    vertical_slash_index short_index = idx;
    short_index.slashes.pop_back();
    REQUIRE_THROWS_WITH(
        minference_sparse_prefill_indices(short_index, 2, 16, 4),
        "minference_sparse_prefill_indices: the index holds 20 columns and 23 offsets for 4 heads x (5, 6)");
    vertical_slash_index far = idx;
    far.verticals[3] = 50;
    REQUIRE_THROWS_WITH(minference_sparse_prefill_indices(far, 2, 16, 4),
                        "minference_sparse_prefill_indices: column 50 is beyond the prompt's 50 tokens");
    far = idx;
    far.slashes[0] = 77;
    REQUIRE_THROWS_WITH(minference_sparse_prefill_indices(far, 2, 16, 4),
                        "minference_sparse_prefill_indices: offset 77 is beyond the prompt's 50 tokens");
}

TEST_CASE("paged_attention_reference: shapes that disagree are refused") {
    const std::vector<float> k(2 * 4 * 4, 0.5f), v(2 * 4 * 4, 0.25f), q(2 * 4, 1.0f);
    const strided_kv_view kv{
        .k = k, .v = v, .num_kv_heads = 1, .head_dim = 4, .stride_page = 16, .stride_token = 4, .stride_head = 4};
    paged_kv_indices x{.page_size = 4, .indptr = {0, 2}, .indices = {0, 1}, .last_page_len = {3}};
    const std::vector<std::int32_t> qo{0, 2};
    std::vector<double> o(8), lse(2);
    paged_attention_reference(q, 1, qo, kv, x, true, 0.5, o, lse);
    REQUIRE(o[0] == Approx(0.25));
    std::vector<double> short_o(7);
    REQUIRE_THROWS_WITH(paged_attention_reference(q, 1, qo, kv, x, true, 0.5, short_o, lse),
                        "paged_attention_reference: query, o or lse does not hold 2 rows x 1 heads x 4");
    REQUIRE_THROWS_WITH(
        paged_attention_reference(q, 3, qo, strided_kv_view{.k = k, .v = v, .num_kv_heads = 2, .head_dim = 4}, x, true,
                                  0.5, o, lse),
        "paged_attention_reference: 3 query heads over 2 KV heads of dim 4; query heads must be a "
        "multiple of KV heads");
    x.indices = {0, 2};
    REQUIRE_THROWS_WITH(paged_attention_reference(q, 1, qo, kv, x, true, 0.5, o, lse),
                        "paged_attention_reference: request 0: page 2 (3 tokens) lies outside the 32 keys");
}
