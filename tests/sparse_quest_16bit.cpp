// Quest over fp32 / bf16 / fp16 keys on the CPU (sparse/quest_math.hpp): the
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
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/sparse/quest_math.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {

constexpr std::uint32_t kernel_threads = 128;  // cuda/quest.cuh's quest_threads

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
                             .tokens = valid[b], .num_kv_heads = s.kv_heads, .head_dim = s.d});
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
        const double u = std::ldexp(1.0, -24), gamma_n = static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
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
