// expect-error: (could not convert|no known conversion from) .*memory_space::host.*to .*memory_space::device
// Host memory where device memory is due: a host span (or a vector) does
// not become a device span; only `device_span<T>{ptr, n}` or a device
// buffer's view() makes one.
#include <kvpolicy/core/memory_space.hpp>

#include <vector>

void consume(kvpolicy::device_span<const float> d);

void caller(const std::vector<float>& v) {
    const kvpolicy::host_span<const float> h = v;
    consume(h);
}
