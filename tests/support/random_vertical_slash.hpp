// A random vertical-slash index for the MInference tests (host, CPU-side
// kernel replays and the device test): per head, `nv` kept columns and `ns`
// kept diagonal offsets drawn without repeats from [0, n), each list
// ascending, as the estimation writes them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kvpolicy/sparse/minference.hpp"

namespace kvpolicy::testing {

inline vertical_slash_index random_index(std::mt19937_64& rng, std::uint32_t heads, std::uint32_t n, std::uint32_t nv,
                                         std::uint32_t ns) {
    vertical_slash_index x{heads,
                           n,
                           nv,
                           ns,
                           std::vector<std::uint32_t>(std::size_t{heads} * nv),
                           std::vector<std::uint32_t>(std::size_t{heads} * ns)};
    std::vector<std::uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    for (std::uint32_t h = 0; h < heads; ++h) {
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + nv);
        std::copy_n(all.begin(), nv, x.verticals.begin() + std::ptrdiff_t{h} * nv);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + ns);
        std::copy_n(all.begin(), ns, x.slashes.begin() + std::ptrdiff_t{h} * ns);
    }
    return x;
}

}  // namespace kvpolicy::testing
