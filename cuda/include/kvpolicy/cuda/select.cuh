// select: the k lowest (score, id) pairs of N device-resident scores, on the
// GPU, in the host selector's order (ascending score, ties by id, NaN
// rejected) - victim selection for millions of candidates.
//
// Two algorithms behind one call, both on 96-bit keys (float: 64-bit) made
// of the score's order-preserving bits and the id (select_key.cuh):
// - radix_sort: CUB's DeviceRadixSort of all N keys, the first k taken.
// - radix_select (for k << N): 8-bit digits from the most significant; per
//   digit one histogram pass over the items still matching the decided
//   prefix and a one-block scan that picks the digit holding the k-th key.
//   It stops as soon as the k-th key is the last of its bucket (after two or
//   three digits on spread-out scores; all twelve only under heavy ties).
//   Then one pass compacts the k winners (strictly-below first, then as many
//   prefix-ties as still fit) and CUB sorts just those k. Kernels after the
//   stop return at once, so nothing waits on the host between passes.
// `automatic` takes radix_select when k <= N / 4. CCCL 3.0 has no
// cub::DeviceTopK, hence the hand-written select. For float scores and
// N <= 4096 (Quest's candidates), `automatic` instead sorts every key in
// one CTA (small_select_kernel): one launch, where the passes above cost
// more in launch latency than in work at that size.
//
// CUB's conventions: two-phase temporary storage (a null `d_temp_storage`
// makes the call a size query, so nothing allocates on the hot path) and an
// explicit stream; every kernel is asynchronous. Departures: errors throw
// (`cuda_error`, `usage_error`) instead of returning cudaError_t, as the rest
// of kvpolicy does; and a NaN score, which only the device sees, is reported
// through `select_status` (count, position, id) with `d_out` left untouched.
// `cub_selector` wraps it all as a `victim_selector` over host arrays
// (synchronous, throws usage_error on NaN); `thrust_selector` (included
// here) is the portable alternative that also runs without a GPU.
#pragma once

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/cuda/select_key.cuh"
#include "kvpolicy/cuda/thrust_selector.cuh"

