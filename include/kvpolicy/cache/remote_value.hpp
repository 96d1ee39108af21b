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
// Keys: `remote_namespace::key(item)` is the namespace (model, dtype,
// layout version, block size, item bytes, TP/PP rank and size, a tenant
// salt's hash) followed by the item's name, so two instances serving the
// same model with the same layout and rank share one copy of each prefix,
// and nothing else. The name is the block's 32-byte digest and the item's
// layer when the namespace has `identities` (the default of the Redis tier's
// callers that hash with kvpolicy/redis/identity.hpp or pass vLLM's SHA-256
// hashes): the 64-bit key is then only the cache's handle, and two blocks
// whose handles collide are two values; without identities, the 64-bit key
// in hex (a single trusted instance's tests). The header carries the digest
// and, with a namespace `mac` (a deployment secret), a MAC of header and
// bytes: a value is used only if its digest is the block's and its MAC
// verifies.
//
// The checksum: remote_checksum.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kvpolicy/cache/block_hasher.hpp"
#include "kvpolicy/cache/remote_checksum.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// The identities of the items an instance names in the store: item key
/// (the cache's 64-bit handle) -> its block's digest and its layer. With a
/// namespace's `identities`, an item's store key and its value's header
/// carry the full digest, and a value is the item's only if that digest
/// matches: two blocks whose 64-bit handles collide stay two blocks in the
/// store. A handle bound to one digest is not bound to another (bind says
/// so), so a lookup that finds a handle in the local tiers found the same
/// block. Thread-safe.
class remote_identities {
public:
    struct identity {
        block_digest digest{};
        std::uint32_t layer = 0;
    };

    /// Binds `item` to (digest, layer); true if it now is. False, changing
    /// nothing, when `item` is bound to another identity: two blocks with
    /// one 64-bit handle (counted in collisions()).
    bool bind(std::uint64_t item, const block_digest& digest, std::uint32_t layer) {
        std::scoped_lock lock(mutex_);
        const auto [it, added] = map_.try_emplace(item, identity{digest, layer});
        if (added || (it->second.digest == digest && it->second.layer == layer)) return true;
        ++collisions_;
        return false;
    }
    void forget(std::uint64_t item) {
        std::scoped_lock lock(mutex_);
        map_.erase(item);
    }
    [[nodiscard]] std::optional<identity> find(std::uint64_t item) const {
        std::scoped_lock lock(mutex_);
        const auto it = map_.find(item);
        if (it == map_.end()) return std::nullopt;
        return it->second;
    }
    /// Keeps the bindings for which keep(item, identity) is true; returns how many were forgotten.
    template <class Keep>
    std::size_t retain(Keep&& keep) {
        std::scoped_lock lock(mutex_);
        return std::erase_if(map_, [&](const auto& e) { return !keep(e.first, e.second); });
    }
    [[nodiscard]] std::size_t size() const {
        std::scoped_lock lock(mutex_);
        return map_.size();
    }
    /// Binds refused so far because the handle was another block's.
    [[nodiscard]] std::size_t collisions() const {
        std::scoped_lock lock(mutex_);
        return collisions_;
    }

private:
    mutable std::mutex mutex_;
    std::unordered_map<std::uint64_t, identity> map_;
    std::size_t collisions_ = 0;
};

/// A keyed MAC over a value's header and payload under a deployment secret
/// (kvpolicy/redis/identity.hpp: hmac_sha256, and poly1305_mac, the fast
/// one). The core names the seam only, so it needs no crypto library.
class remote_mac {
public:
    static constexpr std::size_t size = 32;
    virtual ~remote_mac() = default;
    /// The MAC of `head` followed by `payload`, into `out` (a MAC may hold
    /// a fresh nonce there, so two calls may differ). Thread-safe.
    virtual void sign(std::span<const std::byte> head, std::span<const std::byte> payload,
                      std::span<std::byte, size> out) const = 0;
    /// Whether `mac` is a MAC of `head` followed by `payload`, in constant
    /// time. The default: sign, compare (a deterministic MAC). Thread-safe.
    [[nodiscard]] virtual bool verify(std::span<const std::byte> head, std::span<const std::byte> payload,
                                      std::span<const std::byte, size> mac) const {
        std::array<std::byte, size> want{};
        sign(head, payload, want);
        unsigned diff = 0;
        for (std::size_t i = 0; i < size; ++i) diff |= std::to_integer<unsigned>(want[i] ^ mac[i]);
        return diff == 0;
    }
};

