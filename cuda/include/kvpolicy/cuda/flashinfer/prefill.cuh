// Prefill attention on FlashInfer's kernels: the batched paged prefill that
// MInference's indices feed (sparse/paged_kv_indices.hpp,
// `minference_sparse_prefill_indices`), and the dense causal baseline.
//
// - `batch_prefill_paged<T>`: FlashInfer's BatchPrefillWithPagedKVCache,
//   causal (query row t of a request sees its kv entries <= t + kv_len -
//   qo_len) or unmasked, plan once per layout (both indptrs on the host),
//   run per layer, with the LSE (base 2, FlashInfer's) if asked.
// - `minference_prefill<T>`: MInference's vertical-slash prefill over
//   `sparse_prefill_indices` (sparse/paged_kv_indices.hpp), two batched
//   launches of the above merged by FlashInfer's LSE merge: the slash pages
//   (page_size tokens of one KV head, causal, the block's diagonal pages
//   last) and the vertical columns (one-token pages, no mask; requests
//   without columns allowed). One FlashInfer request per (KV head, query
//   block); its pages alias the key tensor [num_tokens][num_kv_heads]
//   [head_dim] (page stride head_dim, token stride num_kv_heads x head_dim:
//   no copy of K or V). FlashInfer gives a request one contiguous run of
//   query rows (qo_indptr) under one q stride, so a KV head's rows must be
//   contiguous: q is permuted to head-major [num_kv_heads][num_tokens]
//   [group][head_dim] before the launches and o back after them (one copy
//   kernel each way, counted in its time); the caller's q, k, v and o stay
//   [num_tokens][heads][head_dim].
// - `dense_causal_prefill`: FlashInfer's single-request causal prefill.
// bf16 or fp16 in and out, fp32 softmax inside FlashInfer, head_dim 128 and
// the instantiated groups only (flashinfer/instantiated.cuh), checked before
// any launch. Include only in programs that link kvpolicy::flashinfer and
// the instantiations (kvpolicy_flashinfer_kernels, or prefill_kernels.cuh in
// one translation unit of your own).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/flashinfer/decode.cuh"
#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/sparse/paged_kv_indices.hpp"

namespace kvpolicy::cuda::flashinfer {

/// Which keys a prefill query row sees among its request's.
enum class prefill_mask : std::uint8_t {
    causal,  ///< row t of qo_len sees entries e <= t + kv_len - qo_len
    none,    ///< every entry
};

/// FlashInfer's batch prefill over paged KV (see the header paragraph).
template <flashinfer_element T>
class batch_prefill_paged {
public:
    explicit batch_prefill_paged(cudaStream_t stream = cudaStreamPerThread) : stream_(stream) {}

