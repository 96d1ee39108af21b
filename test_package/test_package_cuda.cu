// A consumer of kvpolicy::cuda: device code that needs C++20 (a concept and
// a requires-clause on a kernel), so it fails to build if the package did not
// give nvcc -std=c++20; the kernel takes a device_span from the package's
// device_buffer (memory spaces in the type). Runs where there is a GPU;
// elsewhere it was enough to build it.
#include <concepts>
#include <cstdio>

#include <kvpolicy/cuda/check.cuh>
#include <kvpolicy/cuda/memory.cuh>
#include <kvpolicy/eviction/lru.hpp>

static_assert(kvpolicy::eviction_policy<kvpolicy::lru>);

template <class T>
requires std::unsigned_integral<T> __global__ void fill_ids(kvpolicy::device_span<T> out) {
    const T i = static_cast<T>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < out.size()) out[i] = i;
}

int main() {
    if (kvpolicy::cuda::device_count() == 0) {
        std::printf("kvpolicy test_package_cuda: built; no GPU here, not run\n");
        return 0;
    }
    constexpr unsigned n = 1000;
    kvpolicy::cuda::device_buffer<unsigned> ids(n);
    fill_ids<<<(n + 255) / 256, 256>>>(ids.view(n));
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    unsigned last = 0;
    KVPOLICY_CUDA_CHECK(cudaMemcpy(&last, ids.get() + n - 1, sizeof last, cudaMemcpyDeviceToHost));
    std::printf("kvpolicy test_package_cuda: last id %u\n", last);
    return last == n - 1 ? 0 : 1;
}
