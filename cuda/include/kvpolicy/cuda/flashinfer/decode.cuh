// Paged decode attention on FlashInfer's kernels, over kvpolicy's index
// formats: the dense path (every page of every request) and the sparse one
// (Quest's chosen pages, cuda/quest_paged_kv.cuh) are the same call over
// different `paged_kv_indices`.
//
// `batch_decode<T>` is FlashInfer's BatchDecodeWithPagedKVCache split the way
// FlashInfer's Python wrapper splits it: `plan` once per layout (the page
// indptr on the host: FlashInfer's scheduler decides split-KV from it and
// writes its schedule to the workspaces, synchronously), `run` once per layer
// (asynchronous, nothing on the host). `single_decode` is FlashInfer's
// single-request decode over one request's contiguous K and V, the fast path
// where one request's pages are contiguous (bench/flashinfer_bench.cu times
// it against batch_decode with one request; docs/gpu.md says which to call).
//
// K and V are NHD pages ([page_size][num_kv_heads][head_dim], page p at
// p * page_stride, K and V with the same stride), q and o [batch][num_q_heads]
// [head_dim], all bf16 or fp16, arithmetic fp32 inside FlashInfer; RoPE is
// not applied (engines store K rotated). What is instantiated (head_dim 128,
// the GQA groups) is flashinfer/instantiated.cuh's; anything else is refused
// with a config_error before any launch, and every shape and index checked
// on the host before anything is enqueued (validate, then launch).
// Include only in programs that link kvpolicy::flashinfer and the
// instantiations (kvpolicy_flashinfer_kernels, or decode_kernels.cuh in one
// translation unit of your own).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/memory.cuh"

namespace kvpolicy::cuda::flashinfer {

/// FlashInfer's paged-KV CSR for a batch, in device memory.
struct device_paged_kv_indices {
    std::uint32_t page_size = 0;
    device_span<const std::int32_t> indptr;         ///< [batch + 1]
    device_span<const std::int32_t> indices;        ///< [indptr[batch]] physical pages, position order
    device_span<const std::int32_t> last_page_len;  ///< [batch] 1 .. page_size
};

/// A paged KV cache in device memory (NHD pages; see the header paragraph).
template <flashinfer_element T>
struct paged_kv_cache {
    device_span<const T> k;        ///< page p at p * page_stride: [page_size][num_kv_heads][head_dim]
    device_span<const T> v;        ///< same layout and stride as k
    std::size_t page_stride = 0;   ///< elements between pages; 0 = packed (page_size x token_stride)
    std::size_t token_stride = 0;  ///< elements between a page's tokens; 0 = num_kv_heads x head_dim
    std::uint32_t num_pages = 0;   ///< page ids 0 .. num_pages - 1 are valid
    std::uint32_t page_size = 0;
    std::uint32_t num_kv_heads = 0;
    std::uint32_t head_dim = instantiated_head_dim;
    /// Tokens page num_pages - 1 holds, 1 .. page_size; 0 = page_size. A
    /// token tensor viewed as pages (one request's contiguous K, MInference's
    /// pages over the prompt's keys) ends inside its last page, and FlashInfer
    /// reads no token past a request's last_page_len.
    std::uint32_t last_page_tokens = 0;

    [[nodiscard]] std::size_t token() const noexcept {
        return token_stride != 0 ? token_stride : std::size_t{num_kv_heads} * head_dim;
    }
    [[nodiscard]] std::size_t stride() const noexcept {
        return page_stride != 0 ? page_stride : std::size_t{page_size} * token();
    }
    /// Elements of k (and v) the last page's last token reaches.
    [[nodiscard]] std::size_t extent() const noexcept {
        const std::size_t last_tokens = last_page_tokens != 0 ? last_page_tokens : page_size;
        return num_pages == 0 ? 0
                              : (std::size_t{num_pages} - 1) * stride() + (last_tokens - 1) * token() +
                                    std::size_t{num_kv_heads} * head_dim;
    }
};

/// Heads and softmax scale of an attention call.
struct attention_heads {
    std::uint32_t num_q_heads = 0;
    std::uint32_t num_kv_heads = 0;
    std::uint32_t head_dim = instantiated_head_dim;
    float sm_scale = 0.0f;  ///< 0: 1 / sqrt(head_dim)

