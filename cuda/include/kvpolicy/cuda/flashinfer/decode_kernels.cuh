// FlashInfer's decode kernels for kvpolicy: the definitions behind
// instantiated.cuh's decode family and their explicit instantiations.
// Compile this header in exactly ONE translation unit of a program
// (kvpolicy's: cuda/src/flashinfer_decode.cu); include decode.cuh elsewhere.
//
// What the functions do is what FlashInfer's own driver does
// (csrc/batch_decode.cu, single_decode.cu: plan, then run), with FlashInfer's
// default parameter structs (BatchDecodeParams, SingleDecodeParams) and
// DefaultAttention without mask, window, soft cap or ALiBi. Arguments arrive
// validated by decode.cuh; a FlashInfer status other than success becomes a
// cuda_error, FlashInfer's own exceptions a usage_error.
#pragma once

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <vector>

#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/flashinfer/interop.cuh"
#include "kvpolicy/cuda/flashinfer/paged_kv.cuh"

namespace kvpolicy::cuda::flashinfer::detail {

using decode_variant = ::flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                                      /*logits_soft_cap=*/false, /*alibi=*/false>;
template <flashinfer_element T>
using batch_decode_params = ::flashinfer::BatchDecodeParams<native_t<T>, native_t<T>, native_t<T>, std::int32_t>;
template <flashinfer_element T>
using single_decode_params = ::flashinfer::SingleDecodeParams<native_t<T>, native_t<T>, native_t<T>>;
inline constexpr auto no_pos_encoding = ::flashinfer::PosEncodingMode::kNone;

// FlashInfer's work estimation is templated on the group size; the plan
// dispatches it at run time over the groups FlashInfer supports.
template <flashinfer_element T, class F>
cudaError_t with_work_estimation(std::uint32_t group, F&& f) {
    using P = batch_decode_params<T>;
    cudaError_t status = cudaErrorInvalidValue;
    const auto one = [&]<std::uint32_t G>() {
        if (group == G)
            status = f(
                ::flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<G, instantiated_head_dim,
                                                                                  no_pos_encoding, decode_variant, P>);
    };
    one.template operator()<1>();
    one.template operator()<2>();
    one.template operator()<3>();
    one.template operator()<4>();
    one.template operator()<6>();
    one.template operator()<8>();
    one.template operator()<16>();
    return status;
}

template <flashinfer_element T>
workspace_sizes batch_decode_workspace(const plan_shape& s, cudaStream_t stream) {
    using P = batch_decode_params<T>;
    workspace_sizes out;
    auto indptr = std::vector<std::int32_t>(s.kv_indptr.begin(), s.kv_indptr.end());
    call_flashinfer("DecodePlanWorkspaceSize", [&] {
        return with_work_estimation<T>(s.num_q_heads / s.num_kv_heads, [&](auto estimate) {
            return ::flashinfer::DecodePlanWorkspaceSize<instantiated_head_dim, no_pos_encoding, decode_variant, P>(
                out.float_bytes, out.int_bytes, indptr.data(), static_cast<std::uint32_t>(indptr.size() - 1),
                s.num_q_heads, s.page_size, /*enable_cuda_graph=*/false, stream, estimate);
        });
    });
    return out;
}

template <flashinfer_element T>
decode_plan_info batch_decode_plan(const plan_workspace& ws, const plan_shape& s, cudaStream_t stream) {
    using P = batch_decode_params<T>;
    ::flashinfer::DecodePlanInfo info;
    auto indptr = std::vector<std::int32_t>(s.kv_indptr.begin(), s.kv_indptr.end());
    call_flashinfer("DecodePlan", [&] {
        return with_work_estimation<T>(s.num_q_heads / s.num_kv_heads, [&](auto estimate) {
            return ::flashinfer::DecodePlan<instantiated_head_dim, no_pos_encoding, decode_variant, P>(
                ws.float_ws.data(), ws.float_ws.size(), ws.int_ws.data(), ws.pinned_int.data(), ws.int_ws.size(), info,
                indptr.data(), static_cast<std::uint32_t>(indptr.size() - 1), s.num_q_heads, s.page_size,
                /*enable_cuda_graph=*/false, stream, estimate);
        });
    });
    decode_plan_info out{};
    const std::vector<std::int64_t> v = info.ToVector();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = v[i];
    return out;
}

template <flashinfer_element T>
void batch_decode_run(const batch_decode_launch<T>& a, cudaStream_t stream) {
    using P = batch_decode_params<T>;
    using N = native_t<T>;
    ::flashinfer::DecodePlanInfo info;
    info.FromVector(std::vector<std::int64_t>(a.plan.begin(), a.plan.end()));
    auto kv = native_paged_kv(a.kv, a.batch_size);
    P params;
    params.q = native(a.q.data());
    params.paged_kv = kv;
    params.o = native(a.o.data());
    params.lse = a.lse.empty() ? nullptr : a.lse.data();
    params.num_qo_heads = a.num_q_heads;
    params.q_stride_n = static_cast<std::int32_t>(a.num_q_heads * instantiated_head_dim);
    params.q_stride_h = static_cast<std::int32_t>(instantiated_head_dim);
    params.window_left = -1;
    params.logits_soft_cap = 0.0f;
    params.sm_scale = a.sm_scale;
    params.rope_rcp_scale = 1.0f;
    params.rope_rcp_theta = 1.0f / 1e4f;
    void* const float_ws = a.float_ws.data();
    void* const int_ws = a.int_ws.data();
    params.request_indices = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.request_indices_offset);
    params.kv_tile_indices = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.kv_tile_indices_offset);
    params.o_indptr = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.o_indptr_offset);
    params.kv_chunk_size_ptr = ::flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_ws, info.kv_chunk_size_ptr_offset);
    N* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
        tmp_v = ::flashinfer::GetPtrFromBaseOffset<N>(float_ws, info.v_offset);
        tmp_s = ::flashinfer::GetPtrFromBaseOffset<float>(float_ws, info.s_offset);
    }
    params.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
    call_flashinfer("BatchDecodeWithPagedKVCacheDispatched", [&] {
        return ::flashinfer::BatchDecodeWithPagedKVCacheDispatched<instantiated_head_dim, no_pos_encoding,
                                                                   decode_variant, P>(params, tmp_v, tmp_s,
                                                                                      /*enable_pdl=*/false, stream);
    });
}

