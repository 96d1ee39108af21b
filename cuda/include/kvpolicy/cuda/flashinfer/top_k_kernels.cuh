// cub::DeviceTopK (CCCL >= 3.3; here the CCCL 3.6 FlashInfer's release
// carries) behind instantiated.cuh's top-K family. Compile this header in
// exactly ONE translation unit of a program (kvpolicy's:
// cuda/src/flashinfer_top_k.cu); include top_k.cuh elsewhere.
//
// DeviceTopK offers only unsorted output with ties broken in no promised way.
// To return select.cuh's exact result (the k lowest (score, id) pairs,
// ascending), each item's key is the 64-bit (ordered score bits, id) pair
// (select_key.cuh's order) read through a transform iterator, so no key is
// materialized and no two keys tie; DeviceTopK then selects the k lowest
// keys, CUB's radix sort orders those k, and one kernel writes their ids. A
// NaN score maps to the largest key and records its position (the lowest
// NaN position wins: atomicMin); the last kernel then writes no id.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_topk.cuh>
#include <cuda/iterator>
#include <cuda/std/execution>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/select_key.cuh"

namespace kvpolicy::cuda::flashinfer::detail {

inline constexpr std::uint32_t top_k_no_nan = 0xffffffffu;
inline constexpr int top_k_threads = 256;

struct top_k_key_op {
    const float* scores;
    const std::uint32_t* ids;  // null: item i has id i
    std::uint32_t* nan_index;
    __device__ std::uint64_t operator()(std::uint32_t i) const {
        const float s = scores[i];
        if (s != s) {
            atomicMin(nan_index, i);
            return ~std::uint64_t{0};
        }
        const std::uint32_t id = ids != nullptr ? ids[i] : i;
        return (std::uint64_t{ordered_bits(s)} << 32) | id;
    }
};

// k ids of the sorted keys, and the status; nothing written after a NaN.
__global__ void __launch_bounds__(top_k_threads)
    top_k_finish_kernel(const std::uint64_t* sorted, std::uint32_t k, const std::uint32_t* ids,
                        const std::uint32_t* nan_index, std::uint32_t* out, select_status* status) {
    const std::uint32_t nan_at = *nan_index;
    const bool nan = nan_at != top_k_no_nan;
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    if (!nan)
        for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < k; i += stride)
            out[i] = static_cast<std::uint32_t>(sorted[i]);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *status = nan ? select_status{1, nan_at, ids != nullptr ? ids[nan_at] : nan_at, 0} : select_status{0, 0, 0, k};
}

inline std::size_t top_k_align(std::size_t x) noexcept { return (x + 255) & ~std::size_t{255}; }

// Not inline: the definition instantiated.cuh declares, in this header's one translation unit.
void device_top_k_lowest(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                         device_span<const float> scores, device_span<const std::uint32_t> ids,
                         device_span<std::uint32_t> out, std::uint32_t k, device_span<select_status> status,
                         cudaStream_t stream) {
    const auto n = static_cast<std::uint32_t>(scores.size());
    k = std::min(k, n);
    std::uint32_t* const nan_index =
        temp_storage.empty() ? nullptr : reinterpret_cast<std::uint32_t*>(temp_storage.data());
    const auto keys_in =
        ::cuda::transform_iterator(::cuda::counting_iterator<std::uint32_t>(0),
                                   top_k_key_op{scores.data(), ids.empty() ? nullptr : ids.data(), nan_index});
    const auto env =
        ::cuda::std::execution::env{::cuda::execution::require(::cuda::execution::determinism::not_guaranteed,
                                                               ::cuda::execution::output_ordering::unsorted),
                                    ::cuda::stream_ref{stream}};
    std::size_t top_bytes = 0, sort_bytes = 0;
    if (k > 0) {
        KVPOLICY_CUDA_CHECK(
            cub::DeviceTopK::MinKeys(nullptr, top_bytes, keys_in, static_cast<std::uint64_t*>(nullptr), n, k, env));
        KVPOLICY_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, static_cast<std::uint64_t*>(nullptr),
                                                           static_cast<std::uint64_t*>(nullptr), k, 0, 64, stream));
    }
    const std::size_t keys_at = 256;
    const std::size_t sorted_at = keys_at + top_k_align(std::size_t{k} * sizeof(std::uint64_t));
    const std::size_t cub_at = sorted_at + top_k_align(std::size_t{k} * sizeof(std::uint64_t));
    const std::size_t total = cub_at + std::max<std::size_t>(std::max(top_bytes, sort_bytes), 1);
    if (temp_storage.empty()) {
        temp_storage_bytes = total;
        return;
    }
    auto* const base = reinterpret_cast<unsigned char*>(temp_storage.data());
    auto* const keys = reinterpret_cast<std::uint64_t*>(base + keys_at);
    auto* const sorted = reinterpret_cast<std::uint64_t*>(base + sorted_at);
    KVPOLICY_CUDA_CHECK(cudaMemsetAsync(nan_index, 0xff, sizeof(std::uint32_t), stream));
    if (k > 0) {
        std::size_t bytes = top_bytes;
        KVPOLICY_CUDA_CHECK(cub::DeviceTopK::MinKeys(base + cub_at, bytes, keys_in, keys, n, k, env));
        bytes = sort_bytes;
        KVPOLICY_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(base + cub_at, bytes, keys, sorted, k, 0, 64, stream));
    }
    const unsigned grid = static_cast<unsigned>(std::max<std::size_t>((k + top_k_threads - 1) / top_k_threads, 1));
    top_k_finish_kernel<<<std::min(grid, 4096u), top_k_threads, 0, stream>>>(
        sorted, k, ids.empty() ? nullptr : ids.data(), nan_index, out.empty() ? nullptr : out.data(), status.data());
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvpolicy::cuda::flashinfer::detail