    /// Effects: FlashInfer's PrefillPlan for requests whose query rows are
    /// qo_indptr's and pages kv_indptr's (host), into this object's
    /// workspaces; waits for the schedule's copy.
    /// With `prefill_mask::none`, requests without pages are allowed (their
    /// rows get o = 0 and lse = -inf, the merge's identity).
    /// Throws: config_error for what is not instantiated or page_size 0;
    /// usage_error if the indptrs are not CSRs of the same batch of requests
    /// with rows (and, causal, pages; nothing planned); cuda_error.
    void plan(host_span<const std::int32_t> qo_indptr, host_span<const std::int32_t> kv_indptr,
              const attention_heads& heads, std::uint32_t page_size, prefill_mask mask = prefill_mask::causal) {
        const std::string who = "flashinfer::batch_prefill_paged::plan";
        detail::check_heads(heads, who);
        if (page_size == 0) throw config_error(who + ": page_size is 0; give the tokens per page");
        detail::check_indptr(kv_indptr, who + " (kv_indptr)", mask == prefill_mask::none);
        detail::check_indptr(qo_indptr, who + " (qo_indptr)");
        if (qo_indptr.size() != kv_indptr.size())
            throw usage_error(who + ": qo_indptr holds " + std::to_string(qo_indptr.size()) + " entries, kv_indptr " +
                              std::to_string(kv_indptr.size()) + "; give batch + 1 of each");
        const std::size_t batch = qo_indptr.size() - 1;
        const auto rows = static_cast<std::uint32_t>(qo_indptr[batch]);
        const detail::plan_shape shape{.kv_indptr = kv_indptr,
                                       .qo_indptr = qo_indptr,
                                       .num_q_heads = heads.num_q_heads,
                                       .num_kv_heads = heads.num_kv_heads,
                                       .page_size = page_size};
        const workspace_sizes need = detail::batch_prefill_workspace<T>(shape, rows, stream_);
        float_ws_.reserve(std::max<std::size_t>(need.float_bytes, 1));
        int_ws_.reserve(std::max<std::size_t>(need.int_bytes, 1));
        pinned_.reserve(std::max<std::size_t>(need.int_bytes, 1));
        const detail::plan_workspace ws{
            .float_ws = float_ws_.view(), .int_ws = int_ws_.view(), .pinned_int = pinned_.host_view()};
        plan_ = detail::batch_prefill_plan<T>(ws, shape, rows, stream_);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));
        heads_ = heads;
        page_size_ = page_size;
        batch_ = static_cast<std::uint32_t>(batch);
        rows_ = rows;
        entries_ = static_cast<std::uint32_t>(kv_indptr[batch]);
        mask_ = mask;
    }

    /// Effects: enqueues o = attention of q's rows over the pages `indices`
    /// lists, under the plan's mask; lse if not empty. `qo_indptr` is the
    /// plan's on the device. Shapes: q and o [rows][num_q_heads][head_dim],
    /// lse [rows][num_q_heads].
    /// Throws: usage_error if nothing is planned or a shape disagrees with
    /// the plan (nothing enqueued); cuda_error.
    void run(device_span<const T> q, device_span<const std::int32_t> qo_indptr, const paged_kv_cache<T>& kv,
             const device_paged_kv_indices& indices, device_span<T> o, device_span<float> lse = {}) {
        const std::string who = "flashinfer::batch_prefill_paged::run";
        if (batch_ == 0) throw usage_error(who + ": nothing planned; call plan first");
        detail::check_cache(kv, heads_, page_size_, who);
        const std::size_t values = std::size_t{rows_} * heads_.num_q_heads * heads_.head_dim;
        if (q.size() != values || o.size() != values || qo_indptr.size() != std::size_t{batch_} + 1 ||
            (!lse.empty() && lse.size() != std::size_t{rows_} * heads_.num_q_heads))
            throw usage_error(who + ": q holds " + std::to_string(q.size()) + ", o " + std::to_string(o.size()) +
                              " values and qo_indptr " + std::to_string(qo_indptr.size()) + "; the plan's " +
                              std::to_string(rows_) + " rows need " + std::to_string(values) + " and " +
                              std::to_string(batch_ + 1) + " indptr entries");
        if (indices.page_size != page_size_ || indices.indptr.size() != std::size_t{batch_} + 1 ||
            indices.last_page_len.size() != batch_ || indices.indices.size() < entries_)
            throw usage_error(who + ": the indices do not match the plan (" + std::to_string(batch_) + " requests, " +
                              std::to_string(entries_) + " pages of " + std::to_string(page_size_) + " tokens)");
        detail::batch_prefill_paged_launch<T> a{.q = q,
                                                .o = o,
                                                .lse = lse,
                                                .qo_indptr = qo_indptr,
                                                .causal = mask_ == prefill_mask::causal,
                                                .kv = {.k = kv.k,
                                                       .v = kv.v,
                                                       .page_stride = static_cast<std::uint32_t>(kv.stride()),
                                                       .token_stride = static_cast<std::uint32_t>(kv.token()),
                                                       .page_size = page_size_,
                                                       .num_kv_heads = heads_.num_kv_heads,
                                                       .indptr = indices.indptr,
                                                       .indices = indices.indices,
                                                       .last_page_len = indices.last_page_len},
                                                .batch_size = batch_,
                                                .num_q_heads = heads_.num_q_heads,
                                                .sm_scale = heads_.scale(),
                                                .plan = plan_,
                                                .float_ws = float_ws_.view(),
                                                .int_ws = int_ws_.view()};
        detail::batch_prefill_paged_run<T>(a, stream_);
    }

    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
    cudaStream_t stream_;
    attention_heads heads_{};
    std::uint32_t page_size_ = 0;
    std::uint32_t batch_ = 0;
    std::uint32_t rows_ = 0;
    std::uint32_t entries_ = 0;
    prefill_mask mask_ = prefill_mask::causal;
    detail::prefill_plan_info plan_{};
    device_buffer<std::byte> float_ws_;
    device_buffer<std::byte> int_ws_;
    pinned_buffer<std::byte> pinned_;
};