/// Where an instance's items live in the store: two instances share an
/// item iff their namespaces are equal. The namespace carries everything
/// that makes two instances' bytes incompatible (model, dtype, layout,
/// block size, item bytes, tensor- and pipeline-parallel rank and size) and
/// an optional tenant salt; set each of them, since the defaults match any
/// other instance left at the defaults.
struct remote_namespace {
    std::string model = "model";       ///< the model (and its weights' version)
    std::uint32_t layout_version = 1;  ///< the KV layout (heads, head_dim, ...): bump on any change
    std::uint32_t block_size = 16;     ///< tokens per block
    std::uint32_t item_bytes = 0;      ///< bytes of one item
    std::string dtype = "default";     ///< the KV bytes' type ("bfloat16", "fp8_e4m3", ...)
    std::uint32_t tp_rank = 0;         ///< this instance's tensor-parallel rank, below tp_size
    std::uint32_t tp_size = 1;
    std::uint32_t pp_rank = 0;  ///< this instance's pipeline-parallel rank, below pp_size
    std::uint32_t pp_size = 1;
    /// A tenant salt (vLLM's cache_salt): instances with different salts
    /// share nothing. Empty: none. It scopes, it is not a secret from the
    /// store's readers (the key carries a hash of it).
    std::string tenant{};
    /// When set, items are named by their block's digest (see
    /// remote_identities) in the key and the header; an item it does not
    /// know has no name (key() is empty: never looked up, fetched or written).
    std::shared_ptr<remote_identities> identities{};
    /// When set, each value carries a MAC under the deployment's secret and
    /// a value without a valid one is refused: a writer without the secret
    /// cannot plant a value.
    std::shared_ptr<const remote_mac> mac{};

    /// Throws config_error naming the field and the fix when the namespace
    /// cannot be right (an empty model or dtype, a rank not below its size).
    void validate() const {
        auto bad = [](const std::string& what) { throw config_error("remote_namespace: " + what); };
        if (model.empty()) bad("model is empty; name the model (and its weights' version)");
        if (dtype.empty()) bad("dtype is empty; name the KV bytes' type, e.g. \"bfloat16\"");
        if (block_size == 0) bad("block_size is 0; give the tokens per block");
        if (tp_size == 0 || tp_rank >= tp_size)
            bad("tp_rank " + std::to_string(tp_rank) + " is not below tp_size " + std::to_string(tp_size) +
                "; give this instance's tensor-parallel rank and the group's size (1 without tensor parallelism)");
        if (pp_size == 0 || pp_rank >= pp_size)
            bad("pp_rank " + std::to_string(pp_rank) + " is not below pp_size " + std::to_string(pp_size) +
                "; give this instance's pipeline-parallel rank and the group's size (1 without pipeline parallelism)");
    }

