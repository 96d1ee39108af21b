// full_attention: load every offloaded block. The exact baseline that sparse
// selectors (Quest, sink + window) approximate, and the right choice for
// prefill, where every query attends to every block anyway. As a
// prefill_sparse_selector its prefill attention is dense causal attention
// (seed 004's flash_attn_varlen_func path), the baseline of MInference.
#pragma once

#include <algorithm>
#include <string>
#include <span>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sparse/prefill_attention.hpp"

namespace kvpolicy {

struct full_attention {
    static constexpr std::string_view name = "full";
    static constexpr bool supports_prefill = true;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = false;

    std::size_t select(std::span<const block_id> available, const selection_context&, std::span<block_id> out) const {
        if (out.size() < available.size())
            throw usage_error("full_attention::select: output holds " + std::to_string(out.size()) + " ids for " +
                              std::to_string(available.size()) + " available blocks; size it to available.size()");
        std::ranges::copy(available, out.begin());
        return available.size();
    }
    void on_offload(block_id, layer_index, const key_block_view&) const noexcept {}

    /// Dense causal attention (dense_prefill_attention); throws usage_error
    /// for views that disagree in shape (nothing written).
    void sparse_prefill_attention(const prefill_qkv_view& in, layer_index, const prefill_output_view& out) const {
        dense_prefill_attention(in, out);
    }
};

static_assert(sparse_selector<full_attention>);
static_assert(prefill_sparse_selector<full_attention>);

}  // namespace kvpolicy
