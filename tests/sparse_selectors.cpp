// Sparse block selectors on the host: Quest's bound (always an upper bound of
// q . k, GQA-summed), Quest's and sink_window's selection rules against
// brute-force references, their errors, the registry, and Quest-selected
// attention approaching full attention as the budget grows.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>
#include <kvpolicy/sparse/registry.hpp>
#include <kvpolicy/sparse/sink_window.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {

std::vector<float> uniform_floats(std::mt19937_64& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

std::vector<block_id> iota_blocks(std::size_t n, std::uint32_t first = 0) {
    std::vector<block_id> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = block_id{first + static_cast<std::uint32_t>(i)};
    return b;
}

// q . k in float, channel by channel; `volatile` keeps each product rounded
// on its own (no FMA contraction), the way the bound rounds its terms.
float float_dot(const float* q, const float* k, std::size_t d) {
    float s = 0.0f;
    for (std::size_t c = 0; c < d; ++c) {
        const volatile float p = q[c] * k[c];
        s += p;
    }
    return s;
}

selection_context decode_context(std::uint32_t layer, std::uint32_t q_heads, const quest_config& c,
                                 std::span<const float> query, std::uint32_t block_size = 16) {
    return {.layer = layer_index{layer},
            .is_prefill = false,
            .block_size = block_size,
            .total_kv_len = 0,
            .num_q_heads = q_heads,
            .num_kv_heads = c.num_kv_heads,
            .head_dim = c.head_dim,
            .query = query};
}

}  // namespace

TEST_CASE("quest: the block score bounds q . k of every key in the block, per head and GQA-summed", "[quest]") {
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u, 4u));
    for (int round = 0; round < 60; ++round) {
        const std::uint32_t kv_heads = 1u << (rng() % 3);
        const std::uint32_t group = 1u << (rng() % 3);
        const std::uint32_t q_heads = kv_heads * group;
        const std::uint32_t d = std::array<std::uint32_t, 3>{4, 16, 64}[rng() % 3];
        const quest_config cfg{.num_layers = 2, .num_blocks = 8, .num_kv_heads = kv_heads, .head_dim = d};
        quest q(cfg);
        const std::uint32_t tokens = 1 + static_cast<std::uint32_t>(rng() % 16);
        const float spread = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);  // scales from 1/16 to 16
        const auto keys = uniform_floats(rng, std::size_t{tokens} * kv_heads * d, -spread, spread);
        const block_id b{static_cast<std::uint32_t>(rng() % 8)};
        const layer_index layer{static_cast<std::uint32_t>(rng() % 2)};
        q.on_offload(b, layer, {.keys = keys, .tokens = tokens, .num_kv_heads = kv_heads, .head_dim = d});

        const auto query = uniform_floats(rng, std::size_t{q_heads} * d, -2.0f, 2.0f);
        const float score = q.block_score(b, layer, query, q_heads);
        const auto mn = q.key_min(b, layer), mx = q.key_max(b, layer);
        for (std::uint32_t t = 0; t < tokens; ++t) {
            float summed = 0.0f;
            for (std::uint32_t h = 0; h < q_heads; ++h) {
                const std::uint32_t kv = h / group;
                const float* k = keys.data() + (std::size_t{t} * kv_heads + kv) * d;
                const float dot = float_dot(query.data() + std::size_t{h} * d, k, d);
                const float bound =
                    quest_head_bound(std::span(query).subspan(std::size_t{h} * d, d),
                                     mn.subspan(std::size_t{kv} * d, d), mx.subspan(std::size_t{kv} * d, d));
                REQUIRE(dot <= bound);
                summed += dot;
            }
            REQUIRE(summed <= score);
        }
    }
}

TEST_CASE("quest: the bound is per channel, tighter than nothing and not the whole-vector max", "[quest]") {
    // One KV head, two channels, keys (1, -1) and (-1, 1): per-channel min
    // (-1, -1), max (1, 1). For q = (1, 1) every key has q . k = 0, but the
    // bound is 2, and it must be (the min/max vectors themselves are not keys).
    // The whole-vector rule max(q . min, q . max) = 2 happens to agree here;
    // with q = (1, -1) it gives 0 while the key (1, -1) has q . k = 2.
    quest q({.num_layers = 1, .num_blocks = 1, .num_kv_heads = 1, .head_dim = 2});
    const std::vector<float> keys{1, -1, -1, 1};
    q.on_offload(block_id{0}, layer_index{0}, {.keys = keys, .tokens = 2, .num_kv_heads = 1, .head_dim = 2});
    const std::vector<float> q1{1, -1};
    REQUIRE(q.block_score(block_id{0}, layer_index{0}, q1, 1) == 2.0f);
    const std::vector<float> q2{1, 1};
    REQUIRE(q.block_score(block_id{0}, layer_index{0}, q2, 1) == 2.0f);
}

