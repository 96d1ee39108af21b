// reference_decode_attention: exact single-query attention over a paged KV
// cache, returning the output and its log-sum-exp.
//
// The obviously-correct yardstick for everything that approximates or splits
// attention: the CUDA decode kernel (kvpolicy/cuda/attention.cuh), attention
// streamed block by block through the ring loader and merged with lse_merge,
// and Quest's sparse selection (which must approach this as its budget grows).
// Double accumulation, two passes over the tokens (max, then sum), no
// tiling. Not for serving: O(tokens x heads x head_dim) on one core.
//
// Shapes follow vLLM's paged cache: the keys of block b are
// k[b * block_stride ...] as [block_size][num_kv_heads][head_dim], values
// likewise; token t of the sequence lives in block_table[t / block_size] at
// row t % block_size. Query head h reads KV head h / (num_q_heads /
// num_kv_heads) (GQA). lse is the natural log of the softmax denominator of
// the scaled logits (FlashAttention's convention); no tokens gives o = 0 and
// lse = -inf, the identity of the merge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"

namespace kvpolicy {

struct decode_attention_shape {
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    std::uint32_t block_size = 16;  ///< tokens per block
    float scale = 1.0f;             ///< softmax scale, usually 1 / sqrt(head_dim)
};

/// Host view of a paged cache: keys and values of block b start at
/// b * block_stride; 0 means packed (block_size * num_kv_heads * head_dim).
struct paged_kv_view {
    std::span<const float> k;  ///< [blocks][block_stride], each block [block_size][num_kv_heads][head_dim]
    std::span<const float> v;  ///< same shape as k
    std::size_t block_stride = 0;
};

/// Effects: o[h] = softmax(scale * q_h . K) V and lse[h] = log of its
/// denominator, over tokens [0, num_tokens) of `block_table`.
/// Shapes: q [num_q_heads][head_dim], o [num_q_heads][head_dim], lse [num_q_heads].
/// Throws: usage_error if a shape disagrees, num_tokens exceeds the table,
/// or a block lies outside k or v (nothing written).
inline void reference_decode_attention(std::span<const float> q, const paged_kv_view& kv,
                                       std::span<const block_id> block_table, std::uint64_t num_tokens,
                                       const decode_attention_shape& shape, std::span<float> o, std::span<float> lse) {
    const std::size_t d = shape.head_dim;
    const std::size_t row = std::size_t{shape.num_kv_heads} * d;
    const std::size_t stride = kv.block_stride != 0 ? kv.block_stride : shape.block_size * row;
    const auto fail = [](const std::string& why) { throw usage_error("reference_decode_attention: " + why); };
    if (d == 0 || shape.num_kv_heads == 0 || shape.block_size == 0 || shape.num_q_heads % shape.num_kv_heads != 0 ||
        shape.num_q_heads == 0)
        fail("shape needs head_dim, block_size and KV heads >= 1 and query heads a multiple of KV heads");
    if (q.size() != shape.num_q_heads * d || o.size() != q.size() || lse.size() != shape.num_q_heads)
        fail("q and o must be [num_q_heads][head_dim] and lse [num_q_heads]");
    if (num_tokens > block_table.size() * std::uint64_t{shape.block_size})
        fail(std::to_string(num_tokens) + " tokens but the table holds " + std::to_string(block_table.size()) +
             " blocks of " + std::to_string(shape.block_size));
    if (stride < shape.block_size * row) fail("block_stride is shorter than one block");
    const std::size_t used_blocks = static_cast<std::size_t>((num_tokens + shape.block_size - 1) / shape.block_size);
    for (std::size_t i = 0; i < used_blocks; ++i) {
        const std::size_t end = block_table[i].index() * stride + shape.block_size * row;
        if (end > kv.k.size() || end > kv.v.size())
            fail("block " + std::to_string(block_table[i].value) + " lies outside the key or value array");
    }

    const std::uint32_t group = shape.num_q_heads / shape.num_kv_heads;
    std::vector<double> logits(static_cast<std::size_t>(num_tokens));
    std::vector<double> acc(d);
    for (std::uint32_t h = 0; h < shape.num_q_heads; ++h) {
        const std::size_t kvh = h / group;
        const float* qh = q.data() + h * d;
        const auto at = [&](std::span<const float> cache, std::uint64_t t) {
            const std::size_t b = block_table[static_cast<std::size_t>(t / shape.block_size)].index();
            return cache.data() + b * stride + static_cast<std::size_t>(t % shape.block_size) * row + kvh * d;
        };
        double m = -std::numeric_limits<double>::infinity();
        for (std::uint64_t t = 0; t < num_tokens; ++t) {
            const float* k = at(kv.k, t);
            double dot = 0.0;
            for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(qh[c]) * static_cast<double>(k[c]);
            logits[static_cast<std::size_t>(t)] = dot * static_cast<double>(shape.scale);
            m = std::max(m, logits[static_cast<std::size_t>(t)]);
        }
        std::ranges::fill(acc, 0.0);
        double l = 0.0;
        for (std::uint64_t t = 0; t < num_tokens; ++t) {
            const double p = std::exp(logits[static_cast<std::size_t>(t)] - m);
            l += p;
            const float* v = at(kv.v, t);
            for (std::size_t c = 0; c < d; ++c) acc[c] += p * static_cast<double>(v[c]);
        }
        for (std::size_t c = 0; c < d; ++c) o[h * d + c] = num_tokens == 0 ? 0.0f : static_cast<float>(acc[c] / l);
        lse[h] = num_tokens == 0 ? -std::numeric_limits<float>::infinity() : static_cast<float>(m + std::log(l));
    }
}

}  // namespace kvpolicy
