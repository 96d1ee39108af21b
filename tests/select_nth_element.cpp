// The host victim selector against a full sort of (score, id) pairs.
#include <catch2/catch.hpp>

#include <kvpolicy/select/nth_element_selector.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {
std::vector<item_id> by_full_sort(const std::vector<double>& scores, const std::vector<item_id>& ids, std::size_t k) {
    std::vector<std::size_t> idx(ids.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        return scores[a] < scores[b] || (scores[a] == scores[b] && ids[a] < ids[b]);
    });
    std::vector<item_id> out;
    for (std::size_t i = 0; i < std::min(k, idx.size()); ++i) out.push_back(ids[idx[i]]);
    return out;
}
}  // namespace

TEST_CASE("nth_element_selector equals a full sort, ties broken by id", "[select]") {
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u, 4u));
    nth_element_selector sel;
    for (int round = 0; round < 300; ++round) {
        const std::size_t n = rng() % 500;
        std::vector<double> scores(n);
        std::vector<item_id> ids(n);
        for (std::size_t i = 0; i < n; ++i) {
            scores[i] = static_cast<double>(rng() % 20);  // many ties
            if (rng() % 10 == 0) scores[i] = std::numeric_limits<double>::infinity();
            ids[i] = item_id{static_cast<std::uint32_t>(rng() % 100000)};
        }
        const std::size_t k = n == 0 ? rng() % 3 : rng() % (n + 3);  // k = 0, k = n and k > n included
        std::vector<item_id> out(k);
        const std::size_t got = sel.select_lowest<double>(scores, ids, out);
        out.resize(got);
        REQUIRE(out == by_full_sort(scores, ids, k));
    }
}

TEST_CASE("nth_element_selector: k = 0, k = n, and NaN rejected with nothing written", "[select]") {
    nth_element_selector sel;
    const std::vector<double> scores{3, 1, 2};
    const std::vector<item_id> ids{item_id{0}, item_id{1}, item_id{2}};
    std::vector<item_id> none;
    REQUIRE(sel.select_lowest<double>(scores, ids, none) == 0);
    std::vector<item_id> all(3);
    REQUIRE(sel.select_lowest<double>(scores, ids, all) == 3);
    REQUIRE(all == std::vector<item_id>{item_id{1}, item_id{2}, item_id{0}});

    const std::vector<double> with_nan{3, std::nan(""), 2};
    std::vector<item_id> out(2, item_id{77});
    REQUIRE_THROWS_WITH(sel.select_lowest<double>(with_nan, ids, out), Catch::Contains("item 1 is NaN"));
    REQUIRE(out == std::vector<item_id>(2, item_id{77}));
    const std::vector<double> short_scores{1};
    REQUIRE_THROWS_AS(sel.select_lowest<double>(short_scores, ids, out), usage_error);
}

TEST_CASE("nth_element_selector works on float scores too", "[select]") {
    nth_element_selector sel;
    const std::vector<float> scores{0.5f, 0.25f};
    const std::vector<item_id> ids{item_id{8}, item_id{9}};
    std::vector<item_id> out(1);
    REQUIRE(sel.select_lowest<float>(scores, ids, out) == 1);
    REQUIRE(out[0] == item_id{9});
}
