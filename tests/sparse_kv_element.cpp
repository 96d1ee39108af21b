// The 16-bit KV path's arithmetic on the CPU (kv_element.hpp,
// decode_attention_math.hpp, quest_math.hpp, ring_gather_math.hpp,
// lse_merge_math.hpp), one program so that CI compiles Catch once for it.
// First kv_element and decode attention: widening of every bf16 and fp16
// bit pattern against an independent decode; narrowing against a brute-force nearest-
// value search (ties to even); and one warp of decode attention, lane by
// lane, over fp32 / bf16 / fp16 K and V against reference_decode_attention
// over the same values widened.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/decode_attention_math.hpp>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/lse_merge.hpp>
#include <kvpolicy/sparse/lse_merge_math.hpp>
#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/sparse/quest_math.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>
#include <kvpolicy/sparse/ring_gather_math.hpp>

#include "support/kv_element_vectors.hpp"
#include "support/grouped_decode.hpp"
#include "support/warp_decode.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
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

using testing::narrow;
using testing::widen;

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

// o and lse against the reference's, to fp32 rounding; an empty head's lse
// (-inf) exactly.
void require_attention_close(const std::vector<float>& o, const std::vector<float>& lse,
                             const std::vector<float>& o_ref, const std::vector<float>& lse_ref) {
    for (std::size_t h = 0; h < lse.size(); ++h) {
        if (std::isinf(lse_ref[h])) {
            REQUIRE(lse[h] == lse_ref[h]);
        } else {
            REQUIRE(std::abs(lse[h] - lse_ref[h]) <= 2e-5f * (1.0f + std::abs(lse_ref[h])));
        }
    }
    for (std::size_t i = 0; i < o.size(); ++i)
        REQUIRE(std::abs(o[i] - o_ref[i]) <= 2e-5f * (1.0f + std::abs(o_ref[i])));
}

