// quest (device): Quest's block metadata, block scores and top-K on the GPU.
//
// The same selector as the host `kvpolicy::quest` (sparse/quest.hpp, which
// explains the method and is the reference these kernels are tested
// against), with metadata and scoring where the keys and the query live:
// - metadata kernel (`on_offload`, `on_offload_blocks`): per block, per KV
//   head, per channel, min and max of the keys over the valid tokens,
//   computed while the keys are still on the GPU, before the copy to the CPU
//   tier; one thread per (head, channel), coalesced across channels;
// - scoring kernel: one thread block per candidate, sum over query heads and
//   channels of max(q_c * min_c, q_c * max_c) (GQA: query head h reads KV
//   head h / group), reduced with cub::BlockReduce;
// - top-K: select.cuh's radix select on the negated scores, ties to the
//   older block, exactly the host rule (`plan_quest_selection`).
// Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML'24. Departures, besides the host version's: the scores
// are summed in a tree, not channel by channel, so they match the host's to
// float rounding, not bit for bit; a block with a non-finite key gets no
// metadata (it is always loaded) instead of an error, since a kernel cannot
// throw.
//
// All work is enqueued on the selector's stream: pass the stream that
// produced the keys, so `on_offload` sees them. `select` is synchronous (its
// output is a host span); `score_blocks` and `select_device` are not.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/cuda/select.cuh"
#include "kvpolicy/sparse/quest.hpp"

namespace kvpolicy::cuda {

namespace detail {

inline constexpr int quest_threads = 128;

struct quest_dims {
    std::uint32_t num_blocks;
    std::uint32_t num_kv_heads;
    std::uint32_t head_dim;
};

// grid.x = blocks offloaded; block j's keys start at keys + j * block_stride
// as [tokens][num_kv_heads][head_dim].
__global__ void __launch_bounds__(quest_threads)
    quest_metadata_kernel(const float* keys, std::size_t block_stride, const std::uint32_t* blocks,
                          const std::uint32_t* tokens, std::uint32_t one_block, std::uint32_t one_tokens,
                          std::uint32_t layer, quest_dims dims, float* key_min, float* key_max,
                          std::uint8_t* has_metadata) {
    const std::uint32_t j = blockIdx.x;
    const std::uint32_t block = blocks != nullptr ? blocks[j] : one_block;
    const std::uint32_t valid = tokens != nullptr ? tokens[j] : one_tokens;
    const std::size_t row = std::size_t{dims.num_kv_heads} * dims.head_dim;
    const float* k = keys + j * block_stride;
    const std::size_t at = (std::size_t{layer} * dims.num_blocks + block) * row;
    int bad = valid == 0 ? 1 : 0;
    for (std::size_t e = threadIdx.x; e < row; e += blockDim.x) {
        float mn = ::cuda::std::numeric_limits<float>::infinity();
        float mx = -::cuda::std::numeric_limits<float>::infinity();
        for (std::uint32_t t = 0; t < valid; ++t) {
            const float v = k[t * row + e];
            bad |= (v - v != 0.0f) ? 1 : 0;  // NaN or infinite
            mn = fminf(mn, v);
            mx = fmaxf(mx, v);
        }
        key_min[at + e] = mn;
        key_max[at + e] = mx;
    }
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) has_metadata[std::size_t{layer} * dims.num_blocks + block] = bad != 0 ? 0 : 1;
}

// grid.x = candidates; out[j] = score of blocks[j] (negated with `negate`),
// +inf (-inf) without metadata.
__global__ void __launch_bounds__(quest_threads)
    quest_score_kernel(const float* query, std::uint32_t num_q_heads, const std::uint32_t* blocks,
                       std::uint32_t layer, quest_dims dims, const float* key_min, const float* key_max,
                       const std::uint8_t* has_metadata, bool negate, float* out) {
    using reduce_t = cub::BlockReduce<float, quest_threads>;
    __shared__ typename reduce_t::TempStorage storage;
    const std::uint32_t block = blocks[blockIdx.x];
    const std::size_t flag = std::size_t{layer} * dims.num_blocks + block;
    if (has_metadata[flag] == 0) {  // the same for the whole thread block
        if (threadIdx.x == 0)
            out[blockIdx.x] = negate ? -::cuda::std::numeric_limits<float>::infinity()
                                     : ::cuda::std::numeric_limits<float>::infinity();
        return;
    }
    const std::uint32_t d = dims.head_dim;
    const std::uint32_t group = num_q_heads / dims.num_kv_heads;
    const float* mn = key_min + flag * dims.num_kv_heads * d;
    const float* mx = key_max + flag * dims.num_kv_heads * d;
    float partial = 0.0f;
    for (std::uint32_t e = threadIdx.x; e < num_q_heads * d; e += blockDim.x) {
        const std::uint32_t h = e / d, c = e % d;
        const std::size_t m = std::size_t{h / group} * d + c;
        const float q = query[e];
        partial += fmaxf(q * mn[m], q * mx[m]);
    }
    const float total = reduce_t(storage).Sum(partial);
    if (threadIdx.x == 0) out[blockIdx.x] = negate ? -total : total;
}

}  // namespace detail

