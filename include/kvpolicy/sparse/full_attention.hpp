// full_attention: load every offloaded block. The exact baseline that sparse
// selectors (Quest, sink + window) approximate, and the right choice for
// prefill, where every query attends to every block anyway.
#pragma once

#include <algorithm>
#include <string>
#include <span>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

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
};

static_assert(sparse_selector<full_attention>);

}  // namespace kvpolicy
