// The 16-bit KV path's arithmetic on the CPU (kv_element.hpp,
// decode_attention_math.hpp): widening of every bf16 and fp16 bit pattern
// against an independent decode; narrowing against a brute-force nearest-
// value search (ties to even); and one warp of decode attention, lane by
// lane, over fp32 / bf16 / fp16 K and V against reference_decode_attention
// over the same values widened.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/decode_attention_math.hpp>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

#include "support/warp_decode.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

using namespace kvpolicy;

namespace {

// Independent decodes: sign x mantissa x 2^exponent, in double.
double decode_bf16(std::uint16_t b) {
    return static_cast<double>(std::bit_cast<float>(std::uint32_t{b} << 16));  // bf16 is defined as this
}

double decode_fp16(std::uint16_t b) {
    const int sign = (b >> 15) != 0 ? -1 : 1;
    const int exp = (b >> 10) & 0x1f;
    const int mant = b & 0x3ff;
    if (exp == 0x1f) return mant != 0 ? std::nan("") : sign * std::numeric_limits<double>::infinity();
    if (exp == 0) return sign * std::ldexp(mant, -24);
    return sign * std::ldexp(1024 + mant, exp - 25);
}

// Every finite non-negative value of a 16-bit format, ascending, with bits.
template <class Decode>
std::vector<std::pair<double, std::uint16_t>> finite_values(Decode decode) {
    std::vector<std::pair<double, std::uint16_t>> v;
    for (std::uint32_t b = 0; b < 0x8000u; ++b) {
        const double x = decode(static_cast<std::uint16_t>(b));
        if (std::isfinite(x)) v.emplace_back(x, static_cast<std::uint16_t>(b));
    }
    std::sort(v.begin(), v.end());
    return v;
}

// Round to nearest, ties to the even bit pattern; past the largest value by
// half its ulp or more, inf (inf_bits). Sign applied by the caller.
std::uint16_t nearest(const std::vector<std::pair<double, std::uint16_t>>& values, double x, std::uint16_t inf_bits) {
    const auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(x, std::uint16_t{0}));
    if (hi == values.end()) {
        const double top = values.back().first;
        const double ulp = top - values[values.size() - 2].first;
        return x - top >= ulp / 2 ? inf_bits : values.back().second;
    }
    if (hi->first == x || hi == values.begin()) return hi->second;
    const auto lo = hi - 1;
    const double dl = x - lo->first, dh = hi->first - x;
    if (dl < dh) return lo->second;
    if (dh < dl) return hi->second;
    return (lo->second & 1u) == 0 ? lo->second : hi->second;
}

template <class T>
std::vector<T> narrow(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
    return out;
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
}

}  // namespace

TEST_CASE("kv_element: widening is exact for every bf16 and fp16 bit pattern", "[kv_element][device_math]") {
    for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
        const auto bits = static_cast<std::uint16_t>(b);
        const double want_bf = decode_bf16(bits), want_h = decode_fp16(bits);
        const float got_bf = to_float(bf16{bits}), got_h = to_float(fp16{bits});
        if (std::isnan(want_h))
            REQUIRE(std::isnan(got_h));
        else
            REQUIRE(static_cast<double>(got_h) == want_h);
        if (std::isnan(want_bf))
            REQUIRE(std::isnan(got_bf));
        else
            REQUIRE(static_cast<double>(got_bf) == want_bf);
        REQUIRE(std::signbit(got_h) == ((bits & 0x8000u) != 0));
        // Narrowing a value of the format gives it back (NaN: a NaN).
        if (!std::isnan(want_h)) REQUIRE(to_fp16(got_h).bits == bits);
        if (!std::isnan(want_bf)) REQUIRE(to_bf16(got_bf).bits == bits);
        if (std::isnan(want_h)) REQUIRE(std::isnan(to_float(to_fp16(got_h))));
        if (std::isnan(want_bf)) REQUIRE(std::isnan(to_float(to_bf16(got_bf))));
    }
}

