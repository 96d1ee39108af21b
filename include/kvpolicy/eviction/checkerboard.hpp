// lexicographic_checkerboard: evict layer-chunks in the fixed order of seed
// 000's pictures: back layers first, and within a layer the oldest session
// first, and within a session the leading chunks first.
//
//     key = (layer descending, session ascending, chunk ascending, id)
//
// "Older session" means smaller session id: engines number sessions in
// arrival order. A session-wide last-access time would move every item of a
// session whenever one of them is used (O(items of the session * log n) per
// access instead of O(log n)); where recency should count, use
// `retention_value`, whose cost / idle-time ordering is what the seed's
// pictures approximate. The order ignores accesses entirely, so it is
// `static_between_accesses`: one indexed heap, O(log n) per insert, hold,
// release, erase and pop, and an access costs nothing. A released item
// re-enters at its key; the key is read from the insert's context (an item's
// (session, chunk, layer) does not change).
//
// Use it as the seed's static baseline against `retention_value`, or where
// victims must be predictable from the layout alone. On seed 000's worked
// example (2 layers, 2 chunks) it evicts L1C0, L1C1, L0C0, L0C1, as the
// seed's priority list says (the seed's "L0C1 before L0C0" contradicts that
// list and its own costs). Departure from Pensieve (Yu et al., "Stateful
// Large Language Model Serving with Pensieve", EuroSys'25): not in the
// paper, which ranks by retention value; this is the order seed 000 draws.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/heap_ordered_policy.hpp"

namespace kvpolicy {

/// Where an item sorts in lexicographic_checkerboard: smaller keys are
/// evicted first.
struct checkerboard_order_key {
    std::uint32_t layer_from_back;  // max - layer: the last layer sorts first
    std::uint64_t session;
    std::uint32_t chunk;

    friend constexpr auto operator<=>(const checkerboard_order_key&, const checkerboard_order_key&) noexcept = default;
};

class lexicographic_checkerboard : public heap_ordered_policy<lexicographic_checkerboard, checkerboard_order_key> {
public:
    struct config_type {};

    static constexpr std::string_view name = "checkerboard";
    /// It orders by layer, then session, then chunk, never by use: an order
    /// for a CPU tier of layer-chunks, not for a prefix cache's hits.
    static constexpr std::string_view built_for =
        "the CPU tier of layer-chunk items (--mode tiered --cpu-policy checkerboard --layers L)";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit lexicographic_checkerboard(std::size_t capacity, const config_type& = {})
            : heap_ordered_policy(capacity) {}

    /// Where an item described by `ctx` sorts: smaller keys are evicted first.
    using order_key = checkerboard_order_key;
    [[nodiscard]] static constexpr order_key order_key_of(const access_context& ctx) noexcept {
        return {std::numeric_limits<std::uint32_t>::max() - ctx.layer.value, ctx.session.value, ctx.chunk.value};
    }

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        heap_.push(id.value, order_key_of(ctx));
    }
    void on_access(item_id id, const access_context&) noexcept { tracking_.mark_accessed(id); }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        heap_.push(id.value, heap_.key(id.value));  // the heap keeps a removed id's key
    }
};

static_assert(eviction_policy<lexicographic_checkerboard>);

}  // namespace kvpolicy