template <class T>
void check_warp_decode(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int round = 0; round < 12; ++round) {
        const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 3);
        const std::uint32_t d = 32u * (1 + static_cast<std::uint32_t>(rng() % 8));
        const decode_attention_shape s{.num_q_heads = kv_heads * (1 + static_cast<std::uint32_t>(rng() % 4)),
                                       .num_kv_heads = kv_heads,
                                       .head_dim = d,
                                       .block_size = 16,
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
        testing::warp_decode(q.data(), k.data(), v.data(), table, tokens, s, std::size_t{s.block_size} * kv_heads * d,
                             o, lse);
        reference_decode_attention(q, {.k = kw, .v = vw}, table, tokens, s, o_ref, lse_ref);
        require_attention_close(o, lse, o_ref, lse_ref);
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

TEST_CASE("grouped decode: the warp's reduce-scatter leaves each lane the total of its index",
          "[kv_element][device_math][attention]") {
    std::mt19937_64 rng(77);
    std::uniform_real_distribution<float> x(-4.0f, 4.0f);
    const auto check = [&]<unsigned N>() {
        for (int round = 0; round < 20; ++round) {
            std::vector<std::array<float, N>> vals(warp_lanes);
            double want[N] = {};
            for (auto& lane : vals)
                for (unsigned i = 0; i < N; ++i) {
                    lane[i] = x(rng);
                    want[i] += lane[i];
                }
            const std::vector<float> got = testing::simulate_reduce_scatter<N>(vals);
            for (unsigned lane = 0; lane < warp_lanes; ++lane) {
                INFO("N = " << N << ", lane " << lane);
                REQUIRE(std::abs(got[lane] - want[reduce_scatter_index(lane, N)]) <= 1e-4);
            }
        }
        // Every index is some lane's.
        std::vector<bool> seen(N);
        for (unsigned lane = 0; lane < warp_lanes; ++lane) seen[reduce_scatter_index(lane, N)] = true;
        REQUIRE(std::ranges::all_of(seen, [](bool b) { return b; }));
    };
    check.template operator()<4>();
    check.template operator()<8>();
    check.template operator()<16>();
    check.template operator()<32>();
}

TEST_CASE("grouped decode: a paged cursor stepped forward is the token's block and offset by division",
          "[kv_element][device_math][attention]") {
    std::mt19937_64 rng(31);
    for (int round = 0; round < 20000; ++round) {
        const std::uint32_t bs = 1 + static_cast<std::uint32_t>(rng() % 40);
        std::uint64_t t = rng() % 100000;
        paged_cursor c = paged_cursor::at(t, bs);
        for (int step = 0; step < 8; ++step) {
            const std::uint32_t n = static_cast<std::uint32_t>(rng() % 3 == 0 ? rng() % 4 : rng() % 200);
            c = c.advanced(n, bs);
            t += n;
            INFO("bs " << bs << ", token " << t);
            REQUIRE(c == paged_cursor{t / bs, static_cast<std::uint32_t>(t % bs)});
        }
    }
}

namespace {

template <class T, unsigned E, unsigned GMax>
void check_grouped_decode(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    constexpr std::uint32_t d = 32 * E;
    for (int round = 0; round < 6; ++round) {
        const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 2);
        // Groups from 1 to 2 GMax + 1 query heads: full, partial and several CTAs per KV head.
        const std::uint32_t group = 1 + static_cast<std::uint32_t>(rng() % (2 * GMax + 1));
        // Block sizes below, at and above a tile's depth and the warps' stride.
        constexpr std::uint32_t block_sizes[] = {1, 3, 16, 37};
        const decode_attention_shape s{.num_q_heads = kv_heads * group,
                                       .num_kv_heads = kv_heads,
                                       .head_dim = d,
                                       .block_size = block_sizes[rng() % 4],
                                       .scale = 1.0f / std::sqrt(static_cast<float>(d))};
        const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(rng() % (192 / s.block_size + 1));
        // Token counts that end mid-tile and mid-block, and none at all.
        const std::uint64_t tokens = rng() % (std::uint64_t{blocks} * s.block_size + 1);
        const std::uint32_t splits = 1 + static_cast<std::uint32_t>(rng() % 5);
        const std::size_t block_stride = std::size_t{s.block_size} * kv_heads * d + E * (rng() % 3);
        std::vector<float> q(std::size_t{s.num_q_heads} * d), kf(std::size_t{blocks} * block_stride), vf(kf.size());
        for (float& x : q) x = g(rng);
        for (float& x : kf) x = 2.0f * g(rng);
        for (float& x : vf) x = g(rng);
        std::vector<block_id> table(blocks);
        for (std::uint32_t b = 0; b < blocks; ++b) table[b] = block_id{b};
        std::shuffle(table.begin(), table.end(), rng);
        const auto k = narrow<T>(kf), v = narrow<T>(vf);
        const auto kw = widen(k), vw = widen(v);
        std::vector<float> o(q.size()), lse(s.num_q_heads), o_ref(q.size()), lse_ref(s.num_q_heads);
        testing::grouped_decode<T, E, GMax>(q.data(), k.data(), v.data(), table, tokens, s, block_stride, splits, o,
                                            lse);
        reference_decode_attention(q, {.k = kw, .v = vw, .block_stride = block_stride}, table, tokens, s, o_ref,
                                   lse_ref);
        INFO("d " << d << ", group " << group << ", GMax " << GMax << ", tokens " << tokens << ", splits " << splits);
        require_attention_close(o, lse, o_ref, lse_ref);
    }
}

template <class T>
void check_grouped_decode_shapes(std::mt19937_64& rng) {
    check_grouped_decode<T, 2, 4>(rng);
    check_grouped_decode<T, 2, 8>(rng);
    check_grouped_decode<T, 4, 4>(rng);
    check_grouped_decode<T, 4, 8>(rng);
    check_grouped_decode<T, 8, 4>(rng);
}

}  // namespace

TEST_CASE(
    "grouped decode attention: every CTA, warp and lane of the kernel's mapping equals the reference over "
    "fp32 / bf16 / fp16 K and V",
    "[kv_element][device_math][attention]") {
    // The kernel's choice of heads per CTA is the one simulated here.
    STATIC_REQUIRE(grouped_decode_heads(4, 4) == 4);
    STATIC_REQUIRE(grouped_decode_heads(4, 8) == 8);
    STATIC_REQUIRE(grouped_decode_heads(8, 8) == 4);
    STATIC_REQUIRE(grouped_decode_depth<float, 4, 4> == 4);
    STATIC_REQUIRE(grouped_decode_depth<bf16, 4, 4> == 8);
    STATIC_REQUIRE(grouped_decode_depth<bf16, 4, 8> == 4);
    STATIC_REQUIRE(grouped_decode_depth<fp16, 8, 4> == 4);
    std::mt19937_64 rng(4096);
    check_grouped_decode_shapes<float>(rng);
    check_grouped_decode_shapes<bf16>(rng);
    check_grouped_decode_shapes<fp16>(rng);
}

