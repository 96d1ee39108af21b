// FlashInfer's causal prefill kernels for kvpolicy: the definitions behind
// instantiated.cuh's prefill family and their explicit instantiations.
// Compile this header in exactly ONE translation unit of a program
// (kvpolicy's: cuda/src/flashinfer_prefill.cu); include prefill.cuh elsewhere.
//
// As FlashInfer's own driver (csrc/batch_prefill.cu, batch_prefill_paged.cuh,
// single_prefill.cu): PrefillPlan on the host indptrs, then the paged kernel
// for the CTA tile the plan chose (16, 64 or 128: the tiles its planner picks
// at head_dim 128; the jinja template instantiates the same three), causal or
// unmasked, and FlashInfer's in-place LSE merge of two partial outputs; the dense
// baseline is FlashInfer's single-request prefill, which picks its own tile.
#pragma once

#include <flashinfer/attention/cascade.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <string>
#include <vector>

#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/flashinfer/interop.cuh"
#include "kvpolicy/cuda/flashinfer/paged_kv.cuh"

namespace kvpolicy::cuda::flashinfer::detail {

using prefill_variant = ::flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                                       /*logits_soft_cap=*/false, /*alibi=*/false>;
template <flashinfer_element T>
using paged_prefill_params = ::flashinfer::BatchPrefillPagedParams<native_t<T>, native_t<T>, native_t<T>, std::int32_t>;
template <flashinfer_element T>
using single_prefill_params = ::flashinfer::SinglePrefillParams<native_t<T>, native_t<T>, native_t<T>>;

template <flashinfer_element T>
cudaError_t prefill_plan_impl(bool materialize, const plan_workspace* ws, const plan_shape& s, std::uint32_t total_rows,
                              cudaStream_t stream, workspace_sizes& sizes, ::flashinfer::PrefillPlanInfo& info) {
    auto qo = std::vector<std::int32_t>(s.qo_indptr.begin(), s.qo_indptr.end());
    auto kv = std::vector<std::int32_t>(s.kv_indptr.begin(), s.kv_indptr.end());
    const auto batch = static_cast<std::uint32_t>(qo.size() - 1);
    constexpr std::uint32_t d = instantiated_head_dim;
    if (!materialize)
        return ::flashinfer::PrefillPlanWorkspaceSize<std::int32_t>(
            sizes.float_bytes, sizes.int_bytes, qo.data(), kv.data(), total_rows, batch, s.num_q_heads, s.num_kv_heads,
            d, d, s.page_size, /*enable_cuda_graph=*/false, sizeof(T), /*window_left=*/-1,
            /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, stream,
            sizeof(T));
    return ::flashinfer::PrefillPlan<std::int32_t>(
        ws->float_ws.data(), ws->float_ws.size(), ws->int_ws.data(), ws->pinned_int.data(), ws->int_ws.size(), info,
        qo.data(), kv.data(), total_rows, batch, s.num_q_heads, s.num_kv_heads, d, d, s.page_size,
        /*enable_cuda_graph=*/false, sizeof(T), /*window_left=*/-1, /*fixed_split_size=*/-1,
        /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, stream, sizeof(T));
}

template <flashinfer_element T>
workspace_sizes batch_prefill_workspace(const plan_shape& s, std::uint32_t total_rows, cudaStream_t stream) {
    workspace_sizes out;
    ::flashinfer::PrefillPlanInfo info;
    call_flashinfer("PrefillPlanWorkspaceSize",
                    [&] { return prefill_plan_impl<T>(false, nullptr, s, total_rows, stream, out, info); });
    return out;
}

template <flashinfer_element T>
prefill_plan_info batch_prefill_plan(const plan_workspace& ws, const plan_shape& s, std::uint32_t total_rows,
                                     cudaStream_t stream) {
    workspace_sizes unused;
    ::flashinfer::PrefillPlanInfo info;
    call_flashinfer("PrefillPlan",
                    [&] { return prefill_plan_impl<T>(true, &ws, s, total_rows, stream, unused, info); });
    prefill_plan_info out{};
    const std::vector<std::int64_t> v = info.ToVector();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = v[i];
    return out;
}

template <flashinfer_element T, ::flashinfer::MaskMode Mask>
cudaError_t batch_prefill_paged_dispatch(typename paged_prefill_params<T>::DTypeO* tmp_v, float* tmp_s,
                                         paged_prefill_params<T>& params, std::int64_t cta_tile_q,
                                         cudaStream_t stream) {
    using P = paged_prefill_params<T>;
    constexpr std::uint32_t d = instantiated_head_dim;
    constexpr auto none = ::flashinfer::PosEncodingMode::kNone;
    switch (cta_tile_q) {
        case 16:
            return ::flashinfer::BatchPrefillWithPagedKVCacheDispatched<false, 16, d, d, none, false, Mask,
                                                                        prefill_variant, P>(params, tmp_v, tmp_s, false,
                                                                                            stream);
        case 64:
            return ::flashinfer::BatchPrefillWithPagedKVCacheDispatched<false, 64, d, d, none, false, Mask,
                                                                        prefill_variant, P>(params, tmp_v, tmp_s, false,
                                                                                            stream);
        case 128:
            return ::flashinfer::BatchPrefillWithPagedKVCacheDispatched<false, 128, d, d, none, false, Mask,
                                                                        prefill_variant, P>(params, tmp_v, tmp_s, false,
                                                                                            stream);
        default:
            throw config_error("flashinfer batch prefill: the plan chose CTA tile " + std::to_string(cta_tile_q) +
                               ", which kvpolicy does not instantiate (16, 64, 128 at head_dim 128)");
    }
}

template <flashinfer_element T>
void batch_prefill_paged_run(const batch_prefill_paged_launch<T>& a, cudaStream_t stream) {
    using P = paged_prefill_params<T>;
    using N = native_t<T>;
    ::flashinfer::PrefillPlanInfo info;
    info.FromVector(std::vector<std::int64_t>(a.plan.begin(), a.plan.end()));
    auto kv = native_paged_kv(a.kv, a.batch_size);
    P params(native(a.q.data()), kv, /*maybe_custom_mask=*/nullptr, mutable_ids(a.qo_indptr.data()),
             /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr, native(a.o.data()),
             a.lse.empty() ? nullptr : a.lse.data(),
             /*maybe_alibi_slopes=*/nullptr, a.num_q_heads,
             static_cast<std::int32_t>(a.num_q_heads * instantiated_head_dim),
             static_cast<std::int32_t>(instantiated_head_dim), /*window_left=*/-1, /*logits_soft_cap=*/0.0f, a.sm_scale,
             /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    void* const float_ws = a.float_ws.data();
    void* const int_ws = a.int_ws.data();
    params.request_indices = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.request_indices_offset);
    params.qo_tile_indices = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.qo_tile_indices_offset);
    params.kv_tile_indices = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.kv_tile_indices_offset);
    params.o_indptr = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.o_indptr_offset);
    params.kv_chunk_size_ptr = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.kv_chunk_size_ptr_offset);
    N* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
        params.merge_indptr = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.merge_indptr_offset);
        tmp_v = ::flashinfer::GetPtrFromBaseOffset<N>(float_ws, info.v_offset);
        tmp_s = ::flashinfer::GetPtrFromBaseOffset<float>(float_ws, info.s_offset);
    }
    params.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
    params.max_total_num_rows = static_cast<std::uint32_t>(info.total_num_rows);
    call_flashinfer("BatchPrefillWithPagedKVCacheDispatched", [&]() -> cudaError_t {
        return a.causal ? batch_prefill_paged_dispatch<T, ::flashinfer::MaskMode::kCausal>(tmp_v, tmp_s, params,
                                                                                           info.cta_tile_q, stream)
                        : batch_prefill_paged_dispatch<T, ::flashinfer::MaskMode::kNone>(tmp_v, tmp_s, params,
                                                                                         info.cta_tile_q, stream);
    });
}

