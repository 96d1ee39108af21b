// Chained block hashes: a block's hash covers its parent's hash, its token
// ids and an optional extra key (a LoRA id, a cache salt), so equal hashes
// mean equal prefixes, as in vLLM's prefix cache. Only full blocks are
// hashed: a partial last block changes as decoding appends to it.
//
// The hash is 64-bit and not cryptographic (mix64 is invertible: a block
// with a chosen hash is built in under a second). A 64-bit key is safe as
// the handle of the blocks one instance holds, against chance only: among
// n distinct blocks any two collide with p ~ n^2 / 2^65, 3e-8 at 10^6
// (a large host tier), 3e-6 at 10^7. It is not safe as a block's identity
// in a store shared by many instances over its lifetime (2.7% at 10^9
// blocks, 93% at 10^10) nor against anyone who picks tokens. There a block
// is named by a `block_digest`: 32 bytes of SHA-256 over its parent's
// digest, its tokens and an extra key (kvpolicy/redis/identity.hpp, which
// needs OpenSSL, so it lives with the Redis tier), or the engine's own
// 32-byte hash (vLLM's SHA-256 block hashes), kept whole; its handle is
// digest_handle(d), and remote_identities (remote_value.hpp) keeps the
// digest that a handle stands for.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/item_key.hpp"

namespace kvpolicy {

/// A block's collision-resistant identity: a 32-byte digest (SHA-256).
using block_digest = std::array<std::uint8_t, 32>;

/// The 64-bit handle of a digest: its first 8 bytes, little-endian. The
/// cache and its policies key blocks by it; remote_identities keeps the
/// digest behind it.
[[nodiscard]] constexpr block_hash digest_handle(const block_digest& d) noexcept {
    block_hash h = 0;
    for (int i = 7; i >= 0; --i) h = (h << 8) | d[static_cast<std::size_t>(i)];
    return h;
}
/// The handles of `digests`, in order.
[[nodiscard]] inline std::vector<block_hash> digest_handles(std::span<const block_digest> digests) {
    std::vector<block_hash> out(digests.size());
    std::transform(digests.begin(), digests.end(), out.begin(), [](const block_digest& d) { return digest_handle(d); });
    return out;
}

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
