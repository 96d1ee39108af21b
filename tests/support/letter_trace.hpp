// Letters as keys, so the worked traces of the eviction papers read as they
// are printed (tests/eviction_part_b.cpp, tests/eviction_part_b_frequency.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvpolicy::testing {

inline std::uint64_t key(char c) { return static_cast<std::uint64_t>(c); }

/// The letters `cache` (a flat_cache) evicts, in order, as `trace` is requested.
template <class Cache>
std::vector<char> evicted_keys(Cache& cache, std::string_view trace) {
    std::vector<char> out;
    for (const char c : trace)
        if (const auto r = cache.request(key(c)); r.evicted) out.push_back(static_cast<char>(*r.evicted));
    return out;
}

}  // namespace kvpolicy::testing
