// remote_value: the bytes of one item in a remote store, and their check.
//
// A value is a 48-byte header followed by the item's KV bytes. The header
// says what the bytes are (magic, format version, the cache's layout
// version, the namespace's hash, the item key, the payload length) and
// carries a checksum of the payload, so a load can tell a block from
// another block's bytes, a truncated value, a value written by another model
// or layout under the same key, or bytes changed behind the cache's back.
// A value that does not verify is a failed fetch: recomputed, never used.
//
// Keys: `remote_namespace::key(item)` is the namespace (model, layout
// version, block size, item bytes) followed by the item key (the chain hash,
// or the per-layer key) in hex, so two instances serving the same model with
// the same layout share one copy of each prefix, and nothing else.
//
// The checksum is xxHash64's round function over 4 lanes of 8-byte words
// (Collet, xxHash), several GB/s, so it costs little next to the network.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

namespace detail {
// xxHash64's rounds and avalanche over `n` bytes at `p`; with `out`, the
// bytes are copied there in the same pass (a load feeds both).
inline std::uint64_t checksum_pass(const std::byte* p, std::size_t n, std::byte* out) noexcept {
    constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL, p3 = 0x165667B19E3779F9ULL;
    auto round = [](std::uint64_t acc, std::uint64_t w) { return std::rotl(acc + w * p2, 31) * p1; };
    auto load = [](const std::byte* q) {
        std::uint64_t w;
        std::memcpy(&w, q, 8);
        return w;
    };
    const std::size_t total = n;
    std::uint64_t v[4] = {p1 + p2, p2, 0, 0 - p1};
    for (; n >= 32; n -= 32, p += 32) {
        std::uint64_t w[4];
        for (int i = 0; i < 4; ++i) w[i] = load(p + 8 * i);
        if (out != nullptr) {
            std::memcpy(out, w, 32);
            out += 32;
        }
        for (int i = 0; i < 4; ++i) v[i] = round(v[i], w[i]);
    }
    if (out != nullptr && n > 0) std::memcpy(out, p, n);
    std::uint64_t h = std::rotl(v[0], 1) + std::rotl(v[1], 7) + std::rotl(v[2], 12) + std::rotl(v[3], 18);
    h += total;
    for (; n >= 8; n -= 8, p += 8) h = std::rotl(h ^ round(0, load(p)), 27) * p1 + p3;
    for (; n > 0; --n, ++p) h = std::rotl(h ^ (std::to_integer<std::uint64_t>(*p) * p3), 11) * p1;
    h ^= h >> 33;
    h *= p2;
    h ^= h >> 29;
    h *= p3;
    h ^= h >> 32;
    return h;
}
}  // namespace detail

/// The 64-bit checksum of `bytes` (xxHash64's rounds and avalanche).
[[nodiscard]] inline std::uint64_t remote_checksum(std::span<const std::byte> bytes) noexcept {
    return detail::checksum_pass(bytes.data(), bytes.size(), nullptr);
}

/// Copies `src` into `dst` (at least as long) and returns remote_checksum(src),
/// reading `src` once.
inline std::uint64_t copy_with_checksum(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
    return detail::checksum_pass(src.data(), src.size(), dst.data());
}

/// Where an instance's items live in the store: two instances share an
/// item iff their namespaces are equal.
struct remote_namespace {
    std::string model = "model";      ///< the model (and its weights' version)
    std::uint32_t layout_version = 1; ///< the KV layout (dtype, heads, head_dim, ...): bump on any change
    std::uint32_t block_size = 16;    ///< tokens per block
    std::uint32_t item_bytes = 0;     ///< bytes of one item

    /// The prefix of every key: "kvp:<model>:<layout>:<block_size>:<item_bytes>:".
    [[nodiscard]] std::string prefix() const {
        return "kvp:" + model + ":" + std::to_string(layout_version) + ":" + std::to_string(block_size) + ":" +
               std::to_string(item_bytes) + ":";
    }
    /// The store key of `item`: prefix() then 16 hex digits.
    [[nodiscard]] std::string key(std::uint64_t item) const {
        std::string k = prefix();
        append_hex(k, item);
        return k;
    }
    static void append_hex(std::string& out, std::uint64_t item) {
        static constexpr char digits[] = "0123456789abcdef";
        for (int s = 60; s >= 0; s -= 4) out.push_back(digits[(item >> s) & 15]);
    }
    /// A hash of the namespace, carried in each value's header.
    [[nodiscard]] std::uint64_t hash() const {
        const std::string p = prefix();
        return remote_checksum(std::as_bytes(std::span<const char>(p.data(), p.size())));
    }
};

/// The header in front of every value; little-endian on the wire, as the
/// hosts that share a store are.
struct remote_value_header {
    static constexpr std::uint32_t magic_value = 0x4250564bU;  // "KVPB"
    static constexpr std::uint16_t format_version = 1;
    static constexpr std::size_t size = 48;

