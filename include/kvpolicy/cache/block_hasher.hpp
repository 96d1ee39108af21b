// Chained block hashes: a block's hash covers its parent's hash, its token
// ids and an optional extra key (a LoRA id, a cache salt), so equal hashes
// mean equal prefixes, as in vLLM's prefix cache. Only full blocks are
// hashed: a partial last block changes as decoding appends to it.
//
// The hash is 64-bit and not cryptographic: among 10^6 distinct blocks the
// chance of any collision is about 3e-8 (birthday bound n^2 / 2^65).
// Engines that share a cache between mutually untrusted tenants should pass
// their own hashes (for example truncated SHA-256) and a per-tenant salt.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/item_key.hpp"

namespace kvpolicy {

/// The parent of a chain's first block.
inline constexpr block_hash root_block_hash = 0x6b76706f6c696379ULL;  // "kvpolicy"

[[nodiscard]] constexpr block_hash hash_block(block_hash parent, std::span<const std::int32_t> tokens,
                                              std::uint64_t extra_key = 0) noexcept {
    std::uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ extra_key);
    for (const std::int32_t t : tokens) h = mix64(h + static_cast<std::uint32_t>(t) + 0x632be59bd9b4e019ULL);
    return mix64(h ^ tokens.size());
}

/// Hashes of the full blocks of `tokens`, chained from `root`; returns how
/// many were written (min(out.size(), tokens.size() / block_size)).
inline std::size_t hash_blocks(std::span<const std::int32_t> tokens, std::uint32_t block_size,
                               std::span<block_hash> out, std::uint64_t extra_key = 0,
                               block_hash root = root_block_hash) noexcept {
    if (block_size == 0) return 0;
    const std::size_t full = std::min<std::size_t>(out.size(), tokens.size() / block_size);
    block_hash parent = root;
    for (std::size_t i = 0; i < full; ++i) {
        parent = hash_block(parent, tokens.subspan(i * block_size, block_size), extra_key);
        out[i] = parent;
    }
    return full;
}

}  // namespace kvpolicy