TEST_CASE("quest: selection keeps sinks, recents and the top-scoring middle blocks, in sequence order", "[quest]") {
    std::mt19937_64 rng(GENERATE(5u, 6u, 7u));
    for (int round = 0; round < 40; ++round) {
        const quest_config cfg{.num_layers = 3,
                               .num_blocks = 200,
                               .num_kv_heads = 2,
                               .head_dim = 8,
                               .token_budget = 16u * static_cast<std::uint32_t>(1 + rng() % 12),
                               .threshold_blocks = static_cast<std::uint32_t>(rng() % 6),
                               .sink_blocks = static_cast<std::uint32_t>(rng() % 3),
                               .recent_blocks = static_cast<std::uint32_t>(rng() % 3)};
        quest q(cfg);
        const std::uint32_t layer = static_cast<std::uint32_t>(rng() % 3);
        // Available blocks: a random subset of ids in a random (sequence) order.
        std::vector<block_id> all = iota_blocks(200);
        std::shuffle(all.begin(), all.end(), rng);
        const std::size_t n = rng() % 40;
        std::vector<block_id> available(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
        for (block_id b : available) {
            if (rng() % 10 == 0) continue;  // some blocks without metadata: they must be loaded
            const std::uint32_t tokens = 1 + static_cast<std::uint32_t>(rng() % 16);
            // Coarse values: equal scores happen, and ties go to the older block.
            std::vector<float> keys(std::size_t{tokens} * 16);
            for (float& k : keys) k = static_cast<float>(static_cast<int>(rng() % 5) - 2);
            q.on_offload(b, layer_index{layer}, {.keys = keys, .tokens = tokens, .num_kv_heads = 2, .head_dim = 8});
        }
        std::vector<float> query(4 * 8);
        for (float& x : query) x = static_cast<float>(static_cast<int>(rng() % 3) - 1);
        const auto ctx = decode_context(layer, 4, cfg, query);

        std::vector<block_id> out(n, block_id{999});
        const std::size_t got = q.select(available, ctx, out);
        out.resize(got);

        // Brute force: the same rule, spelled out.
        const std::size_t budget = std::max<std::size_t>(cfg.token_budget / 16, cfg.sink_blocks + cfg.recent_blocks);
        std::vector<block_id> want;
        if (n <= cfg.threshold_blocks || n <= budget) {
            want = available;
        } else {
            std::vector<std::size_t> middle;
            for (std::size_t i = cfg.sink_blocks; i < n - cfg.recent_blocks; ++i) middle.push_back(i);
            const auto score = [&](std::size_t i) { return q.block_score(available[i], layer_index{layer}, query, 4); };
            std::stable_sort(middle.begin(), middle.end(),
                             [&](std::size_t a, std::size_t b) { return score(a) > score(b); });
            middle.resize(budget - cfg.sink_blocks - cfg.recent_blocks);
            std::vector<bool> keep(n, false);
            for (std::size_t i = 0; i < n; ++i) keep[i] = i < cfg.sink_blocks || i >= n - cfg.recent_blocks;
            for (std::size_t i : middle) keep[i] = true;
            for (std::size_t i = 0; i < n; ++i)
                if (keep[i]) want.push_back(available[i]);
            REQUIRE(want.size() == budget);
        }
        REQUIRE(out == want);
    }
}

TEST_CASE("quest: a block whose keys align with the query wins a small budget", "[quest]") {
    std::mt19937_64 rng(42);
    const quest_config cfg{.num_layers = 1, .num_blocks = 64, .num_kv_heads = 1, .head_dim = 32, .token_budget = 48};
    quest q(cfg);
    const auto query = uniform_floats(rng, 32);
    for (std::uint32_t b = 0; b < 64; ++b) {
        auto keys = uniform_floats(rng, 16 * 32, -0.1f, 0.1f);
        if (b == 37)
            for (std::size_t c = 0; c < 32; ++c) keys[5 * 32 + c] = 3.0f * query[c];  // one needle token
        q.on_offload(block_id{b}, layer_index{0}, {.keys = keys, .tokens = 16, .num_kv_heads = 1, .head_dim = 32});
    }
    const auto available = iota_blocks(64);
    std::vector<block_id> out(64);
    const std::size_t got = q.select(available, decode_context(0, 1, cfg, query), out);
    REQUIRE(got == 3);
    REQUIRE(out[0] == block_id{0});   // sink
    REQUIRE(out[1] == block_id{37});  // the needle's block
    REQUIRE(out[2] == block_id{63});  // most recent
}

TEST_CASE("quest: bad input throws usage_error and changes nothing", "[quest]") {
    const quest_config cfg{.num_layers = 2,
                           .num_blocks = 4,
                           .num_kv_heads = 2,
                           .head_dim = 4,
                           .token_budget = 16,
                           .threshold_blocks = 0,
                           .sink_blocks = 0,
                           .recent_blocks = 0};
    quest q(cfg);
    const std::vector<float> keys(2 * 2 * 4, 0.5f);
    REQUIRE_THROWS_AS(
        q.on_offload(block_id{4}, layer_index{0}, {.keys = keys, .tokens = 2, .num_kv_heads = 2, .head_dim = 4}),
        usage_error);
    REQUIRE_THROWS_AS(
        q.on_offload(block_id{0}, layer_index{2}, {.keys = keys, .tokens = 2, .num_kv_heads = 2, .head_dim = 4}),
        usage_error);
    REQUIRE_THROWS_AS(
        q.on_offload(block_id{0}, layer_index{0}, {.keys = keys, .tokens = 2, .num_kv_heads = 1, .head_dim = 8}),
        usage_error);
    REQUIRE_THROWS_AS(
        q.on_offload(block_id{0}, layer_index{0}, {.keys = keys, .tokens = 3, .num_kv_heads = 2, .head_dim = 4}),
        usage_error);
    REQUIRE_THROWS_AS(
        q.on_offload(block_id{0}, layer_index{0}, {.keys = keys, .tokens = 0, .num_kv_heads = 2, .head_dim = 4}),
        usage_error);
    auto bad_keys = keys;
    bad_keys[3] = std::numeric_limits<float>::infinity();
    REQUIRE_THROWS_WITH(
        q.on_offload(block_id{0}, layer_index{0}, {.keys = bad_keys, .tokens = 2, .num_kv_heads = 2, .head_dim = 4}),
        Catch::Contains("NaN or infinite"));
    REQUIRE_FALSE(q.has_metadata(block_id{0}, layer_index{0}));

    const std::vector<float> query(2 * 4, 1.0f);
    const auto available = iota_blocks(4);
    std::vector<block_id> out(4, block_id{99});
    auto ctx = decode_context(0, 2, cfg, query);
    ctx.is_prefill = true;
    REQUIRE_THROWS_WITH(q.select(available, ctx, out), Catch::Contains("decode-only"));
    ctx = decode_context(0, 3, cfg, query);
    REQUIRE_THROWS_AS(q.select(available, ctx, out), usage_error);  // 3 query heads for 2 KV heads
    const std::vector<float> short_query(4, 1.0f);
    REQUIRE_THROWS_AS(q.select(available, decode_context(0, 2, cfg, short_query), out), usage_error);
    auto nan_query = query;
    nan_query[1] = std::nanf("");
    // The exact wording device_quest reports too (it checks on the device).
    REQUIRE_THROWS_WITH(q.select(available, decode_context(0, 2, cfg, nan_query), out),
                        "quest::select: the query has a NaN or infinite value");
    const std::vector<block_id> outside{block_id{1}, block_id{4}};
    REQUIRE_THROWS_AS(q.select(outside, decode_context(0, 2, cfg, query), out), usage_error);
    std::vector<block_id> small(3);
    REQUIRE_THROWS_AS(q.select(available, decode_context(0, 2, cfg, query), small), usage_error);
    REQUIRE(out == std::vector<block_id>(4, block_id{99}));

    REQUIRE_THROWS_AS(quest({.num_layers = 1, .num_blocks = 1, .num_kv_heads = 1, .head_dim = 0}), config_error);
    REQUIRE_THROWS_AS(quest({.num_layers = 1, .num_blocks = 1, .num_kv_heads = 1, .head_dim = 4, .token_budget = 0}),
                      config_error);

    q.on_offload(block_id{1}, layer_index{1}, {.keys = keys, .tokens = 2, .num_kv_heads = 2, .head_dim = 4});
    REQUIRE(q.has_metadata(block_id{1}, layer_index{1}));
    q.reset();
    REQUIRE_FALSE(q.has_metadata(block_id{1}, layer_index{1}));
}

TEST_CASE("quest: the device query check's per-thread test, ORed over every thread, is std::isfinite",
          "[quest][device_math]") {
    // quest_query_thread_nonfinite is what each thread of device_quest's
    // query check runs; here every thread index of several launch shapes,
    // on queries with NaN, +-inf, FLT_MAX, denormals and -0 placed at random.
    std::mt19937_64 rng(1313);
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              -0.0f,
                              std::numeric_limits<float>::min()};
    for (int round = 0; round < 400; ++round) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 4 * 128 + 7)(rng);
        auto query = uniform_floats(rng, n, -1e30f, 1e30f);
        const int planted = std::uniform_int_distribution<int>(0, 3)(rng);
        for (int p = 0; p < planted && n > 0; ++p)
            query[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)] = specials[rng() % std::size(specials)];
        const bool expected = !std::ranges::all_of(query, [](float v) { return std::isfinite(v); });
        for (const std::size_t threads : {std::size_t{1}, std::size_t{32}, std::size_t{128}, std::size_t{1000}}) {
            bool any = false;
            for (std::size_t t = 0; t < threads; ++t)
                any = quest_query_thread_nonfinite(query.data(), n, t, threads) || any;
            REQUIRE(any == expected);
        }
    }
    for (const float v : specials) REQUIRE(is_nonfinite(v) == !std::isfinite(v));
    STATIC_REQUIRE_FALSE(is_nonfinite(-0.0f));
}

