// FlashInfer's decode through kvpolicy's adapter (flashinfer/decode.cuh),
// against kvpolicy's double-precision reference (sparse/reference_attention.hpp)
// over the same bf16 / fp16 values, 32 query / 8 KV heads, head_dim 128:
// - dense: batch_decode over every page of a batch of ragged requests whose
//   page tables are shuffled, and single_decode over one request's
//   contiguous K and V;
// - Quest-sparse: device Quest's metadata, select_top_device per request
//   (no host round trip), the device conversion (cuda/quest_paged_kv.cuh)
//   into FlashInfer's indices, batch_decode over them; the indices equal the
//   host conversion of the positions the top-K chose, and the output equals
//   the reference over exactly those pages;
// - bad input (a budget of 0, a page out of range, mismatched head counts, an
//   empty request, a head_dim not instantiated) refused before any launch:
//   checked first, so they run even on a machine without a GPU.
#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/cuda/flashinfer/decode.cuh>
#include <kvpolicy/cuda/quest.cuh>
#include <kvpolicy/cuda/quest_paged_kv.cuh>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/paged_kv_indices.hpp>
#include <kvpolicy/sparse/paged_kv_row.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_16bit_vectors.cuh"
#include "cuda_test.cuh"
#include "cuda_test_data.cuh"

namespace flashinfer_decode_test {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
using namespace kvpolicy::cuda::testing;
namespace fi = kvpolicy::cuda::flashinfer;

constexpr std::uint32_t q_heads = 32, kv_heads = 8, d = 128, page = 16;

// Reference over the pages `table` lists, `tokens` of them valid.
std::vector<float> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             const std::vector<std::int32_t>& table, std::uint64_t tokens) {
    std::vector<block_id> blocks;
    for (std::int32_t p : table) blocks.push_back(block_id{static_cast<std::uint32_t>(p)});
    std::vector<float> o(q_heads * d), lse(q_heads);
    reference_decode_attention(q, {k, v, 0}, blocks, tokens,
                               {.num_q_heads = q_heads,
                                .num_kv_heads = kv_heads,
                                .head_dim = d,
                                .block_size = page,
                                .scale = 1.0f / std::sqrt(float{d})},
                               o, lse);
    return o;
}

int compare(const char* what, const std::vector<float>& got, const std::vector<float>& want, float tol) {
    float worst = 0.0f;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const float err = std::abs(got[i] - want[i]) / (1.0f + std::abs(want[i]));
        worst = std::max(worst, err);
        bad += err > tol ? 1 : 0;
    }
    std::printf("  %-48s max rel error %.2e (tolerance %.0e)\n", what, worst, tol);
    KVPOLICY_EXPECT(bad == 0);
    return static_cast<int>(bad);
}

void bad_input() {
    std::printf("bad input, refused before any launch\n");
    const std::vector<std::int32_t> table{0, 1, 2};
    const quest_config cfg{
        .num_layers = 1, .num_blocks = 8, .num_kv_heads = kv_heads, .head_dim = d, .token_budget = 0};
    const std::vector<quest_paged_request> reqs{{40, table}};
    KVPOLICY_EXPECT(throws<config_error>([&] { (void)plan_quest_paged_rows(reqs, page, 8, cfg); }));
    fi::device_paged_kv_buffer buffer;
    const std::vector<std::int32_t> indptr{0, 3}, out_of_range{0, 1, 9}, last{5};
    KVPOLICY_EXPECT(
        throws<usage_error>([&] { buffer.upload(page, indptr, out_of_range, last, 8, cudaStreamPerThread); }));
    const std::vector<std::int32_t> empty_request{0, 3, 3};
    fi::batch_decode<bf16> decode;
    const fi::attention_heads heads{.num_q_heads = q_heads, .num_kv_heads = kv_heads};
    KVPOLICY_EXPECT(throws<usage_error>([&] { decode.plan(empty_request, heads, page); }));
    KVPOLICY_EXPECT(throws<usage_error>([&] { decode.plan(indptr, {.num_q_heads = 30, .num_kv_heads = 8}, page); }));
    KVPOLICY_EXPECT(throws<config_error>([&] { decode.plan(indptr, {.num_q_heads = 40, .num_kv_heads = 8}, page); }));
    KVPOLICY_EXPECT(throws<config_error>(
        [&] { decode.plan(indptr, {.num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = 64}, page); }));
    KVPOLICY_EXPECT(throws<config_error>([&] { decode.plan(indptr, heads, 0); }));
    KVPOLICY_EXPECT(throws<usage_error>([&] {  // nothing planned
        decode.run({}, {}, {}, {});
    }));
    KVPOLICY_EXPECT(
        throws<usage_error>([&] { fi::single_decode<bf16>({}, {}, {}, 0, heads, {}, {}, cudaStreamPerThread); }));
}