namespace kvpolicy::cuda {

enum class select_algorithm : std::uint8_t { automatic, radix_sort, radix_select };

/// What `select_lowest` reports on the device; read it after the stream
/// synchronizes.
struct select_status {
    std::uint32_t nan_count;  ///< NaN scores seen; > 0 means d_out was not written
    std::uint32_t nan_index;  ///< position of the first NaN score (when nan_count > 0)
    std::uint32_t nan_id;     ///< its id
    std::uint32_t selected;   ///< ids written to d_out
};

namespace detail {

inline constexpr int radix_bins = 256;  // 8-bit digits
inline constexpr int select_threads = 256;

template <class Score>
inline constexpr int key_bits = static_cast<int>(sizeof(score_bits_t<Score>)) * 8 + 32;
template <class Score>
inline constexpr int key_digits = key_bits<Score> / 8;

template <class Score>
struct radix_state {
    select_key<Score> prefix;  // digits decided so far; the rest are 0
    std::uint32_t remaining;   // rank (1-based) of the k-th key among keys matching the prefix
    std::uint32_t decided;     // digits decided
    std::uint32_t done;        // the prefix pins down the k lowest
    std::uint32_t nan_count;
    std::uint32_t nan_index;  // smallest position of a NaN
    std::uint32_t below;      // compaction: keys below the prefix written
    std::uint32_t tied;       // compaction: keys equal to the prefix written
};

template <class Score>
struct array_source {
    const Score* scores;
    __device__ Score operator()(std::uint32_t i) const { return scores[i]; }
};

__device__ inline std::uint32_t id_at(const std::uint32_t* ids, std::uint32_t i) { return ids != nullptr ? ids[i] : i; }

template <class Score>
__device__ inline unsigned digit_of(const select_key<Score>& k, int d) {
    const int shift = key_bits<Score> - 8 * (d + 1);  // bit offset of the digit's least significant bit
    return shift >= 32 ? static_cast<unsigned>((k.score >> (shift - 32)) & 0xffu)
                       : static_cast<unsigned>((k.id >> shift) & 0xffu);
}

template <class Score>
__device__ inline void set_digit(select_key<Score>& k, int d, unsigned value) {
    using bits = score_bits_t<Score>;
    const int shift = key_bits<Score> - 8 * (d + 1);
    if (shift >= 32)
        k.score |= static_cast<bits>(value) << (shift - 32);
    else
        k.id |= value << shift;
}

/// The key with only its first `digits` digits kept.
template <class Score>
__device__ inline select_key<Score> leading(const select_key<Score>& k, int digits) {
    using bits = score_bits_t<Score>;
    constexpr int score_width = static_cast<int>(sizeof(bits)) * 8;
    const int n = 8 * digits;
    select_key<Score> r{};
    if (n >= score_width) {
        r.score = k.score;
        const int id_width = n - score_width;  // 0 .. 32
        r.id = id_width == 0 ? 0u : id_width >= 32 ? k.id : (k.id & ~(0xffffffffu >> id_width));
    } else {
        r.score = k.score & ~(~bits{0} >> n);
        r.id = 0;
    }
    return r;
}

template <class Score>
__device__ inline int compare(const select_key<Score>& a, const select_key<Score>& b) {
    if (a.score != b.score) return a.score < b.score ? -1 : 1;
    if (a.id != b.id) return a.id < b.id ? -1 : 1;
    return 0;
}

template <class Score>
__global__ void radix_init_kernel(radix_state<Score>* state, std::uint32_t* hist, std::uint32_t k) {
    if (threadIdx.x == 0) {
        *state = radix_state<Score>{};
        state->remaining = k;
        state->nan_index = 0xffffffffu;
    }
    for (int b = static_cast<int>(threadIdx.x); b < radix_bins; b += static_cast<int>(blockDim.x)) hist[b] = 0;
}

// One digit's histogram over the keys that match the decided prefix. Digit 0
// sees every item: it counts NaNs and, in the fused path, stores the scores
// it computed. Equal digits of a warp are combined before the shared atomic
// (scores cluster in few buckets on the leading digits).
template <class Score, class Source>
__global__ void __launch_bounds__(select_threads)
    radix_histogram_kernel(Source source, const std::uint32_t* ids, std::uint32_t n, radix_state<Score>* state,
                           std::uint32_t* hist, int digit, Score* materialize) {
    __shared__ std::uint32_t bins[radix_bins];
    if (state->done != 0) return;  // the same for every thread: set by an earlier kernel
    for (int b = static_cast<int>(threadIdx.x); b < radix_bins; b += static_cast<int>(blockDim.x)) bins[b] = 0;
    __syncthreads();
    const select_key<Score> prefix = state->prefix;
    const unsigned lane = threadIdx.x % 32u;
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    // Whole warps iterate together so that the warp intrinsics see every lane.
    for (std::size_t base = std::size_t{blockIdx.x} * blockDim.x; base < n; base += stride) {
        const std::size_t i = base + threadIdx.x;
        bool counts = false;
        unsigned dig = 0;
        if (i < n) {
            const auto idx = static_cast<std::uint32_t>(i);
            const Score s = source(idx);
            if (materialize != nullptr) materialize[idx] = s;
            if (s != s) {
                if (digit == 0) {
                    atomicAdd(&state->nan_count, 1u);
                    atomicMin(&state->nan_index, idx);
                }
            } else {
                const select_key<Score> key = make_select_key(s, id_at(ids, idx));
                counts = digit == 0 || compare(leading(key, digit), prefix) == 0;
                dig = digit_of(key, digit);
            }
        }
        const unsigned active = __ballot_sync(0xffffffffu, counts);
        if (counts) {
            const unsigned peers = __match_any_sync(active, dig);
            if (lane == static_cast<unsigned>(__ffs(static_cast<int>(peers)) - 1))
                atomicAdd(&bins[dig], static_cast<std::uint32_t>(__popc(peers)));
        }
    }
    __syncthreads();
    for (int b = static_cast<int>(threadIdx.x); b < radix_bins; b += static_cast<int>(blockDim.x))
        if (bins[b] != 0) atomicAdd(&hist[b], bins[b]);
}

// One block of radix_bins threads: find the bucket holding the remaining-th
// key, extend the prefix with it, and stop when that key is the bucket's last
// (or every digit is decided). Clears the histogram for the next digit.
template <class Score>
__global__ void __launch_bounds__(radix_bins)
    radix_choose_kernel(radix_state<Score>* state, std::uint32_t* hist, int digit) {
    using scan_t = cub::BlockScan<std::uint32_t, radix_bins>;
    __shared__ typename scan_t::TempStorage scan_storage;
    const unsigned b = threadIdx.x;
    const std::uint32_t count = hist[b];
    hist[b] = 0;
    // Read before the scan's barriers; only the winner writes, after them.
    const bool skip = state->done != 0 || state->nan_count != 0;
    const std::uint32_t r = state->remaining;
    if (skip) {
        if (b == 0 && state->nan_count != 0) state->done = 1;
        return;
    }
    std::uint32_t before = 0;
    scan_t(scan_storage).ExclusiveSum(count, before);
    if (before < r && r <= before + count) {
        select_key<Score> p = state->prefix;
        set_digit(p, digit, b);
        state->prefix = p;
        const std::uint32_t rem = r - before;
        state->remaining = rem;
        state->decided = static_cast<std::uint32_t>(digit + 1);
        if (rem == count || digit + 1 == key_digits<Score>) state->done = 1;
    }
}

// The k winners: keys whose decided digits are below the prefix (exactly
// k - remaining of them) at [0, k - remaining), then `remaining` keys equal to
// it. Equal keys beyond the last digit are identical (score, id) pairs, so
// which of them are taken does not change the output.
template <class Score>
__global__ void __launch_bounds__(select_threads)
    radix_compact_kernel(const Score* scores, const std::uint32_t* ids, std::uint32_t n, radix_state<Score>* state,
                         select_key<Score>* out, std::uint32_t k) {
    if (state->nan_count != 0) return;
    const int decided = static_cast<int>(state->decided);
    const select_key<Score> prefix = state->prefix;
    const std::uint32_t below_total = k - state->remaining;
    const std::uint32_t tie_room = state->remaining;
    const unsigned lane = threadIdx.x % 32u;
    const unsigned lanes_below = (1u << lane) - 1u;
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    for (std::size_t base = std::size_t{blockIdx.x} * blockDim.x; base < n; base += stride) {
        const std::size_t i = base + threadIdx.x;
        int order = 1;
        select_key<Score> key{};
        if (i < n) {
            const auto idx = static_cast<std::uint32_t>(i);
            key = make_select_key(scores[idx], id_at(ids, idx));
            order = compare(leading(key, decided), prefix);
        }
        const unsigned below = __ballot_sync(0xffffffffu, order < 0);
        const unsigned tied = __ballot_sync(0xffffffffu, order == 0);
        std::uint32_t below_base = 0, tied_base = 0;
        if (lane == 0) {
            if (below != 0) below_base = atomicAdd(&state->below, static_cast<std::uint32_t>(__popc(below)));
            if (tied != 0) tied_base = atomicAdd(&state->tied, static_cast<std::uint32_t>(__popc(tied)));
        }
        below_base = __shfl_sync(0xffffffffu, below_base, 0);
        tied_base = __shfl_sync(0xffffffffu, tied_base, 0);
        if (order < 0) {
            const std::uint32_t pos = below_base + static_cast<std::uint32_t>(__popc(below & lanes_below));
            if (pos < below_total) out[pos] = key;
        } else if (order == 0) {
            const std::uint32_t pos = tied_base + static_cast<std::uint32_t>(__popc(tied & lanes_below));
            if (pos < tie_room) out[below_total + pos] = key;
        }
    }
}

// Keys of every item (sort path), and the NaN scan (every path); `keys` may
// be null (k = 0: only the scan).
template <class Score, class Source>
__global__ void __launch_bounds__(select_threads)
    build_keys_kernel(Source source, const std::uint32_t* ids, std::uint32_t n, radix_state<Score>* state,
                      select_key<Score>* keys, Score* materialize) {
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
        const auto idx = static_cast<std::uint32_t>(i);
        const Score s = source(idx);
        if (materialize != nullptr) materialize[idx] = s;
        if (s != s) {
            atomicAdd(&state->nan_count, 1u);
            atomicMin(&state->nan_index, idx);
        }
        if (keys != nullptr) keys[idx] = make_select_key(s, id_at(ids, idx));
    }
}

template <class Score>
__global__ void __launch_bounds__(select_threads)
    finish_kernel(const select_key<Score>* sorted, std::uint32_t k, const std::uint32_t* ids,
                  const radix_state<Score>* state, std::uint32_t* out, select_status* status) {
    const bool nan = state->nan_count != 0;
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    if (!nan)
        for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < k; i += stride)
            out[i] = sorted[i].id;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        status->nan_count = state->nan_count;
        status->nan_index = nan ? state->nan_index : 0;
        status->nan_id = nan ? id_at(ids, state->nan_index) : 0;
        status->selected = nan ? 0 : k;
    }
}

