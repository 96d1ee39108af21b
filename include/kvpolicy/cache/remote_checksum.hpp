// remote_checksum: the checksum a remote value's header carries of its
// payload (remote_value.hpp), and its one-pass copy and streaming forms.
//
// The checksum accumulates 8 lanes of 8-byte words as XXH3 does (one
// 32 x 32 -> 64 multiply per word, two lanes per SSE2 instruction) and
// finishes with xxHash64's rounds and avalanche (Collet, xxHash): about 20
// GB/s on one core, so a GET that checks every byte stays close to a raw
// one (xxHash64's own rounds, format 1, ran at 11 GB/s and cost GET 20% at
// 64 KiB blocks). It catches corruption; it is not a MAC (remote_mac is).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvpolicy {

namespace detail {
inline constexpr std::uint64_t checksum_p1 = 0x9E3779B185EBCA87ULL, checksum_p2 = 0xC2B2AE3D27D4EB4FULL,
                               checksum_p3 = 0x165667B19E3779F9ULL;
// Per-lane keys (xxHash's XXH3 default secret, its first 64 bytes).
inline constexpr std::uint64_t checksum_key[8] = {0xbe4ba423396cfeb8ULL, 0x1cad21f72c81017cULL, 0xdb979083e96dd4deULL,
                                                  0x1f67b3b7a4a44072ULL, 0x78e5c0cc4ee679cbULL, 0x2172ffcc7dd05a82ULL,
                                                  0x8e2443f7744608b8ULL, 0x4c263a81e69035e0ULL};
inline constexpr std::uint64_t checksum_seed[8] = {checksum_p3,
                                                   checksum_p1,
                                                   checksum_p2,
                                                   checksum_p1 ^ checksum_p2,
                                                   checksum_p2 + checksum_p3,
                                                   checksum_p1 + checksum_p3,
                                                   0 - checksum_p1,
                                                   0 - checksum_p2};
inline constexpr std::size_t checksum_stripe = 64;

inline constexpr std::uint64_t checksum_round(std::uint64_t acc, std::uint64_t w) noexcept {
    return std::rotl(acc + w * checksum_p2, 31) * checksum_p1;
}
inline std::uint64_t checksum_load(const std::byte* q) noexcept {
    std::uint64_t w;
    std::memcpy(&w, q, 8);
    return w;
}
// Eight lanes over whole 64-byte stripes (XXH3's accumulation: word i adds
// itself to lane i ^ 1 and the product of its keyed halves to lane i, one
// 32 x 32 -> 64 multiply per word, so a word never vanishes from the sum),
// one word at a time; returns the bytes consumed (n rounded down to 64). With
// `out`, the stripes are copied there in the same pass. The definition of the
// lanes: checksum_stripes's SSE2 path must equal it (tested).
inline std::size_t checksum_stripes_scalar(std::uint64_t (&v)[8], const std::byte* p, std::size_t n,
                                           std::byte* out) noexcept {
    const std::size_t whole = n & ~(checksum_stripe - 1);
    for (std::size_t at = 0; at < whole; at += checksum_stripe, p += checksum_stripe) {
        if (out != nullptr) {
            std::memcpy(out, p, checksum_stripe);
            out += checksum_stripe;
        }
        for (int i = 0; i < 8; ++i) {
            const std::uint64_t d = checksum_load(p + 8 * i), k = d ^ checksum_key[i];
            v[i ^ 1] += d;
            v[i] += (k & 0xffffffffULL) * (k >> 32);
        }
    }
    return whole;
}
// The same lanes, two per SSE2 instruction where there is SSE2 (every
// x86-64): a load feeds the copy, the sum and the product.
inline std::size_t checksum_stripes(std::uint64_t (&v)[8], const std::byte* p, std::size_t n, std::byte* out) noexcept {
#if defined(__SSE2__)
    const std::size_t whole = n & ~(checksum_stripe - 1);
    __m128i acc[4], key[4];
    for (int j = 0; j < 4; ++j) {
        acc[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 2 * j));
        key[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(checksum_key + 2 * j));
    }
    for (std::size_t at = 0; at < whole; at += checksum_stripe, p += checksum_stripe) {
        for (int j = 0; j < 4; ++j) {
            const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j));
            if (out != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * j), d);
            const __m128i k = _mm_xor_si128(d, key[j]);
            const __m128i product = _mm_mul_epu32(k, _mm_srli_epi64(k, 32));
            acc[j] = _mm_add_epi64(acc[j], _mm_add_epi64(product, _mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2))));
        }
        if (out != nullptr) out += checksum_stripe;
    }
    for (int j = 0; j < 4; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(v + 2 * j), acc[j]);
    return whole;