TEST_CASE("kv_element: narrowing rounds to nearest, ties to even, overflow to inf", "[kv_element][device_math]") {
    const auto halves = finite_values(decode_fp16);
    const auto bfloats = finite_values(decode_bf16);
    std::mt19937_64 rng(16);
    std::vector<float> probes;
    // Random bit patterns cover every exponent; midpoints are the ties.
    for (int i = 0; i < 200000; ++i) probes.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
    for (std::size_t i = 0; i + 1 < halves.size(); i += 7) {
        probes.push_back(static_cast<float>((halves[i].first + halves[i + 1].first) / 2));  // exact in float
        probes.push_back(std::nextafter(static_cast<float>((halves[i].first + halves[i + 1].first) / 2), 0.0f));
    }
    for (std::size_t i = 0; i + 1 < bfloats.size(); i += 7)
        probes.push_back(static_cast<float>((bfloats[i].first + bfloats[i + 1].first) / 2));
    for (float x : {65504.0f, 65519.99f, 65520.0f, 1e9f, 5.960464e-8f, 2.98e-8f, 2.9802322e-8f, 0.0f, -0.0f,
                    std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::max()})
        probes.push_back(x), probes.push_back(-x);
    for (const float x : probes) {
        if (std::isnan(x)) {
            REQUIRE(std::isnan(to_float(to_fp16(x))));
            REQUIRE(std::isnan(to_float(to_bf16(x))));
            continue;
        }
        const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
        const double a = std::abs(static_cast<double>(x));
        const std::uint16_t want_h = std::isinf(a) ? 0x7c00u : nearest(halves, a, 0x7c00u);
        const std::uint16_t want_bf = std::isinf(a) ? 0x7f80u : nearest(bfloats, a, 0x7f80u);
        INFO("x = " << x);
        REQUIRE(to_fp16(x).bits == (want_h | sign));
        REQUIRE(to_bf16(x).bits == (want_bf | sign));
    }
}

namespace {

template <class T>
void check_warp_decode(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int round = 0; round < 12; ++round) {
        const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 3);
        const std::uint32_t d = 32u * (1 + static_cast<std::uint32_t>(rng() % 8));
        const decode_attention_shape s{.num_q_heads = kv_heads * (1 + static_cast<std::uint32_t>(rng() % 4)),
                                       .num_kv_heads = kv_heads, .head_dim = d, .block_size = 16,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(d))};
        const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(rng() % 24);
        const std::uint64_t tokens = rng() % (std::uint64_t{blocks} * s.block_size + 1);
        std::vector<float> q(std::size_t{s.num_q_heads} * d), kf(std::size_t{blocks} * s.block_size * kv_heads * d),
            vf(kf.size());
        for (float& x : q) x = g(rng);
        for (float& x : kf) x = 2.0f * g(rng);
        for (float& x : vf) x = g(rng);
        std::vector<block_id> table(blocks);
        for (std::uint32_t b = 0; b < blocks; ++b) table[b] = block_id{(b * 7) % blocks};
        std::sort(table.begin(), table.end());
        std::shuffle(table.begin(), table.end(), rng);
        const auto k = narrow<T>(kf), v = narrow<T>(vf);
        // The reference sees exactly the stored values, widened.
        const auto kw = widen(k), vw = widen(v);
        std::vector<float> o(q.size()), lse(s.num_q_heads), o_ref(q.size()), lse_ref(s.num_q_heads);
        testing::warp_decode(q.data(), k.data(), v.data(), table, tokens, s, std::size_t{s.block_size} * kv_heads * d, o, lse);
        reference_decode_attention(q, {.k = kw, .v = vw}, table, tokens, s, o_ref, lse_ref);
        for (std::size_t h = 0; h < lse.size(); ++h) {
            if (std::isinf(lse_ref[h])) {
                REQUIRE(lse[h] == lse_ref[h]);
            } else {
                REQUIRE(std::abs(lse[h] - lse_ref[h]) <= 2e-5f * (1.0f + std::abs(lse_ref[h])));
            }
        }
        for (std::size_t i = 0; i < o.size(); ++i) REQUIRE(std::abs(o[i] - o_ref[i]) <= 2e-5f * (1.0f + std::abs(o_ref[i])));
    }
}

}  // namespace

TEST_CASE("decode attention math: one warp, lane by lane, equals the reference over fp32 / bf16 / fp16 K and V",
          "[kv_element][device_math][attention]") {
    std::mt19937_64 rng(2048);
    check_warp_decode<float>(rng);
    check_warp_decode<bf16>(rng);
    check_warp_decode<fp16>(rng);
}
