// kv_element: the storage types of a KV cache (fp32, bf16, fp16) and their
// conversions to and from float, the first piece of the 16-bit KV path.
//
// Serving engines store K and V in bf16 or fp16; attention reads them and
// accumulates in fp32. `bf16` and `fp16` here are 16-bit storage types with
// the IEEE / bfloat16 bit layouts (binary-compatible with CUDA's
// __nv_bfloat16 and __half), and `to_float` / `from_float` convert exactly
// (widening) and with round-to-nearest-even (narrowing, as CUDA's
// __float2bfloat16_rn / __float2half_rn do: NaN stays NaN, overflow gives
// inf). Plain integer arithmetic, `KVPOLICY_HOST_DEVICE`, so the device
// kernels and the CPU tests run the same code (STYLE.md 13;
// tests/sparse_kv_element.cpp checks every one of the 65536 bit patterns
// against an independent reference). The per-thread attention math over
// these types is in sparse/decode_attention_math.hpp.
#pragma once

#include <concepts>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy {

/// bfloat16 storage: the top 16 bits of an IEEE float.
struct bf16 {
    std::uint16_t bits = 0;
    friend constexpr bool operator==(bf16, bf16) = default;
};

/// IEEE binary16 storage: 1 sign, 5 exponent, 10 mantissa bits.
struct fp16 {
    std::uint16_t bits = 0;
    friend constexpr bool operator==(fp16, fp16) = default;
};

/// What a KV cache may hold: fp32, or a 16-bit type attention widens.
template <class T>
concept kv_element = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, fp16>;

namespace detail {
[[nodiscard]] KVPOLICY_HOST_DEVICE inline std::uint32_t float_bits(float f) noexcept {
    std::uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    return u;
}
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float bits_float(std::uint32_t u) noexcept {
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
}
}  // namespace detail

[[nodiscard]] KVPOLICY_HOST_DEVICE inline float to_float(float x) noexcept { return x; }

/// Exact: a bf16 is a float with 16 low zero bits.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float to_float(bf16 x) noexcept {
    return detail::bits_float(std::uint32_t{x.bits} << 16);
}

/// Exact: every binary16 value is a float.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline float to_float(fp16 x) noexcept {
#if defined(__CUDA_ARCH__)
    // The hardware's exact conversion (what __half2float compiles to): one
    // instruction instead of the branches below, which made fp16 attention
    // 2.5x slower than bf16 on an H100.
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
#else
    const std::uint32_t sign = std::uint32_t{x.bits & 0x8000u} << 16;
    const std::uint32_t exp = (x.bits >> 10) & 0x1fu;
    const std::uint32_t mant = x.bits & 0x3ffu;
    if (exp == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
    if (exp != 0) return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
    // Zero or subnormal: mant x 2^-24, exact in float.
    const float v = static_cast<float>(mant) * detail::bits_float(0x33800000u);  // 2^-24
    return sign != 0 ? -v : v;
#endif
}

/// Round to nearest, ties to even; NaN stays a (quiet) NaN.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline bf16 to_bf16(float f) noexcept {
    const std::uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
    const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return bf16{static_cast<std::uint16_t>(rounded >> 16)};
}

/// Round to nearest, ties to even; above the largest half (65504) by half
/// an ulp or more gives inf; NaN stays a (quiet) NaN.
[[nodiscard]] KVPOLICY_HOST_DEVICE inline fp16 to_fp16(float f) noexcept {
    std::uint32_t u = detail::float_bits(f);
    const std::uint32_t sign = u & 0x80000000u;
    u ^= sign;
    std::uint32_t h;
    if (u >= 0x47800000u) {  // >= 2^16: inf, or NaN
        h = u > 0x7f800000u ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u;
    } else if (u < 0x38800000u) {  // below 2^-14: a subnormal half or zero
        // Adding 0.5 (2^-1) puts the half's subnormal step (2^-24) at the
        // float's last mantissa bit, so the float addition rounds to
        // nearest even exactly as the half must.
        constexpr std::uint32_t magic = 0x3f000000u;  // 0.5f
        h = detail::float_bits(detail::bits_float(u) + detail::bits_float(magic)) - magic;
    } else {
        const std::uint32_t odd = (u >> 13) & 1u;
        u += 0xc8000fffu;  // rebias the exponent (-112 << 23) and add just under half an ulp
        u += odd;          // ties to even
        h = u >> 13;       // a carry out of the mantissa bumps the exponent, up to inf
    }
    return fp16{static_cast<std::uint16_t>(h | (sign >> 16))};
}

template <kv_element T>
[[nodiscard]] KVPOLICY_HOST_DEVICE inline T from_float(float f) noexcept {
    if constexpr (std::same_as<T, float>)
        return f;
    else if constexpr (std::same_as<T, bf16>)
        return to_bf16(f);
    else
        return to_fp16(f);
}

}  // namespace kvpolicy
