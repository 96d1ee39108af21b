// The device Quest -> paged-KV conversion's per-thread math
// (sparse/paged_kv_row.hpp), run here thread by thread as the kernel in
// cuda/quest_paged_kv.cuh runs it (a CTA per request, a thread per entry),
// against the host conversion (quest_paged_kv_indices, sparse/
// paged_kv_indices.hpp) on long random batches: random page tables, ragged
// last pages, budgets smaller and larger than the context (load-all rows),
// the top-K's positions in any order; every slot written exactly once. Then
// clamped positions after a NaN (still a permutation, still in bounds), and
// the planner's bad input refused before anything is built. Last, the
// batched selection's CTA radix select (sparse/cta_radix_select_math.hpp),
// thread by thread and lane by lane as select_top_paged's kernel runs it,
// against a stable sort of the scores.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/cta_radix_select_math.hpp>
#include <kvpolicy/sparse/paged_kv_indices.hpp>
#include <kvpolicy/sparse/paged_kv_row.hpp>
#include <kvpolicy/sparse/quest.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

// What the kernel writes, computed by running every thread of every row.
struct device_like_output {
    std::vector<std::int32_t> indices;
    std::vector<std::int32_t> last_page_len;
    std::vector<int> writes;  // per entry: how many threads wrote it
};

device_like_output run_threads(const quest_paged_layout& layout, const std::vector<std::uint32_t>& positions) {
    device_like_output out{std::vector<std::int32_t>(static_cast<std::size_t>(layout.indptr.back()), -1),
                           std::vector<std::int32_t>(layout.rows.size(), -1),
                           std::vector<int>(static_cast<std::size_t>(layout.indptr.back()), 0)};
    for (std::size_t r = 0; r < layout.rows.size(); ++r) {
        const quest_paged_row& row = layout.rows[r];
        for (std::uint32_t t = 0; t < row.count(); ++t) {
            const quest_paged_entry_value e = quest_paged_entry(row, positions.data(), t);
            REQUIRE(e.slot < row.count());
            REQUIRE(e.logical < row.num_blocks);
            out.indices[row.out_begin + e.slot] = layout.pages[row.table_begin + e.logical];
            ++out.writes[row.out_begin + e.slot];
            if (e.slot + 1 == row.count())
                out.last_page_len[r] =
                    static_cast<std::int32_t>(quest_paged_last_page_len(row, e.logical, layout.page_size));
        }
    }
    return out;
}

struct random_batch {
    std::vector<std::vector<std::int32_t>> tables;
    std::vector<std::uint64_t> lengths;
};

random_batch make_batch(std::mt19937_64& rng, std::size_t requests, std::uint32_t page_size, std::uint32_t num_pages,
                        std::uint64_t max_len) {
    random_batch b;
    std::uniform_int_distribution<std::uint64_t> len(1, max_len);
    std::vector<std::int32_t> pool(num_pages);
    std::iota(pool.begin(), pool.end(), 0);
    for (std::size_t r = 0; r < requests; ++r) {
        const std::uint64_t n = len(rng);
        const std::uint64_t blocks = (n + page_size - 1) / page_size;
        std::shuffle(pool.begin(), pool.end(), rng);
        b.tables.emplace_back(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(blocks));
        b.lengths.push_back(n);
    }
    return b;
}

}  // namespace

