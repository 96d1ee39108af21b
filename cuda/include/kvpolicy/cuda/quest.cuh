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
// Keys may be stored as fp32, bf16 or fp16 (`basic_device_quest<T>`:
// device_quest, device_quest_bf16, device_quest_fp16), what engines keep;
// the metadata is kept in the same type (exact, and half the bytes the
// scoring pass reads for 16-bit keys), the query and scores are fp32. Each
// thread's arithmetic is sparse/quest_math.hpp's, run on the CPU thread by
// thread by tests/sparse_kv_element.cpp.
// Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML'24. Departures, besides the host version's: the scores
// are summed in a tree, not channel by channel, so they match the host's to
// float rounding, not bit for bit; a block with a non-finite key gets no
// metadata (it is always loaded) instead of an error, since a kernel cannot
// throw.
//
// Memory spaces in the types (core/memory_space.hpp): the query and keys
// come as device spans (device_selection_context, device_key_block_view),
// block ids to `select` and its output stay on the host; so the host
// checks read no device memory. The query's values are checked on the
// device (`quest_query_check_kernel`, whose per-thread test,
// quest_query_thread_nonfinite, is tested on the CPU), and `select` throws
// the host quest's usage_error afterwards, having written nothing.
//
// All work is enqueued on the selector's stream: pass the stream that
// produced the keys, so `on_offload` sees them. `select` is synchronous (its
// output is a host span); `score_blocks` is not, nor is `select_top_device`,
// the score + top-K path with no host round trip (query check, scores and
// radix select enqueued back to back, results left in device memory), nor
// `select_top_paged`, the same for a whole paged batch in two launches.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/core/sparse_context.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/cuda/quest_paged_kv.cuh"
#include "kvpolicy/cuda/select.cuh"
#include "kvpolicy/cuda/select_key.cuh"
#include "kvpolicy/sparse/cta_radix_select_math.hpp"
#include "kvpolicy/sparse/kv_element.hpp"
#include "kvpolicy/sparse/paged_kv_row.hpp"
#include "kvpolicy/sparse/quest.hpp"
#include "kvpolicy/sparse/quest_math.hpp"

