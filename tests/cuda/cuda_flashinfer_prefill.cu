// FlashInfer's prefill through kvpolicy's adapter (flashinfer/prefill.cuh),
// bf16 and fp16, 32 query / 8 KV heads, head_dim 128:
// - dense_causal_prefill against naive causal attention (double) over the
//   same 16-bit values;
// - minference_prefill over minference_sparse_prefill_indices of a random
//   vertical-slash index (the two launches, slash pages causal with the
//   diagonal last, vertical columns unmasked, merged by LSE) against the host
//   reference of those semantics, vertical_slash_block_attention_reference;
//   once with columns, once with none left outside the slash pages;
// - bad input (mismatched head counts, an index for another prompt, no
//   index set, a head_dim not instantiated) refused before any launch:
//   checked first, so they run even on a machine without a GPU.
#include <kvpolicy/cuda/flashinfer/prefill.cuh>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/minference.hpp>
#include <kvpolicy/sparse/paged_attention_reference.hpp>
#include <kvpolicy/sparse/paged_kv_indices.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_16bit_vectors.cuh"
#include "cuda_test.cuh"
#include "cuda_test_data.cuh"
#include "support/random_vertical_slash.hpp"

namespace flashinfer_prefill_test {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
using namespace kvpolicy::cuda::testing;
namespace fi = kvpolicy::cuda::flashinfer;

constexpr std::uint32_t q_heads = 32, kv_heads = 8, d = 128;

void compare(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, float tol) {
    float worst = 0.0f;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const float err = static_cast<float>(std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
        worst = std::max(worst, err);
        bad += err > tol || !std::isfinite(got[i]) ? 1 : 0;
    }
    std::printf("  %-52s max rel error %.2e (tolerance %.0e)\n", what.c_str(), worst, tol);
    KVPOLICY_EXPECT(bad == 0);
}

std::vector<double> naive_causal(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                 std::uint32_t n) {
    const float scale = 1.0f / std::sqrt(float{d});
    std::vector<double> o(std::size_t{n} * q_heads * d), logits(n);
    for (std::uint32_t h = 0; h < q_heads; ++h) {
        const std::uint32_t kh = h / (q_heads / kv_heads);
        for (std::uint32_t i = 0; i < n; ++i) {
            double m = -std::numeric_limits<double>::infinity();
            for (std::uint32_t j = 0; j <= i; ++j) {
                double dot = 0.0;
                for (std::uint32_t c = 0; c < d; ++c)
                    dot +=
                        double{q[(std::size_t{i} * q_heads + h) * d + c]} * k[(std::size_t{j} * kv_heads + kh) * d + c];
                logits[j] = dot * scale;
                m = std::max(m, logits[j]);
            }
            double l = 0.0;
            double* out = &o[(std::size_t{i} * q_heads + h) * d];
            for (std::uint32_t j = 0; j <= i; ++j) {
                const double p = std::exp(logits[j] - m);
                l += p;
                for (std::uint32_t c = 0; c < d; ++c) out[c] += p * v[(std::size_t{j} * kv_heads + kh) * d + c];
            }
            for (std::uint32_t c = 0; c < d; ++c) out[c] /= l;
        }
    }
    return o;
}

void bad_input() {
    std::printf("bad input, refused before any launch\n");
    std::mt19937_64 rng(3);
    const vertical_slash_index index = kvpolicy::testing::random_index(rng, q_heads, 256, 20, 40);
    const sparse_prefill_indices rows = minference_sparse_prefill_indices(index, kv_heads, 64, 16);
    fi::minference_prefill<bf16> prefill;
    KVPOLICY_EXPECT(throws<usage_error>([&] {  // the index is for 8 KV heads
        prefill.set_indices(rows, {.num_q_heads = q_heads, .num_kv_heads = 4});
    }));
    KVPOLICY_EXPECT(throws<config_error>(
        [&] { prefill.set_indices(rows, {.num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = 64}); }));
    sparse_prefill_indices other = rows;
    other.num_tokens = 300;  // the rows cover 256 tokens
    KVPOLICY_EXPECT(
        throws<usage_error>([&] { prefill.set_indices(other, {.num_q_heads = q_heads, .num_kv_heads = kv_heads}); }));
    KVPOLICY_EXPECT(throws<usage_error>([&] { prefill.run({}, {}, {}, {}); }));  // no index set
    KVPOLICY_EXPECT(throws<usage_error>([&] {
        fi::dense_causal_prefill<bf16>({}, {}, {}, 0, {.num_q_heads = q_heads, .num_kv_heads = kv_heads}, {},
                                       cudaStreamPerThread);
    }));
    fi::batch_prefill_paged<bf16> paged;
    const std::vector<std::int32_t> qo{0, 4}, kv{0, 0};
    KVPOLICY_EXPECT(throws<usage_error>([&] {  // causal over no page
        paged.plan(qo, kv, {.num_q_heads = 4, .num_kv_heads = 1}, 1);
    }));
}

// A token tensor viewed as pages ends inside its last page: the extent
// check must accept exactly the tensor (the GPU run at 1000 tokens, 16-token
// pages, was refused before last_page_tokens), and refuse a byte less. The
// reference walks every token the pages hold.
void partial_last_page() {
    std::printf("pages over a token tensor, the last one partial\n");
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        const std::uint32_t n = 1 + static_cast<std::uint32_t>(rng() % 2000);
        const std::uint32_t page = std::array<std::uint32_t, 4>{1, 16, 32, 64}[rng() % 4];
        const std::uint32_t hkv = std::array<std::uint32_t, 3>{1, 2, 8}[rng() % 3];
        const std::uint32_t blocks = (n + page - 1) / page, tail = n - (blocks - 1) * page;
        // MInference's pool: one head per page, page id c * page * hkv + h.
        std::size_t reached = 0;
        for (std::uint32_t j = 0; j < n; ++j)
            for (std::uint32_t h = 0; h < hkv; ++h) {
                const std::size_t id = std::size_t{j / page} * page * hkv + h;
                reached = std::max(reached, id * d + std::size_t{j % page} * hkv * d + d);
            }
        fi::paged_kv_cache<bf16> alias{.k = {},
                                       .v = {},
                                       .page_stride = d,
                                       .token_stride = std::size_t{hkv} * d,
                                       .num_pages = (blocks - 1) * page * hkv + hkv,
                                       .page_size = page,
                                       .num_kv_heads = 1,
                                       .head_dim = d,
                                       .last_page_tokens = tail};
        KVPOLICY_EXPECT(reached == std::size_t{n} * hkv * d && alias.extent() == reached);
        // One request's contiguous K as packed pages.
        const fi::paged_kv_cache<bf16> packed{.k = {},
                                              .v = {},
                                              .num_pages = blocks,
                                              .page_size = page,
                                              .num_kv_heads = hkv,
                                              .head_dim = d,
                                              .last_page_tokens = tail};
        KVPOLICY_EXPECT(packed.extent() == std::size_t{n} * hkv * d);
        const fi::attention_heads heads{.num_q_heads = hkv * 4, .num_kv_heads = hkv};
        fi::paged_kv_cache<bf16> sized = packed;
        sized.k = sized.v = device_span<const bf16>{nullptr, packed.extent()};
        KVPOLICY_EXPECT(!throws<usage_error>([&] { fi::detail::check_cache(sized, heads, page, "test"); }));
        sized.k = device_span<const bf16>{nullptr, packed.extent() - 1};
        KVPOLICY_EXPECT(throws<usage_error>([&] { fi::detail::check_cache(sized, heads, page, "test"); }));
        sized.k = sized.v;
        sized.last_page_tokens = page + 1;  // more than a page holds
        KVPOLICY_EXPECT(throws<usage_error>([&] { fi::detail::check_cache(sized, heads, page, "test"); }));
        if (tail != page) {  // as a full last page it reaches past the tensor
            sized.last_page_tokens = 0;
            KVPOLICY_EXPECT(throws<usage_error>([&] { fi::detail::check_cache(sized, heads, page, "test"); }));
        }
    }
}

