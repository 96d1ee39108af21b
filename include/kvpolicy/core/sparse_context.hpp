// What a sparse block selector sees: the query of one decode step for one
// layer, the keys of a block at the moment it is offloaded, and (selectors
// that compute prefill attention themselves, `prefill_sparse_selector`) the
// queries, keys and values of one layer's prefill.
//
// Views, not owners: the engine keeps the tensors; selectors record the
// metadata they need (Quest: per-channel key min/max) in their own arrays.
// Two spaces, two types (core/memory_space.hpp): `selection_context` and
// `key_block_view` hold host memory, for host selectors (`sparse_selector`);
// `device_selection_context` and `device_key_block_view` hold device memory
// as device_spans, for device selectors (`device_sparse_selector`), so a
// device query cannot reach a host selector, which would read it on the host.
#pragma once

#include <cstdint>
#include <span>

#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/memory_space.hpp"

namespace kvpolicy {

struct selection_context {
    layer_index layer{};
    bool is_prefill = false;
    std::uint32_t block_size = 16;   ///< tokens per block
    std::uint64_t total_kv_len = 0;  ///< tokens of KV before the query
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    std::span<const float> query;  ///< [num_q_heads][head_dim]; empty in prefill
};

/// Keys of one block of one layer, still on the device that produced them.
struct key_block_view {
    std::span<const float> keys;  ///< [tokens][num_kv_heads][head_dim]
    std::uint32_t tokens = 0;     ///< valid tokens (the last block may be partial)
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
};

/// selection_context for a device selector: the query is device memory.
struct device_selection_context {
    layer_index layer{};
    bool is_prefill = false;
    std::uint32_t block_size = 16;   ///< tokens per block
    std::uint64_t total_kv_len = 0;  ///< tokens of KV before the query
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    device_span<const float> query;  ///< [num_q_heads][head_dim]; empty in prefill
};

/// key_block_view for a device selector: the keys are device memory, stored
/// as T (float, or sparse/kv_element.hpp's bf16 / fp16, what engines keep).
template <class T>
struct basic_device_key_block_view {
    device_span<const T> keys;  ///< [tokens][num_kv_heads][head_dim]
    std::uint32_t tokens = 0;   ///< valid tokens (the last block may be partial)
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
};

using device_key_block_view = basic_device_key_block_view<float>;

/// One layer's prefill, every token of the prompt (the layout of
/// flash_attn_varlen_func for one sequence), in memory space `Space`
/// (memory_space.hpp): host views for the host selectors, device views for
/// the CUDA ones, and neither converts to the other. Token t's query for
/// head h is q[(t * num_q_heads + h) * head_dim ...]; query head h reads KV
/// head h / (num_q_heads / num_kv_heads) (GQA, as in decode).
template <memory_space Space>
struct basic_prefill_qkv_view {
    space_span<const float, Space> q;  ///< [num_tokens][num_q_heads][head_dim]
    space_span<const float, Space> k;  ///< [num_tokens][num_kv_heads][head_dim]
    space_span<const float, Space> v;  ///< [num_tokens][num_kv_heads][head_dim]
    std::uint32_t num_tokens = 0;
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    float scale = 1.0f;  ///< softmax scale, usually 1 / sqrt(head_dim)
};

/// Where prefill attention writes. lse is the natural log of each row's
/// softmax denominator, laid out so that row r = t * num_q_heads + h of o
/// ([rows][head_dim]) and lse ([rows]) merge with `merge_attention_state`.
template <memory_space Space>
struct basic_prefill_output_view {
    space_span<float, Space> o;    ///< [num_tokens][num_q_heads][head_dim]
    space_span<float, Space> lse;  ///< [num_tokens][num_q_heads]
};

using prefill_qkv_view = basic_prefill_qkv_view<memory_space::host>;
using prefill_output_view = basic_prefill_output_view<memory_space::host>;
using device_prefill_qkv_view = basic_prefill_qkv_view<memory_space::device>;
using device_prefill_output_view = basic_prefill_output_view<memory_space::device>;

}  // namespace kvpolicy
