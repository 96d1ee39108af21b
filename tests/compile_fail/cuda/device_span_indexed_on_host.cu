// expect-error: calling a __device__ function.*operator \[\].*from a __host__ function
// Host code reading device memory: under nvcc a device_span's operator[]
// exists, but it is __device__, so a host call does not compile.
#include <kvpolicy/core/memory_space.hpp>

float first_value(kvpolicy::device_span<const float> d) { return d[0]; }
