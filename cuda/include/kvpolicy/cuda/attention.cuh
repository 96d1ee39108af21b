// attention: paged decode attention on the device, returning (o, lse).
//
// One query token, every query head, over the tokens of a paged KV cache
// (the layout of sparse/reference_attention.hpp, its host reference). It is
// the baseline Quest and the ring are judged against (a slow baseline
// flatters them), and what the GPU tests use to show that attention
// streamed through the ring slot by slot and merged (merge.cuh) equals one
// pass. K and V may be fp32, bf16 or fp16 (`basic_paged_decode_args<T>`),
// read as stored and widened, with fp32 arithmetic; no tensor cores (one
// query token gives them nothing to multiply).
//
// Two kernels, one entry point:
// - grouped (head_dim 64, 128 or 256, K/V aligned for vector loads): a CTA
//   per KV head, up to 8 of its query heads and a share of the tokens, so
//   K and V leave HBM once; tiles of tokens with every load issued before
//   any arithmetic (sparse/grouped_decode_math.hpp explains the mapping;
//   FlashDecoding and FlashInfer's decode kernel are the models). On an H100
//   it reads fp32 K/V at 72-91% of the device's copy bandwidth (README).
// - warp per token (any other multiple of 32 up to 256): grid (num_q_heads,
//   num_splits), four warps per block, each warp walking its tokens with an
//   online softmax, one lane per 32 channels.
// Splits are combined by the log-sum-exp merge. Departures from
// FlashAttention-2 (Dao, 2023): none in the math (natural-log lse,
// split-KV combine); head_dim must be a multiple of 32, at most 256.
#pragma once

#include <cuda_runtime.h>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/merge.cuh"
#include "kvpolicy/sparse/decode_attention_math.hpp"
#include "kvpolicy/sparse/grouped_decode_math.hpp"
#include "kvpolicy/sparse/kv_element.hpp"
#include "kvpolicy/sparse/reference_attention.hpp"

