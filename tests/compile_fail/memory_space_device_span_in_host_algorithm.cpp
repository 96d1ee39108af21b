// expect-error: no match(ing function)? for call to.*all_of
// A host algorithm over device memory: a device_span is not a range, so the
// host cannot walk it (the device Quest crash of issue 13, as a type error).
#include <kvpolicy/core/memory_space.hpp>

#include <algorithm>
#include <cmath>

bool all_finite(kvpolicy::device_span<const float> query) {
    return std::ranges::all_of(query, [](float q) { return std::isfinite(q); });
}
