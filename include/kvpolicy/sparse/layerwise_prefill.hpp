// layerwise_prefill: one layer of seed 004's layer-wise offload prefill:
// attention through the prefill selector's hook, then every block of the
// layer's KV offloaded to the CPU tier, each shown to the decode selector's
// `on_offload` hook before its copy.
//
// Seed 004 ("Sparse Policy Integration with Layerwise Offload") separates
// two kinds of sparse policy: MInference changes how prefill attention is
// computed (`sparse_prefill_attention`) and loads everything; Quest changes
// which blocks decode loads and records metadata when blocks are offloaded.
// Per layer the engine computes Q, K, V, calls the prefill selector for
// attention (full_attention: dense causal; minference: vertical-slash), and
// offloads *all* of the layer's KV (`offload_layer_kv_sync`), calling the
// decode selector's hook on each block's keys while they are still where
// they were produced, so Quest's metadata is gathered in the same pass. Use
// it as the host model of that loop (tests, the simulator); a GPU engine
// runs the same sequence with minference.cuh and quest.cuh. Departure from
// the seed: the copy goes into caller-given arrays (the CPU tier's
// layer), not into an engine's tensors, and the MLP between attention and
// offload is the caller's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sparse/prefill_attention.hpp"

namespace kvpolicy {

/// One layer of the CPU tier: block b's keys start at k[b * block_stride]
/// as [block_size][num_kv_heads][head_dim], its values likewise in v.
struct layer_kv_store {
    std::span<float> k;             ///< [blocks][block_stride]
    std::span<float> v;             ///< [blocks][block_stride]
    std::size_t block_stride = 0;   ///< floats between blocks; 0 = packed (block_size * num_kv_heads * head_dim)
    std::uint32_t block_size = 16;  ///< tokens per block
};

/// Effects, in order: `prefill.sparse_prefill_attention(in, layer, out)`;
/// then for block i of the prompt (tokens [i * block_size, ...), the last
/// one possibly partial) `hooks.on_offload(cpu_blocks[i], layer, its keys)`
/// followed by the copy of its keys and values into `cpu`'s block
/// cpu_blocks[i].
/// Throws: usage_error, naming the input, for views that disagree in shape,
/// a block_size of 0, a block count other than ceil(tokens / block_size), a
/// block outside `cpu` or given twice (nothing done then); whatever the
/// prefill selector throws before it writes (minference: last_q larger than
/// the prompt), with nothing done; a hook that throws leaves the blocks
/// before it offloaded.
template <prefill_sparse_selector Prefill, sparse_selector Hooks>
void layerwise_offload_prefill_layer(Prefill& prefill, Hooks& hooks, layer_index layer, const prefill_qkv_view& in,
                                     std::span<const block_id> cpu_blocks, const layer_kv_store& cpu,
                                     const prefill_output_view& out) {
    constexpr const char* who = "layerwise_offload_prefill_layer";
    detail::check_prefill_views(who, in, out);
    const auto fail = [&](const std::string& why) { throw usage_error(std::string(who) + ": " + why); };
    if (cpu.block_size == 0) fail("block_size is 0; give the tokens per block of the CPU tier");
    const std::size_t row = std::size_t{in.num_kv_heads} * in.head_dim;
    const std::size_t stride = cpu.block_stride != 0 ? cpu.block_stride : cpu.block_size * row;
    if (stride < cpu.block_size * row) fail("block_stride is shorter than one block");
    const std::size_t blocks = (std::size_t{in.num_tokens} + cpu.block_size - 1) / cpu.block_size;
    if (cpu_blocks.size() != blocks)
        fail(std::to_string(cpu_blocks.size()) + " CPU blocks for " + std::to_string(in.num_tokens) +
             " tokens in blocks of " + std::to_string(cpu.block_size) + "; give " + std::to_string(blocks));
    std::vector<std::uint32_t> seen;
    seen.reserve(blocks);
    for (block_id b : cpu_blocks) {
        const std::size_t end = b.index() * stride + cpu.block_size * row;
        if (end > cpu.k.size() || end > cpu.v.size())
            fail("block " + std::to_string(b.value) + " lies outside the CPU tier's key or value array");
        seen.push_back(b.value);
    }
    std::ranges::sort(seen);
    if (const auto twice = std::ranges::adjacent_find(seen); twice != seen.end())
        fail("block " + std::to_string(*twice) + " is given twice; give each token range its own CPU block");

    prefill.sparse_prefill_attention(in, layer, out);

    for (std::size_t i = 0; i < blocks; ++i) {
        const std::size_t first = i * cpu.block_size;
        const auto tokens = static_cast<std::uint32_t>(std::min<std::size_t>(cpu.block_size, in.num_tokens - first));
        const std::span<const float> keys = in.k.subspan(first * row, tokens * row);
        hooks.on_offload(cpu_blocks[i], layer,
                         {.keys = keys, .tokens = tokens, .num_kv_heads = in.num_kv_heads, .head_dim = in.head_dim});
        const std::size_t at = cpu_blocks[i].index() * stride;
        std::ranges::copy(keys, cpu.k.begin() + static_cast<std::ptrdiff_t>(at));
        std::ranges::copy(in.v.subspan(first * row, tokens * row), cpu.v.begin() + static_cast<std::ptrdiff_t>(at));
    }
}

}  // namespace kvpolicy
