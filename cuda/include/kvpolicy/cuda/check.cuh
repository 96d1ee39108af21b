// CUDA status checks and device discovery.
//
// Every CUDA call kvpolicy makes goes through `check`, which turns a failed
// status into `kvpolicy::cuda::cuda_error` naming the call, the file and line,
// and CUDA's own message. `device_count()` answers 0 on a machine with no GPU
// (where cudaGetDeviceCount returns an error and leaves the count untouched),
// so test programs can report "skipped" instead of failing.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::cuda {

class cuda_error : public kvpolicy::error {
public:
    cuda_error(cudaError_t status, const char* call, const char* file, int line)
            : kvpolicy::error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                              " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status)),
              status_(status) {}

    [[nodiscard]] cudaError_t status() const noexcept { return status_; }

private:
    cudaError_t status_;
};

inline void check(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess) throw cuda_error(status, call, file, line);
}

/// Number of usable CUDA devices; 0 where there is no GPU or no driver.
[[nodiscard]] inline int device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" status
        return 0;
    }
    return n;
}

}  // namespace kvpolicy::cuda

#define KVPOLICY_CUDA_CHECK(call) ::kvpolicy::cuda::check((call), #call, __FILE__, __LINE__)