template <class T>
void dense(std::mt19937_64& rng) {
    std::printf("dense causal prefill, %s\n", element_name<T>());
    constexpr std::uint32_t n = 300;
    const std::vector<float> q = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * q_heads * d)));
    const std::vector<float> k = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * kv_heads * d)));
    const std::vector<float> v = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * kv_heads * d)));
    device_buffer<T> dq, dk, dv, dout;
    const auto sq = upload_span(to_elements<T>(q), dq), sk = upload_span(to_elements<T>(k), dk),
               sv = upload_span(to_elements<T>(v), dv);
    dout.reserve(q.size());
    fi::dense_causal_prefill<T>(sq, sk, sv, n, {.num_q_heads = q_heads, .num_kv_heads = kv_heads}, dout.view(q.size()),
                                cudaStreamPerThread);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    compare("dense_causal_prefill, 300 tokens", to_floats(download(dout.get(), q.size())), naive_causal(q, k, v, n),
            element_tolerance<T>());
}

template <class T>
void sparse(std::mt19937_64& rng, std::uint32_t n, std::uint32_t nv, std::uint32_t ns, const char* what) {
    std::printf("MInference prefill, %s, %s\n", element_name<T>(), what);
    constexpr std::uint32_t query_block = 64, page = 16;
    const std::vector<float> q = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * q_heads * d)));
    const std::vector<float> k = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * kv_heads * d)));
    const std::vector<float> v = to_floats(to_elements<T>(random_floats(rng, std::size_t{n} * kv_heads * d)));
    vertical_slash_index index = kvpolicy::testing::random_index(rng, q_heads, n, nv, ns);
    for (std::uint32_t h = 0; h < q_heads; ++h) index.slashes[std::size_t{h} * ns] = 0;  // offset 0 kept, as MInference
    for (std::uint32_t h = 0; h < q_heads; ++h)
        std::sort(index.slashes.begin() + std::ptrdiff_t{h} * ns, index.slashes.begin() + std::ptrdiff_t{h + 1} * ns);
    const sparse_prefill_indices rows = minference_sparse_prefill_indices(index, kv_heads, query_block, page);
    const float scale = 1.0f / std::sqrt(float{d});
    std::vector<double> want(q.size()), lse(std::size_t{n} * q_heads);
    vertical_slash_block_attention_reference({.q = q,
                                              .k = k,
                                              .v = v,
                                              .num_tokens = n,
                                              .num_q_heads = q_heads,
                                              .num_kv_heads = kv_heads,
                                              .head_dim = d,
                                              .scale = scale},
                                             index, query_block, page, want, lse);
    device_buffer<T> dq, dk, dv, dout;
    const auto sq = upload_span(to_elements<T>(q), dq), sk = upload_span(to_elements<T>(k), dk),
               sv = upload_span(to_elements<T>(v), dv);
    dout.reserve(q.size());
    poison(dout.view(q.size()));
    const stream_handle stream;
    fi::minference_prefill<T> prefill(stream.get());
    prefill.set_indices(rows, {.num_q_heads = q_heads, .num_kv_heads = kv_heads, .sm_scale = scale});
    prefill.run(sq, sk, sv, dout.view(q.size()));
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    compare(std::string("minference_prefill, ") + std::to_string(n) + " tokens, " +
                std::to_string(rows.verticals.indices.size()) + " column entries",
            to_floats(download(dout.get(), q.size())), want, element_tolerance<T>());
}

}  // namespace flashinfer_prefill_test

int main() {
    using namespace flashinfer_prefill_test;
    bad_input();
    partial_last_page();
    if (kvpolicy::cuda::testing::failures != 0) return 1;
    if (const int skip = kvpolicy::cuda::testing::skip_without_device("cuda_flashinfer_prefill")) return skip;
    std::mt19937_64 rng(46);
    dense<kvpolicy::bf16>(rng);
    dense<kvpolicy::fp16>(rng);
    // 1000 tokens, 256 under the sanitizers (KVPOLICY_CUDA_TEST_SCALE=small): every path still runs.
    const auto n =
        static_cast<std::uint32_t>(std::max<std::size_t>(1000 / kvpolicy::cuda::testing::large_input_divisor(), 256));
    sparse<kvpolicy::bf16>(rng, n, 40, 60, "columns and slashes");
    sparse<kvpolicy::fp16>(rng, n, 40, 60, "columns and slashes");
    sparse<kvpolicy::bf16>(rng, 333, 1, 300, "slashes covering nearly every column");
    std::printf("cuda_flashinfer_prefill: %d failure(s)\n", kvpolicy::cuda::testing::failures);
    return kvpolicy::cuda::testing::failures == 0 ? 0 : 1;
}