// ---- Quest over fp32 / bf16 / fp16 keys on the CPU (sparse/quest_math.hpp): the
// metadata and scoring kernels of kvpolicy/cuda/quest.cuh simulated thread
// by thread, against a naive model in double over the dequantized keys and
// against the host `quest` (fp32) fed the same dequantized keys.
//
// What is exact and what is bounded:
// - Metadata: min and max of stored values are stored values, compared
//   widened exactly, so the 16-bit metadata widened equals the fp32
//   metadata of the widened keys bit for bit (and the naive double min/max).
// - Scores: every term max(q_c * min_c, q_c * max_c) is one rounded float
//   product (the max of two rounded products is the rounded max: rounding is
//   monotone), and the n = num_q_heads x head_dim terms are summed in float
//   in some order (channel order on the host; per-thread strided partials
//   then a tree on the device). Higham, "Accuracy and Stability of Numerical
//   Algorithms" (2nd ed.), eq. 3.5: a float inner product of n terms, in any
//   order, is within gamma_n = n u / (1 - n u) (u = 2^-24) of the exact one
//   times sum |t_c|. So each score is within gamma_n sum|t| of the naive
//   double score, and the host and device scores within 2 gamma_n sum|t| of
//   each other. The tests assert exactly those bounds.
namespace {

constexpr std::uint32_t kernel_threads = 128;  // cuda/quest.cuh's quest_threads

// The scoring kernel's block: each thread's strided partial, then a pairwise
// tree over the threads (cub::BlockReduce's order differs; the bound covers
// every order).
template <class T>
float simulated_kernel_score(const std::vector<float>& q, const T* mn, const T* mx, std::uint32_t q_heads,
                             std::uint32_t kv_heads, std::uint32_t d) {
    std::vector<float> partial(kernel_threads);
    for (std::uint32_t t = 0; t < kernel_threads; ++t)
        partial[t] = quest_score_thread_partial(q.data(), mn, mx, q_heads, q_heads / kv_heads, d, t, kernel_threads);
    for (std::uint32_t width = kernel_threads / 2; width > 0; width /= 2)
        for (std::uint32_t t = 0; t < width; ++t) partial[t] += partial[t + width];
    return partial[0];
}

}  // namespace

TEST_CASE(
    "quest score partial: the stepped term walk adds the same terms in the same order as dividing out "
    "each term's head and channel",
    "[kv_element][device_math][quest]") {
    std::mt19937_64 rng(919);
    std::normal_distribution<float> g(0.0f, 2.0f);
    for (int round = 0; round < 300; ++round) {
        const std::uint32_t kv = 1 + static_cast<std::uint32_t>(rng() % 4),
                            group = 1 + static_cast<std::uint32_t>(rng() % 5);
        const std::uint32_t q_heads = kv * group, d = 1 + static_cast<std::uint32_t>(rng() % 160);
        std::vector<float> q(std::size_t{q_heads} * d), mn(std::size_t{kv} * d), mx(mn.size());
        for (float& x : q) x = g(rng);
        for (std::size_t i = 0; i < mn.size(); ++i) {
            const float a = g(rng), b = g(rng);
            mn[i] = std::min(a, b);
            mx[i] = std::max(a, b);
        }
        const std::uint32_t stride = 1 + static_cast<std::uint32_t>(rng() % 300);
        for (std::uint32_t first = 0; first < stride + 2; ++first) {
            float want = 0.0f;
            for (std::uint32_t e = first; e < q_heads * d; e += stride) {
                const std::size_t m = std::size_t{e / d / group} * d + e % d;
                want += quest_channel_term(q[e], mn[m], mx[m]);
            }
            const float got =
                quest_score_thread_partial(q.data(), mn.data(), mx.data(), q_heads, group, d, first, stride);
            INFO("d " << d << ", group " << group << ", stride " << stride << ", first " << first);
            REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
        }
    }
}