    [[nodiscard]] float scale() const noexcept {
        return sm_scale != 0.0f ? sm_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
    }
};

namespace detail {
/// Throws config_error for what is not instantiated, usage_error for heads
/// that do not group (who: the caller's name).
inline void check_heads(const attention_heads& h, const std::string& who) {
    if (h.head_dim != instantiated_head_dim)
        throw config_error(who + ": head_dim " + std::to_string(h.head_dim) +
                           " is not instantiated; kvpolicy instantiates FlashInfer for head_dim " +
                           std::to_string(instantiated_head_dim) + " (flashinfer/instantiated.cuh)");
    if (h.num_kv_heads == 0 || h.num_q_heads == 0 || h.num_q_heads % h.num_kv_heads != 0)
        throw usage_error(who + ": " + std::to_string(h.num_q_heads) + " query heads and " +
                          std::to_string(h.num_kv_heads) +
                          " KV heads; give at least one of each, query heads a multiple of KV heads");
    const std::uint32_t g = h.num_q_heads / h.num_kv_heads;
    if (std::find(instantiated_groups.begin(), instantiated_groups.end(), g) == instantiated_groups.end())
        throw config_error(who + ": a GQA group of " + std::to_string(g) +
                           " query heads per KV head; FlashInfer dispatches 1, 2, 3, 4, 6, 8 and 16");
    if (!(h.scale() > 0.0f) || !std::isfinite(h.scale()))
        throw usage_error(who + ": sm_scale " + std::to_string(h.sm_scale) + " is not a positive finite number");
}

/// Throws usage_error unless indptr is a CSR of `batch` >= 1 requests, each
/// with at least one page (an empty request has nothing to attend to) unless
/// `allow_empty` (a partial launch whose output is merged with another's).
inline void check_indptr(host_span<const std::int32_t> indptr, const std::string& who, bool allow_empty = false) {
    if (indptr.size() < 2 || indptr[0] != 0)
        throw usage_error(who + ": indptr holds " + std::to_string(indptr.size()) +
                          " entries; give batch + 1 >= 2 of them, starting at 0");
    for (std::size_t r = 0; r + 1 < indptr.size(); ++r)
        if (indptr[r + 1] < indptr[r] || (indptr[r + 1] == indptr[r] && !allow_empty))
            throw usage_error(who + ": request " + std::to_string(r) + " has " +
                              std::to_string(std::int64_t{indptr[r + 1]} - indptr[r]) +
                              " pages; every request needs at least one (leave empty ones out of the batch)");
}

template <flashinfer_element T>
void check_cache(const paged_kv_cache<T>& kv, const attention_heads& h, std::uint32_t page_size,
                 const std::string& who) {
    if (kv.head_dim != h.head_dim || kv.num_kv_heads != h.num_kv_heads || kv.page_size != page_size || page_size == 0)
        throw usage_error(who + ": the cache holds pages of " + std::to_string(kv.page_size) + " tokens x " +
                          std::to_string(kv.num_kv_heads) + " KV heads x " + std::to_string(kv.head_dim) +
                          "; the plan was made for " + std::to_string(page_size) + " x " +
                          std::to_string(h.num_kv_heads) + " x " + std::to_string(h.head_dim));
    // Strides may alias (MInference's pages overlap an NHD key tensor); only
    // the extent the page ids reach must lie inside k and v.
    if (kv.stride() > std::numeric_limits<std::uint32_t>::max() ||
        kv.token() > std::numeric_limits<std::uint32_t>::max() ||
        kv.token() < std::size_t{kv.num_kv_heads} * kv.head_dim)
        throw usage_error(who + ": page_stride " + std::to_string(kv.stride()) + " and token_stride " +
                          std::to_string(kv.token()) +
                          ": a token holds num_kv_heads x head_dim elements and "
                          "FlashInfer keeps strides in 32 bits");
    if (kv.last_page_tokens > page_size)
        throw usage_error(who + ": last_page_tokens " + std::to_string(kv.last_page_tokens) +
                          " is more than a page's " + std::to_string(page_size) +
                          " tokens; give 1 .. page_size, or 0 for a full last page");
    const std::size_t need = kv.extent();
    if (kv.k.size() < need || kv.v.size() < need)
        throw usage_error(who + ": k holds " + std::to_string(kv.k.size()) + " and v " + std::to_string(kv.v.size()) +
                          " elements; " + std::to_string(kv.num_pages) + " pages need " + std::to_string(need));
}
}  // namespace detail

/// Host indices checked and copied to the device: what `batch_decode` and
/// the prefill read (`view()`).
class device_paged_kv_buffer {
public:
    /// Effects: checks, then uploads (synchronously on `stream`).
    /// Throws: usage_error if indptr is not a CSR of non-empty requests
    /// (empty ones allowed with `allow_empty`), indices is not indptr.back()
    /// long, a page lies outside [0, num_pages), or a last_page_len outside
    /// 1 .. page_size (0 for an empty request); config_error for page_size 0
    /// (nothing uploaded).
    void upload(std::uint32_t page_size, host_span<const std::int32_t> indptr, host_span<const std::int32_t> indices,
                host_span<const std::int32_t> last_page_len, std::uint32_t num_pages, cudaStream_t stream,
                bool allow_empty = false) {
        const std::string who = "device_paged_kv_buffer::upload";
        if (page_size == 0) throw config_error(who + ": page_size is 0; give the tokens per page");
        detail::check_indptr(indptr, who, allow_empty);
        const std::size_t batch = indptr.size() - 1;
        if (indices.size() != static_cast<std::size_t>(indptr[batch]) || last_page_len.size() != batch)
            throw usage_error(who + ": " + std::to_string(indices.size()) + " indices and " +
                              std::to_string(last_page_len.size()) + " last-page lengths for " + std::to_string(batch) +
                              " requests of " + std::to_string(indptr[batch]) +
                              " pages; give indptr.back() indices and one length per request");
        for (std::size_t i = 0; i < indices.size(); ++i)
            if (indices[i] < 0 || static_cast<std::uint32_t>(indices[i]) >= num_pages)
                throw usage_error(who + ": indices[" + std::to_string(i) + "] = " + std::to_string(indices[i]) +
                                  " is outside the cache's " + std::to_string(num_pages) + " pages");
        for (std::size_t r = 0; r < batch; ++r)
            if ((last_page_len[r] < 1 && indptr[r + 1] != indptr[r]) ||
                static_cast<std::uint32_t>(last_page_len[r]) > page_size)
                throw usage_error(who + ": last_page_len[" + std::to_string(r) + "] = " +
                                  std::to_string(last_page_len[r]) + " is outside 1 .. " + std::to_string(page_size));
        indptr_.reserve(indptr.size());
        indices_.reserve(indices.size());
        last_.reserve(batch);
        KVPOLICY_CUDA_CHECK(
            cudaMemcpyAsync(indptr_.get(), indptr.data(), indptr.size_bytes(), cudaMemcpyHostToDevice, stream));
        KVPOLICY_CUDA_CHECK(
            cudaMemcpyAsync(indices_.get(), indices.data(), indices.size_bytes(), cudaMemcpyHostToDevice, stream));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(last_.get(), last_page_len.data(), last_page_len.size_bytes(),
                                            cudaMemcpyHostToDevice, stream));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        page_size_ = page_size;
        batch_ = batch;
        entries_ = indices.size();
    }

