// A naive reference for victim_batch_selector<Rule>::select_victims: drop
// the pinned candidates, sort all the others by the rule written out field by
// field (independently of the library's rank types), and take the shortest
// prefix whose blocks reach the requirement. Shared by tests/select_victims.cpp
// and the fuzzer fuzz/select_victims.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include <kvpolicy/eviction/select_victims.hpp>

namespace kvpolicy::testing {

// The rules, ties by sequence id.
inline bool naive_before(std::type_identity<lru>, const eviction_candidate& a, const eviction_candidate& b) {
    return std::tie(a.last_access_time, a.sequence_id) < std::tie(b.last_access_time, b.sequence_id);
}
inline bool naive_before(std::type_identity<fifo>, const eviction_candidate& a, const eviction_candidate& b) {
    return a.sequence_id < b.sequence_id;
}
inline bool naive_before(std::type_identity<lfu>, const eviction_candidate& a, const eviction_candidate& b) {
    return std::tie(a.access_count, a.last_access_time, a.sequence_id) <
           std::tie(b.access_count, b.last_access_time, b.sequence_id);
}
inline bool naive_before(std::type_identity<qos_aware>, const eviction_candidate& a, const eviction_candidate& b) {
    return std::tie(a.priority, a.last_access_time, a.sequence_id) <
           std::tie(b.priority, b.last_access_time, b.sequence_id);
}
// Known lifetimes first (shortest first), then known completion (most
// complete first), then the rest; the last access time breaks ties.
inline bool naive_before(std::type_identity<predictive>, const eviction_candidate& a, const eviction_candidate& b) {
    auto group = [](const eviction_candidate& c) {
        return !std::isnan(c.estimated_lifetime) ? 0 : c.max_length > 0 ? 1 : 2;
    };
    auto ratio = [](const eviction_candidate& c) {
        return static_cast<double>(c.sequence_length) / static_cast<double>(c.max_length);
    };
    if (group(a) != group(b)) return group(a) < group(b);
    if (group(a) == 0 && a.estimated_lifetime != b.estimated_lifetime)
        return a.estimated_lifetime < b.estimated_lifetime;
    if (group(a) == 1 && ratio(a) != ratio(b)) return ratio(a) > ratio(b);
    return std::tie(a.last_access_time, a.sequence_id) < std::tie(b.last_access_time, b.sequence_id);
}

struct naive_result {
    std::vector<std::uint64_t> evicted;
    std::size_t freed = 0;
};

/// Precondition: sequence ids are distinct (the selector throws otherwise).
template <class Rule>
naive_result naive_select(std::vector<eviction_candidate> candidates, std::size_t required) {
    std::erase_if(candidates, [](const eviction_candidate& c) { return c.pinned; });
    std::sort(candidates.begin(), candidates.end(), [](const eviction_candidate& a, const eviction_candidate& b) {
        return naive_before(std::type_identity<Rule>{}, a, b);
    });
    naive_result r;
    for (const auto& c : candidates) {
        if (r.freed >= required) break;
        r.evicted.push_back(c.sequence_id);
        r.freed += c.block_ids.size();
    }
    return r;
}

}  // namespace kvpolicy::testing