#else
    return checksum_stripes_scalar(v, p, n, out);
#endif
}
// The lanes merged (each through xxHash64's round, chained), the last
// n < 64 bytes at p, the length, xxHash64's avalanche.
inline std::uint64_t checksum_finish(const std::uint64_t (&v)[8], const std::byte* p, std::size_t n,
                                     std::uint64_t total) noexcept {
    std::uint64_t h = total * checksum_p1;
    for (int i = 0; i < 8; ++i) h = std::rotl(h ^ checksum_round(0, v[i]), 27) * checksum_p1 + checksum_p3;
    for (; n >= 8; n -= 8, p += 8)
        h = std::rotl(h ^ checksum_round(0, checksum_load(p)), 27) * checksum_p1 + checksum_p3;
    for (; n > 0; --n, ++p) h = std::rotl(h ^ (std::to_integer<std::uint64_t>(*p) * checksum_p3), 11) * checksum_p1;
    h ^= h >> 33;
    h *= checksum_p2;
    h ^= h >> 29;
    h *= checksum_p3;
    h ^= h >> 32;
    return h;
}

// The checksum of `n` bytes at `p`; with `out`, the bytes are copied there
// in the same pass.
inline std::uint64_t checksum_pass(const std::byte* p, std::size_t n, std::byte* out) noexcept {
    std::uint64_t v[8];
    std::copy(std::begin(checksum_seed), std::end(checksum_seed), v);
    const std::size_t whole = checksum_stripes(v, p, n, out);
    if (out != nullptr && n > whole) std::memcpy(out + whole, p + whole, n - whole);
    return checksum_finish(v, p + whole, n - whole, n);
}
}  // namespace detail

/// The 64-bit checksum of `bytes` (XXH3's accumulation, xxHash64's rounds and avalanche to finish).
[[nodiscard]] inline std::uint64_t remote_checksum(std::span<const std::byte> bytes) noexcept {
    return detail::checksum_pass(bytes.data(), bytes.size(), nullptr);
}

/// Copies `src` into `dst` (at least as long) and returns remote_checksum(src),
/// reading `src` once.
inline std::uint64_t copy_with_checksum(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
    return detail::checksum_pass(src.data(), src.size(), dst.data());
}

/// remote_checksum of bytes that arrive in pieces (a value read from a
/// socket straight into its slot): update() with each piece in order, then
/// value() equals remote_checksum of the pieces back to back. Each piece is
/// read once, while it is still in cache.
class remote_checksum_stream {
public:
    void update(std::span<const std::byte> bytes) noexcept {
        const std::byte* p = bytes.data();
        std::size_t n = bytes.size();
        total_ += n;
        if (tail_len_ > 0) {  // complete the stripe the last piece began
            const std::size_t take = std::min(n, sizeof tail_ - tail_len_);
            std::memcpy(tail_ + tail_len_, p, take);
            tail_len_ += take;
            p += take;
            n -= take;
            if (tail_len_ < sizeof tail_) return;
            detail::checksum_stripes(v_, tail_, sizeof tail_, nullptr);
            tail_len_ = 0;
        }
        const std::size_t whole = detail::checksum_stripes(v_, p, n, nullptr);
        tail_len_ = n - whole;
        if (tail_len_ > 0) std::memcpy(tail_, p + whole, tail_len_);
    }
    [[nodiscard]] std::uint64_t value() const noexcept { return detail::checksum_finish(v_, tail_, tail_len_, total_); }

private:
    std::uint64_t v_[8] = {detail::checksum_seed[0], detail::checksum_seed[1], detail::checksum_seed[2],
                           detail::checksum_seed[3], detail::checksum_seed[4], detail::checksum_seed[5],
                           detail::checksum_seed[6], detail::checksum_seed[7]};
    std::uint64_t total_ = 0;
    std::byte tail_[detail::checksum_stripe]{};
    std::size_t tail_len_ = 0;
};

}  // namespace kvpolicy
