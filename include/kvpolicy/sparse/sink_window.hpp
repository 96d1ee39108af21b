// sink_window: load the first blocks of a sequence (the attention sinks) and
// the most recent ones (a sliding window), nothing in between.
//
// StreamingLLM (Xiao et al., "Efficient Streaming Language Models with
// Attention Sinks", ICLR'24) observes that softmax attention parks much of its
// mass on the first few tokens whatever they say; keeping them plus a window
// of recent tokens keeps perplexity stable over unbounded streams. Use it when
// the budget is fixed and no per-block metadata is wanted (no `on_offload`
// work at all), or as the floor under a query-aware selector.
//
// Departures from the paper: sinks and window are counted in blocks, not
// tokens (a selector chooses whole blocks), and positions are not re-assigned
// (the paper re-indexes positions inside the cache; the engine owns that).
// `available` is taken in sequence order: available[0] is the oldest block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

struct sink_window_config {
    std::uint32_t sink_blocks = 1;    ///< leading blocks always loaded
    std::uint32_t window_blocks = 8;  ///< trailing (most recent) blocks always loaded

    friend constexpr bool operator==(const sink_window_config&, const sink_window_config&) noexcept = default;
};

class sink_window {
public:
    using config_type = sink_window_config;

    static constexpr std::string_view name = "sink_window";
    static constexpr bool supports_prefill = true;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;

    sink_window() = default;

    /// Throws: config_error if both counts are 0 (nothing would be loaded).
    explicit sink_window(const config_type& config) : config_(validated(config)) {}

    /// Effects: writes the first `sink_blocks` and the last `window_blocks`
    /// of `available` to `out`, in sequence order (all of `available` when
    /// they overlap); returns the count.
    /// Throws: usage_error if `out` is shorter than `available` (nothing written).
    std::size_t select(std::span<const block_id> available, const selection_context&, std::span<block_id> out) const {
        if (out.size() < available.size())
            throw usage_error("sink_window::select: output holds " + std::to_string(out.size()) + " ids for " +
                              std::to_string(available.size()) + " available blocks; size it to available.size()");
        const std::size_t n = available.size();
        const std::size_t keep = std::size_t{config_.sink_blocks} + config_.window_blocks;
        if (n <= keep) {
            std::ranges::copy(available, out.begin());
            return n;
        }
        const auto sinks = available.first(config_.sink_blocks);
        const auto window = available.last(config_.window_blocks);
        std::ranges::copy(sinks, out.begin());
        std::ranges::copy(window, out.begin() + static_cast<std::ptrdiff_t>(sinks.size()));
        return keep;
    }

    /// Nothing to record: the choice depends on positions only.
    void on_offload(block_id, layer_index, const key_block_view&) const noexcept {}

    [[nodiscard]] const config_type& config() const noexcept { return config_; }

private:
    static config_type validated(const config_type& c) {
        if (c.sink_blocks == 0 && c.window_blocks == 0)
            throw config_error(
                "sink_window: sink_blocks and window_blocks are both 0, so no block would be loaded; "
                "keep at least one (StreamingLLM uses 4 sink tokens plus a window)");
        return c;
    }

    config_type config_{};
};

static_assert(sparse_selector<sink_window>);

}  // namespace kvpolicy
