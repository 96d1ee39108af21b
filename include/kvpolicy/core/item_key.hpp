// Keys that name an eviction item independently of where it is stored.
//
// A dense `item_id` is a slot: it is reused once the item leaves. Policies that
// remember evicted items (ARC's ghost lists, S3-FIFO's ghost FIFO, ...) must
// remember something that survives the slot, so every item also has a 64-bit
// key, computed from one of the two key shapes below.
#pragma once

#include <cstdint>

#include "kvpolicy/core/ids.hpp"

namespace kvpolicy {

/// A whole block (all layers), named by its content hash.
struct block_key {
    block_hash hash{};

    friend constexpr bool operator==(block_key, block_key) noexcept = default;
};

/// One layer of one chunk of one session: seed 000's `(session, chunk, layer)`.
struct layer_chunk_key {
    session_id session{};
    chunk_index chunk{};
    layer_index layer{};

    friend constexpr bool operator==(layer_chunk_key, layer_chunk_key) noexcept = default;
};

/// splitmix64's finaliser: a bijection on 64 bits with full avalanche, so
/// distinct inputs give distinct keys and nearby inputs scatter.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

[[nodiscard]] constexpr std::uint64_t key_of(block_key k) noexcept { return k.hash; }

[[nodiscard]] constexpr std::uint64_t key_of(layer_chunk_key k) noexcept {
    std::uint64_t h = mix64(k.session.value);
    h = mix64(h ^ (std::uint64_t{k.chunk.value} << 20) ^ k.layer.value);
    return h;
}

}  // namespace kvpolicy
