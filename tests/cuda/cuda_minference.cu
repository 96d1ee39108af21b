// MInference on the device (kvpolicy/cuda/minference.cuh) against its host
// references (sparse/minference.hpp, sparse/prefill_attention.hpp), on fresh
// random inputs, outputs poisoned with NaN before every run, every CUDA call
// checked:
// - estimation: the device's column and diagonal masses == the double
//   reference masses to float rounding; the device's index == the host top-k
//   rule applied to the device's own masses, exactly;
// - sparse attention over the device's index == the double reference over
//   the same index; with a budget that keeps everything == dense causal
//   attention; the dense kernel == the host dense attention;
// - the tiled kernels over head_dim 32 .. 256, GQA 1 / 4 / 8, prompts below
//   and not a multiple of a 64-query block, random indices (empty lists,
//   overlapping columns and diagonals) and unaligned q, k, v == the double
//   reference;
// - a NaN in q is reported by wait(); shapes the kernel does not take throw
//   before anything is enqueued.
// Exits 77 (CTest: skipped) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <kvpolicy/cuda/minference.cuh>
#include <kvpolicy/sparse/minference.hpp>
#include <kvpolicy/sparse/prefill_attention.hpp>

#include "cuda_test.cuh"
#include "../support/random_floats.hpp"
#include "../support/random_vertical_slash.hpp"

namespace cuda_minference {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

using kvpolicy::testing::random_floats;

void settle() { KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize()); }

template <class T>
device_span<const T> upload(const std::vector<T>& h, device_buffer<T>& d) {
    d.reserve(std::max<std::size_t>(h.size(), 1));
    if (!h.empty()) KVPOLICY_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    settle();
    return device_span<const T>{d.get(), h.size()};
}

template <class T>
std::vector<T> download(device_span<const T> d) {
    std::vector<T> h(d.size());
    if (!h.empty()) KVPOLICY_CUDA_CHECK(cudaMemcpy(h.data(), d.data(), d.size_bytes(), cudaMemcpyDeviceToHost));
    return h;
}

template <class T>
device_span<T> poisoned(device_buffer<T>& d, std::size_t n) {
    d.reserve(std::max<std::size_t>(n, 1));
    KVPOLICY_CUDA_CHECK(cudaMemset(d.get(), 0xff, n * sizeof(T)));  // NaN for float
    settle();
    return device_span<T>{d.get(), n};
}

bool close(double got, double want, double tol) {
    if (std::isinf(want)) return got == want;
    return std::abs(got - want) <= tol * (1.0 + std::abs(want));
}

struct device_prompt {
    std::uint32_t n, q_heads, kv_heads, d;
    std::vector<float> q, k, v;
    device_buffer<float> dq, dk, dv, d_o, d_lse;

    device_prompt(std::mt19937_64& rng, std::uint32_t n_, std::uint32_t qh, std::uint32_t kvh, std::uint32_t d_)
            : n(n_),
              q_heads(qh),
              kv_heads(kvh),
              d(d_),
              q(random_floats(rng, std::size_t{n_} * qh * d_, 2.0f)),
              k(random_floats(rng, std::size_t{n_} * kvh * d_)),
              v(random_floats(rng, std::size_t{n_} * kvh * d_)) {}

    [[nodiscard]] float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
    [[nodiscard]] prefill_qkv_view host() const {
        return {.q = q,
                .k = k,
                .v = v,
                .num_tokens = n,
                .num_q_heads = q_heads,
                .num_kv_heads = kv_heads,
                .head_dim = d,
                .scale = scale()};
    }
    [[nodiscard]] device_prefill_qkv_view device() {
        return {.q = upload(q, dq),
                .k = upload(k, dk),
                .v = upload(v, dv),
                .num_tokens = n,
                .num_q_heads = q_heads,
                .num_kv_heads = kv_heads,
                .head_dim = d,
                .scale = scale()};
    }
    [[nodiscard]] device_prefill_output_view poisoned_output() {
        return {.o = poisoned(d_o, std::size_t{n} * q_heads * d), .lse = poisoned(d_lse, std::size_t{n} * q_heads)};
    }
    [[nodiscard]] std::vector<float> o() const {
        return download(device_span<const float>{d_o.get(), std::size_t{n} * q_heads * d});
    }
    [[nodiscard]] std::vector<float> lse() const {
        return download(device_span<const float>{d_lse.get(), std::size_t{n} * q_heads});
    }
};