namespace {

struct shape {
    std::uint32_t q_heads, kv_heads, d, block_size, blocks;
};

shape random_shape(std::mt19937_64& rng) {
    const std::uint32_t kv = 1 + static_cast<std::uint32_t>(rng() % 4);
    return {.q_heads = kv * (1 + static_cast<std::uint32_t>(rng() % 4)),
            .kv_heads = kv,
            .d = 16u * (1 + static_cast<std::uint32_t>(rng() % 16)),
            .block_size = 1u + static_cast<std::uint32_t>(rng() % 32),
            .blocks = 8 + static_cast<std::uint32_t>(rng() % 40)};
}

// Keys with repeats and signed zeros (ties), scaled so that fp16 keeps them
// finite unless `overflow` is set.
std::vector<float> random_keys(std::mt19937_64& rng, std::size_t n) {
    std::normal_distribution<float> g(0.0f, 3.0f);
    std::vector<float> k(n);
    for (float& x : k) {
        const auto r = rng() % 16;
        x = r == 0 ? 0.0f : r == 1 ? -0.0f : r == 2 ? 1.5f : g(rng);
    }
    return k;
}

template <class T>
void check_metadata_and_scores(std::mt19937_64& rng) {
    for (int round = 0; round < 10; ++round) {
        const shape s = random_shape(rng);
        const std::size_t row = std::size_t{s.kv_heads} * s.d, block_values = std::size_t{s.block_size} * row;
        const auto keys = narrow<T>(random_keys(rng, s.blocks * block_values));
        const auto keys_w = widen(keys);  // what an fp32 engine holding these values would see
        std::vector<std::uint32_t> valid(s.blocks);
        for (auto& v : valid) v = 1 + static_cast<std::uint32_t>(rng() % s.block_size);

        quest host({.num_layers = 1, .num_blocks = s.blocks, .num_kv_heads = s.kv_heads, .head_dim = s.d});
        std::vector<T> mn(s.blocks * row), mx(s.blocks * row);
        for (std::uint32_t b = 0; b < s.blocks; ++b) {
            const T* k = keys.data() + b * block_values;
            // The metadata kernel: thread t takes elements t, t + 128, ...
            bool bad = false;
            for (std::uint32_t t = 0; t < kernel_threads; ++t)
                for (std::size_t e = t; e < row; e += kernel_threads) {
                    const quest_channel_bounds<T> cb = quest_channel_minmax(k, row, valid[b], e);
                    mn[b * row + e] = cb.min;
                    mx[b * row + e] = cb.max;
                    bad = bad || cb.nonfinite;
                }
            REQUIRE_FALSE(bad);
            // The templated host reference gives the same bits.
            std::vector<T> hmn(row), hmx(row);
            REQUIRE(quest_block_metadata(k, row, valid[b], hmn.data(), hmx.data()));
            for (std::size_t e = 0; e < row; ++e) {
                REQUIRE(hmn[e] == mn[b * row + e]);
                REQUIRE(hmx[e] == mx[b * row + e]);
            }
            host.on_offload(block_id{b}, layer_index{0},
                            {.keys = std::span(keys_w).subspan(b * block_values, valid[b] * row),
                             .tokens = valid[b],
                             .num_kv_heads = s.kv_heads,
                             .head_dim = s.d});
            // Exact: the naive double min/max, and the fp32 selector's metadata
            // of the widened keys, bit for bit (signed zeros included).
            const auto hmin = host.key_min(block_id{b}, layer_index{0});
            const auto hmax = host.key_max(block_id{b}, layer_index{0});
            for (std::size_t e = 0; e < row; ++e) {
                double lo = std::numeric_limits<double>::infinity(), hi = -lo;
                for (std::uint32_t t = 0; t < valid[b]; ++t) {
                    lo = std::min(lo, static_cast<double>(keys_w[b * block_values + t * row + e]));
                    hi = std::max(hi, static_cast<double>(keys_w[b * block_values + t * row + e]));
                }
                INFO("block " << b << " element " << e);
                REQUIRE(static_cast<double>(to_float(mn[b * row + e])) == lo);
                REQUIRE(static_cast<double>(to_float(mx[b * row + e])) == hi);
                REQUIRE(std::bit_cast<std::uint32_t>(to_float(mn[b * row + e])) ==
                        std::bit_cast<std::uint32_t>(hmin[e]));
                REQUIRE(std::bit_cast<std::uint32_t>(to_float(mx[b * row + e])) ==
                        std::bit_cast<std::uint32_t>(hmax[e]));
            }
        }

        // Scores for several queries: kernel order and host order within the
        // derived bounds of the exact score, and the exact score bounds every
        // token's summed q . k (Quest's guarantee, on the dequantized keys).
        std::normal_distribution<float> g(0.0f, 1.0f);
        const std::size_t n = std::size_t{s.q_heads} * s.d;
        const double u = std::ldexp(1.0, -24),
                     gamma_n = static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
        const std::uint32_t group = s.q_heads / s.kv_heads;
        for (int qi = 0; qi < 4; ++qi) {
            std::vector<float> q(n);
            for (float& x : q) x = g(rng);
            for (std::uint32_t b = 0; b < s.blocks; ++b) {
                const T* bmn = mn.data() + b * row;
                const T* bmx = mx.data() + b * row;
                double exact = 0.0, magnitude = 0.0;
                for (std::size_t e = 0; e < n; ++e) {
                    const std::size_t m = (e / s.d) / group * s.d + e % s.d;
                    const double t = std::max(double{q[e]} * to_float(bmn[m]), double{q[e]} * to_float(bmx[m]));
                    exact += t;
                    magnitude += std::abs(t);
                }
                const float device = simulated_kernel_score(q, bmn, bmx, s.q_heads, s.kv_heads, s.d);
                const float reference = host.block_score(block_id{b}, layer_index{0}, q, s.q_heads);
                const float templated = quest_block_score(q.data(), bmn, bmx, s.q_heads, s.kv_heads, s.d);
                INFO("block " << b << " exact " << exact << " device " << device << " host " << reference);
                // Same order, same metadata values: the templated reference is the fp32 selector's score.
                REQUIRE(std::bit_cast<std::uint32_t>(templated) == std::bit_cast<std::uint32_t>(reference));
                REQUIRE(std::abs(double{device} - exact) <= gamma_n * magnitude);
                REQUIRE(std::abs(double{reference} - exact) <= gamma_n * magnitude);
                REQUIRE(std::abs(double{device} - double{reference}) <= 2.0 * gamma_n * magnitude);
                for (std::uint32_t t = 0; t < valid[b]; ++t) {
                    double dot = 0.0;
                    for (std::size_t e = 0; e < n; ++e) {
                        const std::size_t m = (e / s.d) / group * s.d + e % s.d;
                        dot += double{q[e]} * keys_w[b * block_values + t * row + m];
                    }
                    REQUIRE(dot <= exact + 1e-12 * magnitude);
                }
            }
        }
    }
}

}  // namespace

