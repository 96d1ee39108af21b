// expect-error: calling a __host__ function.*operator \[\].*from a __global__ function
// A kernel reading host memory: a host_span's element access is host-only.
#include <kvpolicy/core/memory_space.hpp>

__global__ void read_host(kvpolicy::host_span<const float> h, float* out) { out[0] = h[0]; }
