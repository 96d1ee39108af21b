// expect-error: cannot convert .*basic_prefill_qkv_view<kvpolicy::memory_space::device>.* to .*prefill_qkv_view
// Device prefill views handed to the host MInference: its
// sparse_prefill_attention takes host views, and the memory space is part of
// the view's type, so device pointers never reach host loops.
#include <kvpolicy/sparse/minference.hpp>

void prefill(kvpolicy::minference& m, const kvpolicy::device_prefill_qkv_view& in,
             const kvpolicy::device_prefill_output_view& out) {
    m.sparse_prefill_attention(in, kvpolicy::layer_index{0}, out);
}