TEST_CASE("quest math: metadata and scores over fp32 keys, thread by thread, against the naive model",
          "[quest][device_math][kv_element]") {
    std::mt19937_64 rng(13);
    check_metadata_and_scores<float>(rng);
}

TEST_CASE("quest math: bf16 metadata is exact and its scores stay within the derived bound",
          "[quest][device_math][kv_element]") {
    std::mt19937_64 rng(1613);
    check_metadata_and_scores<bf16>(rng);
}

TEST_CASE("quest math: fp16 metadata is exact and its scores stay within the derived bound",
          "[quest][device_math][kv_element]") {
    std::mt19937_64 rng(1016);
    check_metadata_and_scores<fp16>(rng);
}

TEST_CASE("quest math: a non-finite 16-bit key (or an fp16 overflow) leaves the block without a bound",
          "[quest][device_math][kv_element]") {
    const std::size_t row = 64;
    const std::uint32_t tokens = 16;
    for (const float poison : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(), 70000.0f /* fp16: inf */}) {
        for (std::size_t at : {std::size_t{0}, std::size_t{5 * row + 17}, std::size_t{tokens * row - 1}}) {
            std::vector<float> k(tokens * row, 0.25f);
            k[at] = poison;
            const auto h = narrow<fp16>(k);
            bool any = false;
            for (std::size_t e = 0; e < row; ++e) {
                const auto b = quest_channel_minmax(h.data(), row, tokens, e);
                REQUIRE(b.nonfinite == (e == at % row));
                any = any || b.nonfinite;
            }
            REQUIRE(any);
            std::vector<fp16> mn(row), mx(row);
            REQUIRE_FALSE(quest_block_metadata(h.data(), row, tokens, mn.data(), mx.data()));
            const auto bf = narrow<bf16>(k);
            std::vector<bf16> bmn(row), bmx(row);
            // 70000 is finite in bf16: a bound exists there.
            const bool finite_in_bf16 = std::isfinite(poison);
            REQUIRE(quest_block_metadata(bf.data(), row, tokens, bmn.data(), bmx.data()) == finite_in_bf16);
        }
    }
    std::vector<bf16> none(row), mn(row), mx(row);
    REQUIRE_FALSE(quest_block_metadata(none.data(), row, 0, mn.data(), mx.data()));
}

// ---- The ring loader's gather and the LSE merge over 16-bit K/V, on the CPU,
// through the host-device code the CUDA kernels run (STYLE.md 13):
// - the gather kernel (cuda/ring.cuh), every thread of its grid, against
//   the blocks it must copy: each destination word written exactly once;
// - the merge kernels (cuda/merge.cuh), every thread, over o stored as fp32,
//   bf16 or fp16, against sparse/lse_merge.hpp's double reference, within
//   the bound derived below;
// - the ring pipeline over bf16 / fp16 K/V: scattered CPU-tier blocks
//   gathered into slots, attention per slot (one warp, lane by lane: the
//   decode kernel's math), the per-slot (o, lse) merged into an accumulator,
//   against reference_decode_attention over all the tokens widened.
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr unsigned gather_threads = 256;  // cuda/ring.cuh's
constexpr unsigned merge_threads = 128;   // cuda/merge.cuh's

// A 16-byte word (the kernel's uint4) that counts the assignments made to it.
struct counted_word {
    std::uint64_t lo = 0, hi = 0;
    std::uint32_t writes = 0;
    counted_word() = default;
    counted_word(const counted_word& o) : lo(o.lo), hi(o.hi) {}
    counted_word& operator=(const counted_word& o) {
        lo = o.lo;
        hi = o.hi;
        ++writes;
        return *this;
    }
};