namespace kvpolicy::cuda {

/// One decode step's attention inputs and outputs, all device memory
/// (device spans: core/memory_space.hpp). K and V are stored as T (fp32,
/// bf16 or fp16: sparse/kv_element.hpp); q, o, lse and the arithmetic are fp32.
template <kv_element T>
struct basic_paged_decode_args {
    device_span<const float> q;    ///< [num_q_heads][head_dim]
    device_span<const T> k_cache;  ///< block b at b * block_stride: [block_size][num_kv_heads][head_dim]
    device_span<const T> v_cache;  ///< same layout as k_cache
    std::size_t block_stride = 0;  ///< floats between blocks; 0 = packed
    device_span<const std::uint32_t> block_table;  ///< [ceil(num_tokens / block_size)] blocks in sequence order
    std::uint64_t num_tokens = 0;
    decode_attention_shape shape{};
    device_span<float> o;    ///< [num_q_heads][head_dim]
    device_span<float> lse;  ///< [num_q_heads]
};

using paged_decode_args = basic_paged_decode_args<float>;

namespace detail {

inline constexpr int attention_warps = 4;
inline constexpr int attention_max_per_lane = 8;  // head_dim <= 256

// grid (num_q_heads, splits). Writes o/lse at [split][head] in `o_out`,
// `lse_out` (the final arrays when splits == 1).
// Each lane's arithmetic is sparse/decode_attention_math.hpp's (tested on
// the CPU lane by lane); this kernel maps tokens to warps, sums the lanes'
// dot shares with shuffles and merges the warps.
template <kv_element T>
__global__ void __launch_bounds__(attention_warps * 32)
    paged_decode_kernel(basic_paged_decode_args<T> a, std::size_t stride, float* o_out, float* lse_out) {
    __shared__ float warp_m[attention_warps];
    __shared__ float warp_l[attention_warps];
    __shared__ float warp_acc[attention_warps][attention_max_per_lane * 32];
    constexpr float neg_inf = -::cuda::std::numeric_limits<float>::infinity();

    const std::uint32_t h = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const std::uint32_t d = a.shape.head_dim, per_lane = d / 32;
    const std::uint32_t kvh = h / (a.shape.num_q_heads / a.shape.num_kv_heads);
    const std::size_t row = std::size_t{a.shape.num_kv_heads} * d;
    const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;
    const std::uint64_t chunk = (a.num_tokens + splits - 1) / splits;
    const std::uint64_t begin = chunk * split;
    const std::uint64_t end = begin + chunk < a.num_tokens ? begin + chunk : a.num_tokens;

    float q[attention_max_per_lane];
#pragma unroll
    for (int j = 0; j < attention_max_per_lane; ++j)
        q[j] = j < static_cast<int>(per_lane) ? a.q[std::size_t{h} * d + lane + 32u * j] : 0.0f;
    online_softmax_lane<attention_max_per_lane> state;
    for (std::uint64_t t = begin + warp; t < end; t += attention_warps) {
        const std::size_t at = std::size_t{a.block_table[t / a.shape.block_size]} * stride +
                               static_cast<std::size_t>(t % a.shape.block_size) * row + std::size_t{kvh} * d;
        float dot = lane_partial_dot(q, a.k_cache.data() + at, lane, per_lane);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        state.step(dot * a.shape.scale, a.v_cache.data() + at, lane, per_lane);
    }
    if (lane == 0) {
        warp_m[warp] = state.m;
        warp_l[warp] = state.l;
    }
#pragma unroll
    for (int j = 0; j < attention_max_per_lane; ++j)
        if (j < static_cast<int>(per_lane)) warp_acc[warp][lane + 32u * j] = state.acc[j];
    __syncthreads();

    float big = neg_inf;
    for (int w = 0; w < attention_warps; ++w) big = fmaxf(big, warp_m[w]);
    float denom = 0.0f;
    if (big != neg_inf)
        for (int w = 0; w < attention_warps; ++w)
            if (warp_m[w] != neg_inf) denom += warp_l[w] * expf(warp_m[w] - big);
    float* o = o_out + (std::size_t{split} * gridDim.x + h) * d;
    for (std::uint32_t c = threadIdx.x; c < d; c += blockDim.x) {
        float sum = 0.0f;
        if (big != neg_inf)
            for (int w = 0; w < attention_warps; ++w)
                if (warp_m[w] != neg_inf) sum += warp_acc[w][c] * expf(warp_m[w] - big);
        o[c] = big == neg_inf ? 0.0f : sum / denom;
    }
    if (threadIdx.x == 0) lse_out[std::size_t{split} * gridDim.x + h] = big == neg_inf ? neg_inf : big + logf(denom);
}

// ---- The grouped kernel (sparse/grouped_decode_math.hpp explains the
// mapping): grid (num_kv_heads x groups, splits); a CTA takes one KV head,
// up to GMax of its query heads and split blockIdx.y's tokens, so each K and
// V byte leaves HBM once; head_dim = 32 E.
inline constexpr int grouped_warps = 4;

// The warp's reduce-scatter of N values (sparse/grouped_decode_math.hpp):
// one level per template instance, so every index is a constant and the
// values stay in registers; then a plain butterfly over the offsets left.
template <unsigned Half, unsigned Off, unsigned N>
__device__ __forceinline__ void warp_reduce_scatter(float (&vals)[N], unsigned lane) {
    if constexpr (Half >= 1 && Off >= 1) {
        const bool upper = (lane & Off) != 0;
#pragma unroll
        for (unsigned i = 0; i < Half; ++i) {
            const float lo = vals[i], hi = vals[i + Half];
            vals[i] = reduce_scatter_keep(lo, hi, upper) +
                      __shfl_xor_sync(0xffffffffu, reduce_scatter_send(lo, hi, upper), Off);
        }
        warp_reduce_scatter<Half / 2, Off / 2>(vals, lane);
    } else {
#pragma unroll
        for (unsigned off = Off; off > 0; off /= 2) vals[0] += __shfl_xor_sync(0xffffffffu, vals[0], off);
    }
}

template <kv_element T, unsigned E, unsigned GMax>
__global__ void __launch_bounds__(grouped_warps * 32)
    grouped_decode_kernel(basic_paged_decode_args<T> a, std::size_t stride, std::uint32_t groups_per_kv, float* o_out,
                          float* lse_out) {
    constexpr unsigned U = grouped_decode_depth<T, E, GMax>, N = U * GMax, D = 32 * E;
    static_assert(N >= 4 && N <= 32 && (N & (N - 1)) == 0, "the reduce-scatter takes 4 to 32 values");
    __shared__ float warp_m[grouped_warps][GMax];
    __shared__ float warp_l[grouped_warps][GMax];
    __shared__ float warp_acc[grouped_warps][GMax][D];
    __shared__ __align__(16) float logits[grouped_warps][N];

    const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;
    const std::uint32_t group_size = a.shape.num_q_heads / a.shape.num_kv_heads;
    const std::uint32_t kvh = blockIdx.x / groups_per_kv, first = (blockIdx.x % groups_per_kv) * GMax;
    const std::uint32_t heads = group_size - first < GMax ? group_size - first : GMax;
    const std::uint32_t h0 = kvh * group_size + first;  // the CTA's first query head
    const std::uint32_t split = blockIdx.y, splits = gridDim.y;
    const std::uint64_t chunk = (a.num_tokens + splits - 1) / splits;
    const std::uint64_t begin = chunk * split;
    const std::uint64_t end = begin + chunk < a.num_tokens ? begin + chunk : a.num_tokens;
    const std::size_t row = std::size_t{a.shape.num_kv_heads} * D;

    // The scale goes into q once, so the warp's sums are the scaled logits.
    float q[GMax][E];
#pragma unroll
    for (unsigned h = 0; h < GMax; ++h) {
        if (h < heads) {
            load_lane_channels<E>(a.q.data() + std::size_t{h0 + h} * D, lane, q[h]);
#pragma unroll
            for (unsigned e = 0; e < E; ++e) q[h][e] *= a.shape.scale;
        } else {
#pragma unroll
            for (unsigned e = 0; e < E; ++e) q[h][e] = 0.0f;
        }
    }
    grouped_decode_lane<E, GMax> state;
    const std::uint32_t bs = a.shape.block_size;
    const std::uint64_t first_tile = begin + std::uint64_t{warp} * U;
    paged_cursor tile = paged_cursor::at(first_tile, bs);
    for (std::uint64_t t0 = first_tile; t0 < end;
         t0 += std::uint64_t{grouped_warps} * U, tile = tile.advanced(grouped_warps * U, bs)) {
        const unsigned valid = end - t0 < U ? static_cast<unsigned>(end - t0) : U;
        // Every load of the tile is issued before any arithmetic uses one.
        // (Loading the next tile's block-table entries during this tile's
        // arithmetic was measured slower on an H100: 125.6 -> 159.5 us at
        // 32K tokens, fp32; the entries are L1/L2 hits after a block's first.)
        float k[U][E], v[U][E];
        paged_cursor at_token = tile;
#pragma unroll
        for (unsigned u = 0; u < U; ++u) {
            if (u < valid) {
                const std::size_t at = std::size_t{a.block_table[at_token.block]} * stride +
                                       std::size_t{at_token.offset} * row + std::size_t{kvh} * D;
                load_lane_channels<E>(a.k_cache.data() + at, lane, k[u]);
                load_lane_channels<E>(a.v_cache.data() + at, lane, v[u]);
            } else {
#pragma unroll
                for (unsigned e = 0; e < E; ++e) k[u][e] = v[u][e] = 0.0f;
            }
            at_token = at_token.advanced(1, bs);
        }
        float vals[N];
#pragma unroll
        for (unsigned u = 0; u < U; ++u) {
            float share[GMax];
            grouped_lane_shares(q, k[u], share);
#pragma unroll
            for (unsigned h = 0; h < GMax; ++h) vals[u * GMax + h] = share[h];
        }
        // Reduce-scatter the N shares over the warp, then share the totals.
        warp_reduce_scatter<N / 2, 16>(vals, lane);
        if (lane % (32u / N) == 0) logits[warp][reduce_scatter_index(lane, N)] = vals[0];
        __syncwarp();
        float s[U][GMax];
#pragma unroll
        for (unsigned i = 0; i < N; i += 4) {
            const float4 x = *reinterpret_cast<const float4*>(&logits[warp][i]);
            s[i / GMax][i % GMax] = x.x;
            s[(i + 1) / GMax][(i + 1) % GMax] = x.y;
            s[(i + 2) / GMax][(i + 2) % GMax] = x.z;
            s[(i + 3) / GMax][(i + 3) % GMax] = x.w;
        }
        __syncwarp();  // every lane has read the totals before the next tile writes them
        state.template fold<U>(s, v, valid);
    }

    if (lane == 0) {
#pragma unroll
        for (unsigned h = 0; h < GMax; ++h) {
            warp_m[warp][h] = state.m[h];
            warp_l[warp][h] = state.l[h];
        }
    }
#pragma unroll
    for (unsigned h = 0; h < GMax; ++h)
#pragma unroll
        for (unsigned e = 0; e < E; ++e) warp_acc[warp][h][lane * E + e] = state.acc[h][e];
    __syncthreads();
    for (unsigned i = threadIdx.x; i < heads * D; i += blockDim.x) {
        const unsigned h = i / D, c = i % D;
        float out = 0.0f;
        const float lse =
            merge_warp_states(&warp_m[0][h], &warp_l[0][h], GMax, &warp_acc[0][h][c], GMax * D, grouped_warps, out);
        const std::size_t r = std::size_t{split} * a.shape.num_q_heads + h0 + h;
        o_out[r * D + c] = out;
        if (c == 0) lse_out[r] = lse;
    }
}

// The grouped kernel takes head_dim 64, 128 or 256 (E = 2, 4, 8: nearly
// every model) with each lane's channels aligned for vector loads; other
// shapes take the warp-per-token kernel above.
template <kv_element T>
bool grouped_decode_applies(const basic_paged_decode_args<T>& a, std::size_t stride) {
    const std::uint32_t d = a.shape.head_dim;
    if (d != 64 && d != 128 && d != 256) return false;
    const std::size_t e = d / 32, align = e * sizeof(T) < 16 ? e * sizeof(T) : 16;
    const auto aligned = [&](const void* p, std::size_t bytes) {
        return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
    };
    return stride % e == 0 && aligned(a.k_cache.data(), align) && aligned(a.v_cache.data(), align) &&
           aligned(a.q.data(), e * 4 < 16 ? e * 4 : 16);
}

template <kv_element T, unsigned E, unsigned GMax>
void launch_grouped(const basic_paged_decode_args<T>& a, std::size_t stride, std::uint32_t splits, float* o_out,
                    float* lse_out, cudaStream_t stream) {
    const std::uint32_t group_size = a.shape.num_q_heads / a.shape.num_kv_heads;
    const std::uint32_t groups = (group_size + GMax - 1) / GMax;
    grouped_decode_kernel<T, E, GMax><<<dim3(a.shape.num_kv_heads * groups, splits), grouped_warps * 32, 0, stream>>>(
        a, stride, groups, o_out, lse_out);
}

// Enqueues whichever kernel takes the shape, writing [splits][heads] o and lse.
template <kv_element T>
void launch_decode(const basic_paged_decode_args<T>& a, std::size_t stride, std::uint32_t splits, float* o_out,
                   float* lse_out, cudaStream_t stream) {
    if (!grouped_decode_applies(a, stride)) {
        paged_decode_kernel<<<dim3(a.shape.num_q_heads, splits), attention_warps * 32, 0, stream>>>(a, stride, o_out,
                                                                                                    lse_out);
        return;
    }
    const bool wide = grouped_decode_heads(a.shape.head_dim / 32, a.shape.num_q_heads / a.shape.num_kv_heads) == 8;
    switch (a.shape.head_dim) {
        case 64:
            wide ? launch_grouped<T, 2, 8>(a, stride, splits, o_out, lse_out, stream)
                 : launch_grouped<T, 2, 4>(a, stride, splits, o_out, lse_out, stream);
            break;
        case 128:
            wide ? launch_grouped<T, 4, 8>(a, stride, splits, o_out, lse_out, stream)
                 : launch_grouped<T, 4, 4>(a, stride, splits, o_out, lse_out, stream);
            break;
        default:
            launch_grouped<T, 8, 4>(a, stride, splits, o_out, lse_out, stream);
            break;
    }
}

template <kv_element T>
void check_decode_args(const basic_paged_decode_args<T>& a) {
    const auto& s = a.shape;
    if (s.head_dim == 0 || s.head_dim % 32 != 0 || s.head_dim > 32 * attention_max_per_lane)
        throw usage_error("paged_decode_attention: head_dim " + std::to_string(s.head_dim) +
                          " is not a multiple of 32 in [32, 256]");
    if (s.num_kv_heads == 0 || s.num_q_heads == 0 || s.num_q_heads % s.num_kv_heads != 0 || s.block_size == 0)
        throw usage_error(
            "paged_decode_attention: query heads must be a positive multiple of KV heads, and "
            "block_size at least 1");
    const std::size_t qd = std::size_t{s.num_q_heads} * s.head_dim;
    const std::uint64_t table = (a.num_tokens + s.block_size - 1) / s.block_size;
    if (a.q.size() != qd || a.o.size() != qd || a.lse.size() != s.num_q_heads || a.block_table.size() < table ||
        (a.num_tokens > 0 && (a.k_cache.empty() || a.v_cache.empty())))
        throw usage_error("paged_decode_attention: q has " + std::to_string(a.q.size()) + " values, o " +
                          std::to_string(a.o.size()) + ", lse " + std::to_string(a.lse.size()) + ", the block table " +
                          std::to_string(a.block_table.size()) + " entries; give q and o " + std::to_string(qd) +
                          " values, lse " + std::to_string(s.num_q_heads) + ", a table of " + std::to_string(table) +
                          " blocks, and the caches when there are tokens");
}

}  // namespace detail

/// Effects: enqueues one-pass decode attention: a.o and a.lse over tokens
/// [0, a.num_tokens). Throws: usage_error for a shape the kernel does not
/// take (see the header paragraph) or a missing pointer; cuda_error.
template <kv_element T>
void paged_decode_attention(const basic_paged_decode_args<T>& a, cudaStream_t stream) {
    detail::check_decode_args(a);
    const std::size_t stride = a.block_stride != 0
                                   ? a.block_stride
                                   : std::size_t{a.shape.block_size} * a.shape.num_kv_heads * a.shape.head_dim;
    detail::launch_decode(a, stride, 1, a.o.data(), a.lse.data(), stream);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

/// Split-KV decode attention: `num_splits` blocks per head each take a
/// contiguous share of the tokens, then merge.cuh combines them. Two-phase
/// temporary storage, as select.cuh's: an empty temp_storage only sets
/// temp_storage_bytes; then pass device memory of at least that many bytes.
/// Throws: as paged_decode_attention, and usage_error if the temporary
/// storage is smaller than the size query said.
template <kv_element T>
void paged_decode_attention_split(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                                  const basic_paged_decode_args<T>& a, std::uint32_t num_splits, cudaStream_t stream) {
    void* const d_temp_storage = temp_storage.data();
    detail::check_decode_args(a);
    if (num_splits == 0) throw usage_error("paged_decode_attention_split: num_splits is 0; give at least 1");
    const std::size_t heads = a.shape.num_q_heads;
    const std::size_t lse_at =
        (std::size_t{num_splits} * heads * a.shape.head_dim * sizeof(float) + 255) & ~std::size_t{255};
    const std::size_t total = lse_at + std::size_t{num_splits} * heads * sizeof(float);
    if (d_temp_storage == nullptr) {
        temp_storage_bytes = total;
        return;
    }
    if (temp_storage.size() < total)
        throw usage_error("paged_decode_attention_split: temporary storage has " + std::to_string(temp_storage.size()) +
                          " bytes, needs " + std::to_string(total) + "; ask with an empty temp_storage first");
    auto* o_parts = static_cast<float*>(d_temp_storage);
    auto* lse_parts = reinterpret_cast<float*>(static_cast<unsigned char*>(d_temp_storage) + lse_at);
    const std::size_t stride = a.block_stride != 0
                                   ? a.block_stride
                                   : std::size_t{a.shape.block_size} * a.shape.num_kv_heads * a.shape.head_dim;
    detail::launch_decode(a, stride, num_splits, o_parts, lse_parts, stream);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    merge_attention_states(device_span<const float>{o_parts, num_splits * heads * a.shape.head_dim},
                           device_span<const float>{lse_parts, num_splits * heads}, num_splits, a.shape.head_dim, a.o,
                           a.lse, stream);
}

/// The fp32 forms, for a braced argument list (`paged_decode_attention({.q =
/// ...}, stream)`), which a template cannot deduce from.
inline void paged_decode_attention(const paged_decode_args& a, cudaStream_t stream) {
    paged_decode_attention<float>(a, stream);
}
inline void paged_decode_attention_split(device_span<std::byte> temp_storage, std::size_t& temp_storage_bytes,
                                         const paged_decode_args& a, std::uint32_t num_splits, cudaStream_t stream) {
    paged_decode_attention_split<float>(temp_storage, temp_storage_bytes, a, num_splits, stream);
}

}  // namespace kvpolicy::cuda
