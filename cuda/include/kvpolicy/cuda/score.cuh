// score: retention values of N items in one device pass, and retention-value
// victim selection fused with it.
//
// The formula is seed 000's retention value (seed000_retention_value, each
// chunk priced alone: `.loss = retention_loss::chunk`), after Pensieve (Yu et
// al., "Stateful Large Language Model Serving with Pensieve", EuroSys'25,
// §4.3); retention_value's default prices a chunk with its dependents and has
// no device form yet:
//
//     cost  = ((L - layer) / L) * ((chunk + 1) / total_chunks)
//             * ((alpha * context_length + beta) + const_non_attention)
//     score = cost / (now - last_use), or +inf when last_use >= now
//
// read from struct-of-arrays metadata (one array per field, as the cache keeps
// them), so the pass is bandwidth-bound. In double it is bit-identical to the
// host (same operation order, each step an explicitly rounded intrinsic, so
// nvcc cannot contract a multiply-add into an FMA that the host does not do).
// In float the double result is rounded once: within half an ulp of float
// (relative 2^-24), and +inf stays +inf; a score above FLT_MAX becomes +inf.
// Metadata that breaks a precondition (layer >= L, chunk >= total_chunks)
// scores NaN, which selection then rejects with the item named.
//
// Fusion: `select_lowest_retention` computes the scores inside the first
// histogram pass of select.cuh's radix select (or the key build of its sort),
// storing them for the later passes, so the scoring pass and the selection's
// first read of N scores are one pass. Departure from retention_value: among
// just-used items (score +inf) retention_value orders by cost, this by id;
// the two agree whenever k does not reach into the just-used items.
#pragma once

#include <cuda_runtime.h>

#include <cuda/std/limits>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/select.cuh"

namespace kvpolicy::cuda {

/// Device arrays, one entry per item (struct of arrays), as device spans:
/// the metadata never has to visit the host to be scored.
struct retention_items_view {
    device_span<const std::uint32_t> layer;                 ///< [n]
    device_span<const std::uint32_t> chunk;                 ///< [n]
    device_span<const std::uint32_t> session_total_chunks;  ///< [n]
    device_span<const std::uint64_t> context_length;        ///< [n] tokens before the item
    device_span<const timestamp> last_use;                  ///< [n]
    device_span<const std::uint32_t> ids;                   ///< [n] item ids; empty: item i has id i

    /// n: the length of `layer` (every other array must match).
    [[nodiscard]] KVPOLICY_HOST_DEVICE std::uint32_t size() const noexcept {
        return static_cast<std::uint32_t>(layer.size());
    }
};

/// What is the same for every item of one scoring pass.
struct retention_params {
    pensieve_linear_config cost{};
    std::uint32_t num_layers = 1;
    timestamp now = 0;
};

/// One item's retention value, the host formula's operations in its order.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline double retention_score(std::uint32_t layer, std::uint32_t chunk,
                                                                 std::uint32_t total_chunks,
                                                                 std::uint64_t context_length, timestamp last_use,
                                                                 const retention_params& p) {
    if (layer >= p.num_layers || chunk >= total_chunks) return ::cuda::std::numeric_limits<double>::quiet_NaN();
#if defined(__CUDA_ARCH__)
    const double lw = __ddiv_rn(__uint2double_rn(p.num_layers - layer), __uint2double_rn(p.num_layers));
    const double pw = __ddiv_rn(__uint2double_rn(chunk + 1), __uint2double_rn(total_chunks));
    const double base = __dadd_rn(__dadd_rn(__dmul_rn(p.cost.alpha, __ull2double_rn(context_length)), p.cost.beta),
                                  p.cost.const_non_attention);
    const double cost = __dmul_rn(__dmul_rn(lw, pw), base);
    return last_use < p.now ? __ddiv_rn(cost, __ull2double_rn(p.now - last_use))
                            : ::cuda::std::numeric_limits<double>::infinity();
#else
    const double lw = static_cast<double>(p.num_layers - layer) / static_cast<double>(p.num_layers);
    const double pw = static_cast<double>(chunk + 1) / static_cast<double>(total_chunks);
    const double base = (p.cost.alpha * static_cast<double>(context_length) + p.cost.beta) + p.cost.const_non_attention;
    const double cost = lw * pw * base;
    return last_use < p.now ? cost / static_cast<double>(p.now - last_use)
                            : ::cuda::std::numeric_limits<double>::infinity();
#endif
}

