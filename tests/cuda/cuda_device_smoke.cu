// The device toolchain end to end: a kernel writes, the host reads back what
// it expects. Poisoned output first, every CUDA call checked.
#include <vector>

#include "cuda_test.cuh"

namespace {
__global__ void iota_kernel(unsigned* out, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 3u + 1u;
}
}  // namespace

int main() {
    using namespace kvpolicy::cuda::testing;
    if (int rc = skip_without_device("cuda_device_smoke")) return rc;
    constexpr unsigned n = 1u << 20;
    unsigned* d = nullptr;
    KVPOLICY_CUDA_CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
    KVPOLICY_CUDA_CHECK(cudaMemset(d, 0xff, n * sizeof(unsigned)));  // poison
    iota_kernel<<<(n + 255) / 256, 256>>>(d, n);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    std::vector<unsigned> h(n);
    KVPOLICY_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    KVPOLICY_CUDA_CHECK(cudaFree(d));
    for (unsigned i = 0; i < n; i += 4099) KVPOLICY_EXPECT(h[i] == i * 3u + 1u);
    std::printf("cuda_device_smoke: %d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
