// Whole vectors to and from a stored KV element type (kv_element.hpp), for
// the tests that compare 16-bit K/V paths with float references: narrow
// rounds each value as the cache would store it, widen reads it back.
#pragma once

#include <cstddef>
#include <vector>

#include <kvpolicy/sparse/kv_element.hpp>

namespace kvpolicy::testing {

template <class T>
std::vector<T> narrow(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
    return out;
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
}

}  // namespace kvpolicy::testing