namespace detail {
inline constexpr int head_major_threads = 256;

// [a][b][row] -> [b][a][row], rows of `row` elements copied 16 bytes at a
// time (row is a multiple of 8 16-bit elements: group x head_dim).
template <flashinfer_element T>
__global__ void __launch_bounds__(head_major_threads)
    swap_outer_kernel(const T* src, T* dst, std::uint32_t a_dim, std::uint32_t b_dim, std::uint32_t row) {
    const std::uint32_t vecs = row / 8;  // uint4 per row
    const std::size_t total = std::size_t{a_dim} * b_dim * vecs;
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
        const std::size_t v = i % vecs, ab = i / vecs;
        const std::size_t a = ab / b_dim, b = ab % b_dim;
        reinterpret_cast<uint4*>(dst)[(b * a_dim + a) * vecs + v] = reinterpret_cast<const uint4*>(src)[i];
    }
}

template <flashinfer_element T>
void swap_outer(const T* src, T* dst, std::uint32_t a_dim, std::uint32_t b_dim, std::uint32_t row,
                cudaStream_t stream) {
    const std::size_t total = std::size_t{a_dim} * b_dim * (row / 8);
    const auto grid =
        static_cast<unsigned>(std::min<std::size_t>((total + head_major_threads - 1) / head_major_threads, 65536));
    swap_outer_kernel<T><<<std::max(grid, 1u), head_major_threads, 0, stream>>>(src, dst, a_dim, b_dim, row);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

/// MInference's vertical-slash prefill on FlashInfer (see the header
/// paragraph): `set_indices` once per prompt's index (checks, uploads, plans
/// both launches), `run` per layer.
template <flashinfer_element T>
class minference_prefill {
public:
    explicit minference_prefill(cudaStream_t stream = cudaStreamPerThread) : slashes_(stream), verticals_(stream) {}

    /// Effects: takes `index` (minference_sparse_prefill_indices) for heads
    /// whose KV head count is index.num_kv_heads.
    /// Throws: config_error for what is not instantiated; usage_error if the
    /// head counts disagree with the index, its query rows do not cover
    /// num_kv_heads x num_tokens, the two launches differ in requests, a
    /// request lists fewer slash keys than rows (its causal diagonal must be
    /// listed, last), or a page lies outside the key tensor (checked before
    /// anything is uploaded); cuda_error.
    void set_indices(const sparse_prefill_indices& index, const attention_heads& heads) {
        const std::string who = "flashinfer::minference_prefill::set_indices";
        detail::check_heads(heads, who);
        const std::uint32_t n = index.num_tokens, hkv = index.num_kv_heads;
        if (hkv != heads.num_kv_heads)
            throw usage_error(who + ": the index was built for " + std::to_string(hkv) + " KV heads, the heads say " +
                              std::to_string(heads.num_kv_heads) + "; build it with the model's KV head count");
        const host_span<const std::int32_t> qo(index.qo_indptr);
        detail::check_indptr(qo, who + " (qo_indptr)");
        const std::size_t batch = qo.size() - 1;
        if (static_cast<std::uint64_t>(qo[batch]) != std::uint64_t{n} * hkv ||
            index.slashes.indptr.size() != batch + 1 || index.verticals.indptr.size() != batch + 1 ||
            index.slashes.page_size == 0 || index.verticals.page_size != 1)
            throw usage_error(who + ": " + std::to_string(qo[batch]) + " query rows in " + std::to_string(batch) +
                              " requests, " + std::to_string(index.slashes.indptr.size()) + " and " +
                              std::to_string(index.verticals.indptr.size()) + " kv indptr entries; a prompt of " +
                              std::to_string(n) + " tokens over " + std::to_string(hkv) + " KV heads has " +
                              std::to_string(std::uint64_t{n} * hkv) + " rows, both launches one request each");
        const std::uint32_t page = index.slashes.page_size;
        for (std::size_t r = 0; r < batch; ++r)
            if (std::int64_t{index.slashes.indptr[r + 1] - index.slashes.indptr[r]} * page <
                std::int64_t{qo[r + 1] - qo[r]} - page + 1)
                throw usage_error(who + ": request " + std::to_string(r) + " lists " +
                                  std::to_string(index.slashes.indptr[r + 1] - index.slashes.indptr[r]) +
                                  " slash pages for " + std::to_string(qo[r + 1] - qo[r]) +
                                  " query rows; its causal diagonal pages must be listed, last");
        const std::uint64_t key_blocks = (std::uint64_t{n} + page - 1) / page;
        const std::uint64_t slash_pages = (key_blocks - 1) * page * hkv + hkv;  // ids c * page * hkv + h
        if (n == 0 || std::uint64_t{n} * hkv > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
            throw usage_error(who + ": a prompt of " + std::to_string(n) + " tokens x " + std::to_string(hkv) +
                              " KV heads does not fit FlashInfer's int32 page ids");
        // Upload (each checks its page ids) and plan both launches.
        const attention_heads per_request{.num_q_heads = heads.num_q_heads / hkv,
                                          .num_kv_heads = 1,
                                          .head_dim = heads.head_dim,
                                          .sm_scale = heads.scale()};
        const cudaStream_t s = slashes_.stream();
        slash_kv_.upload(page, index.slashes.indptr, index.slashes.indices, index.slashes.last_page_len,
                         static_cast<std::uint32_t>(slash_pages), s);
        has_verticals_ = !index.verticals.indices.empty();
        if (has_verticals_)
            vertical_kv_.upload(1, index.verticals.indptr, index.verticals.indices, index.verticals.last_page_len,
                                n * hkv, s, /*allow_empty=*/true);
        qo_.reserve(qo.size());
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(qo_.get(), qo.data(), qo.size_bytes(), cudaMemcpyHostToDevice, s));
        slashes_.plan(qo, index.slashes.indptr, per_request, page, prefill_mask::causal);
        if (has_verticals_) verticals_.plan(qo, index.verticals.indptr, per_request, 1, prefill_mask::none);
        heads_ = heads;
        num_tokens_ = n;
        page_size_ = page;
        slash_pages_ = static_cast<std::uint32_t>(slash_pages);
        batch_ = static_cast<std::uint32_t>(batch);
        const std::size_t values = std::size_t{n} * heads.num_q_heads * heads.head_dim;
        const std::size_t lses = std::size_t{n} * heads.num_q_heads;
        q_major_.reserve(values);
        o_major_.reserve(values);
        o_vertical_.reserve(has_verticals_ ? values : 1);
        lse_.reserve(2 * lses);
    }

    /// Effects: enqueues o = the vertical-slash attention of the index set,
    /// for q, o [num_tokens][num_q_heads][head_dim] and k, v
    /// [num_tokens][num_kv_heads][head_dim].
    /// Throws: usage_error if no index is set or a shape disagrees (nothing
    /// enqueued); cuda_error.
    void run(device_span<const T> q, device_span<const T> k, device_span<const T> v, device_span<T> o) {
        const std::string who = "flashinfer::minference_prefill::run";
        if (batch_ == 0) throw usage_error(who + ": no index set; call set_indices first");
        const std::size_t qv = std::size_t{num_tokens_} * heads_.num_q_heads * heads_.head_dim;
        const std::size_t kvv = std::size_t{num_tokens_} * heads_.num_kv_heads * heads_.head_dim;
        if (q.size() != qv || o.size() != qv || k.size() != kvv || v.size() != kvv)
            throw usage_error(who + ": q " + std::to_string(q.size()) + ", o " + std::to_string(o.size()) + ", k " +
                              std::to_string(k.size()) + ", v " + std::to_string(v.size()) + " elements; the index's " +
                              std::to_string(num_tokens_) + " tokens need " + std::to_string(qv) + " for q and o, " +
                              std::to_string(kvv) + " for k and v");
        const std::uint32_t hkv = heads_.num_kv_heads, group = heads_.num_q_heads / hkv;
        const std::uint32_t row = group * heads_.head_dim;
        const std::uint32_t rows = num_tokens_ * hkv;
        const std::size_t lses = std::size_t{rows} * group;
        const cudaStream_t s = slashes_.stream();
        const device_span<const T> q_major{q_major_.get(), qv};
        const device_span<const std::int32_t> qo{qo_.get(), std::size_t{batch_} + 1};
        const device_span<float> lse_slash{lse_.get(), lses}, lse_vertical{lse_.get() + lses, lses};
        detail::swap_outer(q.data(), q_major_.get(), num_tokens_, hkv, row, s);
        // One KV head per request over the NHD key tensor: page id c * page * hkv + h
        // starts at element (c * page * hkv + h) * head_dim, its tokens hkv * head_dim apart.
        // The highest page id, c = key_blocks - 1 and h = hkv - 1, ends at the
        // prompt's last token: n - c * page of its tokens exist.
        const auto pool = [&](std::uint32_t page, std::uint32_t pages) {
            return paged_kv_cache<T>{.k = k,
                                     .v = v,
                                     .page_stride = heads_.head_dim,
                                     .token_stride = std::size_t{hkv} * heads_.head_dim,
                                     .num_pages = pages,
                                     .page_size = page,
                                     .num_kv_heads = 1,
                                     .head_dim = heads_.head_dim,
                                     .last_page_tokens = num_tokens_ - (num_tokens_ - 1) / page * page};
        };
        const device_span<T> o_slash{o_major_.get(), qv};
        slashes_.run(q_major, qo, pool(page_size_, slash_pages_), slash_kv_.view(), o_slash, lse_slash);
        if (has_verticals_) {
            const device_span<T> o_vertical{o_vertical_.get(), qv};
            verticals_.run(q_major, qo, pool(1, rows), vertical_kv_.view(), o_vertical, lse_vertical);
            detail::merge_state_in_place<T>(o_slash, lse_slash, o_vertical, lse_vertical, rows, group, s);
        }
        detail::swap_outer(static_cast<const T*>(o_major_.get()), o.data(), hkv, num_tokens_, row, s);
    }

private:
    batch_prefill_paged<T> slashes_;
    batch_prefill_paged<T> verticals_;
    device_paged_kv_buffer slash_kv_;
    device_paged_kv_buffer vertical_kv_;
    device_buffer<std::int32_t> qo_;  // [batch + 1]
    device_buffer<T> q_major_;        // [num_kv_heads][num_tokens][group][head_dim]
    device_buffer<T> o_major_;        // same: the slash launch's output, then the merged one
    device_buffer<T> o_vertical_;     // same: the vertical launch's
    device_buffer<float> lse_;        // [2][num_kv_heads][num_tokens][group] base 2
    attention_heads heads_{};
    std::uint32_t num_tokens_ = 0;
    std::uint32_t page_size_ = 0;
    std::uint32_t slash_pages_ = 0;
    std::uint32_t batch_ = 0;
    bool has_verticals_ = false;
};

/// Effects: enqueues FlashInfer's dense causal single-request prefill: o =
/// causal attention of the num_tokens queries over the num_tokens keys;
/// q, o [num_tokens][num_q_heads][head_dim], k, v [num_tokens][num_kv_heads][head_dim].
/// Throws: config_error / usage_error for the heads as batch_decode::plan;
/// usage_error for num_tokens 0 or spans of the wrong size (nothing
/// enqueued); cuda_error.
template <flashinfer_element T>
void dense_causal_prefill(device_span<const T> q, device_span<const T> k, device_span<const T> v,
                          std::uint32_t num_tokens, const attention_heads& heads, device_span<T> o,
                          cudaStream_t stream) {
    const std::string who = "flashinfer::dense_causal_prefill";
    detail::check_heads(heads, who);
    if (num_tokens == 0) throw usage_error(who + ": num_tokens is 0; an empty prompt has nothing to attend to");
    const std::size_t qv = std::size_t{num_tokens} * heads.num_q_heads * heads.head_dim;
    const std::size_t kvv = std::size_t{num_tokens} * heads.num_kv_heads * heads.head_dim;
    if (q.size() != qv || o.size() != qv || k.size() != kvv || v.size() != kvv)
        throw usage_error(who + ": q " + std::to_string(q.size()) + ", o " + std::to_string(o.size()) + ", k " +
                          std::to_string(k.size()) + ", v " + std::to_string(v.size()) + " elements; " +
                          std::to_string(num_tokens) + " tokens need " + std::to_string(qv) + " for q and o, " +
                          std::to_string(kvv) + " for k and v");
    detail::single_prefill_causal_run<T>({.q = q,
                                          .k = k,
                                          .v = v,
                                          .o = o,
                                          .qo_len = num_tokens,
                                          .kv_len = num_tokens,
                                          .num_q_heads = heads.num_q_heads,
                                          .num_kv_heads = heads.num_kv_heads,
                                          .sm_scale = heads.scale()},
                                         stream);
}

}  // namespace kvpolicy::cuda::flashinfer
