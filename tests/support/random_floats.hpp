// Random inputs for the attention tests (host and device programs alike):
// n values drawn from a normal distribution of mean 0 and deviation `scale`.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace kvpolicy::testing {

inline std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float scale = 1.0f) {
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = g(rng);
    return v;
}

}  // namespace kvpolicy::testing
