// The device Quest -> paged-KV conversion's per-thread math
// (sparse/paged_kv_row.hpp), run here thread by thread as the kernel in
// cuda/quest_paged_kv.cuh runs it (a CTA per request, a thread per entry),
// against the host conversion (quest_paged_kv_indices, sparse/
// paged_kv_indices.hpp) on long random batches: random page tables, ragged
// last pages, budgets smaller and larger than the context (load-all rows),
// the top-K's positions in any order; every slot written exactly once. Then
// clamped positions after a NaN (still a permutation, still in bounds), and
// the planner's bad input refused before anything is built.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/paged_kv_indices.hpp>
#include <kvpolicy/sparse/paged_kv_row.hpp>
#include <kvpolicy/sparse/quest.hpp>

#include <algorithm>
#include <cstdint>
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
