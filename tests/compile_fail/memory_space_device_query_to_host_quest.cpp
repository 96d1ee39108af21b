// expect-error: (could not convert|no viable conversion).*device_span.*std::span<const float>
// A device query handed to the host Quest: its selection_context holds a
// host std::span, and a device_span does not convert to it.
#include <kvpolicy/core/memory_space.hpp>
#include <kvpolicy/sparse/quest.hpp>

kvpolicy::selection_context context_for(kvpolicy::device_span<const float> d_query) {
    return kvpolicy::selection_context{.num_q_heads = 1, .head_dim = 4, .query = d_query};
}