// ---- Few float scores (Quest's candidates: 2048 at 32K tokens): one CTA
// holds every (score, id) key in registers, sorts them with CUB's block
// radix sort and writes the first k: one launch instead of the radix
// select's twenty-odd, whose launch latency dominated at this size (190 us
// for 2048 scores on an H100). A key is the score's ordered bits above the
// id, so ascending keys are the host selector's order; padding and NaN sort
// last (no finite score's bits are all ones). `automatic` only: the named
// algorithms keep their own paths, so the tests can hold each to the host.
inline constexpr int small_select_threads = 512;
inline constexpr int small_select_items = 8;
inline constexpr std::uint32_t small_select_max = small_select_threads * small_select_items;

template <class Source>
__global__ void __launch_bounds__(small_select_threads)
    small_select_kernel(Source first, const std::uint32_t* ids, std::uint32_t n, std::uint32_t k, std::uint32_t* out,
                        select_status* status) {
    using sort_t = cub::BlockRadixSort<std::uint64_t, small_select_threads, small_select_items>;
    __shared__ typename sort_t::TempStorage temp;
    __shared__ std::uint32_t nan_count, nan_index;
    if (threadIdx.x == 0) {
        nan_count = 0;
        nan_index = 0xffffffffu;
    }
    __syncthreads();
    std::uint64_t keys[small_select_items];
#pragma unroll
    for (int j = 0; j < small_select_items; ++j) {
        const std::uint32_t i = threadIdx.x * small_select_items + static_cast<std::uint32_t>(j);
        keys[j] = ~std::uint64_t{0};
        if (i >= n) continue;
        const float s = first(i);
        if (s != s) {
            atomicAdd(&nan_count, 1u);
            atomicMin(&nan_index, i);
        } else {
            const select_key<float> key = make_select_key(s, id_at(ids, i));
            keys[j] = (std::uint64_t{key.score} << 32) | key.id;  // one radix key, score above id
        }
    }
    sort_t(temp).Sort(keys);  // blocked: thread t holds ranks t * items ..
    __syncthreads();          // the NaN count is final
    const bool nan = nan_count != 0;
    if (!nan)
#pragma unroll
        for (int j = 0; j < small_select_items; ++j) {
            const std::uint32_t rank = threadIdx.x * small_select_items + static_cast<std::uint32_t>(j);
            if (rank < k) out[rank] = static_cast<std::uint32_t>(keys[j]);
        }
    if (threadIdx.x == 0) {
        status->nan_count = nan_count;
        status->nan_index = nan ? nan_index : 0;
        status->nan_id = nan ? id_at(ids, nan_index) : 0;
        status->selected = nan ? 0 : k;
    }
}