TEST_CASE("sink_window keeps the first and the last blocks", "[sink_window]") {
    const sink_window sw({.sink_blocks = 2, .window_blocks = 3});
    const selection_context ctx{};
    for (std::size_t n = 0; n < 12; ++n) {
        const auto available = iota_blocks(n, 100);
        std::vector<block_id> out(n, block_id{0});
        const std::size_t got = sw.select(available, ctx, out);
        out.resize(got);
        std::vector<block_id> want;
        for (std::size_t i = 0; i < n; ++i)
            if (i < 2 || i + 3 >= n) want.push_back(available[i]);
        REQUIRE(out == want);
    }
    const auto available = iota_blocks(8);
    std::vector<block_id> small(7);
    REQUIRE_THROWS_AS(sw.select(available, ctx, small), usage_error);
    REQUIRE_THROWS_AS(sink_window({.sink_blocks = 0, .window_blocks = 0}), config_error);
    const sink_window window_only({.sink_blocks = 0, .window_blocks = 2});
    std::vector<block_id> out(8);
    REQUIRE(window_only.select(available, ctx, out) == 2);
    REQUIRE(out[0] == block_id{6});
    REQUIRE(out[1] == block_id{7});
}

TEST_CASE("sparse selectors are registered by name with their phase flags", "[sparse][registry]") {
    STATIC_REQUIRE(sparse_selector<full_attention>);
    STATIC_REQUIRE(sparse_selector<sink_window>);
    STATIC_REQUIRE(sparse_selector<quest>);
    STATIC_REQUIRE(!quest::supports_prefill);
    STATIC_REQUIRE(quest::supports_decode);
    STATIC_REQUIRE(quest::requires_block_selection);
    STATIC_REQUIRE(!full_attention::requires_block_selection);
    REQUIRE(joined_names<sparse_selectors>() == "full, sink_window, quest, minference");
    const bool quest_selects =
        visit_by_name<sparse_selectors>("quest", []<class S>() { return S::requires_block_selection; });
    REQUIRE(quest_selects);
    REQUIRE_THROWS_WITH(visit_by_name<sparse_selectors>(
                            "h2o", []<class S>() { return 0; }, "sparse selector"),
                        Catch::Contains("accepted: full, sink_window, quest, minference"));
}

