// kvpolicy's paged_kv_launch as FlashInfer's paged_kv_t, for the decode and
// prefill kernel headers: an NHD cache read through explicit strides, so
// kvpolicy's page ids may address an engine's tensor without a copy
// (sparse/paged_kv_indices.hpp's vertical_slash_strides).
#pragma once

#include <flashinfer/page.cuh>

#include <cstdint>

#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/flashinfer/interop.cuh"

namespace kvpolicy::cuda::flashinfer::detail {

template <flashinfer_element T>
::flashinfer::paged_kv_t<native_t<T>, std::int32_t> native_paged_kv(const paged_kv_launch<T>& kv,
                                                                    std::uint32_t batch_size) {
    const std::int64_t strides[3] = {kv.page_stride, kv.token_stride, instantiated_head_dim};  // NHD; copied
    return ::flashinfer::paged_kv_t<native_t<T>, std::int32_t>(
        kv.num_kv_heads, kv.page_size, instantiated_head_dim, batch_size, ::flashinfer::QKVLayout::kNHD,
        native(kv.k.data()), native(kv.v.data()), strides, strides, mutable_ids(kv.indices.data()),
        mutable_ids(kv.indptr.data()), mutable_ids(kv.last_page_len.data()));
}

}  // namespace kvpolicy::cuda::flashinfer::detail