// The ring's gather of `ids` (arena blocks) into consecutive slot blocks:
// grid (ids, slices) x gather_threads, each thread's copy the kernel's.
template <class Word>
void simulate_gather(const std::vector<Word>& arena, const std::vector<std::uint32_t>& ids, std::size_t block_words,
                     std::size_t slice_words, std::vector<Word>& slot) {
    const std::size_t slices = (block_words + slice_words - 1) / slice_words;
    for (std::size_t j = 0; j < ids.size(); ++j)
        for (std::size_t slice = 0; slice < slices; ++slice)
            for (unsigned t = 0; t < gather_threads; ++t)
                gather_thread_copy<gather_threads, 4>(arena.data() + ids[j] * block_words,
                                                      slot.data() + j * block_words,
                                                      gather_slice_words(slice, slice_words, block_words), t);
}

}  // namespace

TEST_CASE("ring gather math: every thread of the grid, each slot word copied once from its block",
          "[ring][device_math]") {
    std::mt19937_64 rng(77);
    for (int round = 0; round < 40; ++round) {
        const std::size_t block_words = 1 + rng() % 3000;  // below and above the 4-deep unrolled rounds
        const std::size_t slice_words = round % 4 == 0 ? 4096 : 1 + rng() % 1100;
        const std::size_t capacity = 4 + rng() % 12;
        std::vector<counted_word> arena(capacity * block_words);
        for (auto& w : arena) w.lo = rng(), w.hi = rng();
        std::vector<std::uint32_t> ids(1 + rng() % capacity);
        for (auto& id : ids) id = static_cast<std::uint32_t>(rng() % capacity);
        std::vector<counted_word> slot(ids.size() * block_words);
        simulate_gather(arena, ids, block_words, slice_words, slot);
        for (std::size_t j = 0; j < ids.size(); ++j)
            for (std::size_t i = 0; i < block_words; ++i) {
                const counted_word& got = slot[j * block_words + i];
                const counted_word& want = arena[ids[j] * block_words + i];
                INFO("round " << round << " block " << j << " word " << i << " of " << block_words << ", slices of "
                              << slice_words);
                REQUIRE(got.writes == 1);
                REQUIRE(got.lo == want.lo);
                REQUIRE(got.hi == want.hi);
            }
    }
}