[[nodiscard]] inline unsigned grid_for(std::size_t n, int threads) {
    int device = 0, sms = 0;
    KVPOLICY_CUDA_CHECK(cudaGetDevice(&device));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const std::size_t wanted = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
    // A few blocks per SM, then grid-stride: each block flushes a histogram,
    // so more blocks mean more global atomics, not more speed.
    return static_cast<unsigned>(std::clamp<std::size_t>(wanted, 1, static_cast<std::size_t>(sms) * 8));
}

[[nodiscard]] constexpr std::size_t align_up(std::size_t x) noexcept { return (x + 255) & ~std::size_t{255}; }

[[nodiscard]] constexpr select_algorithm resolve(select_algorithm a, std::size_t n, std::size_t k) noexcept {
    if (a != select_algorithm::automatic) return a;
    return k <= n / 4 ? select_algorithm::radix_select : select_algorithm::radix_sort;
}

/// The two-phase storage protocol every selection path shares: a null
/// d_temp_storage is a size query (sets temp_storage_bytes to `total`,
/// returns false: enqueue nothing); otherwise checks the storage and the
/// pointers and returns true. Throws: usage_error, naming what is short.
inline bool select_storage_ready(const void* d_temp_storage, std::size_t& temp_storage_bytes, std::size_t total,
                                 const select_status* d_status, bool missing_out, bool missing_scores) {
    if (d_temp_storage == nullptr) {
        temp_storage_bytes = total;
        return false;
    }
    if (temp_storage_bytes < total)
        throw usage_error("select_lowest: temporary storage has " + std::to_string(temp_storage_bytes) +
                          " bytes, this call needs " + std::to_string(total) +
                          "; ask with a null d_temp_storage first, with the same n, k and algorithm");
    if (d_status == nullptr || missing_out || missing_scores)
        throw usage_error("select_lowest: d_status, d_out (k > 0) and d_scores (n > 0) must be device pointers");
    return true;
}

