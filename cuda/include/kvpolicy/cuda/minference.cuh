// minference (device): MInference's vertical-slash index estimation and
// sparse prefill attention on the GPU, and a dense causal prefill attention
// kernel of the same design as its baseline.
//
// The method, its parameters and its departures from the paper are the host
// selector's (sparse/minference.hpp; Jiang et al., "MInference 1.0",
// NeurIPS 2024). The per-thread math is shared with the host
// (sparse/minference_estimate.hpp, sparse/prefill_block.hpp, tested on the
// CPU thread by thread); the kernels here only map indices:
// - estimation: logits of the last last_q queries against every key (one
//   thread per (head, row, key)), each row's log-sum-exp (one block per row,
//   128 partial softmax states merged in a tree), the mass of every column
//   and every diagonal (one thread each), negated; then top-k per head and
//   kind through select.cuh's `select_lowest` (ties to the lower index, as
//   on the host), and the kept ids sorted ascending by a mark / exclusive
//   scan / scatter pass;
// - attention: CTA-tiled FlashAttention-2 on CUDA cores (sparse/prefill_block.hpp
//   holds the math and the phases; the kernel only maps (head, query block)
//   to a CTA and synchronises between phases): a CTA of 256 threads owns 64
//   queries of one head, stages 64-key tiles of K then V in shared memory,
//   keeps a 4 x 4 score micro-tile and a 4 x head_dim/16 output tile per
//   thread in registers; dense causal skips the tiles past the diagonal and
//   masks only the diagonal one; vertical-slash walks the merged union of
//   the kept diagonals' key intervals of the block as contiguous tiles, then
//   the kept columns outside it, with exact per-key masks (no rounding to
//   64-key blocks). Returns (o, lse), so the LSE merge (merge.cuh) composes
//   with it (chunked prefill). Blocks are launched heaviest first.
// Departures from the paper's kernels: fp32 on CUDA cores, no tensor cores.
// head_dim must be a multiple of 32, at most 256 (templates for 64, 128 and
// 256; other multiples run on the next with zero channels). A device whose
// opt-in shared memory per block is below a template's need (head_dim 256
// needs 156 KB) runs the previous design instead: one warp per (query,
// head), prefill_attention_kernel below, which the bench also times as its
// baseline.
//
// Memory spaces are in the types (core/memory_space.hpp): the entry points
// take device_prefill_qkv_view / device_prefill_output_view, so host views
// do not compile here and device views do not reach the host selector.
#pragma once

#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/cuda/select.cuh"
#include "kvpolicy/sparse/minference.hpp"
#include "kvpolicy/sparse/minference_estimate.hpp"
#include "kvpolicy/sparse/prefill_attention.hpp"
#include "kvpolicy/sparse/prefill_block.hpp"
#include "kvpolicy/sparse/prefill_tile.hpp"

namespace kvpolicy::cuda {

namespace detail {

inline constexpr int minference_row_threads = 128;  // the CPU test merges 128 partials in this tree
inline constexpr int minference_threads = 256;
inline constexpr int prefill_warps = 4;
inline constexpr int prefill_max_per_lane = 8;  // head_dim <= 256

// grid (ceil(n / threads), last_q, heads).
__global__ void __launch_bounds__(minference_threads)
    minference_logits_kernel(minference_estimate_args a, float* logits) {
    const std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= a.num_tokens) return;
    logits[(std::size_t{blockIdx.z} * a.last_q + blockIdx.y) * a.num_tokens + j] =
        estimation_logit(a, blockIdx.z, blockIdx.y, j);
}

// grid (last_q, heads), minference_row_threads threads.
__global__ void __launch_bounds__(minference_row_threads)
    minference_row_lse_kernel(minference_estimate_args a, float* row_lse) {
    __shared__ float part_m[minference_row_threads];
    __shared__ float part_l[minference_row_threads];
    const std::uint32_t t = threadIdx.x, r = blockIdx.x, h = blockIdx.y;
    const softmax_state mine = estimation_row_partial(a, h, r, t, minference_row_threads);
    part_m[t] = mine.m;
    part_l[t] = mine.l;
    __syncthreads();
    for (std::uint32_t stride = minference_row_threads / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            const softmax_state s =
                combine_softmax_states({part_m[t], part_l[t]}, {part_m[t + stride], part_l[t + stride]});
            part_m[t] = s.m;
            part_l[t] = s.l;
        }
        __syncthreads();
    }
    if (t == 0) row_lse[std::size_t{h} * a.last_q + r] = softmax_lse({part_m[0], part_l[0]});
}

