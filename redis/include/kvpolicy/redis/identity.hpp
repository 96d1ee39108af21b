// identity: the Redis tier's cryptography through OpenSSL's libcrypto
// (Debian libssl-dev): SHA-256 block digests, a block's collision-resistant
// identity, and the keyed MACs a deployment's values carry: HMAC-SHA-256,
// and poly1305_mac (Poly1305 under per-value keys), the fast one.
//
// A block's digest is SHA-256 of its parent's digest, the length and bytes
// of an extra key (a LoRA id, a tenant's cache salt) and the length and
// bytes of its token ids (int32, little-endian), chained from
// root_block_digest as kvpolicy::hash_blocks chains 64-bit hashes. Its
// handle (digest_handle: the first 8 bytes) is what the cache and the
// policies key by; remote_namespace::identities keeps the digest behind
// each handle, and the store key and value header carry the digest whole.
//
// Why here and not in the core: the header-only core needs no library but
// range-v3, and only a store shared past one instance needs collision
// resistance; the Redis tier already links hiredis and now OpenSSL (which
// uses the CPU's SHA extensions where there are some).
#pragma once

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kvpolicy/cache/block_hasher.hpp"
#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy::redis {

/// The parent of a chain's first block ("kvpolicy block digest root v1", padded).
inline constexpr block_digest root_block_digest = {'k', 'v', 'p', 'o', 'l', 'i', 'c', 'y', ' ', 'b', 'l',
                                                   'o', 'c', 'k', ' ', 'd', 'i', 'g', 'e', 's', 't', ' ',
                                                   'r', 'o', 'o', 't', ' ', 'v', '1', 0,   0,   0};

/// SHA-256 block digests, one EVP context reused (not thread-safe: one per thread).
class sha256_block_hasher {
public:
    // SHA-256 fetched once: EVP_sha256() at each init costs an implicit fetch.
    sha256_block_hasher() : md_(EVP_MD_fetch(nullptr, "SHA256", nullptr)), ctx_(EVP_MD_CTX_new()) {
        if (md_ == nullptr || ctx_ == nullptr) {
            EVP_MD_free(md_);
            EVP_MD_CTX_free(ctx_);
            throw error("sha256_block_hasher: OpenSSL could not set up SHA-256");
        }
    }
    ~sha256_block_hasher() {
        EVP_MD_CTX_free(ctx_);
        EVP_MD_free(md_);
    }
    sha256_block_hasher(const sha256_block_hasher&) = delete;
    sha256_block_hasher& operator=(const sha256_block_hasher&) = delete;

    /// The digest of a block of `tokens` after `parent`, with `extra`.
    [[nodiscard]] block_digest operator()(const block_digest& parent, std::span<const std::int32_t> tokens,
                                          std::span<const std::byte> extra = {}) {
        static_assert(std::endian::native == std::endian::little,
                      "token ids are hashed little-endian; add a byte swap");
        const std::uint64_t lens[2] = {extra.size(), tokens.size()};
        block_digest out{};
        unsigned int n = 0;
        if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1 || EVP_DigestUpdate(ctx_, parent.data(), parent.size()) != 1 ||
            EVP_DigestUpdate(ctx_, &lens[0], 8) != 1 || EVP_DigestUpdate(ctx_, extra.data(), extra.size()) != 1 ||
            EVP_DigestUpdate(ctx_, &lens[1], 8) != 1 ||
            EVP_DigestUpdate(ctx_, tokens.data(), tokens.size_bytes()) != 1 ||
            EVP_DigestFinal_ex(ctx_, out.data(), &n) != 1 || n != out.size())
            throw error("sha256_block_hasher: OpenSSL's SHA-256 failed");
        return out;
    }

    /// Digests of the full blocks of `tokens`, chained from `root`; returns
    /// how many were written (min(out.size(), tokens.size() / block_size)).
    std::size_t hash_blocks(std::span<const std::int32_t> tokens, std::uint32_t block_size, std::span<block_digest> out,
                            std::span<const std::byte> extra = {}, const block_digest& root = root_block_digest) {
        if (block_size == 0) return 0;
        const std::size_t full = std::min<std::size_t>(out.size(), tokens.size() / block_size);
        const block_digest* parent = &root;
        for (std::size_t i = 0; i < full; ++i) {
            out[i] = (*this)(*parent, tokens.subspan(i * block_size, block_size), extra);
            parent = &out[i];
        }
        return full;
    }

private:
    EVP_MD* md_;
    EVP_MD_CTX* ctx_;
};

/// HMAC-SHA-256 under a deployment's secret: set it as
/// `store_config::ns.mac` on every instance that shares the store, so that
/// a value is used only if it was written by one of them.
class hmac_sha256 final : public remote_mac {
public:
    static constexpr std::size_t min_secret_bytes = 16;