/// The selection behind select_lowest and score.cuh's fused retention path:
/// digit 0 (or the key build) reads `first`; with `materialize`, it also
/// stores the scores it read in temp storage, and later passes read those;
/// without, later passes read `d_scores`.
template <class Score, class Source>
void select_lowest_from(void* d_temp_storage, std::size_t& temp_storage_bytes, Source first, const Score* d_scores,
                        bool materialize, const std::uint32_t* d_ids, std::uint32_t num_items, std::uint32_t* d_out,
                        std::uint32_t k, select_status* d_status, cudaStream_t stream, select_algorithm algorithm) {
    static_assert(std::is_same_v<Score, float> || std::is_same_v<Score, double>,
                  "select_lowest: scores are float or double");
    using key_t = select_key<Score>;
    k = std::min(k, num_items);
    if constexpr (std::is_same_v<Score, float>) {
        if (algorithm == select_algorithm::automatic && num_items <= small_select_max) {
            // Scores are read once, into registers: nothing to keep.
            if (!select_storage_ready(d_temp_storage, temp_storage_bytes, 1, d_status, k > 0 && d_out == nullptr,
                                      num_items > 0 && !materialize && d_scores == nullptr))
                return;
            small_select_kernel<Source>
                <<<1, small_select_threads, 0, stream>>>(first, d_ids, num_items, k, d_out, d_status);
            KVPOLICY_CUDA_CHECK(cudaGetLastError());
            return;
        }
    }
    const select_algorithm algo = resolve(algorithm, num_items, k);
    const std::size_t sorted = k == 0 ? 0 : (algo == select_algorithm::radix_sort ? num_items : k);

    std::size_t cub_bytes = 0;
    if (sorted > 0)
        KVPOLICY_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, cub_bytes, static_cast<const key_t*>(nullptr),
                                                           static_cast<key_t*>(nullptr), sorted,
                                                           select_key_decomposer{}, 0, key_bits<Score>, stream));
    const std::size_t hist_at = align_up(sizeof(radix_state<Score>));
    const std::size_t keys_at = align_up(hist_at + radix_bins * sizeof(std::uint32_t));
    const std::size_t sorted_at = align_up(keys_at + sorted * sizeof(key_t));
    const std::size_t scores_at = align_up(sorted_at + sorted * sizeof(key_t));
    const std::size_t cub_at = align_up(scores_at + (materialize ? std::size_t{num_items} * sizeof(Score) : 0));
    const std::size_t total = cub_at + std::max<std::size_t>(cub_bytes, 1);
    if (!select_storage_ready(d_temp_storage, temp_storage_bytes, total, d_status, k > 0 && d_out == nullptr,
                              num_items > 0 && !materialize && d_scores == nullptr))
        return;

    auto* base = static_cast<unsigned char*>(d_temp_storage);
    auto* state = reinterpret_cast<radix_state<Score>*>(base);
    auto* hist = reinterpret_cast<std::uint32_t*>(base + hist_at);
    auto* keys = reinterpret_cast<key_t*>(base + keys_at);
    auto* keys_sorted = reinterpret_cast<key_t*>(base + sorted_at);
    Score* stored = materialize ? reinterpret_cast<Score*>(base + scores_at) : nullptr;
    const Score* scores = materialize ? stored : d_scores;
    const unsigned grid = grid_for(num_items, select_threads);

    radix_init_kernel<Score><<<1, radix_bins, 0, stream>>>(state, hist, k);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    if (k > 0 && algo == select_algorithm::radix_select) {
        radix_histogram_kernel<Score, Source>
            <<<grid, select_threads, 0, stream>>>(first, d_ids, num_items, state, hist, 0, stored);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        radix_choose_kernel<Score><<<1, radix_bins, 0, stream>>>(state, hist, 0);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
        for (int digit = 1; digit < key_digits<Score>; ++digit) {
            radix_histogram_kernel<Score, array_source<Score>><<<grid, select_threads, 0, stream>>>(
                array_source<Score>{scores}, d_ids, num_items, state, hist, digit, nullptr);
            KVPOLICY_CUDA_CHECK(cudaGetLastError());
            radix_choose_kernel<Score><<<1, radix_bins, 0, stream>>>(state, hist, digit);
            KVPOLICY_CUDA_CHECK(cudaGetLastError());
        }
        radix_compact_kernel<Score><<<grid, select_threads, 0, stream>>>(scores, d_ids, num_items, state, keys, k);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    } else {
        build_keys_kernel<Score, Source>
            <<<grid, select_threads, 0, stream>>>(first, d_ids, num_items, state, k > 0 ? keys : nullptr, stored);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }
    if (sorted > 0) {
        std::size_t bytes = cub_bytes;
        KVPOLICY_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(base + cub_at, bytes, keys, keys_sorted, sorted,
                                                           select_key_decomposer{}, 0, key_bits<Score>, stream));
    }
    finish_kernel<Score>
        <<<grid_for(k, select_threads), select_threads, 0, stream>>>(keys_sorted, k, d_ids, state, d_out, d_status);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail

