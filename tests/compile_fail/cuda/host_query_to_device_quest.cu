// expect-error: no suitable user-defined conversion from .*selection_context.* to .*device_selection_context
// The issue-13 crash the other way round: a host query handed to the
// device Quest. Its select takes a device_selection_context (the query a
// device_span), and a host selection_context does not convert to it.
#include <kvpolicy/cuda/quest.cuh>

#include <vector>

std::size_t pick(kvpolicy::cuda::device_quest& q, const std::vector<float>& host_query,
                 std::span<const kvpolicy::block_id> available, std::span<kvpolicy::block_id> out) {
    const kvpolicy::selection_context ctx{.num_q_heads = 1, .head_dim = 128, .query = host_query};
    return q.select(available, ctx, out);
}