class device_quest {
public:
    using config_type = quest_config;

    static constexpr std::string_view name = "quest_cuda";
    static constexpr bool supports_prefill = false;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;

    /// Allocates the metadata on the device (2 * num_layers * num_blocks *
    /// num_kv_heads * head_dim floats), all blocks without metadata.
    /// Throws: config_error as the host quest does; cuda_error.
    explicit device_quest(const config_type& config, cudaStream_t stream = cudaStreamPerThread)
        : config_(quest::validate(config)), stream_(stream), selector_(stream) {
        const std::size_t values = std::size_t{config_.num_layers} * config_.num_blocks * row();
        key_min_.reserve(values);
        key_max_.reserve(values);
        has_metadata_.reserve(std::size_t{config_.num_layers} * config_.num_blocks);
        reset();
    }

    /// Effects: enqueues the metadata of (`block`, `layer`) from `keys`, whose
    /// span points to device memory ([tokens][num_kv_heads][head_dim]).
    /// Throws: usage_error for a block or layer out of range, a shape that
    /// differs from the config, or no valid tokens (nothing enqueued).
    void on_offload(block_id block, layer_index layer, const key_block_view& keys) {
        check_range(block.value, layer, "on_offload");
        if (keys.num_kv_heads != config_.num_kv_heads || keys.head_dim != config_.head_dim || keys.tokens == 0 ||
            keys.keys.size() < std::size_t{keys.tokens} * row())
            throw usage_error("device_quest::on_offload: keys of block " + std::to_string(block.value) +
                              " are not [tokens >= 1][" + std::to_string(config_.num_kv_heads) + "][" +
                              std::to_string(config_.head_dim) + "] as the config says");
        detail::quest_metadata_kernel<<<1, detail::quest_threads, 0, stream_>>>(
            keys.keys.data(), 0, nullptr, nullptr, block.value, keys.tokens, layer.value, dims(), key_min_.get(),
            key_max_.get(), has_metadata_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// Batched `on_offload` for one layer: block j of `count` has its keys at
    /// d_keys + j * block_stride (floats), `d_tokens[j]` valid tokens, and
    /// CPU-tier id `d_blocks[j]` (all device arrays). Ids are not checked on
    /// the host (they are on the device): keep them below num_blocks.
    void on_offload_blocks(layer_index layer, const float* d_keys, std::size_t block_stride,
                           const std::uint32_t* d_blocks, const std::uint32_t* d_tokens, std::uint32_t count) {
        check_range(0, layer, "on_offload_blocks");
        if (count == 0) return;
        detail::quest_metadata_kernel<<<count, detail::quest_threads, 0, stream_>>>(
            d_keys, block_stride, d_blocks, d_tokens, 0, 0, layer.value, dims(), key_min_.get(), key_max_.get(),
            has_metadata_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// Enqueues d_scores[j] = score of block d_blocks[j] for the device query
    /// ([num_q_heads][head_dim]); -score with `negate` (what top-K selects on).
    void score_blocks(layer_index layer, const std::uint32_t* d_blocks, std::uint32_t n, const float* d_query,
                      std::uint32_t num_q_heads, float* d_scores, bool negate = false) {
        check_range(0, layer, "score_blocks");
        if (num_q_heads == 0 || num_q_heads % config_.num_kv_heads != 0)
            throw usage_error("device_quest::score_blocks: " + std::to_string(num_q_heads) +
                              " query heads is not a multiple of " + std::to_string(config_.num_kv_heads) +
                              " KV heads");
        if (n == 0) return;
        detail::quest_score_kernel<<<n, detail::quest_threads, 0, stream_>>>(
            d_query, num_q_heads, d_blocks, layer.value, dims(), key_min_.get(), key_max_.get(),
            has_metadata_.get(), negate, d_scores);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// The host quest's `select`, scored and selected on the device; `ctx.query`
    /// points to device memory. Synchronous.
    /// Throws: usage_error as the host quest does (a NaN in the query is
    /// found on the device and reported after the fact, nothing written).
    std::size_t select(std::span<const block_id> available, const selection_context& ctx, std::span<block_id> out) {
        ::kvpolicy::detail::check_quest_selection(config_, available, ctx, out, "device_quest");
        const quest_plan plan = plan_quest_selection(available.size(), ctx.block_size, config_);
        if (plan.load_all) {
            std::ranges::copy(available, out.begin());
            return available.size();
        }
        const auto m = static_cast<std::uint32_t>(plan.middle_end - plan.middle_begin);
        const auto keep = static_cast<std::uint32_t>(plan.middle_keep);
        staging_.reserve(m);
        blocks_.reserve(m);
        scores_.reserve(m);
        for (std::uint32_t i = 0; i < m; ++i) staging_.get()[i] = available[plan.middle_begin + i].value;
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(blocks_.get(), staging_.get(), m * sizeof(std::uint32_t),
                                            cudaMemcpyHostToDevice, stream_));
        score_blocks(ctx.layer, blocks_.get(), m, ctx.query.data(), ctx.num_q_heads, scores_.get(), true);
        selector_.select_lowest_device(scores_.get(), nullptr, m, keep);
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), selector_.device_output(), keep * sizeof(std::uint32_t),
                                            cudaMemcpyDeviceToHost, stream_));
        const select_status status = selector_.wait_status();
        if (status.nan_count != 0)
            throw usage_error("device_quest::select: the score of block " +
                              std::to_string(available[plan.middle_begin + status.nan_id].value) +
                              " is NaN; the query holds a NaN or infinite value");
        std::sort(staging_.get(), staging_.get() + keep);
        std::size_t n = 0;
        for (std::size_t i = 0; i < plan.middle_begin; ++i) out[n++] = available[i];
        for (std::uint32_t i = 0; i < keep; ++i) out[n++] = available[plan.middle_begin + staging_.get()[i]];
        for (std::size_t i = plan.middle_end; i < available.size(); ++i) out[n++] = available[i];
        return n;
    }

    /// Enqueues: every block without metadata again.
    void reset() {
        KVPOLICY_CUDA_CHECK(cudaMemsetAsync(has_metadata_.get(), 0,
                                            std::size_t{config_.num_layers} * config_.num_blocks, stream_));
    }

    /// Copies (synchronously) the metadata of (`block`, `layer`) to the host:
    /// [num_kv_heads][head_dim] each; returns whether it has any.
    bool copy_metadata(block_id block, layer_index layer, std::span<float> key_min, std::span<float> key_max) {
        check_range(block.value, layer, "copy_metadata");
        if (key_min.size() < row() || key_max.size() < row())
            throw usage_error("device_quest::copy_metadata: give num_kv_heads x head_dim floats for each");
        const std::size_t flag = layer.index() * config_.num_blocks + block.index();
        std::uint8_t has = 0;
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(key_min.data(), key_min_.get() + flag * row(), row() * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(key_max.data(), key_max_.get() + flag * row(), row() * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(&has, has_metadata_.get() + flag, 1, cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return has != 0;
    }

    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
    [[nodiscard]] std::size_t row() const noexcept { return std::size_t{config_.num_kv_heads} * config_.head_dim; }
    [[nodiscard]] detail::quest_dims dims() const noexcept {
        return {config_.num_blocks, config_.num_kv_heads, config_.head_dim};
    }

    void check_range(std::uint32_t block, layer_index layer, const char* what) const {
        ::kvpolicy::detail::check_quest_block(config_, block_id{block}, layer, "device_quest", what);
    }

    config_type config_;
    cudaStream_t stream_;
    device_buffer<float> key_min_;             // [num_layers][num_blocks][num_kv_heads][head_dim]
    device_buffer<float> key_max_;             // [num_layers][num_blocks][num_kv_heads][head_dim]
    device_buffer<std::uint8_t> has_metadata_;  // [num_layers][num_blocks]
    device_buffer<std::uint32_t> blocks_;      // [middle] candidate ids
    device_buffer<float> scores_;              // [middle] negated scores
    pinned_buffer<std::uint32_t> staging_;     // [middle] ids out, chosen positions back
    cub_selector selector_;
};

static_assert(sparse_selector<device_quest>);

}  // namespace kvpolicy::cuda
