// Host vectors of 16-bit K/V elements for the FlashInfer tests (bf16 and
// fp16 through kvpolicy's exact conversions, sparse/kv_element.hpp), and
// how close each type's attention output must come to the double reference.
#pragma once

#include <concepts>
#include <cstddef>
#include <vector>

#include <kvpolicy/sparse/kv_element.hpp>

namespace kvpolicy::cuda::testing {

template <class T>
const char* element_name() {
    return std::same_as<T, bf16> ? "bf16" : "fp16";
}
// bf16 keeps 8 bits of mantissa, fp16 11: the output's rounding dominates.
template <class T>
float element_tolerance() {
    return std::same_as<T, bf16> ? 2e-2f : 4e-3f;
}
template <class T>
std::vector<T> to_elements(const std::vector<float>& x) {
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = from_float<T>(x[i]);
    return out;
}
template <class T>
std::vector<float> to_floats(const std::vector<T>& x) {
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = to_float(x[i]);
    return out;
}

}  // namespace kvpolicy::cuda::testing