namespace kvpolicy::cuda {

namespace detail {

inline constexpr int quest_threads = 128;

struct quest_dims {
    std::uint32_t num_blocks;
    std::uint32_t num_kv_heads;
    std::uint32_t head_dim;
};

// grid.x = blocks offloaded; block j's keys start at keys + j * block_stride
// as [tokens][num_kv_heads][head_dim]. Each thread's elements are
// quest_channel_minmax's (sparse/quest_math.hpp, tested on the CPU thread by
// thread); metadata is stored as T (exact: a min or max of T values).
template <kv_element T>
__global__ void __launch_bounds__(quest_threads)
    quest_metadata_kernel(device_span<const T> keys_span, std::size_t block_stride,
                          device_span<const std::uint32_t> blocks_span, device_span<const std::uint32_t> tokens_span,
                          std::uint32_t one_block, std::uint32_t one_tokens, std::uint32_t layer, quest_dims dims,
                          device_span<T> key_min_span, device_span<T> key_max_span,
                          device_span<std::uint8_t> has_metadata_span) {
    const std::uint32_t* blocks = blocks_span.empty() ? nullptr : blocks_span.data();
    const std::uint32_t* tokens = tokens_span.empty() ? nullptr : tokens_span.data();
    const std::uint32_t j = blockIdx.x;
    const std::uint32_t block = blocks != nullptr ? blocks[j] : one_block;
    const std::uint32_t valid = tokens != nullptr ? tokens[j] : one_tokens;
    const std::size_t row = std::size_t{dims.num_kv_heads} * dims.head_dim;
    const T* k = keys_span.data() + j * block_stride;
    const std::size_t at = (std::size_t{layer} * dims.num_blocks + block) * row;
    int bad = valid == 0 ? 1 : 0;
    for (std::size_t e = threadIdx.x; e < row; e += blockDim.x) {
        const quest_channel_bounds<T> b = quest_channel_minmax(k, row, valid, e);
        key_min_span.data()[at + e] = b.min;
        key_max_span.data()[at + e] = b.max;
        bad |= b.nonfinite ? 1 : 0;
    }
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) has_metadata_span.data()[std::size_t{layer} * dims.num_blocks + block] = bad != 0 ? 0 : 1;
}

// One CTA's score of one block: the sum over query heads and channels of
// quest_score_thread_partial (fp32 over the widened T metadata), reduced
// with cub::BlockReduce; +inf without metadata; negated with `negate`.
// Thread 0 writes *out.
template <kv_element T>
__device__ void quest_score_block(const float* query, std::uint32_t num_q_heads, std::uint32_t block,
                                  std::uint32_t layer, quest_dims dims, const T* key_min, const T* key_max,
                                  const std::uint8_t* has_metadata, bool negate, float* out,
                                  typename cub::BlockReduce<float, quest_threads>::TempStorage& storage) {
    const std::size_t flag = std::size_t{layer} * dims.num_blocks + block;
    if (has_metadata[flag] == 0) {  // the same for the whole thread block
        if (threadIdx.x == 0)
            *out = negate ? -::cuda::std::numeric_limits<float>::infinity()
                          : ::cuda::std::numeric_limits<float>::infinity();
        return;
    }
    const std::size_t at = flag * dims.num_kv_heads * dims.head_dim;
    const float partial =
        quest_score_thread_partial(query, key_min + at, key_max + at, num_q_heads, num_q_heads / dims.num_kv_heads,
                                   dims.head_dim, threadIdx.x, blockDim.x);
    const float total = cub::BlockReduce<float, quest_threads>(storage).Sum(partial);
    if (threadIdx.x == 0) *out = negate ? -total : total;
}

// grid.x = candidates; out[j] = score of blocks[j] (negated with `negate`).
template <kv_element T>
__global__ void __launch_bounds__(quest_threads)
    quest_score_kernel(device_span<const float> query_span, std::uint32_t num_q_heads,
                       device_span<const std::uint32_t> blocks, std::uint32_t layer, quest_dims dims,
                       device_span<const T> key_min_span, device_span<const T> key_max_span,
                       device_span<const std::uint8_t> has_metadata, bool negate, device_span<float> out) {
    __shared__ typename cub::BlockReduce<float, quest_threads>::TempStorage storage;
    quest_score_block<T>(query_span.data(), num_q_heads, blocks[blockIdx.x], layer, dims, key_min_span.data(),
                         key_max_span.data(), has_metadata.data(), negate, out.data() + blockIdx.x, storage);
}

// grid = (max_middle, batch): CTA (i, r) scores request r's middle candidate
// i, page pages[table_begin + middle_begin + i], into scores[r * max_middle
// + i], negated (the selection takes the lowest). Rows whose selection is
// empty or everything (cta_radix_needs_passes) are not scored.
template <kv_element T>
__global__ void __launch_bounds__(quest_threads)
    quest_paged_score_kernel(device_span<const quest_paged_row> rows, device_span<const std::int32_t> pages,
                             device_span<const float> queries, std::uint32_t num_q_heads, std::uint32_t layer,
                             quest_dims dims, device_span<const T> key_min, device_span<const T> key_max,
                             device_span<const std::uint8_t> has_metadata, std::uint32_t max_middle,
                             device_span<float> scores) {
    __shared__ typename cub::BlockReduce<float, quest_threads>::TempStorage storage;
    const quest_paged_row row = rows[blockIdx.y];
    const std::uint32_t middle = row.middle_end - row.middle_begin;
    if (blockIdx.x >= middle || !cta_radix_needs_passes(middle, row.keep)) return;
    const auto block = static_cast<std::uint32_t>(pages[row.table_begin + row.middle_begin + blockIdx.x]);
    quest_score_block<T>(queries.data() + std::size_t{blockIdx.y} * num_q_heads * dims.head_dim, num_q_heads, block,
                         layer, dims, key_min.data(), key_max.data(), has_metadata.data(), true,
                         scores.data() + std::size_t{blockIdx.y} * max_middle + blockIdx.x, storage);
}

inline constexpr int paged_select_threads = 512;

// grid = batch: CTA r checks request r's query (flags[r]) and selects the
// keep lowest of its negated scores into positions[positions_begin ..], in
// position order, ties to the lower position: sparse/cta_radix_select_math's
// radix select (four 8-bit passes, a shared histogram each, one warp picking
// the digit), then a compaction of two block scans per chunk. A NaN score
// leaves the positions unwritten and is reported in status[r], as
// select_lowest reports it (nan_id: the position).
__global__ void __launch_bounds__(paged_select_threads)
    quest_paged_select_kernel(device_span<const quest_paged_row> rows, device_span<const float> queries,
                              std::uint32_t query_values, device_span<const float> scores, std::uint32_t max_middle,
                              device_span<std::uint32_t> positions, device_span<select_status> status,
                              device_span<std::uint32_t> flags) {
    using scan_t = cub::BlockScan<std::uint32_t, paged_select_threads>;
    __shared__ typename scan_t::TempStorage scan;
    __shared__ std::uint32_t hist[cta_radix_bins];
    __shared__ std::uint32_t nan_count, nan_index;
    __shared__ cta_radix_pick pick;
    const std::uint32_t r = blockIdx.x, t = threadIdx.x;
    const quest_paged_row row = rows[r];
    const std::uint32_t n = row.middle_end - row.middle_begin, k = row.keep < n ? row.keep : n;
    if (t == 0) {
        nan_count = 0;
        nan_index = 0xffffffffu;
    }
    const int bad =
        quest_query_thread_nonfinite(queries.data() + std::size_t{r} * query_values, query_values, t, blockDim.x) ? 1
                                                                                                                  : 0;
    const int any_bad = __syncthreads_or(bad);  // also publishes the NaN counters' start
    if (t == 0) flags[r] = any_bad != 0 ? 1u : 0u;
    std::uint32_t* const out = positions.data() + row.positions_begin;
    if (!cta_radix_needs_passes(n, k)) {  // nothing scored: none or every candidate
        for (std::uint32_t i = t; i < k; i += blockDim.x) out[i] = i;
        if (t == 0) status[r] = select_status{0, 0, 0, k};
        return;
    }
    const float* const s = scores.data() + std::size_t{r} * max_middle;
    for (std::uint32_t i = t; i < n; i += blockDim.x)
        if (s[i] != s[i]) {
            atomicAdd(&nan_count, 1u);
            atomicMin(&nan_index, i);
        }
    __syncthreads();
    if (nan_count != 0) {
        if (t == 0) status[r] = select_status{nan_count, nan_index, nan_index, 0};
        return;
    }
    cta_radix_cut cut = cta_radix_start(n, k);
    for (int pass = 0; pass < cta_radix_passes; ++pass) {
        for (std::uint32_t b = t; b < cta_radix_bins; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (std::uint32_t i = t; i < n; i += blockDim.x) {
            const std::uint32_t key = ordered_bits(s[i]);
            if (cta_radix_in_prefix(key, cut.threshold, pass)) atomicAdd(&hist[cta_radix_digit(key, pass)], 1u);
        }
        __syncthreads();
        if (t < 32) {  // one warp: an inclusive scan of the lanes' sums, then the lane holding the rank picks
            const std::uint32_t sum = cta_radix_lane_sum(hist, t);
            std::uint32_t inclusive = sum;
            for (std::uint32_t o = 1; o < 32; o <<= 1) {
                const std::uint32_t v = __shfl_up_sync(0xffffffffu, inclusive, o);
                if (t >= o) inclusive += v;
            }
            cta_radix_pick mine;
            if (cta_radix_pick_in_lane(hist, t, inclusive - sum, cut.rank, mine)) pick = mine;
        }
        __syncthreads();
        cut = cta_radix_narrow(cut, pass, pick);
    }
    std::uint32_t tied_seen = 0, taken = 0;
    for (std::uint32_t base = 0; base < n; base += blockDim.x) {
        const std::uint32_t i = base + t;
        const bool in = i < n;
        const std::uint32_t key = in ? ordered_bits(s[i]) : 0u;
        std::uint32_t tied_before = 0, chunk_tied = 0, slot = 0, chunk_taken = 0;
        scan_t(scan).ExclusiveSum(in && key == cut.threshold ? 1u : 0u, tied_before, chunk_tied);
        __syncthreads();  // the scan's storage is reused
        const bool take = in && cta_radix_takes(key, cut, tied_seen + tied_before);
        scan_t(scan).ExclusiveSum(take ? 1u : 0u, slot, chunk_taken);
        __syncthreads();
        if (take) out[taken + slot] = i;
        taken += chunk_taken;
        tied_seen += chunk_tied;
    }
    if (t == 0) status[r] = select_status{0, 0, 0, k};
}

// One thread block: *flag = 1 if the query holds a NaN or infinite value
// (quest_query_thread_nonfinite per thread, ORed over the block); 0 else.
__global__ void __launch_bounds__(quest_threads)
    quest_query_check_kernel(device_span<const float> query, device_span<std::uint32_t> flag) {
    const int bad = quest_query_thread_nonfinite(query.data(), query.size(), threadIdx.x, blockDim.x) ? 1 : 0;
    const int any = __syncthreads_or(bad);
    if (threadIdx.x == 0) flag[0] = any != 0 ? 1u : 0u;
}

}  // namespace detail

/// Quest on the device over keys stored as T (fp32, bf16 or fp16); the
/// metadata is kept as T too (sparse/quest_math.hpp says why), the query and
/// the scores are fp32. `device_quest` is the fp32 one.
template <kv_element T>
class basic_device_quest {
public:
    using config_type = quest_config;
    using key_element = T;