template <flashinfer_element T>
void single_decode_run(const single_decode_launch<T>& a, cudaStream_t stream) {
    using P = single_decode_params<T>;
    P params(native(a.q.data()), native(a.k.data()), native(a.v.data()), native(a.o.data()),
             /*maybe_alibi_slopes=*/nullptr, a.kv_len, a.num_q_heads, a.num_kv_heads, ::flashinfer::QKVLayout::kNHD,
             instantiated_head_dim, /*window_left=*/-1, /*logits_soft_cap=*/0.0f, a.sm_scale, /*rope_scale=*/1.0f,
             /*rope_theta=*/1e4f);
    call_flashinfer("SingleDecodeWithKVCacheDispatched", [&] {
        return ::flashinfer::SingleDecodeWithKVCacheDispatched<instantiated_head_dim, no_pos_encoding, decode_variant,
                                                               P>(
            params, a.tmp.empty() ? nullptr : native(a.tmp.data()), stream);
    });
}

// ---- the instantiations (this header's one translation unit) ----
#define KVPOLICY_FLASHINFER_DECODE(T)                                                                       \
    template workspace_sizes batch_decode_workspace<T>(const plan_shape&, cudaStream_t);                    \
    template decode_plan_info batch_decode_plan<T>(const plan_workspace&, const plan_shape&, cudaStream_t); \
    template void batch_decode_run<T>(const batch_decode_launch<T>&, cudaStream_t);                         \
    template void single_decode_run<T>(const single_decode_launch<T>&, cudaStream_t);
KVPOLICY_FLASHINFER_DECODE(bf16)
KVPOLICY_FLASHINFER_DECODE(fp16)
#undef KVPOLICY_FLASHINFER_DECODE

}  // namespace kvpolicy::cuda::flashinfer::detail