    [[nodiscard]] device_paged_kv_indices view() const noexcept {
        return {page_size_, device_span<const std::int32_t>{indptr_.get(), batch_ == 0 ? 0 : batch_ + 1},
                device_span<const std::int32_t>{indices_.get(), entries_},
                device_span<const std::int32_t>{last_.get(), batch_}};
    }

private:
    device_buffer<std::int32_t> indptr_;
    device_buffer<std::int32_t> indices_;
    device_buffer<std::int32_t> last_;
    std::uint32_t page_size_ = 0;
    std::size_t batch_ = 0;
    std::size_t entries_ = 0;
};

/// FlashInfer's batch decode over paged KV: plan once per layout, run per
/// layer (see the header paragraph). Not copyable; owns its workspaces.
template <flashinfer_element T>
class batch_decode {
public:
    explicit batch_decode(cudaStream_t stream = cudaStreamPerThread) : stream_(stream) {}

    /// Effects: plans the batch whose page indptr is `indptr` (host) for
    /// `heads` and `page_size`: FlashInfer's DecodePlan (split-KV or not,
    /// and its schedule) into this object's workspaces, which grow if need
    /// be; waits for the schedule's copy. A later `run` must use the same
    /// layout (the indptr's values) on the device.
    /// Throws: config_error for a head_dim or GQA group not instantiated, a
    /// page_size of 0; usage_error for an indptr that is not a CSR of
    /// non-empty requests (nothing planned: the previous plan stays); cuda_error.
    void plan(host_span<const std::int32_t> indptr, const attention_heads& heads, std::uint32_t page_size) {
        const std::string who = "flashinfer::batch_decode::plan";
        detail::check_heads(heads, who);
        if (page_size == 0) throw config_error(who + ": page_size is 0; give the tokens per page");
        detail::check_indptr(indptr, who);
        const detail::plan_shape shape{.kv_indptr = indptr,
                                       .qo_indptr = {},
                                       .num_q_heads = heads.num_q_heads,
                                       .num_kv_heads = heads.num_kv_heads,
                                       .page_size = page_size};
        const workspace_sizes need = detail::batch_decode_workspace<T>(shape, stream_);
        float_ws_.reserve(std::max<std::size_t>(need.float_bytes, 1));
        int_ws_.reserve(std::max<std::size_t>(need.int_bytes, 1));
        pinned_.reserve(std::max<std::size_t>(need.int_bytes, 1));
        const detail::plan_workspace ws{
            .float_ws = float_ws_.view(), .int_ws = int_ws_.view(), .pinned_int = pinned_.host_view()};
        plan_ = detail::batch_decode_plan<T>(ws, shape, stream_);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the pinned schedule is copied before it is reused
        heads_ = heads;
        page_size_ = page_size;
        batch_ = static_cast<std::uint32_t>(indptr.size() - 1);
        entries_ = static_cast<std::uint32_t>(indptr[batch_]);
    }