    std::uint32_t magic = magic_value;
    std::uint16_t format = format_version;
    std::uint16_t reserved = 0;
    std::uint32_t layout_version = 0;
    std::uint32_t reserved2 = 0;
    std::uint64_t namespace_hash = 0;
    std::uint64_t key = 0;
    std::uint64_t length = 0;
    std::uint64_t checksum = 0;
};
static_assert(sizeof(remote_value_header) == remote_value_header::size);
static_assert(std::endian::native == std::endian::little, "remote values are little-endian; add a byte swap here");

/// Why a loaded value was refused (`ok` when it was not).
enum class remote_value_check : std::uint8_t { ok, missing, too_short, bad_magic, wrong_namespace, wrong_key, wrong_length, bad_checksum };

[[nodiscard]] constexpr std::string_view to_string(remote_value_check c) noexcept {
    switch (c) {
        case remote_value_check::ok: return "ok";
        case remote_value_check::missing: return "missing";
        case remote_value_check::too_short: return "too short for its header";
        case remote_value_check::bad_magic: return "not a kvpolicy value (bad magic or format)";
        case remote_value_check::wrong_namespace: return "written under another namespace or layout";
        case remote_value_check::wrong_key: return "the value of another key";
        case remote_value_check::wrong_length: return "a payload of the wrong length";
        case remote_value_check::bad_checksum: return "payload bytes that do not match the checksum";
    }
    return "?";
}

/// Writes the header of `payload` (item `key`) into `out` (size bytes).
inline void encode_remote_header(std::span<std::byte, remote_value_header::size> out, const remote_namespace& ns,
                                 std::uint64_t ns_hash, std::uint64_t key, std::span<const std::byte> payload) noexcept {
    remote_value_header h;
    h.layout_version = ns.layout_version;
    h.namespace_hash = ns_hash;
    h.key = key;
    h.length = payload.size();
    h.checksum = remote_checksum(payload);
    std::memcpy(out.data(), &h, sizeof h);
}

/// Writes the value of item `key` into `out` (header + payload, so
/// remote_value_header::size + payload.size() bytes), reading the payload once.
inline void encode_remote_value(std::span<std::byte> out, const remote_namespace& ns, std::uint64_t ns_hash,
                                std::uint64_t key, std::span<const std::byte> payload) noexcept {
    remote_value_header h;
    h.layout_version = ns.layout_version;
    h.namespace_hash = ns_hash;
    h.key = key;
    h.length = payload.size();
    h.checksum = copy_with_checksum(out.subspan(remote_value_header::size), payload);
    std::memcpy(out.data(), &h, sizeof h);
}

/// verify_remote_value, copying the payload into `dst` (its length is the
/// expected one) in the same pass as the checksum. On anything but `ok`,
/// `dst` holds unspecified bytes: the caller must not use them.
[[nodiscard]] inline remote_value_check verify_and_copy_remote_value(std::span<const std::byte> value,
                                                                     const remote_namespace& ns, std::uint64_t ns_hash,
                                                                     std::uint64_t key, std::span<std::byte> dst) noexcept {
    if (value.size() < remote_value_header::size) return remote_value_check::too_short;
    remote_value_header h;
    std::memcpy(&h, value.data(), sizeof h);
    if (h.magic != remote_value_header::magic_value || h.format != remote_value_header::format_version)
        return remote_value_check::bad_magic;
    if (h.namespace_hash != ns_hash || h.layout_version != ns.layout_version) return remote_value_check::wrong_namespace;
    if (h.key != key) return remote_value_check::wrong_key;
    const std::span<const std::byte> payload = value.subspan(remote_value_header::size);
    if (h.length != dst.size() || payload.size() != dst.size()) return remote_value_check::wrong_length;
    if (copy_with_checksum(dst, payload) != h.checksum) return remote_value_check::bad_checksum;
    return remote_value_check::ok;
}

/// Checks a loaded value against what the cache expects; on `ok` the
/// payload is `value.subspan(remote_value_header::size)`.
[[nodiscard]] inline remote_value_check verify_remote_value(std::span<const std::byte> value, const remote_namespace& ns,
                                                            std::uint64_t ns_hash, std::uint64_t key,
                                                            std::size_t expected_length) noexcept {
    if (value.size() < remote_value_header::size) return remote_value_check::too_short;
    remote_value_header h;
    std::memcpy(&h, value.data(), sizeof h);
    if (h.magic != remote_value_header::magic_value || h.format != remote_value_header::format_version)
        return remote_value_check::bad_magic;
    if (h.namespace_hash != ns_hash || h.layout_version != ns.layout_version) return remote_value_check::wrong_namespace;
    if (h.key != key) return remote_value_check::wrong_key;
    const std::span<const std::byte> payload = value.subspan(remote_value_header::size);
    if (h.length != expected_length || payload.size() != expected_length) return remote_value_check::wrong_length;
    if (remote_checksum(payload) != h.checksum) return remote_value_check::bad_checksum;
    return remote_value_check::ok;
}

}  // namespace kvpolicy