namespace detail {

template <class Score>
struct retention_source {
    retention_items_view items;
    retention_params params;
    __device__ Score operator()(std::uint32_t i) const {
        return static_cast<Score>(retention_score(items.layer[i], items.chunk[i], items.session_total_chunks[i],
                                                  items.context_length[i], items.last_use[i], params));
    }
};

template <class Score>
__global__ void retention_score_kernel(retention_source<Score> source, std::uint32_t n, Score* out) {
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = source(static_cast<std::uint32_t>(i));
}

inline void check_retention_inputs(const retention_items_view& items, const retention_params& params,
                                   const char* what) {
    (void)pensieve_linear(params.cost);  // throws config_error naming a bad parameter
    if (params.num_layers == 0)
        throw config_error(std::string(what) + ": num_layers is 0; give the model's layer count");
    const std::size_t n = items.layer.size();
    if (n >= std::numeric_limits<std::uint32_t>::max() || items.chunk.size() != n ||
        items.session_total_chunks.size() != n || items.context_length.size() != n || items.last_use.size() != n ||
        (!items.ids.empty() && items.ids.size() != n))
        throw usage_error(std::string(what) + ": metadata arrays of " + std::to_string(n) + " layers, " +
                          std::to_string(items.chunk.size()) + " chunks, " +
                          std::to_string(items.session_total_chunks.size()) + " chunk totals, " +
                          std::to_string(items.context_length.size()) + " context lengths, " +
                          std::to_string(items.last_use.size()) + " last uses and " + std::to_string(items.ids.size()) +
                          " ids; give one of each per item (ids may be empty), fewer than 2^32 items");
}

}  // namespace detail

/// Effects: enqueues on `stream` d_out[i] = retention value of item i
/// (double: bit-identical to the host; float: rounded once).
/// Throws: config_error for bad cost parameters or num_layers 0,
/// usage_error for a missing array, cuda_error if the launch fails.
template <class Score>
void compute_retention(const retention_items_view& items, const retention_params& params, device_span<Score> out,
                       cudaStream_t stream) {
    static_assert(std::is_same_v<Score, float> || std::is_same_v<Score, double>,
                  "compute_retention: scores are float or double");
    detail::check_retention_inputs(items, params, "compute_retention");
    if (out.size() < items.size())
        throw usage_error("compute_retention: room for " + std::to_string(out.size()) + " scores of " +
                          std::to_string(items.size()) + " items; give one per item");
    if (items.size() == 0) return;
    detail::retention_score_kernel<Score>
        <<<detail::grid_for(items.size(), detail::select_threads), detail::select_threads, 0, stream>>>(
            detail::retention_source<Score>{items, params}, items.size(), out.data());
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

/// Effects: enqueues the selection of the k items with the lowest retention
/// values at params.now, scoring fused into the selection's first pass; ids
/// ascending by (score, id) to d_out, outcome to *d_status (select.cuh's
/// contract, two-phase temporary storage included: the scores are stored
/// in it).
/// Throws: as compute_retention and select_lowest.
template <class Score>
void select_lowest_retention(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                             const retention_items_view& items, const retention_params& params,
                             device_span<std::uint32_t> out, std::uint32_t k, device_span<select_status> status,
                             cudaStream_t stream, select_algorithm algorithm = select_algorithm::automatic) {
    detail::check_retention_inputs(items, params, "select_lowest_retention");
    const std::uint32_t n = items.size();
    if (temp_storage.data() != nullptr && (out.size() < std::min(k, n) || status.empty()))
        throw usage_error("select_lowest_retention: room for " + std::to_string(out.size()) + " ids and " +
                          std::to_string(status.size()) +
                          " statuses; give min(k, n) = " + std::to_string(std::min(k, n)) + " ids and one status");
    std::size_t bytes = temp_storage.data() != nullptr ? temp_storage.size() : temp_storage_bytes;
    detail::select_lowest_from<Score>(temp_storage.data(), bytes, detail::retention_source<Score>{items, params},
                                      nullptr, true, items.ids.empty() ? nullptr : items.ids.data(), n,
                                      out.empty() ? nullptr : out.data(), k, status.empty() ? nullptr : status.data(),
                                      stream, algorithm);
    if (temp_storage.data() == nullptr) temp_storage_bytes = bytes;
}

}  // namespace kvpolicy::cuda