TEST_CASE("paged_kv_row: every thread's entry equals the host conversion on random batches") {
    std::mt19937_64 rng(46);
    constexpr std::uint32_t num_pages = 4096;
    for (int trial = 0; trial < 60; ++trial) {
        const std::uint32_t page_size = std::vector<std::uint32_t>{1, 4, 16, 64}[trial % 4];
        const std::size_t requests = 1 + static_cast<std::size_t>(rng() % 16);
        const std::uint64_t max_len = std::uint64_t{page_size} * (trial % 3 == 0 ? 8 : 600);
        const random_batch b = make_batch(rng, requests, page_size, num_pages, max_len);
        quest_config cfg{.num_layers = 1,
                         .num_blocks = num_pages,
                         .num_kv_heads = 1,
                         .head_dim = 8,
                         .token_budget = page_size * static_cast<std::uint32_t>(4 + rng() % 200),
                         .threshold_blocks = static_cast<std::uint32_t>(rng() % 6),
                         .sink_blocks = static_cast<std::uint32_t>(rng() % 3),
                         .recent_blocks = static_cast<std::uint32_t>(1 + rng() % 2)};
        std::vector<quest_paged_request> reqs;
        for (std::size_t r = 0; r < requests; ++r) reqs.push_back({b.lengths[r], b.tables[r]});
        const quest_paged_layout layout = plan_quest_paged_rows(reqs, page_size, num_pages, cfg);

        // The top-K's output: per request, keep distinct middle positions in a random order.
        std::vector<std::uint32_t> positions(layout.positions);
        std::vector<std::vector<std::uint32_t>> chosen(requests);
        for (std::size_t r = 0; r < requests; ++r) {
            const quest_paged_row& row = layout.rows[r];
            std::vector<std::uint32_t> middle(row.middle_end - row.middle_begin);
            std::iota(middle.begin(), middle.end(), 0u);
            std::shuffle(middle.begin(), middle.end(), rng);
            for (std::uint32_t i = 0; i < row.keep; ++i) positions[row.positions_begin + i] = middle[i];
            for (std::uint32_t c = 0; c < row.middle_begin; ++c) chosen[r].push_back(c);
            for (std::uint32_t i = 0; i < row.keep; ++i) chosen[r].push_back(row.middle_begin + middle[i]);
            for (std::uint32_t c = row.middle_end; c < row.num_blocks; ++c) chosen[r].push_back(c);
            const quest_plan plan = plan_quest_selection(row.num_blocks, page_size, cfg);
            CHECK(row.keep == plan.middle_keep);
            CHECK(row.count() == (plan.load_all ? row.num_blocks : quest_budget_blocks(cfg, page_size)));
        }
        std::vector<quest_request_pages> host;
        for (std::size_t r = 0; r < requests; ++r) host.push_back({b.tables[r], b.lengths[r], chosen[r]});
        const paged_kv_indices want = quest_paged_kv_indices(host, page_size);

        const device_like_output got = run_threads(layout, positions);
        CHECK(layout.indptr == want.indptr);
        CHECK(got.indices == want.indices);
        CHECK(got.last_page_len == want.last_page_len);
        CHECK(std::ranges::all_of(got.writes, [](int w) { return w == 1; }));
    }
}

TEST_CASE("paged_kv_row: positions left unwritten after a NaN are clamped, every slot still written once") {
    std::mt19937_64 rng(7);
    const random_batch b = make_batch(rng, 3, 16, 512, 16 * 300);
    const quest_config cfg{.num_layers = 1, .num_blocks = 512, .num_kv_heads = 1, .head_dim = 8, .token_budget = 512};
    std::vector<quest_paged_request> reqs;
    for (std::size_t r = 0; r < 3; ++r) reqs.push_back({b.lengths[r], b.tables[r]});
    const quest_paged_layout layout = plan_quest_paged_rows(reqs, 16, 512, cfg);
    std::vector<std::uint32_t> positions(layout.positions, 0xffffffffu);  // what a poisoned buffer holds
    const device_like_output got = run_threads(layout, positions);
    CHECK(std::ranges::all_of(got.writes, [](int w) { return w == 1; }));
    CHECK(std::ranges::all_of(got.indices, [](std::int32_t p) { return p >= 0 && p < 512; }));
}

