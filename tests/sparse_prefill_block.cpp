// CTA-tiled prefill attention (sparse/prefill_block.hpp), the math of the
// CUDA kernels in kvpolicy/cuda/minference.cuh, run on the CPU the way a CTA
// runs it: each phase for all 256 thread indices (in a shuffled order, so a
// thread reading what another writes in the same phase would show), then the
// next phase, every block of every head, against the double reference
// (tests/support/naive_prefill_attention.hpp, which shares no code with it).
// Shared memory is poisoned with NaN before every block.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/minference.hpp>
#include <kvpolicy/sparse/prefill_block.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/naive_prefill_attention.hpp"
#include "support/random_vertical_slash.hpp"

using namespace kvpolicy;
using kvpolicy::testing::naive_prefill_attention;
using kvpolicy::testing::naive_prefill_shape;

namespace {

struct prompt_shape {
    std::uint32_t n, q_heads, kv_heads, d;
};

struct qkv_prompt {
    naive_prefill_shape s;
    std::vector<float> q, k, v;
};

qkv_prompt random_prompt(std::mt19937_64& rng, const prompt_shape& sh) {
    qkv_prompt p{{sh.n, sh.q_heads, sh.kv_heads, sh.d, 1.0f / std::sqrt(static_cast<float>(sh.d))}, {}, {}, {}};
    std::normal_distribution<float> g(0.0f, 1.0f);
    p.q.resize(std::size_t{sh.n} * sh.q_heads * sh.d);
    p.k.resize(std::size_t{sh.n} * sh.kv_heads * sh.d);
    p.v.resize(p.k.size());
    for (float& x : p.q) x = 2.0f * g(rng);
    for (float& x : p.k) x = g(rng);
    for (float& x : p.v) x = g(rng);
    return p;
}

prefill_qkv_view view_of(const qkv_prompt& p) {
    return {.q = p.q,
            .k = p.k,
            .v = p.v,
            .num_tokens = p.s.num_tokens,
            .num_q_heads = p.s.num_q_heads,
            .num_kv_heads = p.s.num_kv_heads,
            .head_dim = p.s.head_dim,
            .scale = p.s.scale};
}

using kvpolicy::testing::random_index;

// Every block of every head, thread by thread. index == nullptr: dense.
template <std::uint32_t D>
void run_blocks(const qkv_prompt& p, const vertical_slash_index* index, std::vector<float>& o, std::vector<float>& lse,
                std::mt19937_64& rng, bool shuffle = true) {
    const auto& s = p.s;
    o.assign(std::size_t{s.num_tokens} * s.num_q_heads * s.head_dim, std::numeric_limits<float>::quiet_NaN());
    lse.assign(std::size_t{s.num_tokens} * s.num_q_heads, std::numeric_limits<float>::quiet_NaN());
    const prefill_head_args a{.q = p.q.data(),
                              .k = p.k.data(),
                              .v = p.v.data(),
                              .o = o.data(),
                              .lse = lse.data(),
                              .num_q_heads = s.num_q_heads,
                              .num_kv_heads = s.num_kv_heads,
                              .head_dim = s.head_dim,
                              .scale = s.scale};
    std::vector<float> smem(prefill_block_layout<D>::bytes / sizeof(float));
    std::vector<prefill_block_thread<D>> state(prefill_block_threads);
    std::vector<std::uint32_t> order(prefill_block_threads);
    std::iota(order.begin(), order.end(), 0u);
    const auto threads = [&](auto&& phase) {
        if (shuffle) std::shuffle(order.begin(), order.end(), rng);
        for (const std::uint32_t t : order) phase(t, state[t]);
    };
    for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
        for (std::uint32_t b = 0; b < prefill_blocks(s.num_tokens); ++b) {
            std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
            for (auto& th : state) th = prefill_block_thread<D>{};
            const prefill_block_shared sh = prefill_block_carve<D>(smem.data());
            if (index == nullptr) {
                const auto c = prefill_block_context(a, s.num_tokens, h, b, true);
                prefill_block_attention<D>(c, dense_block_tiles::make(c), sh, threads);
            } else {
                const auto c = prefill_block_context(a, s.num_tokens, h, b, (h + b) % 2 == 0, index->vertical(h).data(),
                                                     index->vertical_count, index->slash(h).data(), index->slash_count);
                prefill_block_attention<D>(c, vertical_slash_block_tiles::make(c), sh, threads);
            }
        }
    }
}