    /// Effects: enqueues o = attention(q, the pages `indices` lists) on the
    /// stream; lse (FlashInfer's, base 2) if not empty.
    /// Shapes: q and o [batch][num_q_heads][head_dim], lse [batch][num_q_heads].
    /// Throws: usage_error if nothing is planned or a shape disagrees with
    /// the plan (nothing enqueued); cuda_error.
    void run(device_span<const T> q, const paged_kv_cache<T>& kv, const device_paged_kv_indices& indices,
             device_span<T> o, device_span<float> lse = {}) {
        const std::string who = "flashinfer::batch_decode::run";
        if (batch_ == 0) throw usage_error(who + ": nothing planned; call plan first");
        detail::check_cache(kv, heads_, page_size_, who);
        const std::size_t values = std::size_t{batch_} * heads_.num_q_heads * heads_.head_dim;
        if (q.size() != values || o.size() != values ||
            (!lse.empty() && lse.size() != std::size_t{batch_} * heads_.num_q_heads))
            throw usage_error(who + ": q holds " + std::to_string(q.size()) + ", o " + std::to_string(o.size()) +
                              " and lse " + std::to_string(lse.size()) + " values; the plan's " +
                              std::to_string(batch_) + " requests need [batch][num_q_heads][head_dim] = " +
                              std::to_string(values) + " and lse empty or [batch][num_q_heads]");
        if (indices.page_size != page_size_ || indices.indptr.size() != std::size_t{batch_} + 1 ||
            indices.last_page_len.size() != batch_ || indices.indices.size() < entries_)
            throw usage_error(who + ": the indices hold " + std::to_string(indices.indptr.size()) + " indptr, " +
                              std::to_string(indices.indices.size()) + " pages of " +
                              std::to_string(indices.page_size) + " tokens; the plan has " + std::to_string(batch_) +
                              " requests, " + std::to_string(entries_) + " pages of " + std::to_string(page_size_));
        detail::batch_decode_launch<T> a{.q = q,
                                         .o = o,
                                         .lse = lse,
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
        detail::batch_decode_run<T>(a, stream_);
    }

    [[nodiscard]] std::uint32_t batch() const noexcept { return batch_; }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
    cudaStream_t stream_;
    attention_heads heads_{};
    std::uint32_t page_size_ = 0;
    std::uint32_t batch_ = 0;
    std::uint32_t entries_ = 0;
    detail::decode_plan_info plan_{};
    device_buffer<std::byte> float_ws_;
    device_buffer<std::byte> int_ws_;
    pinned_buffer<std::byte> pinned_;
};

/// Elements of T single_decode's temporary storage holds for kv_len tokens
/// and num_q_heads heads: FlashInfer splits the keys into chunks of at least
/// 256, each with a partial output and its LSE.
[[nodiscard]] inline std::size_t single_decode_tmp_elements(std::uint32_t kv_len, std::uint32_t num_q_heads) noexcept {
    const std::size_t chunks = (std::size_t{kv_len} + 255) / 256;
    return chunks * num_q_heads * (instantiated_head_dim + 2);  // o partials, then float LSEs (2 elements of T each)
}

/// Effects: enqueues FlashInfer's single-request decode: o = attention(q,
/// the kv_len tokens of k and v), K and V contiguous [kv_len][num_kv_heads]
/// [head_dim]. `tmp` (single_decode_tmp_elements) lets it split the keys
/// over the GPU; empty, one CTA per KV head reads them all.
/// Throws: config_error / usage_error as batch_decode::plan for the heads;
/// usage_error for kv_len 0, spans of the wrong size or a short tmp (nothing
/// enqueued); cuda_error.
template <flashinfer_element T>
void single_decode(device_span<const T> q, device_span<const T> k, device_span<const T> v, std::uint32_t kv_len,
                   const attention_heads& heads, device_span<T> o, device_span<T> tmp, cudaStream_t stream) {
    const std::string who = "flashinfer::single_decode";
    detail::check_heads(heads, who);
    if (kv_len == 0) throw usage_error(who + ": kv_len is 0; an empty request has nothing to attend to");
    const std::size_t qv = std::size_t{heads.num_q_heads} * heads.head_dim;
    const std::size_t kvv = std::size_t{kv_len} * heads.num_kv_heads * heads.head_dim;
    if (q.size() != qv || o.size() != qv || k.size() < kvv || v.size() < kvv ||
        (!tmp.empty() && tmp.size() < single_decode_tmp_elements(kv_len, heads.num_q_heads)))
        throw usage_error(who + ": q " + std::to_string(q.size()) + ", o " + std::to_string(o.size()) + ", k " +
                          std::to_string(k.size()) + ", v " + std::to_string(v.size()) + " and tmp " +
                          std::to_string(tmp.size()) + " elements; give q and o " + std::to_string(qv) + ", k and v " +
                          std::to_string(kvv) + ", tmp empty or single_decode_tmp_elements()");
    detail::single_decode_run<T>({.q = q,
                                  .k = k,
                                  .v = v,
                                  .o = o,
                                  .tmp = tmp,
                                  .kv_len = kv_len,
                                  .num_q_heads = heads.num_q_heads,
                                  .num_kv_heads = heads.num_kv_heads,
                                  .sm_scale = heads.scale()},
                                 stream);
}

}  // namespace kvpolicy::cuda::flashinfer