TEST_CASE("paged_kv_row: the planner refuses bad input before building anything") {
    const std::vector<std::int32_t> table{0, 1, 2};
    const quest_config cfg{.num_layers = 1, .num_blocks = 8, .num_kv_heads = 1, .head_dim = 8, .token_budget = 64};
    const auto plan = [&](std::vector<quest_paged_request> reqs, std::uint32_t page_size, std::uint32_t pages,
                          quest_config c) { return plan_quest_paged_rows(reqs, page_size, pages, c); };
    CHECK_THROWS_AS(plan({{40, table}}, 0, 8, cfg), config_error);  // page_size 0
    CHECK_THROWS_AS(plan({}, 16, 8, cfg), usage_error);             // empty batch
    CHECK_THROWS_AS(plan({{0, table}}, 16, 8, cfg), usage_error);   // empty request
    CHECK_THROWS_AS(plan({{49, table}}, 16, 8, cfg), usage_error);  // table too short
    CHECK_THROWS_AS(plan({{40, table}}, 16, 2, cfg), usage_error);  // page out of range
    quest_config zero = cfg;
    zero.token_budget = 0;
    CHECK_THROWS_AS(plan({{40, table}}, 16, 8, zero), config_error);  // budget of 0
    try {
        (void)plan({{40, table}}, 16, 2, cfg);
    } catch (const usage_error& e) {
        CHECK(std::string(e.what()).find("page 2 of logical block 2") != std::string::npos);
    }
}

namespace {

// The test's own order-preserving bits of a non-NaN float (the kernel uses
// cuda/select_key.cuh's ordered_bits): -0.0 as +0.0, negatives flipped.
std::uint32_t test_ordered_bits(float s) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(s);
    if ((u & 0x7fffffffu) == 0) u = 0;
    return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// select_top_paged's CTA, step for step: `threads` threads stride over the
// keys to fill each pass's histogram, the 32 lanes of one warp pick the
// digit from an exclusive scan of their bins' sums, then the compaction
// walks the keys a CTA-wide chunk at a time, two exclusive scans per chunk
// (keys tied with the threshold, then keys taken), writing positions in
// order. Returns the positions written.
std::vector<std::uint32_t> run_cta(const std::vector<float>& scores, std::uint32_t k, std::uint32_t threads) {
    const auto n = static_cast<std::uint32_t>(scores.size());
    std::vector<std::uint32_t> keys(n);
    for (std::uint32_t i = 0; i < n; ++i) keys[i] = test_ordered_bits(scores[i]);
    cta_radix_cut cut = cta_radix_start(n, k);
    if (cta_radix_needs_passes(n, k))
        for (int pass = 0; pass < cta_radix_passes; ++pass) {
            std::uint32_t hist[cta_radix_bins] = {};
            for (std::uint32_t t = 0; t < threads; ++t)
                for (std::uint32_t i = t; i < n; i += threads)
                    if (cta_radix_in_prefix(keys[i], cut.threshold, pass)) ++hist[cta_radix_digit(keys[i], pass)];
            std::uint32_t before = 0;
            int pickers = 0;
            cta_radix_pick pick;
            for (std::uint32_t lane = 0; lane < 32; ++lane) {
                pickers += cta_radix_pick_in_lane(hist, lane, before, cut.rank, pick) ? 1 : 0;
                before += cta_radix_lane_sum(hist, lane);
            }
            REQUIRE(pickers == 1);  // exactly one lane finds the rank
            cut = cta_radix_narrow(cut, pass, pick);
        }
    std::vector<std::uint32_t> out;
    std::uint32_t tied_seen = 0;
    for (std::uint32_t base = 0; base < n; base += threads) {
        std::uint32_t chunk_tied = 0;
        std::vector<std::uint32_t> tied_before(threads);
        for (std::uint32_t t = 0; t < threads; ++t) {  // exclusive scan of the ties
            tied_before[t] = tied_seen + chunk_tied;
            const std::uint32_t i = base + t;
            chunk_tied += (i < n && keys[i] == cut.threshold) ? 1u : 0u;
        }
        for (std::uint32_t t = 0; t < threads; ++t) {  // exclusive scan of the takes: slots in thread order
            const std::uint32_t i = base + t;
            if (i < n && cta_radix_takes(keys[i], cut, tied_before[t])) out.push_back(i);
        }
        tied_seen += chunk_tied;
    }
    return out;
}

// The reference: positions stably sorted by score, the first k, in position order.
std::vector<std::uint32_t> lowest_k(const std::vector<float>& scores, std::uint32_t k) {
    std::vector<std::uint32_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return scores[a] < scores[b]; });
    order.resize(std::min<std::size_t>(k, order.size()));
    std::sort(order.begin(), order.end());
    return order;
}

}  // namespace