void run_any(const qkv_prompt& p, const vertical_slash_index* index, std::vector<float>& o, std::vector<float>& lse,
             std::mt19937_64& rng) {
    switch (prefill_block_dim(p.s.head_dim)) {
        case 64:
            run_blocks<64>(p, index, o, lse, rng);
            break;
        case 128:
            run_blocks<128>(p, index, o, lse, rng);
            break;
        default:
            run_blocks<256>(p, index, o, lse, rng);
            break;
    }
}

void naive(const qkv_prompt& p, const vertical_slash_index* index, std::vector<float>& o, std::vector<float>& lse) {
    if (index == nullptr) {
        naive_prefill_attention(
            p.q, p.k, p.v, p.s, [](std::uint32_t, std::uint32_t i, std::uint32_t j) { return j <= i; }, o, lse);
        return;
    }
    std::vector<std::set<std::uint32_t>> cols(index->num_heads), offs(index->num_heads);
    for (std::uint32_t h = 0; h < index->num_heads; ++h) {
        cols[h].insert(index->vertical(h).begin(), index->vertical(h).end());
        offs[h].insert(index->slash(h).begin(), index->slash(h).end());
    }
    naive_prefill_attention(
        p.q, p.k, p.v, p.s,
        [&](std::uint32_t h, std::uint32_t i, std::uint32_t j) {
            return j <= i && (cols[h].contains(j) || offs[h].contains(i - j));
        },
        o, lse);
}

// got == want within float rounding: |got - want| <= 2e-5 (1 + |want|); an
// infinite want exactly.
void require_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0, first = 0;
    for (std::size_t x = 0; x < got.size(); ++x) {
        const bool ok = std::isinf(want[x])
                            ? got[x] == want[x]
                            : std::abs(double{got[x]} - double{want[x]}) <= 2e-5 * (1.0 + std::abs(double{want[x]}));
        if (!ok && bad++ == 0) first = x;
    }
    INFO(what << ": " << bad << " values differ, first at " << first << ": got " << (bad ? got[first] : 0.0f)
              << " want " << (bad ? want[first] : 0.0f));
    REQUIRE(bad == 0);
}

void check(const qkv_prompt& p, const vertical_slash_index* index, std::mt19937_64& rng, const std::string& what) {
    std::vector<float> o, lse, o_ref, lse_ref;
    run_any(p, index, o, lse, rng);
    naive(p, index, o_ref, lse_ref);
    require_close(o, o_ref, what + " o");
    require_close(lse, lse_ref, what + " lse");
}

std::string name_of(const prompt_shape& s) {
    return "n " + std::to_string(s.n) + ", heads " + std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) +
           ", d " + std::to_string(s.d);
}

// Shapes: head_dim 32 .. 256 (each template and the padded ones), GQA 1, 4
// and 8, n below one tile, at a tile, not a multiple of it.
const std::vector<prompt_shape> shapes = {
    {1, 1, 1, 32},    {37, 2, 1, 32},   {64, 4, 4, 64},  {200, 4, 1, 64}, {129, 8, 1, 128},
    {300, 2, 2, 128}, {150, 2, 1, 256}, {100, 2, 1, 96}, {90, 1, 1, 160}, {70, 2, 2, 224},
};

}  // namespace