    /// The prefix of every key:
    /// "kvp:<model>:<dtype>:<layout>:<block_size>:<item_bytes>:tp<rank>.<size>:pp<rank>.<size>:"
    /// then "t<16 hex digits: a hash of the tenant salt>:" with one.
    [[nodiscard]] std::string prefix() const {
        std::string p = "kvp:" + model + ":" + dtype + ":" + std::to_string(layout_version) + ":" +
                        std::to_string(block_size) + ":" + std::to_string(item_bytes) + ":tp" +
                        std::to_string(tp_rank) + "." + std::to_string(tp_size) + ":pp" + std::to_string(pp_rank) +
                        "." + std::to_string(pp_size) + ":";
        if (!tenant.empty()) {
            p += "t";
            append_hex(p, remote_checksum(std::as_bytes(std::span<const char>(tenant.data(), tenant.size()))));
            p += ":";
        }
        return p;
    }
    /// Whether `item` has a name here (always, without identities).
    [[nodiscard]] bool names(std::uint64_t item) const { return !identities || identities->find(item).has_value(); }
    /// Appends `item`'s name after the prefix: its block's digest (64 hex
    /// digits), ':' and its layer with identities, its key's 16 hex digits
    /// without. False, appending nothing, for an item without a name.
    bool append_item(std::string& out, std::uint64_t item) const {
        if (!identities) {
            append_hex(out, item);
            return true;
        }
        const auto id = identities->find(item);
        if (!id) return false;
        static constexpr char digits[] = "0123456789abcdef";
        for (const std::uint8_t b : id->digest) {
            out.push_back(digits[b >> 4]);
            out.push_back(digits[b & 15]);
        }
        out += ":" + std::to_string(id->layer);
        return true;
    }
    /// The store key of `item`: prefix() then its name; empty when it has none.
    [[nodiscard]] std::string key(std::uint64_t item) const {
        std::string k = prefix();
        return append_item(k, item) ? k : std::string();
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
    static constexpr std::uint16_t format_version = 3;         // 2: the 8-lane checksum; 3: the block's digest, the MAC
    static constexpr std::size_t size = 112;
    static constexpr std::size_t signed_size = 80;               // the header's bytes the MAC covers: all before it
    static constexpr std::uint16_t has_digest = 1, has_mac = 2;  // flags

    std::uint32_t magic = magic_value;
    std::uint16_t format = format_version;
    std::uint16_t flags = 0;
    std::uint32_t layout_version = 0;
    std::uint32_t layer = 0;  ///< with has_digest: the item's layer of its block
    std::uint64_t namespace_hash = 0;
    std::uint64_t key = 0;
    std::uint64_t length = 0;
    std::uint64_t checksum = 0;
    block_digest digest{};  ///< with has_digest: the block's digest
    std::array<std::byte, remote_mac::size>
        mac{};  ///< with has_mac: the MAC of the first signed_size bytes and the payload
};
static_assert(sizeof(remote_value_header) == remote_value_header::size);
static_assert(offsetof(remote_value_header, mac) == remote_value_header::signed_size);
static_assert(std::endian::native == std::endian::little, "remote values are little-endian; add a byte swap here");

/// Why a loaded value was refused (`ok` when it was not).
enum class remote_value_check : std::uint8_t {
    ok,
    missing,
    too_short,
    bad_magic,
    wrong_namespace,
    wrong_key,
    wrong_length,
    bad_checksum,
    wrong_identity,
    bad_mac
};

[[nodiscard]] constexpr std::string_view to_string(remote_value_check c) noexcept {
    switch (c) {
        case remote_value_check::ok:
            return "ok";
        case remote_value_check::missing:
            return "missing";
        case remote_value_check::too_short:
            return "too short for its header";
        case remote_value_check::bad_magic:
            return "not a kvpolicy value (bad magic or format)";
        case remote_value_check::wrong_namespace:
            return "written under another namespace or layout";
        case remote_value_check::wrong_key:
            return "the value of another key";
        case remote_value_check::wrong_length:
            return "a payload of the wrong length";
        case remote_value_check::bad_checksum:
            return "payload bytes that do not match the checksum";
        case remote_value_check::wrong_identity:
            return "the value of another block (its digest differs) or of an unknown one";
        case remote_value_check::bad_mac:
            return "no valid MAC under this deployment's secret";
    }
    return "?";
}

namespace detail {
template <class Bytes>
[[nodiscard]] constexpr bool all_zero(const Bytes& b) noexcept {
    for (const auto x : b)
        if (x != decltype(x){}) return false;
    return true;
}

inline void sign_remote_value(const remote_mac& mac, remote_value_header& h, std::span<const std::byte> payload) {
    const auto head =
        std::as_bytes(std::span<const remote_value_header, 1>(&h, 1)).first(remote_value_header::signed_size);
    std::array<std::byte, remote_mac::size> out{};
    mac.sign(head, payload, out);
    h.mac = out;
}
}  // namespace detail

/// The header of item `key` (its digest and layer from ns.identities, its
/// MAC under ns.mac) whose payload `payload` has checksum `checksum`.
/// Precondition: ns.names(key).
[[nodiscard]] inline remote_value_header make_remote_header(const remote_namespace& ns, std::uint64_t ns_hash,
                                                            std::uint64_t key, std::span<const std::byte> payload,
                                                            std::uint64_t checksum) {
    remote_value_header h;
    h.layout_version = ns.layout_version;
    h.namespace_hash = ns_hash;
    h.key = key;
    h.length = payload.size();
    h.checksum = checksum;
    if (ns.identities)
        if (const auto id = ns.identities->find(key)) {
            h.flags |= remote_value_header::has_digest;
            h.digest = id->digest;
            h.layer = id->layer;
        }
    if (ns.mac) {
        h.flags |= remote_value_header::has_mac;
        detail::sign_remote_value(*ns.mac, h, payload);
    }
    return h;
}

/// The header's own checks (magic, format, namespace, layout, key, a
/// declared length of `expected_length`, with identities the block's digest
/// and layer, with a MAC its presence); the payload's length, checksum and
/// MAC are the caller's to check (h.length, h.checksum, check_remote_mac).
[[nodiscard]] inline remote_value_check check_remote_header(const remote_value_header& h, const remote_namespace& ns,
                                                            std::uint64_t ns_hash, std::uint64_t key,
                                                            std::size_t expected_length) {
    if (h.magic != remote_value_header::magic_value || h.format != remote_value_header::format_version)
        return remote_value_check::bad_magic;
    if (h.namespace_hash != ns_hash || h.layout_version != ns.layout_version)
        return remote_value_check::wrong_namespace;
    if (h.key != key) return remote_value_check::wrong_key;
    if (h.length != expected_length) return remote_value_check::wrong_length;
    if ((h.flags & ~(remote_value_header::has_digest | remote_value_header::has_mac)) != 0)
        return remote_value_check::bad_magic;
    const bool mac = (h.flags & remote_value_header::has_mac) != 0;
    if (mac != static_cast<bool>(ns.mac) || (!mac && !detail::all_zero(h.mac))) return remote_value_check::bad_mac;
    const bool digest = (h.flags & remote_value_header::has_digest) != 0;
    if (!ns.identities)  // no digest, and its field untouched
        return digest || !detail::all_zero(h.digest) || h.layer != 0 ? remote_value_check::wrong_identity
                                                                     : remote_value_check::ok;
    const auto id = ns.identities->find(key);
    if (!id || !digest || h.digest != id->digest || h.layer != id->layer) return remote_value_check::wrong_identity;
    return remote_value_check::ok;
}

/// With ns.mac: whether h.mac is a MAC of the header and `payload`
/// (ns.mac->verify, constant time); ok without one.
[[nodiscard]] inline remote_value_check check_remote_mac(const remote_value_header& h, const remote_namespace& ns,
                                                         std::span<const std::byte> payload) {
    if (!ns.mac) return remote_value_check::ok;
    const auto head =
        std::as_bytes(std::span<const remote_value_header, 1>(&h, 1)).first(remote_value_header::signed_size);
    return ns.mac->verify(head, payload, h.mac) ? remote_value_check::ok : remote_value_check::bad_mac;
}

/// Writes the header of `payload` (item `key`) into `out` (size bytes).
inline void encode_remote_header(std::span<std::byte, remote_value_header::size> out, const remote_namespace& ns,
                                 std::uint64_t ns_hash, std::uint64_t key, std::span<const std::byte> payload) {
    const remote_value_header h = make_remote_header(ns, ns_hash, key, payload, remote_checksum(payload));
    std::memcpy(out.data(), &h, sizeof h);
}

/// Writes the value of item `key` into `out` (header + payload, so
/// remote_value_header::size + payload.size() bytes).
inline void encode_remote_value(std::span<std::byte> out, const remote_namespace& ns, std::uint64_t ns_hash,
                                std::uint64_t key, std::span<const std::byte> payload) {
    const std::uint64_t sum = copy_with_checksum(out.subspan(remote_value_header::size), payload);
    const remote_value_header h = make_remote_header(ns, ns_hash, key, payload, sum);
    std::memcpy(out.data(), &h, sizeof h);
}

namespace detail {
// The header checks of a whole value; on ok, `h` is its header.
[[nodiscard]] inline remote_value_check check_value_header(std::span<const std::byte> value, remote_value_header& h,
                                                           const remote_namespace& ns, std::uint64_t ns_hash,
                                                           std::uint64_t key, std::size_t expected_length) {
    if (value.size() < remote_value_header::size) return remote_value_check::too_short;
    std::memcpy(&h, value.data(), sizeof h);
    const remote_value_check c = check_remote_header(h, ns, ns_hash, key, expected_length);
    if (c != remote_value_check::ok) return c;
    if (value.size() - remote_value_header::size != expected_length) return remote_value_check::wrong_length;
    return remote_value_check::ok;
}
}  // namespace detail

/// verify_remote_value, copying the payload into `dst` (its length is the
/// expected one) in the same pass as the checksum. On anything but `ok`,
/// `dst` holds unspecified bytes: the caller must not use them.
[[nodiscard]] inline remote_value_check verify_and_copy_remote_value(std::span<const std::byte> value,
                                                                     const remote_namespace& ns, std::uint64_t ns_hash,
                                                                     std::uint64_t key, std::span<std::byte> dst) {
    remote_value_header h;
    if (const auto c = detail::check_value_header(value, h, ns, ns_hash, key, dst.size()); c != remote_value_check::ok)
        return c;
    if (copy_with_checksum(dst, value.subspan(remote_value_header::size)) != h.checksum)
        return remote_value_check::bad_checksum;
    return check_remote_mac(h, ns, value.subspan(remote_value_header::size));
}

/// Checks a loaded value against what the cache expects; on `ok` the
/// payload is `value.subspan(remote_value_header::size)`.
[[nodiscard]] inline remote_value_check verify_remote_value(std::span<const std::byte> value,
                                                            const remote_namespace& ns, std::uint64_t ns_hash,
                                                            std::uint64_t key, std::size_t expected_length) {
    remote_value_header h;
    if (const auto c = detail::check_value_header(value, h, ns, ns_hash, key, expected_length);
        c != remote_value_check::ok)
        return c;
    if (remote_checksum(value.subspan(remote_value_header::size)) != h.checksum)
        return remote_value_check::bad_checksum;
    return check_remote_mac(h, ns, value.subspan(remote_value_header::size));
}

}  // namespace kvpolicy