TEST_CASE("cta_radix_select: the k lowest scores, ties to the lower position, on long random inputs") {
    std::mt19937_64 rng(46);
    const float inf = std::numeric_limits<float>::infinity();
    for (int trial = 0; trial < 400; ++trial) {
        const auto n = static_cast<std::uint32_t>(1 + rng() % 5000);
        // Few distinct values (heavy ties), or spread ones; -0.0 and +0.0,
        // infinities (a block without metadata scores -inf after Quest's
        // negation) and tiny negatives on every digit boundary.
        const bool ties = trial % 2 == 0;
        std::vector<float> scores(n);
        for (float& s : scores) {
            const std::uint64_t pick = rng() % 100;
            if (pick < 2)
                s = -inf;
            else if (pick < 3)
                s = inf;
            else if (pick < 5)
                s = (pick == 3) ? -0.0f : 0.0f;
            else if (ties)
                s = static_cast<float>(static_cast<int>(rng() % 7) - 3) * 0.5f;
            else
                s = std::ldexp(static_cast<float>(rng() % 2000001) / 1e6f - 1.0f, static_cast<int>(rng() % 40) - 20);
        }
        const std::uint32_t k = trial % 10 == 0   ? 0
                                : trial % 10 == 1 ? n
                                : trial % 10 == 2 ? n + 5
                                                  : static_cast<std::uint32_t>(rng() % (n + 1));
        const std::uint32_t threads = (trial % 3 == 0) ? 512 : (trial % 3 == 1) ? 256 : 96;
        const std::vector<std::uint32_t> want = lowest_k(scores, k);
        INFO("n " << n << ", k " << k << ", threads " << threads << (ties ? ", ties" : ""));
        REQUIRE(run_cta(scores, k, threads) == want);
    }
}

TEST_CASE("cta_radix_select: each digit and prefix step, worked by hand") {
    // Keys 0x01020304 and 0x01020305 share three digits; pass 3 splits them.
    STATIC_REQUIRE(cta_radix_digit(0x01020304u, 0) == 0x01u);
    STATIC_REQUIRE(cta_radix_digit(0x01020304u, 3) == 0x04u);
    STATIC_REQUIRE(cta_radix_in_prefix(0x01020305u, 0x01020300u, 3));
    STATIC_REQUIRE(!cta_radix_in_prefix(0x01030305u, 0x01020300u, 2));
    STATIC_REQUIRE(cta_radix_in_prefix(0xffffffffu, 0u, 0));
    // Three of 0x00, two of 0x01 ...: rank 4 lies in bin 1, with 3 below.
    std::uint32_t hist[cta_radix_bins] = {3, 2, 1};
    cta_radix_pick pick;
    REQUIRE(cta_radix_pick_in_lane(hist, 0, 0, 4, pick));
    REQUIRE((pick.digit == 1 && pick.below == 3));
    REQUIRE(!cta_radix_pick_in_lane(hist, 1, 6, 4, pick));
    const cta_radix_cut cut = cta_radix_narrow({0, 4}, 0, {1, 3});
    REQUIRE((cut.threshold == 0x01000000u && cut.rank == 1));
    REQUIRE(cta_radix_takes(0x00ffffffu, cut, 9));
    REQUIRE(cta_radix_takes(0x01000000u, cut, 0));
    REQUIRE(!cta_radix_takes(0x01000000u, cut, 1));
}