    static constexpr std::string_view name = std::same_as<T, float>  ? std::string_view{"quest_cuda"}
                                             : std::same_as<T, bf16> ? std::string_view{"quest_cuda_bf16"}
                                                                     : std::string_view{"quest_cuda_fp16"};
    static constexpr bool supports_prefill = false;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;

    /// Allocates the metadata on the device (2 * num_layers * num_blocks *
    /// num_kv_heads * head_dim values of T), all blocks without metadata.
    /// Throws: config_error as the host quest does; cuda_error.
    explicit basic_device_quest(const config_type& config, cudaStream_t stream = cudaStreamPerThread)
            : config_(quest::validate(config)), stream_(stream), selector_(stream) {
        const std::size_t values = std::size_t{config_.num_layers} * config_.num_blocks * row();
        key_min_.reserve(values);
        key_max_.reserve(values);
        has_metadata_.reserve(std::size_t{config_.num_layers} * config_.num_blocks);
        reset();
    }

    /// Effects: enqueues the metadata of (`block`, `layer`) from `keys`
    /// (device memory, [tokens][num_kv_heads][head_dim]).
    /// Throws: usage_error for a block or layer out of range, a shape that
    /// differs from the config, no valid tokens, or a view shorter than
    /// tokens x num_kv_heads x head_dim (nothing enqueued).
    void on_offload(block_id block, layer_index layer, const basic_device_key_block_view<T>& keys) {
        check_range(block.value, layer, "on_offload");
        if (keys.num_kv_heads != config_.num_kv_heads || keys.head_dim != config_.head_dim || keys.tokens == 0 ||
            keys.keys.size() < std::size_t{keys.tokens} * row())
            throw usage_error("device_quest::on_offload: keys of block " + std::to_string(block.value) +
                              " are not [tokens >= 1][" + std::to_string(config_.num_kv_heads) + "][" +
                              std::to_string(config_.head_dim) + "] as the config says");
        detail::quest_metadata_kernel<T>
            <<<1, detail::quest_threads, 0, stream_>>>(keys.keys, 0, {}, {}, block.value, keys.tokens, layer.value,
                                                       dims(), key_min_.view(), key_max_.view(), has_metadata_.view());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// Batched `on_offload` for one layer: block j of blocks.size() has its
    /// keys at keys.subspan(j * block_stride), `tokens[j]` valid tokens
    /// (at most block_stride / (num_kv_heads x head_dim)), and CPU-tier id
    /// `blocks[j]` (all device memory). Ids and token counts are read on the
    /// device, not checked on the host: keep ids below num_blocks.
    /// Throws: usage_error if the layer is out of range, tokens and blocks
    /// differ in length, block_stride is shorter than one token row, or keys
    /// is shorter than blocks.size() x block_stride (nothing enqueued).
    void on_offload_blocks(layer_index layer, device_span<const T> keys, std::size_t block_stride,
                           device_span<const std::uint32_t> blocks, device_span<const std::uint32_t> tokens) {
        check_range(0, layer, "on_offload_blocks");
        if (tokens.size() != blocks.size() || block_stride < row() || keys.size() < blocks.size() * block_stride)
            throw usage_error("device_quest::on_offload_blocks: " + std::to_string(blocks.size()) + " blocks, " +
                              std::to_string(tokens.size()) + " token counts, stride " + std::to_string(block_stride) +
                              " and " + std::to_string(keys.size()) +
                              " key values; give one count per block, a stride of at least num_kv_heads x "
                              "head_dim = " +
                              std::to_string(row()) + " and blocks x stride values");
        if (blocks.empty()) return;
        detail::quest_metadata_kernel<T><<<static_cast<unsigned>(blocks.size()), detail::quest_threads, 0, stream_>>>(
            keys, block_stride, blocks, tokens, 0, 0, layer.value, dims(), key_min_.view(), key_max_.view(),
            has_metadata_.view());
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// Enqueues scores[j] = score of block blocks[j] for `query`
    /// ([num_q_heads][head_dim]); -score with `negate` (what top-K selects
    /// on). All device memory.
    /// Throws: usage_error if the layer is out of range, num_q_heads is not a
    /// multiple of the KV heads, the query is not num_q_heads x head_dim
    /// values, or scores is shorter than blocks (nothing enqueued).
    void score_blocks(layer_index layer, device_span<const std::uint32_t> blocks, device_span<const float> query,
                      std::uint32_t num_q_heads, device_span<float> scores, bool negate = false) {
        check_score_args(layer, blocks.size(), query.size(), num_q_heads, scores.size(), "score_blocks");
        enqueue_scores(layer, blocks, query, num_q_heads, scores, negate);
    }

    /// Quest's score + top-K with no host round trip: enqueues, back to
    /// back on the selector's stream, the device query check (query_flag[0]
    /// = 1 if the query holds a NaN or infinite value, else 0), the scores of
    /// `candidates` (block ids, device memory) and the radix selection of the
    /// min(keep, candidates.size()) highest into `positions`: indexes into
    /// candidates, highest score first, equal scores to the lower position
    /// (the older block: the host rule, `quest_top_positions`, up to order).
    /// `status[0]` is select_lowest's (a NaN score: positions not written).
    /// No cudaStreamSynchronize, no host copy: the caller reads the results
    /// after its own event or sync, or feeds `positions` to the next kernel.
    /// Two-phase temporary storage as select_lowest's: with an empty
    /// temp_storage, only sets temp_storage_bytes (scores + selection) and
    /// enqueues nothing.
    /// Throws: usage_error for the shapes score_blocks rejects, positions
    /// shorter than min(keep, n), an empty status or query_flag, or
    /// temporary storage smaller than the size query said (nothing
    /// enqueued); cuda_error.
    void select_top_device(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes, layer_index layer,
                           device_span<const std::uint32_t> candidates, device_span<const float> query,
                           std::uint32_t num_q_heads, std::uint32_t keep, device_span<std::uint32_t> positions,
                           device_span<select_status> status, device_span<std::uint32_t> query_flag) {
        const std::size_t n = candidates.size();
        const std::size_t scores_bytes = (n * sizeof(float) + 255) & ~std::size_t{255};
        std::size_t select_bytes = 0;
        select_lowest<float>({}, select_bytes, device_span<const float>{nullptr, n}, {}, positions, keep, status,
                             stream_);
        if (temp_storage.data() == nullptr) {
            temp_storage_bytes = scores_bytes + select_bytes;
            return;
        }
        check_score_args(layer, n, query.size(), num_q_heads, n, "select_top_device");
        const std::size_t k = std::min<std::size_t>(keep, n);
        if (positions.size() < k || status.empty() || query_flag.empty() ||
            temp_storage.size() < scores_bytes + select_bytes)
            throw usage_error("device_quest::select_top_device: room for " + std::to_string(positions.size()) +
                              " positions, " + std::to_string(status.size()) + " statuses, " +
                              std::to_string(query_flag.size()) + " query flags and " +
                              std::to_string(temp_storage.size()) + " bytes; give " + std::to_string(k) +
                              " positions, one status, one flag and the " +
                              std::to_string(scores_bytes + select_bytes) + " bytes the size query gives");
        const device_span<float> scores{reinterpret_cast<float*>(temp_storage.data()), n};
        detail::quest_query_check_kernel<<<1, detail::quest_threads, 0, stream_>>>(query, query_flag.first(1));
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        enqueue_scores(layer, candidates, query, num_q_heads, scores, true);
        select_lowest<float>(temp_storage.subspan(scores_bytes), select_bytes, scores, {}, positions, keep, status,
                             stream_);
    }

    /// Quest's score + top-K for every request of a paged batch, in two
    /// launches whatever the batch: one CTA per (request, candidate) scores,
    /// one CTA per request selects (sparse/cta_radix_select_math.hpp: a
    /// radix select, no sort). Request r's candidates are its middle pages,
    /// `layout.pages()[table_begin + middle_begin ..]` (Quest's metadata is
    /// indexed by page id: offload page p as block p), its query
    /// `queries[r * num_q_heads * head_dim ..]`; its row.keep chosen
    /// positions (into its middle) go to positions[row.positions_begin ..],
    /// in position order, ties to the lower position (the host rule,
    /// `quest_top_positions`, up to order), exactly what
    /// `device_quest_paged_layout::write` reads. query_flags[r] = 1 if
    /// query r holds a NaN or infinite value; status[r] is select_lowest's
    /// (a NaN score: that row's positions not written). Rows that keep none
    /// or every candidate are not scored. Nothing is synchronized or copied
    /// to the host; the scores live in this selector's buffer, so calls on
    /// one selector are serialized on its stream.
    /// Throws: usage_error for a layout not uploaded or of more than 65535
    /// requests, a query span not batch x num_q_heads x head_dim, query
    /// heads not a multiple of the KV heads, positions, status or flags too
    /// short, a page id at or past the selector's num_blocks (nothing
    /// enqueued); cuda_error.
    void select_top_paged(layer_index layer, const device_quest_paged_layout& layout, device_span<const float> queries,
                          std::uint32_t num_q_heads, device_span<std::uint32_t> positions,
                          device_span<select_status> status, device_span<std::uint32_t> query_flags) {
        const std::string at = "device_quest::select_top_paged: ";
        const std::uint32_t batch = layout.batch();
        if (batch == 0 || batch > 65535)
            throw usage_error(at + "the layout holds " + std::to_string(batch) +
                              " requests; upload one of 1 .. 65535 (device_quest_paged_layout::upload)");
        if (queries.size() % batch != 0)
            throw usage_error(at + std::to_string(queries.size()) + " query values for " + std::to_string(batch) +
                              " requests; give batch x num_q_heads x head_dim");
        const std::size_t per_query = queries.size() / batch;
        check_score_args(layer, 0, per_query, num_q_heads, 0, "select_top_paged");
        if (positions.size() < layout.positions() || status.size() < batch || query_flags.size() < batch)
            throw usage_error(at + "room for " + std::to_string(positions.size()) + " positions, " +
                              std::to_string(status.size()) + " statuses and " + std::to_string(query_flags.size()) +
                              " query flags; the layout needs " + std::to_string(layout.positions()) + ", " +
                              std::to_string(batch) + " and " + std::to_string(batch));
        if (layout.page_bound() > config_.num_blocks)
            throw usage_error(at + "the page tables reach page " + std::to_string(layout.page_bound() - 1) +
                              " but the selector holds metadata for " + std::to_string(config_.num_blocks) +
                              " blocks; make num_blocks the cache's page count");
        const std::uint32_t max_middle = layout.max_middle();
        scores_.reserve(std::max<std::size_t>(std::size_t{batch} * max_middle, 1));
        const device_span<float> scores{scores_.get(), std::size_t{batch} * max_middle};
        if (max_middle != 0) {
            detail::quest_paged_score_kernel<T><<<dim3(max_middle, batch), detail::quest_threads, 0, stream_>>>(
                layout.rows(), layout.pages(), queries, num_q_heads, layer.value, dims(), key_min_.view(),
                key_max_.view(), has_metadata_.view(), max_middle, scores);
            KVPOLICY_CUDA_CHECK(cudaGetLastError());
        }
        detail::quest_paged_select_kernel<<<batch, detail::paged_select_threads, 0, stream_>>>(
            layout.rows(), queries, static_cast<std::uint32_t>(per_query), scores, max_middle, positions, status,
            query_flags);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// The host quest's `select`, scored and selected on the device; the
    /// query is device memory, the block ids and `out` host memory.
    /// Synchronous.
    /// Throws: usage_error as the host quest does, with its wording: the
    /// shape checks on the host, the NaN or infinite query check on the
    /// device (reported after the fact); nothing is written to `out` then.
    std::size_t select(std::span<const block_id> available, const device_selection_context& ctx,
                       std::span<block_id> out) {
        ::kvpolicy::detail::check_quest_selection(config_, available, ctx, out, "device_quest");
        const quest_plan plan = plan_quest_selection(available.size(), ctx.block_size, config_);
        const bool scored = !plan.load_all;
        const auto m = static_cast<std::uint32_t>(plan.middle_end - plan.middle_begin);
        const auto keep = static_cast<std::uint32_t>(plan.middle_keep);
        staging_.reserve(std::max<std::size_t>(m, 1) + 1);
        query_flag_.reserve(1);
        detail::quest_query_check_kernel<<<1, detail::quest_threads, 0, stream_>>>(ctx.query, query_flag_.view(1));
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        std::uint32_t* const flag_back = staging_.get() + std::max<std::size_t>(m, 1);  // [1] after the ids
        if (scored) {
            blocks_.reserve(m);
            scores_.reserve(m);
            for (std::uint32_t i = 0; i < m; ++i) staging_.get()[i] = available[plan.middle_begin + i].value;
            KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(blocks_.get(), staging_.get(), m * sizeof(std::uint32_t),
                                                cudaMemcpyHostToDevice, stream_));
            score_blocks(ctx.layer, blocks_.view(m), ctx.query, ctx.num_q_heads, scores_.view(m), true);
            selector_.select_lowest_device<float>(scores_.view(m), device_span<const std::uint32_t>{}, keep);
            KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), selector_.device_output().data(),
                                                keep * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, stream_));
        }
        KVPOLICY_CUDA_CHECK(
            cudaMemcpyAsync(flag_back, query_flag_.get(), sizeof(std::uint32_t), cudaMemcpyDeviceToHost, stream_));
        const select_status status = scored ? selector_.wait_status() : select_status{};
        if (!scored) KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (*flag_back != 0) ::kvpolicy::detail::throw_quest_nonfinite_query("device_quest");
        if (status.nan_count != 0)  // a finite query cannot score NaN against finite metadata
            throw usage_error("device_quest::select: the score of block " +
                              std::to_string(available[plan.middle_begin + status.nan_id].value) +
                              " is NaN; the block's metadata is corrupt");
        if (!scored) {
            std::ranges::copy(available, out.begin());
            return available.size();
        }
        std::sort(staging_.get(), staging_.get() + keep);
        std::size_t n = 0;
        for (std::size_t i = 0; i < plan.middle_begin; ++i) out[n++] = available[i];
        for (std::uint32_t i = 0; i < keep; ++i) out[n++] = available[plan.middle_begin + staging_.get()[i]];
        for (std::size_t i = plan.middle_end; i < available.size(); ++i) out[n++] = available[i];
        return n;
    }

