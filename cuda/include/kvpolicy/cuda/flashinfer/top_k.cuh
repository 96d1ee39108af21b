// Victim selection on cub::DeviceTopK: select.cuh's `select_lowest`
// contract (the k lowest (score, id) pairs of device-resident float scores,
// written ascending as ids, ties to the lower id, NaN reported through
// select_status with `out` untouched, CUB's two-phase temporary storage) on
// CCCL's AIR top-K instead of kvpolicy's radix select, so a program can time
// both on the same input (bench/flashinfer_bench.cu) and call the faster.
// Same ids in the same order as select_lowest; two departures: after a NaN,
// `status.nan_count` is 1, not the number of NaN scores (the position and id
// are the lowest NaN's, as there), and k = 0 scans nothing, so reports no
// NaN. Float scores only (what the bench times). Here and not beside
// select.cuh because DeviceTopK needs CCCL >= 3.3, which kvpolicy has only
// as the CCCL FlashInfer's release carries (kvpolicy::flashinfer); link the
// instantiation (kvpolicy_flashinfer_kernels, or top_k_kernels.cuh in one
// translation unit of your own).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/flashinfer/instantiated.cuh"
#include "kvpolicy/cuda/select.cuh"

namespace kvpolicy::cuda::flashinfer {

/// Effects: enqueues on `stream` the selection of the min(k, scores.size())
/// lowest (score, id) pairs into `out`, ascending, and `status[0]`; with an
/// empty `temp_storage` only sets temp_storage_bytes. `ids` empty (item i
/// has id i) or one per score. All spans device memory.
/// Throws: usage_error as select_lowest (storage smaller than the size
/// query said, ids of another length, out shorter than min(k, n), no
/// status, 2^32 or more scores; nothing enqueued); cuda_error.
inline void device_top_k_lowest(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                                device_span<const float> scores, device_span<const std::uint32_t> ids,
                                device_span<std::uint32_t> out, std::uint32_t k, device_span<select_status> status,
                                cudaStream_t stream) {
    if (scores.size() >= std::numeric_limits<std::uint32_t>::max() || (!ids.empty() && ids.size() != scores.size()))
        throw usage_error("device_top_k_lowest: " + std::to_string(scores.size()) + " scores and " +
                          std::to_string(ids.size()) +
                          " ids; give fewer than 2^32 scores and one id per score or none");
    const auto n = static_cast<std::uint32_t>(scores.size());
    if (temp_storage.data() != nullptr) {
        std::size_t need = 0;
        detail::device_top_k_lowest({}, need, scores, ids, out, k, status, stream);
        if (out.size() < std::min(k, n) || status.empty() || temp_storage.size() < need)
            throw usage_error("device_top_k_lowest: room for " + std::to_string(out.size()) + " ids, " +
                              std::to_string(status.size()) + " statuses and " + std::to_string(temp_storage.size()) +
                              " bytes; give min(k, n) = " + std::to_string(std::min(k, n)) +
                              " ids, one status and the " + std::to_string(need) + " bytes the size query gives");
    }
    detail::device_top_k_lowest(temp_storage, temp_storage_bytes, scores, ids, out, k, status, stream);
}

}  // namespace kvpolicy::cuda::flashinfer
