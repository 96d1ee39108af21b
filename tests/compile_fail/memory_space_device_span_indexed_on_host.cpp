// expect-error: (no match for .*operator\[\].*operand types are|no viable overloaded operator\[\] for type) .*device_span
// Host code reading device memory through a device_span's operator[].
// (Under nvcc the operator exists but is __device__; that case is
// tests/compile_fail/cuda/device_span_indexed_on_host.cu.)
#include <kvpolicy/core/memory_space.hpp>

float first_value(kvpolicy::device_span<const float> d) { return d[0]; }
