// Strong identifier types.
//
// Every per-block field in kvpolicy is an array indexed by a dense id, so ids are
// plain unsigned integers underneath. Wrapping each kind in its own type makes
// `pool.ref_count(session)` a compile error instead of a silent out-of-range
// read. The wrappers are trivially copyable and cost nothing at run time.
#pragma once

#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>

namespace kvpolicy {

/// An unsigned integer with a tag type, so ids of different kinds do not mix.
/// `invalid()` is the all-ones value, used as the "no id" sentinel in
/// index-linked structures.
template <class Tag, std::unsigned_integral Rep>
struct strong_id {
    using rep_type = Rep;

    Rep value{};

    constexpr strong_id() noexcept = default;
    constexpr explicit strong_id(Rep v) noexcept : value(v) {}

    [[nodiscard]] static constexpr strong_id invalid() noexcept { return strong_id{std::numeric_limits<Rep>::max()}; }
    [[nodiscard]] constexpr bool is_valid() const noexcept { return value != std::numeric_limits<Rep>::max(); }
    [[nodiscard]] constexpr std::size_t index() const noexcept { return value; }

    friend constexpr bool operator==(strong_id, strong_id) noexcept = default;
    friend constexpr auto operator<=>(strong_id, strong_id) noexcept = default;
};

/// Dense id of a block inside one tier: 0 .. capacity-1.
using block_id = strong_id<struct block_id_tag, std::uint32_t>;
/// Dense id of the unit an eviction policy evicts (a block, or one layer of
/// one block): 0 .. capacity-1 of the policy.
using item_id = strong_id<struct item_id_tag, std::uint32_t>;
/// A conversation (or request stream) whose KV the cache holds.
using session_id = strong_id<struct session_id_tag, std::uint64_t>;
/// Transformer layer, 0 = the first layer of the forward pass.
using layer_index = strong_id<struct layer_index_tag, std::uint32_t>;
/// Position of a block-sized chunk inside its session, 0 = leading tokens.
using chunk_index = strong_id<struct chunk_index_tag, std::uint32_t>;

/// Content identity of a full block: a chained hash (parent hash, token ids,
/// extra key) or an id taken from a trace. Equal hashes mean equal prefixes.
using block_hash = std::uint64_t;

}  // namespace kvpolicy

template <class Tag, class Rep>
struct std::hash<kvpolicy::strong_id<Tag, Rep>> {
    std::size_t operator()(kvpolicy::strong_id<Tag, Rep> id) const noexcept { return std::hash<Rep>{}(id.value); }
};
