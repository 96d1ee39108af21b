// prefill_attention: causal prefill attention on the host, dense or over a
// vertical-slash index, computed with the tile math the CUDA kernels run
// (sparse/prefill_tile.hpp), and the argument checks every prefill entry
// point shares.
//
// `dense_prefill_attention` is what `full_attention` computes when the
// layer-wise offload prefill asks it for attention (seed 004's
// flash_attn_varlen_func path): every query i attends to keys 0 .. i.
// `vertical_slash_prefill_attention` is MInference's sparse attention in the
// same float tiles; sparse/minference.hpp holds its double reference. Both
// are O(tokens x keys x head_dim) on one core: for tests and small prompts,
// not for serving (the CUDA kernels are those).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/sparse_context.hpp"
#include "kvpolicy/sparse/prefill_tile.hpp"

namespace kvpolicy {

namespace detail {

/// Throws usage_error, naming `who`, unless the input has the shapes of
/// basic_prefill_qkv_view's comments (host or device views: only sizes are
/// read).
template <memory_space Space>
void check_prefill_input(const char* who, const basic_prefill_qkv_view<Space>& in) {
    const auto fail = [&](const std::string& why) { throw usage_error(std::string(who) + ": " + why); };
    if (in.head_dim == 0 || in.num_kv_heads == 0 || in.num_q_heads == 0 || in.num_q_heads % in.num_kv_heads != 0)
        fail("shape has " + std::to_string(in.num_q_heads) + " query heads, " + std::to_string(in.num_kv_heads) +
             " KV heads, head_dim " + std::to_string(in.head_dim) +
             "; give head_dim and KV heads >= 1 and query heads a multiple of KV heads");
    if (!std::isfinite(in.scale)) fail("scale is not finite; give 1 / sqrt(head_dim)");
    const std::size_t n = in.num_tokens, d = in.head_dim;
    const std::size_t q_size = n * in.num_q_heads * d, kv_size = n * in.num_kv_heads * d;
    if (in.q.size() != q_size || in.k.size() != kv_size || in.v.size() != kv_size)
        fail("q, k, v hold " + std::to_string(in.q.size()) + ", " + std::to_string(in.k.size()) + ", " +
             std::to_string(in.v.size()) + " values; give [tokens][heads][head_dim]: " + std::to_string(q_size) + ", " +
             std::to_string(kv_size) + ", " + std::to_string(kv_size));
}

/// check_prefill_input, and the output's shapes too.
template <memory_space Space>
void check_prefill_views(const char* who, const basic_prefill_qkv_view<Space>& in,
                         const basic_prefill_output_view<Space>& out) {
    check_prefill_input(who, in);
    const std::size_t rows = std::size_t{in.num_tokens} * in.num_q_heads, q_size = rows * in.head_dim;
    if (out.o.size() != q_size || out.lse.size() != rows)
        throw usage_error(std::string(who) + ": o and lse hold " + std::to_string(out.o.size()) + " and " +
                          std::to_string(out.lse.size()) + " values; give [tokens][q_heads][head_dim] = " +
                          std::to_string(q_size) + " and [tokens][q_heads] = " + std::to_string(rows));
}

[[nodiscard]] inline prefill_head_args head_args(const prefill_qkv_view& in, const prefill_output_view& out) noexcept {
    return {.q = in.q.data(),
            .k = in.k.data(),
            .v = in.v.data(),
            .o = out.o.data(),
            .lse = out.lse.data(),
            .num_q_heads = in.num_q_heads,
            .num_kv_heads = in.num_kv_heads,
            .head_dim = in.head_dim,
            .scale = in.scale};
}

}  // namespace detail

/// Effects: causal attention of every query over keys 0 .. i: o and lse of
/// each row (lse in natural log). Throws: usage_error for a shape that
/// disagrees (nothing written).
inline void dense_prefill_attention(const prefill_qkv_view& in, const prefill_output_view& out) {
    detail::check_prefill_views("dense_prefill_attention", in, out);
    const prefill_head_args a = detail::head_args(in, out);
    std::vector<float> acc(in.head_dim);
    for (std::uint32_t i = 0; i < in.num_tokens; ++i)
        for (std::uint32_t h = 0; h < in.num_q_heads; ++h)
            prefill_attention_row(a, dense_causal_keys{i}, i, h, acc.data());
}

/// One head's kept columns and diagonal offsets, both ascending.
struct vertical_slash_head_view {
    std::span<const std::uint32_t> verticals;
    std::span<const std::uint32_t> slashes;
};

/// Effects: attention of query i, head h over the vertical-slash keys of
/// `index(h)` (any callable returning a vertical_slash_head_view), in the
/// kernels' float tiles. Preconditions: the views are checked, every index
/// below num_tokens. Used by minference on request and by the CPU tests of
/// the tile math.
template <class IndexOfHead>
void vertical_slash_prefill_attention(const prefill_qkv_view& in, const prefill_output_view& out, IndexOfHead&& index) {
    const prefill_head_args a = detail::head_args(in, out);
    std::vector<float> acc(in.head_dim);
    for (std::uint32_t h = 0; h < in.num_q_heads; ++h) {
        const vertical_slash_head_view set = index(h);
        for (std::uint32_t i = 0; i < in.num_tokens; ++i) {
            const auto keys =
                vertical_slash_keys::make(set.verticals.data(), static_cast<std::uint32_t>(set.verticals.size()),
                                          set.slashes.data(), static_cast<std::uint32_t>(set.slashes.size()), i);
            prefill_attention_row(a, keys, i, h, acc.data());
        }
    }
}

}  // namespace kvpolicy