// A cache of `num_pages` pages, K and V in separate arrays, values drawn once.
template <class T>
struct cache {
    std::vector<float> k, v;  // the T values, widened
    device_buffer<T> dk, dv;
    cache(std::mt19937_64& rng, std::uint32_t num_pages) {
        const std::size_t n = std::size_t{num_pages} * page * kv_heads * d;
        k = to_floats(to_elements<T>(random_floats(rng, n)));
        v = to_floats(to_elements<T>(random_floats(rng, n)));
        upload(to_elements<T>(k), dk);
        upload(to_elements<T>(v), dv);
    }
    fi::paged_kv_cache<T> view(std::uint32_t num_pages) const {
        const std::size_t n = std::size_t{num_pages} * page * kv_heads * d;
        return {.k = device_span<const T>{dk.get(), n},
                .v = device_span<const T>{dv.get(), n},
                .num_pages = num_pages,
                .page_size = page,
                .num_kv_heads = kv_heads};
    }
};

template <class T>
void dense(std::mt19937_64& rng) {
    std::printf("dense decode, %s\n", element_name<T>());
    constexpr std::uint32_t num_pages = 1200;
    cache<T> c(rng, num_pages);
    const std::vector<std::uint64_t> lengths{1, 17, 4000, 333, 16 * 60};
    std::vector<std::int32_t> pool(num_pages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<std::int32_t> indptr{0}, indices, last;
    for (std::uint64_t n : lengths) {
        const auto blocks = static_cast<std::int32_t>((n + page - 1) / page);
        indices.insert(indices.end(), pool.begin() + indptr.back(), pool.begin() + indptr.back() + blocks);
        indptr.push_back(indptr.back() + blocks);
        last.push_back(static_cast<std::int32_t>(n - (blocks - 1) * std::uint64_t{page}));
    }
    const auto batch = static_cast<std::uint32_t>(lengths.size());
    const std::vector<float> q = to_floats(to_elements<T>(random_floats(rng, std::size_t{batch} * q_heads * d)));
    device_buffer<T> dq, dout;
    upload(to_elements<T>(q), dq);
    dout.reserve(q.size());
    fi::device_paged_kv_buffer idx;
    const stream_handle stream;
    idx.upload(page, indptr, indices, last, num_pages, stream.get());
    fi::batch_decode<T> decode(stream.get());
    decode.plan(indptr, {.num_q_heads = q_heads, .num_kv_heads = kv_heads}, page);
    decode.run(device_span<const T>{dq.get(), q.size()}, c.view(num_pages), idx.view(), dout.view(q.size()));
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const std::vector<float> got = to_floats(download(dout.get(), q.size()));
    for (std::uint32_t r = 0; r < batch; ++r) {
        const std::vector<float> qr(q.begin() + std::ptrdiff_t{r} * q_heads * d,
                                    q.begin() + std::ptrdiff_t{r + 1} * q_heads * d);
        const std::vector<std::int32_t> table(indices.begin() + indptr[r], indices.begin() + indptr[r + 1]);
        const std::vector<float> want = reference(qr, c.k, c.v, table, lengths[r]);
        const std::vector<float> gr(got.begin() + std::ptrdiff_t{r} * q_heads * d,
                                    got.begin() + std::ptrdiff_t{r + 1} * q_heads * d);
        const std::string what = "batch_decode request of " + std::to_string(lengths[r]) + " tokens";
        compare(what.c_str(), gr, want, element_tolerance<T>());
    }

    // single_decode: one request's pages contiguous (pages 0 .. n/page - 1 in order).
    const std::uint32_t tokens = 5000;
    std::vector<std::int32_t> contiguous((tokens + page - 1) / page);
    std::iota(contiguous.begin(), contiguous.end(), 0);
    const std::vector<float> q1(q.begin(), q.begin() + q_heads * d);
    const std::size_t kv_values = std::size_t{tokens} * kv_heads * d;
    device_buffer<T> tmp(fi::single_decode_tmp_elements(tokens, q_heads));
    for (const bool split : {false, true}) {
        fi::single_decode<T>(device_span<const T>{dq.get(), q1.size()}, device_span<const T>{c.dk.get(), kv_values},
                             device_span<const T>{c.dv.get(), kv_values}, tokens,
                             {.num_q_heads = q_heads, .num_kv_heads = kv_heads}, dout.view(q1.size()),
                             split ? tmp.view() : device_span<T>{}, stream.get());
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        compare(split ? "single_decode, split over the GPU" : "single_decode, one CTA per KV head",
                to_floats(download(dout.get(), q1.size())), reference(q1, c.k, c.v, contiguous, tokens),
                element_tolerance<T>());
    }
}

template <class T>
void quest_sparse(std::mt19937_64& rng) {
    std::printf("Quest-sparse decode, %s\n", element_name<T>());
    constexpr std::uint32_t num_pages = 2048;
    cache<T> c(rng, num_pages);
    const stream_handle stream;
    // Quest's metadata: key block p is page p (K only, packed pages).
    const quest_config cfg{
        .num_layers = 1, .num_blocks = num_pages, .num_kv_heads = kv_heads, .head_dim = d, .token_budget = 512};
    basic_device_quest<T> quest(cfg, stream.get());
    {
        std::vector<std::uint32_t> ids(num_pages), valid(num_pages, page);
        std::iota(ids.begin(), ids.end(), 0u);
        device_buffer<std::uint32_t> dids, dvalid;
        upload(ids, dids);
        upload(valid, dvalid);
        quest.on_offload_blocks(layer_index{0},
                                device_span<const T>{c.dk.get(), std::size_t{num_pages} * page * kv_heads * d},
                                std::size_t{page} * kv_heads * d, dids.view(num_pages), dvalid.view(num_pages));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    }
    const std::vector<std::uint64_t> lengths{16 * 300 + 5, 16 * 31, 16 * 600};  // ragged, under the budget, long
    std::vector<std::int32_t> pool(num_pages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<std::vector<std::int32_t>> tables;
    std::vector<quest_paged_request> reqs;
    std::size_t used = 0;
    for (std::uint64_t n : lengths) {
        const std::size_t blocks = (n + page - 1) / page;
        tables.emplace_back(pool.begin() + static_cast<std::ptrdiff_t>(used),
                            pool.begin() + static_cast<std::ptrdiff_t>(used + blocks));
        used += blocks;
    }
    for (std::size_t r = 0; r < lengths.size(); ++r) reqs.push_back({lengths[r], tables[r]});
    const quest_paged_layout layout = plan_quest_paged_rows(reqs, page, num_pages, cfg);
    device_quest_paged_layout dlayout;
    dlayout.upload(layout, stream.get());

    // Per request: its query (fp32 for Quest's scores, T for the attention), its candidates (its middle pages in
    // order), select_top_device into its slice of the positions.
    const auto batch = static_cast<std::uint32_t>(lengths.size());
    const std::vector<float> q = to_floats(to_elements<T>(random_floats(rng, std::size_t{batch} * q_heads * d)));
    device_buffer<float> dq32;
    device_buffer<T> dq, dout;
    upload(q, dq32);
    upload(to_elements<T>(q), dq);
    dout.reserve(q.size());
    device_buffer<std::uint32_t> positions(std::max<std::uint32_t>(layout.positions, 1));
    poison(positions.view());
    device_buffer<select_status> status(batch);
    device_buffer<std::uint32_t> flags(batch);
    std::vector<device_buffer<std::uint32_t>> candidates(batch);
    device_buffer<std::byte> temp;
    for (std::uint32_t r = 0; r < batch; ++r) {
        const quest_paged_row& row = layout.rows[r];
        if (row.keep == 0) continue;
        std::vector<std::uint32_t> cand;
        for (std::uint32_t b = row.middle_begin; b < row.middle_end; ++b)
            cand.push_back(static_cast<std::uint32_t>(tables[r][b]));
        upload(cand, candidates[r]);
        const auto query =
            device_span<const float>{dq32.get() + std::size_t{r} * q_heads * d, std::size_t{q_heads} * d};
        std::size_t bytes = 0;
        quest.select_top_device({}, bytes, layer_index{0}, candidates[r].view(cand.size()), query, q_heads, row.keep,
                                positions.view().subspan(row.positions_begin, row.keep), status.view().subspan(r, 1),
                                flags.view().subspan(r, 1));
        temp.reserve(bytes);
        quest.select_top_device(temp.view(), bytes, layer_index{0}, candidates[r].view(cand.size()), query, q_heads,
                                row.keep, positions.view().subspan(row.positions_begin, row.keep),
                                status.view().subspan(r, 1), flags.view().subspan(r, 1));
    }
    device_buffer<std::int32_t> indices(layout.indptr.back()), last(batch);
    dlayout.write(device_span<const std::uint32_t>{positions.get(), layout.positions}, indices.view(), last.view(),
                  stream.get());
    fi::batch_decode<T> decode(stream.get());
    decode.plan(layout.indptr, {.num_q_heads = q_heads, .num_kv_heads = kv_heads}, page);
    const fi::device_paged_kv_indices view{page, dlayout.indptr(), indices.view(), last.view()};
    decode.run(device_span<const T>{dq.get(), q.size()}, c.view(num_pages), view, dout.view(q.size()));
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    // The indices equal the host conversion of what the top-K chose.
    const std::vector<std::uint32_t> chosen_positions = download(positions.get(), layout.positions);
    std::vector<std::vector<std::uint32_t>> chosen(batch);
    for (std::uint32_t r = 0; r < batch; ++r) {
        const quest_paged_row& row = layout.rows[r];
        for (std::uint32_t b = 0; b < row.middle_begin; ++b) chosen[r].push_back(b);
        for (std::uint32_t i = 0; i < row.keep; ++i)
            chosen[r].push_back(row.middle_begin + chosen_positions[row.positions_begin + i]);
        for (std::uint32_t b = row.middle_end; b < row.num_blocks; ++b) chosen[r].push_back(b);
    }
    std::vector<quest_request_pages> host;
    for (std::uint32_t r = 0; r < batch; ++r) host.push_back({tables[r], lengths[r], chosen[r]});
    const paged_kv_indices want = quest_paged_kv_indices(host, page);
    const std::vector<std::int32_t> got_indices = download(indices.get(), want.indices.size());
    const std::vector<std::int32_t> got_last = download(last.get(), batch);
    KVPOLICY_EXPECT(got_indices == want.indices);
    KVPOLICY_EXPECT(got_last == want.last_page_len);
    std::printf("  device conversion equals the host one: %s\n",
                got_indices == want.indices && got_last == want.last_page_len ? "yes" : "NO");

    // The batched selection (two launches for the batch) chooses the same
    // pages per request, in position order, and its indices are the same.
    device_buffer<std::uint32_t> batched(std::max<std::uint32_t>(layout.positions, 1));
    poison(batched.view());
    device_buffer<select_status> batched_status(batch);
    device_buffer<std::uint32_t> batched_flags(batch);
    quest.select_top_paged(layer_index{0}, dlayout, device_span<const float>{dq32.get(), q.size()}, q_heads,
                           batched.view(), batched_status.view(), batched_flags.view());
    device_buffer<std::int32_t> batched_indices(layout.indptr.back()), batched_last(batch);
    dlayout.write(device_span<const std::uint32_t>{batched.get(), layout.positions}, batched_indices.view(),
                  batched_last.view(), stream.get());
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const std::vector<std::uint32_t> batched_positions = download(batched.get(), layout.positions);
    const std::vector<select_status> statuses = download(batched_status.get(), batch);
    const std::vector<std::uint32_t> flags_back = download(batched_flags.get(), batch);
    for (std::uint32_t r = 0; r < batch; ++r) {
        const quest_paged_row& row = layout.rows[r];
        const auto first = std::ptrdiff_t{row.positions_begin}, last_one = first + std::ptrdiff_t{row.keep};
        std::vector<std::uint32_t> one(chosen_positions.begin() + first, chosen_positions.begin() + last_one);
        std::sort(one.begin(), one.end());
        const std::vector<std::uint32_t> mine(batched_positions.begin() + first, batched_positions.begin() + last_one);
        KVPOLICY_EXPECT(mine == one);  // the same set, already in position order
        KVPOLICY_EXPECT(statuses[r].nan_count == 0 && statuses[r].selected == row.keep && flags_back[r] == 0);
    }
    KVPOLICY_EXPECT(download(batched_indices.get(), want.indices.size()) == want.indices);
    KVPOLICY_EXPECT(download(batched_last.get(), batch) == want.last_page_len);
    std::printf("  batched selection equals the per-request one: %s\n",
                download(batched_indices.get(), want.indices.size()) == want.indices ? "yes" : "NO");

    // Attention over exactly those pages.
    const std::vector<float> got = to_floats(download(dout.get(), q.size()));
    for (std::uint32_t r = 0; r < batch; ++r) {
        const std::vector<float> qr(q.begin() + std::ptrdiff_t{r} * q_heads * d,
                                    q.begin() + std::ptrdiff_t{r + 1} * q_heads * d);
        const std::vector<std::int32_t> table(want.pages(r).begin(), want.pages(r).end());
        const std::vector<float> gr(got.begin() + std::ptrdiff_t{r} * q_heads * d,
                                    got.begin() + std::ptrdiff_t{r + 1} * q_heads * d);
        const std::string what =
            "sparse request of " + std::to_string(lengths[r]) + " tokens, " + std::to_string(table.size()) + " pages";
        compare(what.c_str(), gr, reference(qr, c.k, c.v, table, want.kv_len(r)), element_tolerance<T>());
    }
}

}  // namespace flashinfer_decode_test

int main() {
    using namespace flashinfer_decode_test;
    bad_input();
    if (kvpolicy::cuda::testing::failures != 0) return 1;
    if (const int skip = kvpolicy::cuda::testing::skip_without_device("cuda_flashinfer_decode")) return skip;
    std::mt19937_64 rng(46);
    dense<kvpolicy::bf16>(rng);
    dense<kvpolicy::fp16>(rng);
    quest_sparse<kvpolicy::bf16>(rng);
    quest_sparse<kvpolicy::fp16>(rng);
    std::printf("cuda_flashinfer_decode: %d failure(s)\n", kvpolicy::cuda::testing::failures);
    return kvpolicy::cuda::testing::failures == 0 ? 0 : 1;
}
