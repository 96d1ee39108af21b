// What a sparse block selector sees: the query of one decode step for one
// layer, and the keys of a block at the moment it is offloaded.
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
    std::uint32_t block_size = 16;      ///< tokens per block
    std::uint64_t total_kv_len = 0;     ///< tokens of KV before the query
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    std::span<const float> query;       ///< [num_q_heads][head_dim]; empty in prefill
};

/// Keys of one block of one layer, still on the device that produced them.
struct key_block_view {
    std::span<const float> keys;        ///< [tokens][num_kv_heads][head_dim]
    std::uint32_t tokens = 0;           ///< valid tokens (the last block may be partial)
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
};

/// selection_context for a device selector: the query is device memory.
struct device_selection_context {
    layer_index layer{};
    bool is_prefill = false;
    std::uint32_t block_size = 16;         ///< tokens per block
    std::uint64_t total_kv_len = 0;        ///< tokens of KV before the query
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    device_span<const float> query;        ///< [num_q_heads][head_dim]; empty in prefill
};

/// key_block_view for a device selector: the keys are device memory.
struct device_key_block_view {
    device_span<const float> keys;         ///< [tokens][num_kv_heads][head_dim]
    std::uint32_t tokens = 0;              ///< valid tokens (the last block may be partial)
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
};

}  // namespace kvpolicy