// grid (ceil(n / threads), heads, 2): z = 0 columns, z = 1 diagonals;
// scores[z][h][x] = -mass (select_lowest keeps the highest masses).
__global__ void __launch_bounds__(minference_threads)
    minference_mass_kernel(minference_estimate_args a, float* scores) {
    const std::uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= a.num_tokens) return;
    const std::uint32_t h = blockIdx.y;
    const float mass = blockIdx.z == 0 ? estimation_column_mass(a, h, x) : estimation_diagonal_mass(a, h, x);
    scores[(std::size_t{blockIdx.z} * a.num_q_heads + h) * a.num_tokens + x] = -mass;
}

// grid (ceil(keep / threads), heads): mask[h][chosen[h][t]] = 1.
__global__ void __launch_bounds__(minference_threads)
    minference_mark_kernel(const std::uint32_t* chosen, std::uint32_t keep, std::uint32_t n, std::uint32_t* mask) {
    const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= keep) return;
    const std::size_t h = blockIdx.y;
    const std::uint32_t id = chosen[h * keep + t];
    if (id < n) mask[h * n + id] = 1;  // not after a NaN: the selection then writes nothing (ids stay ~0)
}

// grid (ceil(n / threads), 2 * heads): each marked index goes to its rank
// (the exclusive scan of all marks): ascending inside its head's list.
__global__ void __launch_bounds__(minference_threads)
    minference_scatter_kernel(const std::uint32_t* mask, const std::uint32_t* rank, std::uint32_t n,
                              std::uint32_t total, std::uint32_t* sorted) {
    const std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const std::size_t at = std::size_t{blockIdx.y} * n + j;
    // rank counts the marks of every list before this one; after a NaN a
    // list has fewer marks than places, so guard the end.
    if (mask[at] != 0 && rank[at] < total) sorted[rank[at]] = j;
}

struct prefill_index_args {
    const std::uint32_t* verticals = nullptr;  // [heads][vertical_count]
    const std::uint32_t* slashes = nullptr;    // [heads][slash_count]
    std::uint32_t vertical_count = 0;
    std::uint32_t slash_count = 0;
};