TEST_CASE("prefill blocks: dense causal, thread by thread as the CTA runs it, equals the double reference",
          "[prefill_block]") {
    std::mt19937_64 rng(2024);
    for (const prompt_shape& s : shapes) {
        const qkv_prompt p = random_prompt(rng, s);
        check(p, nullptr, rng, "dense " + name_of(s));
    }
    // A longer prompt: many tiles per block, the diagonal tile mid-block.
    const prompt_shape s{700, 4, 1, 64};
    check(random_prompt(rng, s), nullptr, rng, "dense " + name_of(s));
}

TEST_CASE("prefill blocks: vertical-slash, thread by thread, equal the double reference over the same index",
          "[prefill_block]") {
    std::mt19937_64 rng(77);
    for (const prompt_shape& s : shapes) {
        const qkv_prompt p = random_prompt(rng, s);
        const std::uint32_t n = s.n;
        // Empty lists, one kind only, sparse, dense enough that columns and
        // diagonals overlap everywhere, everything.
        const std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes = {
            {0, 0}, {0, std::min(n, 5u)}, {std::min(n, 7u), 0}, {n / 5, n / 7}, {n / 2, n / 2}, {n, n}};
        for (const auto& [nv, ns] : sizes) {
            const vertical_slash_index index = random_index(rng, s.q_heads, n, nv, ns);
            check(p, &index, rng,
                  "sparse " + name_of(s) + ", " + std::to_string(nv) + " columns, " + std::to_string(ns) + " offsets");
        }
    }
}

TEST_CASE("prefill blocks: vertical-slash over the estimated index (sink and recent defaults) on a long prompt",
          "[prefill_block]") {
    std::mt19937_64 rng(5);
    for (const prompt_shape& s : {prompt_shape{600, 4, 1, 64}, prompt_shape{333, 8, 1, 128}}) {
        const qkv_prompt p = random_prompt(rng, s);
        for (const minference_config& cfg :
             {minference_config{}, minference_config{.adaptive_budget = 0.05},
              minference_config{.adaptive_budget = std::nullopt, .vertical_size = 40, .slash_size = 90}}) {
            const vertical_slash_index index = estimate_vertical_slash_reference(view_of(p), cfg);
            check(p, &index, rng,
                  "estimated " + name_of(s) + ", " + std::to_string(index.vertical_count) + " columns, " +
                      std::to_string(index.slash_count) + " offsets");
        }
    }
}