/// Effects: enqueues on `stream` the selection of the min(k, scores.size())
/// lowest (score, id) pairs, written ascending by (score, id) as ids to
/// `out`; `status[0]` says how it went (a NaN score leaves out untouched).
/// `ids` is empty (item i has id i) or one per score. Two-phase temporary
/// storage as in CUB: with an empty `temp_storage`, only sets
/// `temp_storage_bytes` and enqueues nothing; then pass a span of at least
/// that many bytes. Every span is device memory; read out and status after
/// the stream synchronizes.
/// Throws: usage_error if the temporary storage is smaller than the size
/// query said, ids is neither empty nor scores' length, out is shorter than
/// min(k, n), status is empty, or there are 2^32 or more scores (nothing
/// enqueued); cuda_error if a launch fails.
template <class Score>
void select_lowest(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                   device_span<const Score> scores, device_span<const std::uint32_t> ids,
                   device_span<std::uint32_t> out, std::uint32_t k, device_span<select_status> status,
                   cudaStream_t stream, select_algorithm algorithm = select_algorithm::automatic) {
    if (scores.size() >= std::numeric_limits<std::uint32_t>::max() || (!ids.empty() && ids.size() != scores.size()))
        throw usage_error("select_lowest: " + std::to_string(scores.size()) + " scores and " +
                          std::to_string(ids.size()) +
                          " ids; give fewer than 2^32 scores and one id per score or none");
    const auto n = static_cast<std::uint32_t>(scores.size());
    if (temp_storage.data() != nullptr && (out.size() < std::min(k, n) || status.empty()))
        throw usage_error("select_lowest: room for " + std::to_string(out.size()) + " ids and " +
                          std::to_string(status.size()) +
                          " statuses; give min(k, n) = " + std::to_string(std::min(k, n)) + " ids and one status");
    std::size_t bytes = temp_storage.data() != nullptr ? temp_storage.size() : temp_storage_bytes;
    detail::select_lowest_from<Score>(temp_storage.data(), bytes, detail::array_source<Score>{scores.data()},
                                      scores.data(), false, ids.empty() ? nullptr : ids.data(), n,
                                      out.empty() ? nullptr : out.data(), k, status.empty() ? nullptr : status.data(),
                                      stream, algorithm);
    if (temp_storage.data() == nullptr) temp_storage_bytes = bytes;
}