    /// Throws: config_error for a secret under 16 bytes (nothing kept).
    explicit hmac_sha256(std::span<const std::byte> secret) {
        if (secret.size() < min_secret_bytes)
            throw config_error("hmac_sha256: the secret has " + std::to_string(secret.size()) +
                               " bytes; give at least " + std::to_string(min_secret_bytes) +
                               " random bytes (32 recommended), the same on every "
                               "instance that shares the store");
        mac_ = EVP_MAC_fetch(nullptr, OSSL_MAC_NAME_HMAC, nullptr);
        ctx_ = mac_ != nullptr ? EVP_MAC_CTX_new(mac_) : nullptr;
        char digest[] = "SHA256";
        const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                     OSSL_PARAM_construct_end()};
        if (ctx_ == nullptr ||
            EVP_MAC_init(ctx_, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) != 1) {
            release();
            throw error("hmac_sha256: OpenSSL could not set up HMAC-SHA-256");
        }
    }
    explicit hmac_sha256(std::string_view secret)
            : hmac_sha256(std::as_bytes(std::span<const char>(secret.data(), secret.size()))) {}
    ~hmac_sha256() override { release(); }
    hmac_sha256(const hmac_sha256&) = delete;
    hmac_sha256& operator=(const hmac_sha256&) = delete;

    void sign(std::span<const std::byte> head, std::span<const std::byte> payload,
              std::span<std::byte, size> out) const override {
        EVP_MAC_CTX* c = EVP_MAC_CTX_dup(ctx_);  // the keyed state, so that sign is thread-safe
        std::size_t n = 0;
        const bool ok =
            c != nullptr && EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(head.data()), head.size()) == 1 &&
            EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) == 1 &&
            EVP_MAC_final(c, reinterpret_cast<unsigned char*>(out.data()), &n, out.size()) == 1 && n == size;
        EVP_MAC_CTX_free(c);
        if (!ok) throw error("hmac_sha256: OpenSSL's HMAC failed");
    }

private:
    void release() noexcept {
        EVP_MAC_CTX_free(ctx_);
        EVP_MAC_free(mac_);
        ctx_ = nullptr;
        mac_ = nullptr;
    }
    EVP_MAC* mac_ = nullptr;
    EVP_MAC_CTX* ctx_ = nullptr;
};

/// The fast deployment MAC: Poly1305 under a one-time key per value, the
/// key HMAC-SHA-256(secret, label, nonce) for a fresh random 16-byte nonce
/// (Wegman-Carter with keys from a PRF, as ChaCha20-Poly1305 and NaCl derive
/// theirs). The MAC field holds the 16-byte tag, then the nonce. Poly1305
/// runs several times faster than HMAC-SHA-256 over the bytes (bench/redis),
/// so a verified GET keeps pace with the network; a tampered tag, nonce,
/// header or payload fails (forgery chance about 2^-100 per try).
class poly1305_mac final : public remote_mac {
public:
    static constexpr std::size_t tag_bytes = 16, nonce_bytes = 16;

    /// Throws: config_error for a secret under 16 bytes (hmac_sha256's rule).
    explicit poly1305_mac(std::span<const std::byte> secret)
            : kdf_(secret), poly_(EVP_MAC_fetch(nullptr, "POLY1305", nullptr)) {
        if (poly_ == nullptr) throw error("poly1305_mac: OpenSSL has no Poly1305 here");
    }
    explicit poly1305_mac(std::string_view secret)
            : poly1305_mac(std::as_bytes(std::span<const char>(secret.data(), secret.size()))) {}
    ~poly1305_mac() override { EVP_MAC_free(poly_); }
    poly1305_mac(const poly1305_mac&) = delete;
    poly1305_mac& operator=(const poly1305_mac&) = delete;

    void sign(std::span<const std::byte> head, std::span<const std::byte> payload,
              std::span<std::byte, size> out) const override {
        if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data() + tag_bytes), static_cast<int>(nonce_bytes)) != 1)
            throw error("poly1305_mac: OpenSSL's random generator failed");
        tag(head, payload, out.subspan<tag_bytes, nonce_bytes>(), out.first<tag_bytes>());
    }
    [[nodiscard]] bool verify(std::span<const std::byte> head, std::span<const std::byte> payload,
                              std::span<const std::byte, size> mac) const override {
        std::array<std::byte, tag_bytes> want{};
        tag(head, payload, mac.subspan<tag_bytes, nonce_bytes>(), want);
        return CRYPTO_memcmp(want.data(), mac.data(), tag_bytes) == 0;
    }

    /// The one-time key's derivation: HMAC-SHA-256(secret, key_label || nonce).
    static constexpr std::string_view key_label = "kvpolicy poly1305 one-time key v1";

private:
    void tag(std::span<const std::byte> head, std::span<const std::byte> payload,
             std::span<const std::byte, nonce_bytes> nonce, std::span<std::byte, tag_bytes> out) const {
        std::array<std::byte, key_label.size() + nonce_bytes> input{};
        std::memcpy(input.data(), key_label.data(), key_label.size());
        std::memcpy(input.data() + key_label.size(), nonce.data(), nonce_bytes);
        std::array<std::byte, size> key{};
        kdf_.sign(input, {}, key);
        EVP_MAC_CTX* c = EVP_MAC_CTX_new(poly_);
        std::size_t n = 0;
        const bool ok =
            c != nullptr &&
            EVP_MAC_init(c, reinterpret_cast<const unsigned char*>(key.data()), key.size(), nullptr) == 1 &&
            EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(head.data()), head.size()) == 1 &&
            EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) == 1 &&
            EVP_MAC_final(c, reinterpret_cast<unsigned char*>(out.data()), &n, out.size()) == 1 && n == tag_bytes;
        EVP_MAC_CTX_free(c);
        OPENSSL_cleanse(key.data(), key.size());
        if (!ok) throw error("poly1305_mac: OpenSSL's Poly1305 failed");
    }

    hmac_sha256 kdf_;
    EVP_MAC* poly_;
};

}  // namespace kvpolicy::redis
