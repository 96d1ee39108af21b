// A tiny harness for device test programs: CTest marks a program that exits
// 77 as skipped, which is what every program here does on a machine with no
// GPU. Checks count failures and report them with file and line.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <kvpolicy/cuda/check.cuh>

namespace kvpolicy::cuda::testing {
inline constexpr int skip_code = 77;
inline int failures = 0;

inline int skip_without_device(const char* program) {
    if (device_count() == 0) {
        std::printf("%s: no CUDA device on this machine: skipped\n", program);
        return skip_code;
    }
    return 0;
}

/// How much smaller the largest inputs are: 10 when KVPOLICY_CUDA_TEST_SCALE
/// is "small" (scripts/gpu-check.sh sets it for compute-sanitizer, where
/// racecheck made a 10^6-score selection run past five minutes), else 1.
/// Every code path still runs; only the item counts of the big cases shrink.
inline std::size_t large_input_divisor() {
    const char* scale = std::getenv("KVPOLICY_CUDA_TEST_SCALE");
    return scale != nullptr && std::string_view(scale) == "small" ? 10 : 1;
}
}  // namespace kvpolicy::cuda::testing

#define KVPOLICY_EXPECT(cond)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            std::printf("%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
            ++::kvpolicy::cuda::testing::failures;                                     \
        }                                                                              \
    } while (0)