template <flashinfer_element T>
void merge_state_in_place(device_span<T> o, device_span<float> lse, device_span<T> o_other,
                          device_span<float> lse_other, std::uint32_t rows, std::uint32_t num_heads,
                          cudaStream_t stream) {
    call_flashinfer("MergeStateInPlace", [&] {
        return ::flashinfer::MergeStateInPlace(native(o.data()), lse.data(), native(o_other.data()), lse_other.data(),
                                               rows, num_heads, instantiated_head_dim, /*mask=*/nullptr, stream);
    });
}

template <flashinfer_element T>
void single_prefill_causal_run(const single_prefill_launch<T>& a, cudaStream_t stream) {
    using P = single_prefill_params<T>;
    constexpr std::uint32_t d = instantiated_head_dim;
    P params(native(a.q.data()), native(a.k.data()), native(a.v.data()), /*maybe_custom_mask=*/nullptr,
             native(a.o.data()), /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr, a.num_q_heads, a.num_kv_heads,
             a.qo_len, a.kv_len, /*q_stride_n=*/a.num_q_heads * d, /*q_stride_h=*/d,
             /*kv_stride_n=*/a.num_kv_heads * d, /*kv_stride_h=*/d, d, /*window_left=*/-1,
             /*logits_soft_cap=*/0.0f, a.sm_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    call_flashinfer("SinglePrefillWithKVCacheDispatched", [&] {
        return ::flashinfer::SinglePrefillWithKVCacheDispatched<d, d, ::flashinfer::PosEncodingMode::kNone, false,
                                                                ::flashinfer::MaskMode::kCausal, prefill_variant, P>(
            params, /*tmp=*/nullptr, stream);
    });
}

#define KVPOLICY_FLASHINFER_PREFILL(T)                                                                            \
    template workspace_sizes batch_prefill_workspace<T>(const plan_shape&, std::uint32_t, cudaStream_t);          \
    template prefill_plan_info batch_prefill_plan<T>(const plan_workspace&, const plan_shape&, std::uint32_t,     \
                                                     cudaStream_t);                                               \
    template void batch_prefill_paged_run<T>(const batch_prefill_paged_launch<T>&, cudaStream_t);                 \
    template void merge_state_in_place<T>(device_span<T>, device_span<float>, device_span<T>, device_span<float>, \
                                          std::uint32_t, std::uint32_t, cudaStream_t);                            \
    template void single_prefill_causal_run<T>(const single_prefill_launch<T>&, cudaStream_t);
KVPOLICY_FLASHINFER_PREFILL(bf16)
KVPOLICY_FLASHINFER_PREFILL(fp16)
#undef KVPOLICY_FLASHINFER_PREFILL

}  // namespace kvpolicy::cuda::flashinfer::detail