// The previous design (fallback and the bench's baseline): grid
// (ceil(n / prefill_warps), heads), one warp per query.
template <bool Dense>
__global__ void __launch_bounds__(prefill_warps * 32)
    prefill_attention_kernel(prefill_head_args a, std::uint32_t n, prefill_index_args index) {
    __shared__ float s_q[prefill_warps][prefill_max_per_lane * 32];
    __shared__ float s_scores[prefill_warps][prefill_tile_keys];
    __shared__ std::uint32_t s_keys[prefill_warps][prefill_tile_keys];
    const std::uint32_t warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    const std::uint32_t i = blockIdx.x * prefill_warps + warp, h = blockIdx.y;
    if (i >= n) return;  // the whole warp: only __syncwarp below
    const std::uint32_t d = a.head_dim, per_lane = d / 32u;
    const std::uint32_t kvh = h / (a.num_q_heads / a.num_kv_heads);
    const std::size_t kv_row = std::size_t{a.num_kv_heads} * d;
    const float* q = a.q + (std::size_t{i} * a.num_q_heads + h) * d;
    for (std::uint32_t c = lane; c < d; c += 32u) s_q[warp][c] = q[c];
    __syncwarp();

    dense_causal_keys dense{i};
    vertical_slash_keys sparse{};
    if constexpr (!Dense)
        sparse =
            vertical_slash_keys::make(index.verticals + std::size_t{h} * index.vertical_count, index.vertical_count,
                                      index.slashes + std::size_t{h} * index.slash_count, index.slash_count, i);
    const std::uint32_t count = Dense ? dense.count() : sparse.count();

    float acc[prefill_max_per_lane];
#pragma unroll
    for (int j = 0; j < prefill_max_per_lane; ++j) acc[j] = 0.0f;
    softmax_state state{};
    for (std::uint32_t begin = 0; begin < count; begin += prefill_tile_keys) {
        const std::uint32_t c = begin + lane;
        std::uint32_t key = 0;
        float score = -INFINITY;
        if (c < count) {
            const bool live = Dense ? dense.key(c, key) : sparse.key(c, key);
            if (live)
                score = prefill_logit(s_q[warp], a.k + std::size_t{key} * kv_row + std::size_t{kvh} * d, d, a.scale);
        }
        s_scores[warp][lane] = score;
        s_keys[warp][lane] = key;
        __syncwarp();
        const std::uint32_t tile = count - begin < prefill_tile_keys ? count - begin : prefill_tile_keys;
        online_softmax_tile(state, acc, s_scores[warp], s_keys[warp], tile, a.v + std::size_t{kvh} * d, kv_row, lane,
                            32u, per_lane);
        __syncwarp();
    }
    const float lse = finish_online_softmax(state, acc, per_lane);
    const std::size_t row = std::size_t{i} * a.num_q_heads + h;
    for (std::uint32_t j = 0; j < per_lane; ++j) a.o[row * d + lane + 32u * j] = acc[j];
    if (lane == 0) a.lse[row] = lse;
}