TEST_CASE("quest-selected attention approaches full attention as the budget grows", "[quest][attention]") {
    std::mt19937_64 rng(GENERATE(21u, 22u));
    constexpr std::uint32_t blocks = 48, block_size = 16, kv_heads = 2, group = 2, d = 32;
    const decode_attention_shape shape{.num_q_heads = kv_heads * group,
                                       .num_kv_heads = kv_heads,
                                       .head_dim = d,
                                       .block_size = block_size,
                                       .scale = 1.0f / std::sqrt(float{d})};
    const std::size_t block_floats = std::size_t{block_size} * kv_heads * d;
    auto k = uniform_floats(rng, blocks * block_floats);
    const auto v = uniform_floats(rng, blocks * block_floats);
    const auto q = uniform_floats(rng, std::size_t{shape.num_q_heads} * d);
    // Three heavy hitters: tokens whose keys point along the queries of
    // every head that reads them, so they hold most of the softmax mass.
    for (int needle = 0; needle < 3; ++needle) {
        const std::size_t b = 1 + rng() % (blocks - 2), t = rng() % block_size;
        for (std::size_t kv = 0; kv < kv_heads; ++kv)
            for (std::size_t c = 0; c < d; ++c)
                k[b * block_floats + (t * kv_heads + kv) * d + c] =
                    6.0f * (q[(kv * group) * d + c] + q[(kv * group + 1) * d + c]);
    }
    quest sel({.num_layers = 1,
               .num_blocks = blocks,
               .num_kv_heads = kv_heads,
               .head_dim = d,
               .token_budget = 16,
               .threshold_blocks = 2});
    for (std::uint32_t b = 0; b < blocks; ++b)
        sel.on_offload(block_id{b}, layer_index{0},
                       {.keys = std::span(k).subspan(b * block_floats, block_floats),
                        .tokens = block_size,
                        .num_kv_heads = kv_heads,
                        .head_dim = d});
    const auto table = iota_blocks(blocks);
    const paged_kv_view kv{.k = k, .v = v};
    std::vector<float> o_full(q.size()), lse_full(shape.num_q_heads);
    reference_decode_attention(q, kv, table, std::uint64_t{blocks} * block_size, shape, o_full, lse_full);
    const float v_max = std::abs(std::ranges::max(v, {}, [](float x) { return std::abs(x); }));

    std::vector<double> last_mass(shape.num_q_heads, 0.0);
    double error = 1e9;
    for (std::uint32_t budget_blocks : {3u, 6u, 12u, 24u, 48u}) {
        sel = quest({.num_layers = 1,
                     .num_blocks = blocks,
                     .num_kv_heads = kv_heads,
                     .head_dim = d,
                     .token_budget = budget_blocks * block_size,
                     .threshold_blocks = 2});
        for (std::uint32_t b = 0; b < blocks; ++b)
            sel.on_offload(block_id{b}, layer_index{0},
                           {.keys = std::span(k).subspan(b * block_floats, block_floats),
                            .tokens = block_size,
                            .num_kv_heads = kv_heads,
                            .head_dim = d});
        std::vector<block_id> chosen(blocks);
        chosen.resize(sel.select(table, decode_context(0, shape.num_q_heads, sel.config(), q, block_size), chosen));
        REQUIRE(chosen.size() == budget_blocks);
        std::vector<float> o(q.size()), lse(shape.num_q_heads);
        reference_decode_attention(q, kv, chosen, std::uint64_t{budget_blocks} * block_size, shape, o, lse);
        error = 0.0;
        for (std::uint32_t h = 0; h < shape.num_q_heads; ++h) {
            // The share of the softmax mass the selected blocks hold; the
            // output error is at most 2 (1 - mass) max|v|.
            const double mass = std::exp(double{lse[h]} - double{lse_full[h]});
            REQUIRE(mass <= 1.0 + 1e-5);
            REQUIRE(mass >= last_mass[h] - 1e-6);  // larger budgets select supersets
            last_mass[h] = mass;
            for (std::size_t c = 0; c < d; ++c) {
                const double e = std::abs(double{o[h * d + c]} - double{o_full[h * d + c]});
                REQUIRE(e <= 2.0 * (1.0 - mass) * v_max + 1e-5);
                error = std::max(error, e);
            }
        }
        if (budget_blocks == 6) REQUIRE(*std::ranges::min_element(last_mass) > 0.9);  // the needles are found
    }
    REQUIRE(error == 0.0);  // the whole budget loads everything: the same computation
}
