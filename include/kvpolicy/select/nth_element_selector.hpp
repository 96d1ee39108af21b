// nth_element_selector: the host victim-selection back end.
//
// Copies (score, id) pairs into a reused scratch buffer, partitions with
// `std::nth_element` around the k-th lowest and sorts only the first k:
// O(n + k log k) instead of a full sort's O(n log n). Ties are broken by id.
// The scratch buffer grows to the largest n seen and is then reused, so
// steady-state calls do not allocate.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

class nth_element_selector {
public:
    static constexpr std::string_view name = "nth_element";

    /// Effects: writes the min(out.size(), ids.size()) lowest ids, ascending
    /// by (score, id), and returns their count.
    /// Throws: usage_error if scores and ids differ in length or a score is
    /// NaN; nothing is written then.
    template <class Score>
    std::size_t select_lowest(std::span<const Score> scores, std::span<const item_id> ids, std::span<item_id> out) {
        if (scores.size() != ids.size())
            throw usage_error("select_lowest: " + std::to_string(scores.size()) + " scores for " +
                              std::to_string(ids.size()) + " ids; pass one score per id");
        for (std::size_t i = 0; i < scores.size(); ++i)
            if (std::isnan(static_cast<double>(scores[i])))
                throw usage_error("select_lowest: score of item " + std::to_string(ids[i].value) +
                                  " is NaN; check the cost model's parameters");
        const std::size_t k = std::min(out.size(), ids.size());
        if (k == 0) return 0;

        scratch_.resize(ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i) scratch_[i] = {static_cast<double>(scores[i]), ids[i].value};
        const auto by_score_then_id = [](const entry& a, const entry& b) {
            return a.score < b.score || (a.score == b.score && a.id < b.id);
        };
        if (k < scratch_.size())
            std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(k - 1), scratch_.end(),
                             by_score_then_id);
        std::sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(k), by_score_then_id);
        for (std::size_t i = 0; i < k; ++i) out[i] = item_id{scratch_[i].id};
        return k;
    }

private:
    struct entry {
        double score;
        std::uint32_t id;
    };
    std::vector<entry> scratch_;
};

static_assert(victim_selector<nth_element_selector>);
static_assert(victim_selector<nth_element_selector, float>);

}  // namespace kvpolicy