namespace {

// Unit roundoff of T (round to nearest: 2^-p for p significand bits).
template <class T>
double unit_roundoff() {
    if constexpr (std::is_same_v<T, bf16>)
        return std::ldexp(1.0, -8);
    else if constexpr (std::is_same_v<T, fp16>)
        return std::ldexp(1.0, -11);
    else
        return std::ldexp(1.0, -24);
}

// Merge error bound, per merge step. The merged channel is a convex
// combination of the inputs (weights wa/s, wb/s), so errors already in the
// inputs pass through with weights summing to 1 and do not grow. Each step
// adds (a) the fp32 arithmetic: exp to within 2 ulps (glibc's expf, CUDA's
// expf), the weights' quotient and the two products and sum, together under
// 16 u32 relative to max |o|; (b) one narrowing to T, u_T |value| <= u_T max
// |o| (absolute error 2^-25 at most for an fp16 subnormal, far below that).
// So after P steps |o - o_ref| <= P (u_T + 16 u32) max|o|. The lse is fp32
// throughout: m + log(s) with s in [1, P], under 8 u32 (1 + |lse|) per step.
template <class T>
void check_merge_math(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    const double u32 = std::ldexp(1.0, -24), uT = unit_roundoff<T>();
    for (int round = 0; round < 30; ++round) {
        const std::uint32_t rows = 1 + static_cast<std::uint32_t>(rng() % 40);
        const std::uint32_t d = 1 + static_cast<std::uint32_t>(rng() % 300);  // below and above 128 threads
        const std::uint32_t parts = 1 + static_cast<std::uint32_t>(rng() % 9);
        std::vector<float> o_parts_f(std::size_t{parts} * rows * d), lse_parts(std::size_t{parts} * rows);
        for (float& x : o_parts_f) x = g(rng);
        for (float& x : lse_parts) x = 4.0f * g(rng);
        for (std::size_t i = 0; i < lse_parts.size(); ++i)
            if (rng() % 5 == 0) lse_parts[i] = neg_inf;  // empty parts, some rows empty everywhere
        for (std::size_t i = 0; i < lse_parts.size(); ++i)
            if (lse_parts[i] == neg_inf)
                for (std::uint32_t c = 0; c < d; ++c) o_parts_f[i * d + c] = std::numeric_limits<float>::quiet_NaN();
        const auto o_parts = narrow<T>(o_parts_f);
        const auto o_parts_w = widen(o_parts);  // the reference sees the stored values
        double max_o = 0.0;
        for (std::size_t i = 0; i < o_parts_w.size(); ++i)
            if (lse_parts[i / d] != neg_inf) max_o = std::max(max_o, std::abs(double{o_parts_w[i]}));

        // Reference: fold the parts in order in double (sparse/lse_merge.hpp).
        std::vector<float> o_ref(std::size_t{rows} * d, 0.0f), lse_ref(rows, neg_inf);
        for (std::uint32_t p = 0; p < parts; ++p)
            merge_attention_state(
                o_ref, lse_ref,
                std::span<const float>(o_parts_w).subspan(std::size_t{p} * rows * d, std::size_t{rows} * d),
                std::span<const float>(lse_parts).subspan(std::size_t{p} * rows, rows), d);

        // merge_states_kernel: grid.x = rows, thread t takes channels t, t + 128, ...
        std::vector<T> o(std::size_t{rows} * d);
        std::vector<float> lse(rows);
        for (std::uint32_t r = 0; r < rows; ++r)
            for (unsigned t = 0; t < merge_threads; ++t) {
                const lse_parts_merge w = lse_merge_parts_row(lse_parts.data(), parts, rows, r);
                for (std::uint32_t i = t; i < d; i += merge_threads)
                    o[std::size_t{r} * d + i] =
                        lse_merge_parts_channel(w, o_parts.data(), lse_parts.data(), parts, rows, d, r, i);
                if (t == 0) lse[r] = w.lse();
            }
        // merge_state_inplace_kernel, part by part into an empty accumulator
        // (its o holds NaN: an empty accumulator's o must not be read).
        std::vector<T> acc(std::size_t{rows} * d, from_float<T>(std::numeric_limits<float>::quiet_NaN()));
        std::vector<float> acc_lse(rows, neg_inf);
        for (std::uint32_t p = 0; p < parts; ++p)
            for (std::uint32_t r = 0; r < rows; ++r) {
                // Every thread computes the row's weights before any writes lse (the kernel's __syncthreads).
                const lse_pair_merge w = lse_merge_pair(acc_lse[r], lse_parts[std::size_t{p} * rows + r]);
                for (unsigned t = 0; t < merge_threads; ++t)
                    for (std::uint32_t i = t; i < d; i += merge_threads)
                        acc[std::size_t{r} * d + i] = lse_merge_channel(w, acc[std::size_t{r} * d + i],
                                                                        o_parts[(std::size_t{p} * rows + r) * d + i]);
                if (w.how != lse_pair_merge::kind::keep_a) acc_lse[r] = w.lse;
            }
        const double o_tol = parts * (uT + 16.0 * u32) * max_o;
        for (std::uint32_t r = 0; r < rows; ++r) {
            INFO("round " << round << " row " << r << " of " << rows << ", " << parts << " parts, head_dim " << d);
            if (lse_ref[r] == neg_inf) {
                REQUIRE(lse[r] == neg_inf);
                REQUIRE(acc_lse[r] == neg_inf);
                for (std::uint32_t i = 0; i < d; ++i) REQUIRE(to_float(o[std::size_t{r} * d + i]) == 0.0f);
                continue;
            }
            const double lse_tol = parts * 8.0 * u32 * (1.0 + std::abs(double{lse_ref[r]}));
            REQUIRE(std::abs(double{lse[r]} - lse_ref[r]) <= lse_tol);
            REQUIRE(std::abs(double{acc_lse[r]} - lse_ref[r]) <= lse_tol);
            for (std::uint32_t i = 0; i < d; ++i) {
                const double want = o_ref[std::size_t{r} * d + i];
                REQUIRE(std::abs(double{to_float(o[std::size_t{r} * d + i])} - want) <= o_tol);
                REQUIRE(std::abs(double{to_float(acc[std::size_t{r} * d + i])} - want) <= o_tol);
            }
        }
    }
}

}  // namespace

TEST_CASE("lse merge math: every thread, o as fp32 / bf16 / fp16, within the derived bound of the double reference",
          "[lse_merge][device_math][kv_element]") {
    std::mt19937_64 rng(4242);
    check_merge_math<float>(rng);
    check_merge_math<bf16>(rng);
    check_merge_math<fp16>(rng);
}

