// expect-error: no suitable user-defined conversion from .*host_span<const float>.* to .*device_span<const float>
// Host memory handed to a kernel launch whose parameter is a device span.
#include <kvpolicy/core/memory_space.hpp>

#include <vector>

__global__ void scale(kvpolicy::device_span<const float> in, kvpolicy::device_span<float> out) {
    if (threadIdx.x < in.size()) out[threadIdx.x] = 2.0f * in[threadIdx.x];
}

void launch(const std::vector<float>& host_in, kvpolicy::device_span<float> out) {
    scale<<<1, 32>>>(kvpolicy::host_span<const float>{host_in}, out);
}