TEST_CASE("prefill blocks: the tiles admit every kept (query, key) pair of a block exactly once", "[prefill_block]") {
    // The load phase and the masks alone, as the scores phase applies them,
    // against the predicate: dense j <= i; sparse j <= i and (column j or
    // offset i - j kept). Long prompts, offsets in runs (merged ranges
    // longer than a tile) and scattered.
    std::mt19937_64 rng(11);
    for (const std::uint32_t n : {1u, 63u, 64u, 65u, 500u, 1111u}) {
        for (int trial = 0; trial < 4; ++trial) {
            const bool dense = trial == 0;
            vertical_slash_index index = random_index(rng, 1, n, trial == 1 ? 0 : n / 9, n / 6);
            if (trial == 3) {  // a run of recent offsets and sinks, as the defaults keep
                std::set<std::uint32_t> offs(index.slashes.begin(), index.slashes.end());
                std::set<std::uint32_t> cols(index.verticals.begin(), index.verticals.end());
                for (std::uint32_t o = 0; o < std::min(n, 150u); ++o) offs.insert(o);
                for (std::uint32_t j = 0; j < std::min(n, 30u); ++j) cols.insert(j);
                index.slashes.assign(offs.begin(), offs.end());
                index.verticals.assign(cols.begin(), cols.end());
                index.slash_count = static_cast<std::uint32_t>(index.slashes.size());
                index.vertical_count = static_cast<std::uint32_t>(index.verticals.size());
            }
            const std::set<std::uint32_t> cols(index.verticals.begin(), index.verticals.end());
            const std::set<std::uint32_t> offs(index.slashes.begin(), index.slashes.end());
            std::vector<float> q(std::size_t{n} * 64), kv(std::size_t{n} * 64);
            const prefill_head_args with_data{.q = q.data(),
                                              .k = kv.data(),
                                              .v = kv.data(),
                                              .num_q_heads = 1,
                                              .num_kv_heads = 1,
                                              .head_dim = 64,
                                              .scale = 1.0f};
            std::vector<float> smem(prefill_block_layout<64>::bytes / sizeof(float));
            const prefill_block_shared sh = prefill_block_carve<64>(smem.data());
            for (std::uint32_t b = 0; b < prefill_blocks(n); ++b) {
                const auto c = prefill_block_context(with_data, n, 0, b, true, index.verticals.data(),
                                                     index.vertical_count, index.slashes.data(), index.slash_count);
                std::vector<std::uint32_t> seen(std::size_t{prefill_block_rows} * n, 0);
                prefill_key_tile tile{};
                const auto visit = [&](auto tiles) {
                    while (tiles.next_tile(tile)) {
                        REQUIRE(tile.count >= 1);
                        REQUIRE(tile.count <= prefill_block_keys);
                        for (std::uint32_t t = 0; t < prefill_block_threads; ++t)
                            prefill_block_load_keys<64>(c, tile, sh, t);
                        for (std::uint32_t row = 0; c.i0 + row < c.i1; ++row)
                            for (std::uint32_t slot = 0; slot < prefill_block_keys; ++slot) {
                                if (tile.masked && !prefill_block_admits(c, tile, sh, row, slot)) continue;
                                const std::uint32_t j = sh.keys[slot];
                                REQUIRE(j < c.i1);
                                ++seen[std::size_t{row} * n + j];
                            }
                    }
                };
                if (dense)
                    visit(dense_block_tiles::make(c));
                else
                    visit(vertical_slash_block_tiles::make(c));
                std::size_t wrong = 0;
                for (std::uint32_t row = 0; c.i0 + row < c.i1; ++row) {
                    const std::uint32_t i = c.i0 + row;
                    for (std::uint32_t j = 0; j < n; ++j) {
                        const bool want = j <= i && (dense || cols.contains(j) || offs.contains(i - j));
                        if (seen[std::size_t{row} * n + j] != (want ? 1u : 0u)) ++wrong;
                    }
                }
                INFO("n " << n << ", trial " << trial << ", block " << b);
                REQUIRE(wrong == 0);
            }
        }
    }
}

TEST_CASE("prefill blocks: the result does not depend on the order threads run a phase in", "[prefill_block]") {
    std::mt19937_64 rng(3);
    const qkv_prompt p = random_prompt(rng, {150, 2, 1, 128});
    const vertical_slash_index index = random_index(rng, 2, 150, 20, 30);
    std::vector<float> o1, lse1, o2, lse2;
    run_blocks<128>(p, &index, o1, lse1, rng, false);
    run_blocks<128>(p, &index, o2, lse2, rng, true);
    REQUIRE(o1 == o2);
    REQUIRE(lse1 == lse2);
}

TEST_CASE("prefill blocks: lists that are not ascending (an unfinished device index) never read past the prompt",
          "[prefill_block]") {
    // Outputs are unspecified then; every read stays inside q, k, v and the
    // lists (the sanitizer build checks), every key below the block's end.
    std::mt19937_64 rng(9);
    const qkv_prompt p = random_prompt(rng, {130, 1, 1, 64});
    vertical_slash_index index{1, 130, 40, 40, std::vector<std::uint32_t>(40), std::vector<std::uint32_t>(40)};
    std::uniform_int_distribution<std::uint32_t> any(0, 129);
    for (auto& x : index.verticals) x = any(rng);
    for (auto& x : index.slashes) x = any(rng) % 3 == 0 ? 0u : any(rng);
    std::vector<float> o, lse;
    run_blocks<64>(p, &index, o, lse, rng);
    for (const float x : o) REQUIRE(!std::isnan(x));
}