namespace {

// Element type T as 16-byte words, as the gather kernel moves it.
struct word16 {
    unsigned char bytes[16];
};

template <class T>
void check_ring_attention(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int round = 0; round < 6; ++round) {
        const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 2);
        const std::uint32_t d = 32u * (1 + static_cast<std::uint32_t>(rng() % 4));
        const decode_attention_shape s{.num_q_heads = kv_heads * (1 + static_cast<std::uint32_t>(rng() % 3)),
                                       .num_kv_heads = kv_heads,
                                       .head_dim = d,
                                       .block_size = 16,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(d))};
        const std::size_t half = std::size_t{s.block_size} * kv_heads * d;  // K (or V) values of a block
        const std::size_t block_values = 2 * half;                          // [K | V], as the GPU test lays them out
        const std::size_t block_bytes = block_values * sizeof(T);
        REQUIRE(block_bytes % 16 == 0);
        const std::size_t block_words = block_bytes / 16;
        const std::uint32_t capacity = 24 + static_cast<std::uint32_t>(rng() % 40);
        std::vector<float> arena_f(capacity * block_values);
        for (float& x : arena_f) x = g(rng);
        const auto arena_t = narrow<T>(arena_f);
        std::vector<word16> arena(capacity * block_words);
        std::memcpy(arena.data(), arena_t.data(), arena_t.size() * sizeof(T));

        // The sequence: a random subset of the CPU tier in a random order,
        // the last block partial; loads of slot_blocks through a ring.
        std::vector<std::uint32_t> seq(capacity);
        std::iota(seq.begin(), seq.end(), 0u);
        std::shuffle(seq.begin(), seq.end(), rng);
        seq.resize(1 + rng() % capacity);
        const std::uint64_t tokens = (seq.size() - 1) * std::uint64_t{s.block_size} + 1 + rng() % s.block_size;
        const std::uint32_t slot_blocks = 1 + static_cast<std::uint32_t>(rng() % 7);
        const std::size_t slice_words = 1 + rng() % block_words;

        std::vector<float> q(std::size_t{s.num_q_heads} * d);
        for (float& x : q) x = g(rng);
        std::vector<float> acc_o(q.size(), 0.0f), acc_lse(s.num_q_heads, neg_inf), part_o(q.size()),
            part_lse(s.num_q_heads);
        std::vector<word16> slot(slot_blocks * block_words);
        std::size_t merges = 0;
        for (std::size_t first = 0; first < seq.size(); first += slot_blocks) {
            const std::vector<std::uint32_t> ids(
                seq.begin() + static_cast<std::ptrdiff_t>(first),
                seq.begin() + static_cast<std::ptrdiff_t>(std::min(seq.size(), first + slot_blocks)));
            simulate_gather(arena, ids, block_words, slice_words, slot);
            std::vector<T> slot_t(ids.size() * block_values);  // ring_loader::slot_view<T>
            std::memcpy(static_cast<void*>(slot_t.data()), slot.data(), slot_t.size() * sizeof(T));
            std::vector<block_id> local(ids.size());
            for (std::size_t j = 0; j < ids.size(); ++j) local[j] = block_id{static_cast<std::uint32_t>(j)};
            const std::uint64_t slot_tokens =
                std::min<std::uint64_t>(tokens - first * s.block_size, ids.size() * std::uint64_t{s.block_size});
            testing::warp_decode(q.data(), slot_t.data(), slot_t.data() + half, local, slot_tokens, s, block_values,
                                 part_o, part_lse);
            for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
                const lse_pair_merge w = lse_merge_pair(acc_lse[h], part_lse[h]);
                for (std::uint32_t i = 0; i < d; ++i)
                    acc_o[std::size_t{h} * d + i] =
                        lse_merge_channel(w, acc_o[std::size_t{h} * d + i], part_o[std::size_t{h} * d + i]);
                acc_lse[h] = w.lse;
            }
            ++merges;
        }
        // Reference: all tokens at once over the widened values, in sequence order.
        const auto arena_w = widen(arena_t);
        std::vector<block_id> table(seq.size());
        for (std::size_t j = 0; j < seq.size(); ++j) table[j] = block_id{seq[j]};
        std::vector<float> o_ref(q.size()), lse_ref(s.num_q_heads);
        reference_decode_attention(
            q, {.k = arena_w, .v = std::span<const float>(arena_w).subspan(half), .block_stride = block_values}, table,
            tokens, s, o_ref, lse_ref);
        // The per-slot attention matches the reference to 2e-5 relative (as
        // tests/sparse_kv_element.cpp's one-pass check); each fp32 merge adds
        // under 16 u32 (see check_merge_math).
        const double tol = 2e-5 + static_cast<double>(merges) * 16.0 * std::ldexp(1.0, -24);
        for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
            INFO("round " << round << " head " << h << ", " << seq.size() << " blocks, " << merges << " slot loads");
            REQUIRE(std::abs(double{acc_lse[h]} - lse_ref[h]) <= tol * (1.0 + std::abs(double{lse_ref[h]})));
            for (std::uint32_t i = 0; i < d; ++i)
                REQUIRE(std::abs(double{acc_o[std::size_t{h} * d + i]} - o_ref[std::size_t{h} * d + i]) <=
                        tol * (1.0 + std::abs(double{o_ref[std::size_t{h} * d + i]})));
        }
    }
}

}  // namespace

TEST_CASE("ring pipeline over bf16 / fp16 K/V: gathered slots, per-slot attention, LSE merge equal one pass",
          "[ring][lse_merge][kv_element][device_math]") {
    std::mt19937_64 rng(1313);
    check_ring_attention<float>(rng);
    check_ring_attention<bf16>(rng);
    check_ring_attention<fp16>(rng);
}