    /// Enqueues: every block without metadata again.
    void reset() {
        KVPOLICY_CUDA_CHECK(
            cudaMemsetAsync(has_metadata_.get(), 0, std::size_t{config_.num_layers} * config_.num_blocks, stream_));
    }

    /// Copies (synchronously) the metadata of (`block`, `layer`) to the host:
    /// [num_kv_heads][head_dim] each; returns whether it has any.
    bool copy_metadata(block_id block, layer_index layer, host_span<T> key_min, host_span<T> key_max) {
        check_range(block.value, layer, "copy_metadata");
        if (key_min.size() < row() || key_max.size() < row())
            throw usage_error("device_quest::copy_metadata: give num_kv_heads x head_dim values for each");
        const std::size_t flag = layer.index() * config_.num_blocks + block.index();
        std::uint8_t has = 0;
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(key_min.data(), key_min_.get() + flag * row(), row() * sizeof(T),
                                            cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(key_max.data(), key_max_.get() + flag * row(), row() * sizeof(T),
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

    void check_score_args(layer_index layer, std::size_t blocks, std::size_t query_size, std::uint32_t num_q_heads,
                          std::size_t scores_size, const char* what) const {
        check_range(0, layer, what);
        const std::string at = std::string("device_quest::") + what + ": ";
        if (num_q_heads == 0 || num_q_heads % config_.num_kv_heads != 0)
            throw usage_error(at + std::to_string(num_q_heads) + " query heads is not a multiple of " +
                              std::to_string(config_.num_kv_heads) + " KV heads");
        if (query_size != std::size_t{num_q_heads} * config_.head_dim || scores_size < blocks)
            throw usage_error(at + "a query of " + std::to_string(query_size) + " values and room for " +
                              std::to_string(scores_size) + " scores of " + std::to_string(blocks) +
                              " blocks; give num_q_heads x head_dim = " +
                              std::to_string(std::size_t{num_q_heads} * config_.head_dim) +
                              " values and one score per block");
    }

    void enqueue_scores(layer_index layer, device_span<const std::uint32_t> blocks, device_span<const float> query,
                        std::uint32_t num_q_heads, device_span<float> scores, bool negate) {
        if (blocks.empty()) return;
        detail::quest_score_kernel<T><<<static_cast<unsigned>(blocks.size()), detail::quest_threads, 0, stream_>>>(
            query, num_q_heads, blocks, layer.value, dims(), key_min_.view(), key_max_.view(), has_metadata_.view(),
            negate, scores);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    void check_range(std::uint32_t block, layer_index layer, const char* what) const {
        ::kvpolicy::detail::check_quest_block(config_, block_id{block}, layer, "device_quest", what);
    }

    config_type config_;
    cudaStream_t stream_;
    device_buffer<T> key_min_;                  // [num_layers][num_blocks][num_kv_heads][head_dim]
    device_buffer<T> key_max_;                  // [num_layers][num_blocks][num_kv_heads][head_dim]
    device_buffer<std::uint8_t> has_metadata_;  // [num_layers][num_blocks]
    device_buffer<std::uint32_t> blocks_;       // [middle] candidate ids
    device_buffer<float> scores_;               // [middle] negated scores
    device_buffer<std::uint32_t> query_flag_;   // [1] the query check's verdict
    pinned_buffer<std::uint32_t> staging_;      // [middle] ids out, chosen positions back; [1] query flag
    cub_selector selector_;
};

using device_quest = basic_device_quest<float>;
using device_quest_bf16 = basic_device_quest<bf16>;
using device_quest_fp16 = basic_device_quest<fp16>;

static_assert(device_sparse_selector<device_quest>);
static_assert(device_sparse_selector<device_quest_bf16>);
static_assert(device_sparse_selector<device_quest_fp16>);

}  // namespace kvpolicy::cuda