void expect_close_arrays(const std::vector<float>& got, const std::vector<float>& want, double tol) {
    KVPOLICY_EXPECT(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
        if (!close(got[i], want[i], tol)) {
            if (bad++ < 3) std::printf("  at %zu: got %.8g want %.8g\n", i, double{got[i]}, double{want[i]});
        }
    KVPOLICY_EXPECT(bad == 0);
}

void estimation_and_attention(std::uint64_t seed, std::uint32_t n, std::uint32_t d, const minference_config& cfg) {
    std::mt19937_64 rng(seed);
    device_prompt p(rng, n, 4, 2, d);
    const auto in = p.device();
    device_minference dm(cfg, cudaStreamPerThread);
    const auto out = p.poisoned_output();
    dm.sparse_prefill_attention(in, layer_index{0}, out);
    dm.wait();

    // Masses: device (negated) against the double reference.
    const minference_masses want = minference_masses_reference(p.host(), cfg);
    const std::vector<float> neg = download(dm.negated_masses(n));
    const std::size_t hn = std::size_t{p.q_heads} * n;
    std::vector<float> column(hn), diagonal(hn);
    std::size_t bad = 0;
    for (std::size_t x = 0; x < hn; ++x) {
        column[x] = -neg[x];
        diagonal[x] = -neg[hn + x];
        if (!close(column[x], want.column[x], 1e-4) || !close(diagonal[x], want.diagonal[x], 1e-4)) ++bad;
    }
    KVPOLICY_EXPECT(bad == 0);

    // Index: the host rule on the device's masses, exactly.
    const vertical_slash_index got = dm.copy_index(n);
    const minference_sizes sizes = minference_kept_sizes(cfg, n);
    KVPOLICY_EXPECT(got.vertical_count == sizes.vertical_count && got.slash_count == sizes.slash_count);
    std::vector<std::uint32_t> scratch, chosen(n);
    for (std::uint32_t h = 0; h < p.q_heads; ++h) {
        minference_top_indices(std::span<const float>(column).subspan(std::size_t{h} * n, n), sizes.vertical_count,
                               scratch, chosen);
        KVPOLICY_EXPECT(std::ranges::equal(got.vertical(h), std::span(chosen).first(sizes.vertical_count)));
        minference_top_indices(std::span<const float>(diagonal).subspan(std::size_t{h} * n, n), sizes.slash_count,
                               scratch, chosen);
        KVPOLICY_EXPECT(std::ranges::equal(got.slash(h), std::span(chosen).first(sizes.slash_count)));
    }

    // Attention over that index: the double reference.
    std::vector<float> o_ref(hn * d), lse_ref(hn);
    vertical_slash_attention_reference(p.host(), got, {.o = o_ref, .lse = lse_ref});
    expect_close_arrays(p.o(), o_ref, 2e-5);
    expect_close_arrays(p.lse(), lse_ref, 2e-5);
}

void full_budget_is_dense(std::uint64_t seed, std::uint32_t n, std::uint32_t d) {
    std::mt19937_64 rng(seed);
    device_prompt p(rng, n, 4, 1, d);
    const auto in = p.device();
    std::vector<float> o_ref(std::size_t{n} * 4 * d), lse_ref(std::size_t{n} * 4);
    dense_prefill_attention(p.host(), {.o = o_ref, .lse = lse_ref});

    device_minference dm({.adaptive_budget = 1.0, .num_sink_tokens = 2, .num_recent_diags = 3, .last_q = 16},
                         cudaStreamPerThread);
    dm.sparse_prefill_attention(in, layer_index{0}, p.poisoned_output());
    dm.wait();
    expect_close_arrays(p.o(), o_ref, 2e-5);
    expect_close_arrays(p.lse(), lse_ref, 2e-5);

    prefill_attention_dense(in, p.poisoned_output(), cudaStreamPerThread);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    expect_close_arrays(p.o(), o_ref, 2e-5);
    expect_close_arrays(p.lse(), lse_ref, 2e-5);
}

using kvpolicy::testing::random_index;

// The CTA-tiled kernels over shapes and indices the estimate does not make:
// head_dim 32 .. 256 (the 64/128/256 templates and the padded ones), GQA 1,
// 4, 8, prompts below one 64-query block and not a multiple of it, empty
// lists, overlapping columns and diagonals, and q, k, v at an address that
// is not 16-byte aligned (`shift` floats in: scalar loads). Dense == the
// double reference over every offset; sparse == the double reference over
// the index.
void tiled_shapes(std::uint64_t seed, std::uint32_t n, std::uint32_t qh, std::uint32_t kvh, std::uint32_t d,
                  std::uint32_t shift) {
    std::mt19937_64 rng(seed);
    device_prompt p(rng, n, qh, kvh, d);
    const std::size_t q_size = p.q.size(), kv_size = p.k.size();
    device_buffer<float> raw(q_size + 2 * kv_size + 3 * std::size_t{shift} + 1);
    float* base = raw.get();
    const auto put = [&](const std::vector<float>& h, float* at) {
        KVPOLICY_CUDA_CHECK(cudaMemcpy(at, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
        return device_span<const float>{at, h.size()};
    };
    const device_prefill_qkv_view in{.q = put(p.q, base + shift),
                                     .k = put(p.k, base + q_size + 2 * shift),
                                     .v = put(p.v, base + q_size + kv_size + 3 * shift),
                                     .num_tokens = n,
                                     .num_q_heads = qh,
                                     .num_kv_heads = kvh,
                                     .head_dim = d,
                                     .scale = p.scale()};
    settle();
    const std::size_t rows = std::size_t{n} * qh;
    std::vector<float> o_ref(rows * d), lse_ref(rows);

    vertical_slash_index every{qh, n, 0, n, {}, std::vector<std::uint32_t>(rows)};
    for (std::uint32_t h = 0; h < qh; ++h)
        for (std::uint32_t o = 0; o < n; ++o) every.slashes[std::size_t{h} * n + o] = o;
    vertical_slash_attention_reference(p.host(), every, {.o = o_ref, .lse = lse_ref});
    prefill_attention_dense(in, p.poisoned_output(), cudaStreamPerThread);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    expect_close_arrays(p.o(), o_ref, 2e-5);
    expect_close_arrays(p.lse(), lse_ref, 2e-5);

    const std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes = {
        {0, 0}, {0, std::min(n, 3u)}, {std::min(n, 5u), 0}, {n / 6, n / 9}, {n / 2, n / 2}};
    for (const auto& [nv, ns] : sizes) {
        const vertical_slash_index index = random_index(rng, qh, n, nv, ns);
        device_buffer<std::uint32_t> dv, ds;
        const device_vertical_slash_index di{upload(index.verticals, dv), upload(index.slashes, ds), nv, ns};
        vertical_slash_attention_reference(p.host(), index, {.o = o_ref, .lse = lse_ref});
        prefill_attention_vertical_slash(in, di, p.poisoned_output(), cudaStreamPerThread);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
        expect_close_arrays(p.o(), o_ref, 2e-5);
        expect_close_arrays(p.lse(), lse_ref, 2e-5);
    }
}

void bad_input() {
    std::mt19937_64 rng(99);
    device_prompt p(rng, 100, 2, 1, 64);
    p.q[std::size_t{99} * 2 * 64] = std::numeric_limits<float>::quiet_NaN();  // the last query: every mass of head 0
    const auto in = p.device();
    device_minference dm({.num_sink_tokens = 2, .num_recent_diags = 4}, cudaStreamPerThread);
    dm.sparse_prefill_attention(in, layer_index{0}, p.poisoned_output());
    bool thrown = false;
    try {
        dm.wait();
    } catch (const usage_error&) {
        thrown = true;
    }
    KVPOLICY_EXPECT(thrown);

    auto odd = in;
    odd.head_dim = 48;
    odd.q = odd.q.first(std::size_t{100} * 2 * 48);
    odd.k = odd.k.first(std::size_t{100} * 48);
    odd.v = odd.v.first(std::size_t{100} * 48);
    thrown = false;
    try {
        dm.estimate(odd);
    } catch (const usage_error& e) {
        thrown = std::string(e.what()).find("multiple of 32") != std::string::npos;
    }
    KVPOLICY_EXPECT(thrown);
    thrown = false;
    try {
        device_minference({.last_q = 200}, cudaStreamPerThread).estimate(in);
    } catch (const config_error&) {
        thrown = true;
    }
    KVPOLICY_EXPECT(thrown);
}

}  // namespace

int run() {
    using namespace kvpolicy::cuda::testing;
    if (const int skip = skip_without_device("cuda_minference")) return skip;
    const minference_config small{.adaptive_budget = 0.1, .num_sink_tokens = 4, .num_recent_diags = 8, .last_q = 64};
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        estimation_and_attention(seed, 300 + static_cast<std::uint32_t>(seed) * 137, 64, small);
        estimation_and_attention(seed + 10, 700, 128,
                                 {.adaptive_budget = std::nullopt,
                                  .vertical_size = 40,
                                  .slash_size = 90,
                                  .num_sink_tokens = 30,
                                  .num_recent_diags = 20,
                                  .last_q = 32});
        full_budget_is_dense(seed + 20, 257 + static_cast<std::uint32_t>(seed) * 50, seed % 2 == 0 ? 64 : 128);
    }
    tiled_shapes(31, 1, 1, 1, 32, 0);
    tiled_shapes(32, 37, 2, 1, 32, 1);
    tiled_shapes(33, 64, 4, 4, 64, 0);
    tiled_shapes(34, 300, 4, 1, 64, 3);
    tiled_shapes(35, 129, 8, 1, 128, 0);
    tiled_shapes(36, static_cast<std::uint32_t>(1000 / large_input_divisor()), 8, 2, 128,
                 0);  // 100 under the sanitizers
    tiled_shapes(37, 200, 2, 1, 96, 2);
    tiled_shapes(38, 150, 2, 1, 256, 0);
    tiled_shapes(39, 90, 2, 2, 224, 1);
    bad_input();
    std::printf("cuda_minference: %d failures\n", failures);
    return failures == 0 ? 0 : 1;
}

}  // namespace cuda_minference

int main() { return cuda_minference::run(); }