inline unsigned blocks_for(std::size_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// CTA-tiled prefill attention: grid (blocks, heads), block x = gridDim.x - 1
// - blockIdx.x (each head's longest query blocks start first), prefill_block_threads
// threads, prefill_block_layout<D>::bytes of dynamic shared memory.
template <bool Dense, std::uint32_t D>
__global__ void __launch_bounds__(prefill_block_threads, D == 256 ? 1 : 2)
    prefill_block_kernel(prefill_head_args a, std::uint32_t n, prefill_index_args index, bool vec) {
    extern __shared__ float4 prefill_block_smem[];
    const prefill_block_shared sh = prefill_block_carve<D>(reinterpret_cast<float*>(prefill_block_smem));
    const std::uint32_t h = blockIdx.y, block = gridDim.x - 1 - blockIdx.x, t = threadIdx.x;
    prefill_block_thread<D> th;
    const auto threads = [&](auto&& phase) {
        phase(t, th);
        __syncthreads();
    };
    if constexpr (Dense) {
        const prefill_block_ctx c = prefill_block_context(a, n, h, block, vec);
        prefill_block_attention<D>(c, dense_block_tiles::make(c), sh, threads);
    } else {
        const prefill_block_ctx c = prefill_block_context(
            a, n, h, block, vec, index.verticals + std::size_t{h} * index.vertical_count, index.vertical_count,
            index.slashes + std::size_t{h} * index.slash_count, index.slash_count);
        prefill_block_attention<D>(c, vertical_slash_block_tiles::make(c), sh, threads);
    }
}

// Launches the tiled kernel for head_dim template D; false (nothing
// launched) if the device cannot give a block its shared memory.
template <bool Dense, std::uint32_t D>
bool launch_prefill_block(const prefill_head_args& a, std::uint32_t n, const prefill_index_args& index,
                          cudaStream_t stream) {
    constexpr std::size_t bytes = prefill_block_layout<D>::bytes;
    int dev = 0, optin = 0;
    KVPOLICY_CUDA_CHECK(cudaGetDevice(&dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes > static_cast<std::size_t>(optin)) return false;
    KVPOLICY_CUDA_CHECK(cudaFuncSetAttribute(prefill_block_kernel<Dense, D>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    const auto address = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p); };
    const bool vec = ((address(a.q) | address(a.k) | address(a.v)) % 16) == 0;
    prefill_block_kernel<Dense, D>
        <<<dim3(prefill_blocks(n), a.num_q_heads), prefill_block_threads, bytes, stream>>>(a, n, index, vec);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    return true;
}

// The tiled kernel for a.head_dim, or the warp-per-query one where the
// device lacks the shared memory.
template <bool Dense>
void launch_prefill(const prefill_head_args& a, std::uint32_t n, const prefill_index_args& index, cudaStream_t stream) {
    bool done = false;
    switch (prefill_block_dim(a.head_dim)) {
        case 64:
            done = launch_prefill_block<Dense, 64>(a, n, index, stream);
            break;
        case 128:
            done = launch_prefill_block<Dense, 128>(a, n, index, stream);
            break;
        default:
            done = launch_prefill_block<Dense, 256>(a, n, index, stream);
            break;
    }
    if (done) return;
    prefill_attention_kernel<Dense>
        <<<dim3(blocks_for(n, prefill_warps), a.num_q_heads), prefill_warps * 32, 0, stream>>>(a, n, index);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

inline void check_device_prefill(const char* who, const device_prefill_qkv_view& in) {
    ::kvpolicy::detail::check_prefill_input(who, in);
    if (in.head_dim % 32 != 0 || in.head_dim > 32 * prefill_max_per_lane)
        throw usage_error(std::string(who) + ": head_dim " + std::to_string(in.head_dim) +
                          " is not a multiple of 32 in [32, 256]");
}

[[nodiscard]] inline prefill_head_args device_head_args(const device_prefill_qkv_view& in,
                                                        const device_prefill_output_view& out) noexcept {
    return {.q = in.q.data(),
            .k = in.k.data(),
            .v = in.v.data(),
            .o = out.o.data(),
            .lse = out.lse.data(),
            .num_q_heads = in.num_q_heads,
            .num_kv_heads = in.num_kv_heads,
            .head_dim = in.head_dim,
            .scale = in.scale};
}

}  // namespace detail

/// Effects: enqueues dense causal prefill attention (every query i over
/// keys 0 .. i): o and lse of every row. The baseline of the sparse kernel,
/// of the same design (CTA-tiled). Throws: usage_error for a shape that disagrees or a
/// head_dim the kernel does not take (nothing enqueued); cuda_error.
inline void prefill_attention_dense(const device_prefill_qkv_view& in, const device_prefill_output_view& out,
                                    cudaStream_t stream) {
    detail::check_device_prefill("prefill_attention_dense", in);
    ::kvpolicy::detail::check_prefill_views("prefill_attention_dense", in, out);
    if (in.num_tokens == 0) return;
    detail::launch_prefill<true>(detail::device_head_args(in, out), in.num_tokens, {}, stream);
}

/// One vertical-slash index on the device: per query head, `vertical_count`
/// kept columns and `slash_count` kept diagonal offsets, each ascending.
struct device_vertical_slash_index {
    device_span<const std::uint32_t> verticals;  ///< [num_heads][vertical_count]
    device_span<const std::uint32_t> slashes;    ///< [num_heads][slash_count]
    std::uint32_t vertical_count = 0;
    std::uint32_t slash_count = 0;
};

/// Effects: enqueues sparse prefill attention over `index` (query i reads
/// the kept columns <= i and i - o for the kept offsets o <= i, each key
/// once). Preconditions: every index below num_tokens, lists ascending.
/// Throws: usage_error for shapes that disagree (nothing enqueued); cuda_error.
inline void prefill_attention_vertical_slash(const device_prefill_qkv_view& in,
                                             const device_vertical_slash_index& index,
                                             const device_prefill_output_view& out, cudaStream_t stream) {
    detail::check_device_prefill("prefill_attention_vertical_slash", in);
    ::kvpolicy::detail::check_prefill_views("prefill_attention_vertical_slash", in, out);
    if (index.verticals.size() != std::size_t{in.num_q_heads} * index.vertical_count ||
        index.slashes.size() != std::size_t{in.num_q_heads} * index.slash_count)
        throw usage_error("prefill_attention_vertical_slash: the index holds " +
                          std::to_string(index.verticals.size()) + " columns and " +
                          std::to_string(index.slashes.size()) +
                          " offsets; give [num_q_heads][vertical_count] and "
                          "[num_q_heads][slash_count]");
    if (in.num_tokens == 0) return;
    detail::launch_prefill<false>(
        detail::device_head_args(in, out), in.num_tokens,
        {index.verticals.data(), index.slashes.data(), index.vertical_count, index.slash_count}, stream);
}

/// MInference as a device sparse selector: the host `minference`'s contract
/// (every block selected, prefill only) over device views.
class device_minference {
public:
    using config_type = minference_config;
    using key_element = float;  ///< on_offload's keys (unused: nothing recorded)

    static constexpr std::string_view name = "minference_cuda";
    static constexpr bool supports_prefill = true;
    static constexpr bool supports_decode = false;
    static constexpr bool requires_block_selection = false;

    /// Throws: config_error as the host minference does. Allocates nothing
    /// until the first prompt; buffers grow to the largest prompt seen.
    explicit device_minference(const config_type& config, cudaStream_t stream = cudaStreamPerThread)
            : config_(validate_minference_config(config)), stream_(stream) {}

    /// Every available block (host ids), as the host selector.
    /// Throws: usage_error if `out` is shorter than `available` (nothing written).
    std::size_t select(std::span<const block_id> available, const device_selection_context&,
                       std::span<block_id> out) const {
        if (out.size() < available.size())
            throw usage_error("device_minference::select: output holds " + std::to_string(out.size()) + " ids for " +
                              std::to_string(available.size()) + " available blocks; size it to available.size()");
        std::ranges::copy(available, out.begin());
        return available.size();
    }
    /// Nothing to record: the index is estimated from each prompt itself.
    void on_offload(block_id, layer_index, const device_key_block_view&) const noexcept {}

    /// Effects: enqueues the index estimation of this prompt into the
    /// selector's device buffers (index()), then sparse attention over it.
    /// Asynchronous on the selector's stream; `wait()` reports a NaN that the
    /// estimate met. Throws: usage_error for shapes, config_error for a
    /// last_q larger than the prompt (nothing enqueued); cuda_error.
    void sparse_prefill_attention(const device_prefill_qkv_view& in, layer_index,
                                  const device_prefill_output_view& out) {
        ::kvpolicy::detail::check_prefill_views("device_minference::sparse_prefill_attention", in, out);
        estimate(in);
        prefill_attention_vertical_slash(in, index(), out, stream_);
    }

    /// Effects: enqueues only the index estimation (index()).
    /// Throws: as sparse_prefill_attention.
    void estimate(const device_prefill_qkv_view& in) {
        detail::check_device_prefill("device_minference::estimate", in);
        check_minference_prompt(config_, in.num_tokens);
        const std::uint32_t n = in.num_tokens, heads = in.num_q_heads, last_q = config_.last_q;
        sizes_ = minference_kept_sizes(config_, n);
        heads_ = heads;
        const std::size_t hn = std::size_t{heads} * n;
        logits_.reserve(std::size_t{heads} * last_q * n);
        row_lse_.reserve(std::size_t{heads} * last_q);
        scores_.reserve(2 * hn);
        chosen_.reserve(std::size_t{heads} * (sizes_.vertical_count + sizes_.slash_count));
        mask_.reserve(2 * hn);
        rank_.reserve(2 * hn);
        sorted_.reserve(std::size_t{heads} * (sizes_.vertical_count + sizes_.slash_count));
        status_.reserve(2 * std::size_t{heads});
        const auto scores_of = [&](std::size_t list) {  // list = kind * heads + head
            return device_span<const float>{scores_.get() + list * n, n};
        };
        std::size_t select_bytes = 0, scan_bytes = 0, more = 0;
        select_lowest<float>({}, select_bytes, scores_of(0), {}, {}, sizes_.vertical_count, {}, stream_);
        select_lowest<float>({}, more, scores_of(0), {}, {}, sizes_.slash_count, {}, stream_);
        select_bytes = std::max(select_bytes, more);
        KVPOLICY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, mask_.get(), rank_.get(),
                                                          static_cast<int>(2 * hn), stream_));
        temp_.reserve(std::max(select_bytes, scan_bytes));

        const minference_estimate_args a{.q = in.q.data(),
                                         .k = in.k.data(),
                                         .logits = logits_.get(),
                                         .row_lse = row_lse_.get(),
                                         .num_tokens = n,
                                         .num_q_heads = heads,
                                         .num_kv_heads = in.num_kv_heads,
                                         .head_dim = in.head_dim,
                                         .scale = in.scale,
                                         .last_q = last_q,
                                         .num_sink_tokens = config_.num_sink_tokens,
                                         .num_recent_diags = config_.num_recent_diags};
        const int t = detail::minference_threads;
        detail::minference_logits_kernel<<<dim3(detail::blocks_for(n, t), last_q, heads), t, 0, stream_>>>(
            a, logits_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        detail::minference_row_lse_kernel<<<dim3(last_q, heads), detail::minference_row_threads, 0, stream_>>>(
            a, row_lse_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        detail::minference_mass_kernel<<<dim3(detail::blocks_for(n, t), heads, 2), t, 0, stream_>>>(a, scores_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());

        // Top-k of each head's columns, then of its diagonals. After a NaN
        // mass (reported by wait()) a selection writes nothing: the ids stay
        // ~0 and the sorted lists 0, so every later read stays in bounds.
        const std::size_t total = std::size_t{heads} * (sizes_.vertical_count + sizes_.slash_count);
        KVPOLICY_CUDA_CHECK(cudaMemsetAsync(chosen_.get(), 0xff, total * sizeof(std::uint32_t), stream_));
        KVPOLICY_CUDA_CHECK(cudaMemsetAsync(sorted_.get(), 0, total * sizeof(std::uint32_t), stream_));
        std::uint32_t* chosen_v = chosen_.get();
        std::uint32_t* chosen_s = chosen_v + std::size_t{heads} * sizes_.vertical_count;
        for (std::uint32_t h = 0; h < heads; ++h) {
            std::size_t bytes = temp_.capacity();
            select_lowest<float>(
                temp_.view(), bytes, scores_of(h), {},
                device_span<std::uint32_t>{chosen_v + std::size_t{h} * sizes_.vertical_count, sizes_.vertical_count},
                sizes_.vertical_count, device_span<select_status>{status_.get() + h, 1}, stream_);
            bytes = temp_.capacity();
            select_lowest<float>(
                temp_.view(), bytes, scores_of(std::size_t{heads} + h), {},
                device_span<std::uint32_t>{chosen_s + std::size_t{h} * sizes_.slash_count, sizes_.slash_count},
                sizes_.slash_count, device_span<select_status>{status_.get() + heads + h, 1}, stream_);
        }
        // Ascending order: mark, scan, scatter. The scan over [2][heads][n]
        // ranks column marks before diagonal marks, head by head, so the
        // sorted lists land at [heads][vertical_count] then [heads][slash_count].
        KVPOLICY_CUDA_CHECK(cudaMemsetAsync(mask_.get(), 0, 2 * hn * sizeof(std::uint32_t), stream_));
        detail::minference_mark_kernel<<<dim3(detail::blocks_for(sizes_.vertical_count, t), heads), t, 0, stream_>>>(
            chosen_v, sizes_.vertical_count, n, mask_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        detail::minference_mark_kernel<<<dim3(detail::blocks_for(sizes_.slash_count, t), heads), t, 0, stream_>>>(
            chosen_s, sizes_.slash_count, n, mask_.get() + hn);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        std::size_t bytes = temp_.capacity();
        KVPOLICY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp_.get(), bytes, mask_.get(), rank_.get(),
                                                          static_cast<int>(2 * hn), stream_));
        detail::minference_scatter_kernel<<<dim3(detail::blocks_for(n, t), 2 * heads), t, 0, stream_>>>(
            mask_.get(), rank_.get(), n, static_cast<std::uint32_t>(total), sorted_.get());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// The index of the last estimate, on the device (valid once the stream
    /// reaches it).
    [[nodiscard]] device_vertical_slash_index index() const noexcept {
        const std::size_t nv = std::size_t{heads_} * sizes_.vertical_count;
        const std::size_t ns = std::size_t{heads_} * sizes_.slash_count;
        return {device_span<const std::uint32_t>{sorted_.get(), nv},
                device_span<const std::uint32_t>{sorted_.get() + nv, ns}, sizes_.vertical_count, sizes_.slash_count};
    }

    /// The last estimate's negated masses, [2][num_q_heads][num_tokens]
    /// (columns, then diagonals by offset), on the device.
    [[nodiscard]] device_span<const float> negated_masses(std::uint32_t num_tokens) const noexcept {
        return device_span<const float>{scores_.get(), 2 * std::size_t{heads_} * num_tokens};
    }

    /// Waits for the stream. Throws: usage_error if a mass was NaN (a NaN or
    /// infinite value in q or k); the outputs are then unspecified.
    void wait() {
        std::vector<select_status> s(2 * std::size_t{heads_});
        if (!s.empty())
            KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(s.data(), status_.get(), s.size() * sizeof(select_status),
                                                cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));
        for (std::size_t x = 0; x < s.size(); ++x)
            if (s[x].nan_count != 0)
                throw usage_error("device_minference: the " + std::string(x < heads_ ? "column" : "diagonal") +
                                  " mass " + std::to_string(s[x].nan_id) + " of head " + std::to_string(x % heads_) +
                                  " is NaN; q or k holds a NaN or infinite value");
    }

    /// Copies the last index to the host (synchronous), as the host
    /// reference lays it out.
    [[nodiscard]] vertical_slash_index copy_index(std::uint32_t num_tokens) {
        wait();
        vertical_slash_index x{heads_,
                               num_tokens,
                               sizes_.vertical_count,
                               sizes_.slash_count,
                               std::vector<std::uint32_t>(std::size_t{heads_} * sizes_.vertical_count),
                               std::vector<std::uint32_t>(std::size_t{heads_} * sizes_.slash_count)};
        const device_vertical_slash_index d = index();
        if (!x.verticals.empty())
            KVPOLICY_CUDA_CHECK(
                cudaMemcpy(x.verticals.data(), d.verticals.data(), d.verticals.size_bytes(), cudaMemcpyDeviceToHost));
        if (!x.slashes.empty())
            KVPOLICY_CUDA_CHECK(
                cudaMemcpy(x.slashes.data(), d.slashes.data(), d.slashes.size_bytes(), cudaMemcpyDeviceToHost));
        return x;
    }

    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    [[nodiscard]] minference_sizes sizes() const noexcept { return sizes_; }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
    config_type config_;
    cudaStream_t stream_;
    minference_sizes sizes_{};
    std::uint32_t heads_ = 0;
    device_buffer<float> logits_;          // [heads][last_q][n]
    device_buffer<float> row_lse_;         // [heads][last_q]
    device_buffer<float> scores_;          // [2][heads][n] negated masses
    device_buffer<std::uint32_t> chosen_;  // [heads][vertical_count] then [heads][slash_count], by mass
    device_buffer<std::uint32_t> mask_;    // [2][heads][n]
    device_buffer<std::uint32_t> rank_;    // [2][heads][n] exclusive scan of mask_
    device_buffer<std::uint32_t> sorted_;  // [heads][vertical_count] then [heads][slash_count], ascending
    device_buffer<select_status> status_;  // [2][heads]
    device_buffer<std::byte> temp_;        // select_lowest / DeviceScan temporary storage
};

static_assert(device_sparse_selector<device_minference>);
static_assert(prefill_sparse_selector<device_minference, memory_space::device>);
static_assert(!prefill_sparse_selector<device_minference>, "host views must not reach a device selector");

}  // namespace kvpolicy::cuda