/// `select_lowest` as a `victim_selector` over host arrays: copies scores and
/// ids to the device, selects, copies the ids back, synchronously on its
/// stream. Device buffers grow to the largest n seen and are reused. Use it
/// where the scores are on the host and n is large; for scores already on the
/// device call `select_lowest_device` and skip the copies.
class cub_selector {
public:
    static constexpr std::string_view name = "cub";

    /// No CUDA call until the first selection; the stream defaults to the
    /// calling thread's per-thread stream.
    cub_selector() = default;
    explicit cub_selector(cudaStream_t stream, select_algorithm algorithm = select_algorithm::automatic) noexcept
            : stream_(stream), algorithm_(algorithm) {}

    /// Effects: writes the min(out.size(), ids.size()) lowest ids, ascending
    /// by (score, id), and returns their count.
    /// Throws: usage_error if scores and ids differ in length, there are
    /// 2^32 or more, or a score is NaN (naming the first such item); nothing
    /// is written then. cuda_error if CUDA fails.
    template <class Score>
    std::size_t select_lowest(std::span<const Score> scores, std::span<const item_id> ids, std::span<item_id> out) {
        if (scores.size() != ids.size())
            throw usage_error("select_lowest: " + std::to_string(scores.size()) + " scores for " +
                              std::to_string(ids.size()) + " ids; pass one score per id");
        if (ids.size() >= std::numeric_limits<std::uint32_t>::max())
            throw usage_error("select_lowest: " + std::to_string(ids.size()) +
                              " items; the CUDA selector takes fewer than 2^32");
        const auto n = static_cast<std::uint32_t>(ids.size());
        const auto k = static_cast<std::uint32_t>(std::min<std::size_t>(out.size(), n));
        scores_.reserve(std::max<std::size_t>(n, 1) * sizeof(Score));
        ids_.reserve(std::max<std::uint32_t>(n, 1));
        static_assert(sizeof(item_id) == sizeof(std::uint32_t), "item ids are copied as their 32-bit values");
        if (n > 0) {
            KVPOLICY_CUDA_CHECK(
                cudaMemcpyAsync(scores_.get(), scores.data(), n * sizeof(Score), cudaMemcpyHostToDevice, stream_));
            KVPOLICY_CUDA_CHECK(
                cudaMemcpyAsync(ids_.get(), ids.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice, stream_));
        }
        select_lowest_device(device_span<const Score>{reinterpret_cast<const Score*>(scores_.get()), n},
                             device_span<const std::uint32_t>{ids_.get(), n}, k);
        host_ids_.resize(k);
        if (k > 0)
            KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(host_ids_.data(), out_.get(), k * sizeof(std::uint32_t),
                                                cudaMemcpyDeviceToHost, stream_));
        const select_status status = wait_status();
        if (status.nan_count != 0)
            throw usage_error("select_lowest: score of item " + std::to_string(status.nan_id) +
                              " is NaN; check the cost model's parameters");
        for (std::size_t i = 0; i < k; ++i) out[i] = item_id{host_ids_[i]};
        return k;
    }

    /// Enqueues the selection of the min(k, scores.size()) lowest of
    /// `scores` into this selector's own output (`device_output()`); `ids`
    /// is empty (item i has id i) or one id per score; all device memory.
    /// Read `wait_status()` for the outcome.
    /// Throws: usage_error if ids is neither empty nor scores' length, or
    /// there are 2^32 or more scores (nothing enqueued); cuda_error.
    template <class Score>
    void select_lowest_device(device_span<const Score> scores, device_span<const std::uint32_t> ids, std::uint32_t k) {
        if (!ids.empty() && ids.size() != scores.size())
            throw usage_error("cub_selector::select_lowest_device: " + std::to_string(scores.size()) + " scores for " +
                              std::to_string(ids.size()) + " ids; pass one id per score or none");
        if (scores.size() >= std::numeric_limits<std::uint32_t>::max())
            throw usage_error("cub_selector::select_lowest_device: " + std::to_string(scores.size()) +
                              " items; the CUDA selector takes fewer than 2^32");
        const auto n = static_cast<std::uint32_t>(scores.size());
        k = std::min(k, n);
        out_.reserve(std::max<std::uint32_t>(k, 1));
        status_.reserve(1);
        last_k_ = k;
        const std::uint32_t* d_ids = ids.empty() ? nullptr : ids.data();
        std::size_t bytes = 0;
        detail::select_lowest_from<Score>(nullptr, bytes, detail::array_source<Score>{scores.data()}, scores.data(),
                                          false, d_ids, n, out_.get(), k, status_.get(), stream_, algorithm_);
        temp_.reserve(bytes);
        bytes = temp_.capacity();
        detail::select_lowest_from<Score>(temp_.get(), bytes, detail::array_source<Score>{scores.data()}, scores.data(),
                                          false, d_ids, n, out_.get(), k, status_.get(), stream_, algorithm_);
    }

    /// Waits for the stream and returns the last selection's status.
    [[nodiscard]] select_status wait_status() {
        select_status s{};
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(&s, status_.get(), sizeof s, cudaMemcpyDeviceToHost, stream_));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return s;
    }

    /// The k ids of the last selection, on the device.
    [[nodiscard]] device_span<const std::uint32_t> device_output() const noexcept {
        return device_span<const std::uint32_t>{out_.get(), last_k_};
    }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
    [[nodiscard]] select_algorithm algorithm() const noexcept { return algorithm_; }

private:
    cudaStream_t stream_ = cudaStreamPerThread;
    select_algorithm algorithm_ = select_algorithm::automatic;
    device_buffer<unsigned char> temp_;
    device_buffer<unsigned char> scores_;  // [n] scores, float or double
    device_buffer<std::uint32_t> ids_;     // [n]
    device_buffer<std::uint32_t> out_;     // [k]
    device_buffer<select_status> status_;  // [1]
    std::vector<std::uint32_t> host_ids_;  // [k] staging
    std::uint32_t last_k_ = 0;             // ids the last selection wrote
};

static_assert(victim_selector<cub_selector>);
static_assert(victim_selector<cub_selector, float>);

}  // namespace kvpolicy::cuda
