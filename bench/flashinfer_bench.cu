// kvpolicy's selections with FlashInfer's kernels attending (issue 46), each
// row against its baseline in the same run. 32 query / 8 KV heads, head dim
// 128, bf16 K/V/q/o (fp32 accumulation inside the kernels), 16-token pages.
//
// - dense decode, one request, 2K / 4K / 32K / 128K tokens: FlashInfer's
//   batch decode (one request over its pages: plan once, run timed), its
//   single-request decode (contiguous K/V, split over the GPU), and
//   kvpolicy's own split-KV kernel (cuda/attention.cuh, best of 16..256
//   splits) as the baseline of both;
// - Quest, 2048-token budget, 1 and 16 requests at 32K and 128K: end to end
//   (per request the device query check, scores and top-K, then the device
//   conversion to FlashInfer's indices and FlashInfer's decode over the
//   chosen pages; no host round trip, plans made once per layout outside
//   the timing) against FlashInfer's dense batch decode of the same batch;
//   and score + top-K alone for one request;
// - MInference, default (1000, 6096) budget, 32K / 64K / 128K (--tokens):
//   estimate (kvpolicy's cuda/minference.cuh, fp32 q/k: its only input type),
//   the index to the host, the host conversion to FlashInfer's two launches
//   (minference_sparse_prefill_indices), their upload and plans, and the
//   sparse prefill (two launches and the LSE merge), against FlashInfer's
//   dense causal prefill; the GPU-only part (estimate + sparse prefill, the
//   conversion excluded) on its own row, since a device conversion would take
//   the host's place;
// - victim selection, k = 1% of 10^6 and 10^7 float scores: cub::DeviceTopK
//   (flashinfer/top_k.cuh) against select.cuh's radix select, same output.
// Medians of --reps runs after a warm-up (default 20; prefill rows 3, and a
// first run of a second or more is the measurement). --json FILE writes one
// object per row: section, name, tokens, requests, us, baseline, baseline_us,
// ratio (baseline_us / us: above 1, faster than the baseline).
//
//   flashinfer_bench [--reps N] [--json FILE] [--tokens N[,N...]]   (MInference lengths; default 32768,65536,131072)
#include <kvpolicy/cuda/attention.cuh>
#include <kvpolicy/cuda/flashinfer/decode.cuh>
#include <kvpolicy/cuda/flashinfer/prefill.cuh>
#include <kvpolicy/cuda/flashinfer/top_k.cuh>
#include <kvpolicy/cuda/minference.cuh>
#include <kvpolicy/cuda/quest.cuh>
#include <kvpolicy/cuda/quest_paged_kv.cuh>
#include <kvpolicy/cuda/select.cuh>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/paged_kv_indices.hpp>
#include <kvpolicy/sparse/paged_kv_row.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_bench.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace flashinfer_bench {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
namespace fi = kvpolicy::cuda::flashinfer;

namespace {

constexpr std::uint32_t q_heads = 32, kv_heads = 8, d = 128, page = 16;
constexpr std::size_t token_values = std::size_t{kv_heads} * d;  // one token of K (or V)
const fi::attention_heads heads{.num_q_heads = q_heads, .num_kv_heads = kv_heads};

struct row_writer {
    bench::json_rows json;
    void add(const char* section, const std::string& name, std::uint32_t tokens, std::uint32_t requests, double us,
             const std::string& baseline, double baseline_us) {
        const double ratio = baseline_us / us;
        std::printf("  %-44s %8u tok %3u req %12.1f us   vs %-30s %12.1f us   %7.2fx\n", name.c_str(), tokens, requests,
                    us, baseline.c_str(), baseline_us, ratio);
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "{\"section\": \"%s\", \"name\": \"%s\", \"tokens\": %u, \"requests\": %u, \"us\": %.3f, "
                      "\"baseline\": \"%s\", \"baseline_us\": %.3f, \"ratio\": %.4f}",
                      section, name.c_str(), tokens, requests, us, baseline.c_str(), baseline_us, ratio);
        json.add(buf);
    }
};

// K and V of `pages` packed pages, separate arrays; page p of request r at p.
struct paged_cache {
    device_buffer<bf16> k, v;
    std::uint32_t pages;
    explicit paged_cache(std::uint32_t num_pages)
            : k(std::size_t{num_pages} * page * token_values),
              v(std::size_t{num_pages} * page * token_values),
              pages(num_pages) {
        bench::fill_uniform(k.get(), std::size_t{num_pages} * page * token_values, 1);
        bench::fill_uniform(v.get(), std::size_t{num_pages} * page * token_values, 2);
    }
    [[nodiscard]] fi::paged_kv_cache<bf16> view() const {
        const std::size_t n = std::size_t{pages} * page * token_values;
        return {.k = device_span<const bf16>{k.get(), n},
                .v = device_span<const bf16>{v.get(), n},
                .num_pages = pages,
                .page_size = page,
                .num_kv_heads = kv_heads};
    }
};

// kvpolicy's own split-KV decode over the first `blocks` pages, best of a few splits.
double own_decode_us(cudaStream_t stream, int reps, const paged_cache& c, device_span<const std::uint32_t> table,
                     std::uint32_t tokens, device_buffer<float>& q32, device_buffer<float>& o32,
                     device_buffer<float>& lse) {
    const basic_paged_decode_args<bf16> args{.q = q32.view(std::size_t{q_heads} * d),
                                             .k_cache = device_span<const bf16>{c.k.get(), c.view().k.size()},
                                             .v_cache = device_span<const bf16>{c.v.get(), c.view().v.size()},
                                             .block_stride = 0,
                                             .block_table = table.first((tokens + page - 1) / page),
                                             .num_tokens = tokens,
                                             .shape = {.num_q_heads = q_heads,
                                                       .num_kv_heads = kv_heads,
                                                       .head_dim = d,
                                                       .block_size = page,
                                                       .scale = heads.scale()},
                                             .o = o32.view(std::size_t{q_heads} * d),
                                             .lse = lse.view(q_heads)};
    double best = 1e30;
    for (std::uint32_t splits : {16u, 32u, 64u, 128u, 256u}) {
        std::size_t bytes = 0;
        paged_decode_attention_split({}, bytes, args, splits, stream);
        device_buffer<std::byte> temp(bytes);
        best = std::min(best, bench::time_gpu_us(stream, reps, [&] {
                            paged_decode_attention_split(temp.view(), bytes, args, splits, stream);
                        }));
    }
    return best;
}

void dense_decode(cudaStream_t stream, int reps, row_writer& out) {
    std::printf("\ndense decode, one request, bf16 (baseline: kvpolicy's own split-KV kernel)\n");
    constexpr std::uint32_t max_tokens = 131072, max_pages = max_tokens / page;
    paged_cache c(max_pages);
    std::vector<std::uint32_t> ids(max_pages);
    std::iota(ids.begin(), ids.end(), 0u);
    device_buffer<std::uint32_t> table(max_pages);
    KVPOLICY_CUDA_CHECK(cudaMemcpy(table.get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    device_buffer<float> q32(q_heads * d), o32(q_heads * d), lse(q_heads);
    device_buffer<bf16> q(q_heads * d), o(q_heads * d);
    bench::fill_uniform(q32.get(), q_heads * d, 3);
    bench::fill_uniform(q.get(), q_heads * d, 3);
    fi::batch_decode<bf16> decode(stream);
    fi::device_paged_kv_buffer idx;
    for (std::uint32_t tokens : {2048u, 4096u, 32768u, 131072u}) {
        const std::uint32_t pages = tokens / page;
        const std::vector<std::int32_t> indptr{0, static_cast<std::int32_t>(pages)},
            last{static_cast<std::int32_t>(page)};
        const std::vector<std::int32_t> indices(ids.begin(), ids.begin() + pages);
        idx.upload(page, indptr, indices, last, max_pages, stream);
        decode.plan(indptr, heads, page);
        const device_span<const bf16> qv{q.get(), std::size_t{q_heads} * d};
        const double batch_us =
            bench::time_gpu_us(stream, reps, [&] { decode.run(qv, c.view(), idx.view(), o.view()); });
        device_buffer<bf16> tmp(fi::single_decode_tmp_elements(tokens, q_heads));
        const std::size_t kvv = std::size_t{tokens} * token_values;
        const double single_us = bench::time_gpu_us(stream, reps, [&] {
            fi::single_decode<bf16>(qv, device_span<const bf16>{c.k.get(), kvv},
                                    device_span<const bf16>{c.v.get(), kvv}, tokens, heads, o.view(), tmp.view(),
                                    stream);
        });
        const double own_us = own_decode_us(stream, reps, c, table.view(), tokens, q32, o32, lse);
        out.add("dense_decode", "flashinfer batch_decode (1 request)", tokens, 1, batch_us, "kvpolicy split-KV decode",
                own_us);
        out.add("dense_decode", "flashinfer single_decode", tokens, 1, single_us, "kvpolicy split-KV decode", own_us);
        out.add("dense_decode", "flashinfer single_decode vs batch_decode", tokens, 1, single_us,
                "flashinfer batch_decode (1 request)", batch_us);
    }
}

void quest_rows(cudaStream_t stream, int reps, row_writer& out) {
    std::printf("\nQuest, 2048-token budget, bf16 (baseline: FlashInfer dense batch decode of the same batch)\n");
    constexpr std::uint32_t budget = 2048;
    for (std::uint32_t tokens : {32768u, 131072u}) {
        for (std::uint32_t requests : {1u, 16u}) {
            const std::uint32_t blocks = tokens / page, pages = blocks * requests;
            paged_cache c(pages);
            const quest_config cfg{
                .num_layers = 1, .num_blocks = pages, .num_kv_heads = kv_heads, .head_dim = d, .token_budget = budget};
            basic_device_quest<bf16> q_sel(cfg, stream);
            std::vector<std::uint32_t> ids(pages), valid(pages, page);
            std::iota(ids.begin(), ids.end(), 0u);
            device_buffer<std::uint32_t> dids(pages), dvalid(pages);
            KVPOLICY_CUDA_CHECK(cudaMemcpy(dids.get(), ids.data(), pages * 4ul, cudaMemcpyHostToDevice));
            KVPOLICY_CUDA_CHECK(cudaMemcpy(dvalid.get(), valid.data(), pages * 4ul, cudaMemcpyHostToDevice));
            q_sel.on_offload_blocks(layer_index{0}, c.view().k, std::size_t{page} * token_values, dids.view(pages),
                                    dvalid.view(pages));
            // Layout: request r owns pages [r * blocks, (r + 1) * blocks).
            std::vector<std::vector<std::int32_t>> tables(requests);
            std::vector<quest_paged_request> reqs;
            for (std::uint32_t r = 0; r < requests; ++r) {
                tables[r].resize(blocks);
                std::iota(tables[r].begin(), tables[r].end(), static_cast<std::int32_t>(r * blocks));
                reqs.push_back({tokens, tables[r]});
            }
            const quest_paged_layout layout = plan_quest_paged_rows(reqs, page, pages, cfg);
            device_quest_paged_layout dlayout;
            dlayout.upload(layout, stream);
            device_buffer<float> q32(std::size_t{requests} * q_heads * d);
            device_buffer<bf16> q(std::size_t{requests} * q_heads * d), o(std::size_t{requests} * q_heads * d);
            bench::fill_uniform(q32.get(), std::size_t{requests} * q_heads * d, 5);
            bench::fill_uniform(q.get(), std::size_t{requests} * q_heads * d, 5);
            device_buffer<std::uint32_t> positions(layout.positions), flags(requests);
            device_buffer<select_status> status(requests);
            device_buffer<std::int32_t> indices(layout.indptr.back()), last(requests);
            const quest_paged_row& row0 = layout.rows[0];
            const std::uint32_t middle = row0.middle_end - row0.middle_begin;
            std::size_t bytes = 0;
            q_sel.select_top_device({}, bytes, layer_index{0}, dids.view(middle), q32.view(q_heads * d), q_heads,
                                    row0.keep, positions.view(row0.keep), status.view(1), flags.view(1));
            device_buffer<std::byte> temp(bytes);
            const auto score_top_k = [&](std::uint32_t r) {
                const quest_paged_row& row = layout.rows[r];
                q_sel.select_top_device(temp.view(), bytes, layer_index{0},
                                        dids.view(pages).subspan(r * blocks + row.middle_begin, middle),
                                        q32.view(std::size_t{requests} * q_heads * d)
                                            .subspan(std::size_t{r} * q_heads * d, std::size_t{q_heads} * d),
                                        q_heads, row.keep, positions.view().subspan(row.positions_begin, row.keep),
                                        status.view().subspan(r, 1), flags.view().subspan(r, 1));
            };
            fi::batch_decode<bf16> sparse(stream), dense(stream);
            sparse.plan(layout.indptr, heads, page);
            const fi::device_paged_kv_indices sparse_idx{page, dlayout.indptr(), indices.view(), last.view()};
            const auto qv = device_span<const bf16>{q.get(), std::size_t{requests} * q_heads * d};
            const double quest_us = bench::time_gpu_us(stream, reps, [&] {
                for (std::uint32_t r = 0; r < requests; ++r) score_top_k(r);
                dlayout.write(positions.view(), indices.view(), last.view(), stream);
                sparse.run(qv, c.view(), sparse_idx, o.view());
            });
            std::vector<std::int32_t> indptr{0}, all_pages(pages), full_last(requests, static_cast<std::int32_t>(page));
            std::iota(all_pages.begin(), all_pages.end(), 0);
            for (std::uint32_t r = 0; r < requests; ++r) indptr.push_back(static_cast<std::int32_t>((r + 1) * blocks));
            fi::device_paged_kv_buffer dense_idx;
            dense_idx.upload(page, indptr, all_pages, full_last, pages, stream);
            dense.plan(indptr, heads, page);
            const double dense_us =
                bench::time_gpu_us(stream, reps, [&] { dense.run(qv, c.view(), dense_idx.view(), o.view()); });
            // The batched selection: every request's scores in one launch, its top-K in one CTA of another.
            const auto batched_select = [&] {
                q_sel.select_top_paged(layer_index{0}, dlayout, q32.view(std::size_t{requests} * q_heads * d), q_heads,
                                       positions.view(), status.view(requests), flags.view(requests));
            };
            const double batched_us = bench::time_gpu_us(stream, reps, [&] {
                batched_select();
                dlayout.write(positions.view(), indices.view(), last.view(), stream);
                sparse.run(qv, c.view(), sparse_idx, o.view());
            });
            out.add("quest", "quest end to end (score+topK+indices+decode)", tokens, requests, quest_us,
                    "flashinfer dense batch_decode", dense_us);
            out.add("quest", "quest end to end, batched select_top_paged", tokens, requests, batched_us,
                    "flashinfer dense batch_decode", dense_us);
            const double per_request_select_us = bench::time_gpu_us(stream, reps, [&] {
                for (std::uint32_t r = 0; r < requests; ++r) score_top_k(r);
            });
            const double batched_select_us = bench::time_gpu_us(stream, reps, batched_select);
            out.add("quest", "quest score + top-K, batched select_top_paged", tokens, requests, batched_select_us,
                    "select_top_device per request", per_request_select_us);
            if (requests == 1)
                out.add("quest", "quest score + top-K alone", tokens, 1, per_request_select_us,
                        "flashinfer dense batch_decode", dense_us);
        }
    }
}

__global__ void to_bf16_kernel(const float* x, bf16* y, std::size_t n) {
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
         i += std::size_t{gridDim.x} * blockDim.x)
        y[i] = to_bf16(x[i]);
}

void minference_rows(cudaStream_t stream, int reps, const std::vector<std::uint32_t>& lengths, row_writer& out) {
    std::printf("\nMInference, (1000, 6096), bf16 attention (baseline: FlashInfer dense causal prefill)\n");
    const minference_config mcfg{.adaptive_budget = std::nullopt, .vertical_size = 1000, .slash_size = 6096};
    for (std::uint32_t n : lengths) {
        const std::size_t qv = std::size_t{n} * q_heads * d, kvv = std::size_t{n} * token_values;
        device_buffer<float> q32(qv), k32(kvv), v32(kvv);
        bench::fill_uniform(q32.get(), qv, 11);
        bench::fill_uniform(k32.get(), kvv, 12);
        bench::fill_uniform(v32.get(), kvv, 13);
        device_buffer<bf16> q(qv), k(kvv), v(kvv), o(qv);
        to_bf16_kernel<<<1024, 256, 0, stream>>>(q32.get(), q.get(), qv);
        to_bf16_kernel<<<1024, 256, 0, stream>>>(k32.get(), k.get(), kvv);
        to_bf16_kernel<<<1024, 256, 0, stream>>>(v32.get(), v.get(), kvv);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto cq = device_span<const bf16>{q.get(), qv}, ck = device_span<const bf16>{k.get(), kvv},
                   cv = device_span<const bf16>{v.get(), kvv};
        const int prefill_reps = reps > 0 ? std::min(reps, 3) : 3;
        const double dense_us = bench::time_long_us(
            stream, prefill_reps, [&] { fi::dense_causal_prefill<bf16>(cq, ck, cv, n, heads, o.view(), stream); });
        device_minference est(mcfg, stream);
        const device_prefill_qkv_view in{.q = q32.view(qv),
                                         .k = k32.view(kvv),
                                         .v = v32.view(kvv),
                                         .num_tokens = n,
                                         .num_q_heads = q_heads,
                                         .num_kv_heads = kv_heads,
                                         .head_dim = d,
                                         .scale = heads.scale()};
        const double estimate_us = bench::time_long_us(stream, prefill_reps, [&] { est.estimate(in); });
        fi::minference_prefill<bf16> prefill(stream);
        const auto t0 = std::chrono::steady_clock::now();
        const vertical_slash_index index = est.copy_index(n);
        const auto t1 = std::chrono::steady_clock::now();
        const sparse_prefill_indices rows = minference_sparse_prefill_indices(index, kv_heads, 64, page);
        const auto t2 = std::chrono::steady_clock::now();
        prefill.set_indices(rows, heads);
        const auto t3 = std::chrono::steady_clock::now();
        const double sparse_us = bench::time_long_us(stream, prefill_reps, [&] { prefill.run(cq, ck, cv, o.view()); });
        const auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
        const double copy_us = us(t0, t1), convert_us = us(t1, t2), plan_us = us(t2, t3);
        const double e2e_us = estimate_us + copy_us + convert_us + plan_us + sparse_us;
        std::printf(
            "    %u tokens: estimate %.0f us, index to host %.0f us, host conversion %.0f us (%zu slash pages, "
            "%zu columns), upload + plans %.0f us, sparse prefill %.0f us\n",
            n, estimate_us, copy_us, convert_us, rows.slashes.indices.size(), rows.verticals.indices.size(), plan_us,
            sparse_us);
        out.add("minference", "minference end to end (host conversion)", n, 1, e2e_us,
                "flashinfer dense causal prefill", dense_us);
        out.add("minference", "minference estimate + sparse prefill (GPU)", n, 1, estimate_us + sparse_us,
                "flashinfer dense causal prefill", dense_us);
        out.add("minference", "minference sparse prefill alone", n, 1, sparse_us, "flashinfer dense causal prefill",
                dense_us);
    }
}

void victims(cudaStream_t stream, int reps, row_writer& out) {
    std::printf("\nvictim selection, k = 1%% lowest float scores (baseline: select.cuh radix select)\n");
    for (std::uint32_t n : {1000000u, 10000000u}) {
        const std::uint32_t k = n / 100;
        device_buffer<float> s(n);
        bench::fill_uniform(s.get(), n, 21);
        device_buffer<std::uint32_t> ids(k);
        device_buffer<select_status> st(1);
        const auto scores = device_span<const float>{s.get(), n};
        std::size_t topk_bytes = 0, radix_bytes = 0;
        fi::device_top_k_lowest({}, topk_bytes, scores, {}, ids.view(), k, st.view(), stream);
        select_lowest<float>({}, radix_bytes, scores, {}, ids.view(), k, st.view(), stream,
                             select_algorithm::radix_select);
        device_buffer<std::byte> temp(std::max(topk_bytes, radix_bytes));
        const double topk_us = bench::time_gpu_us(stream, reps, [&] {
            fi::device_top_k_lowest(temp.view(topk_bytes), topk_bytes, scores, {}, ids.view(), k, st.view(), stream);
        });
        const double radix_us = bench::time_gpu_us(stream, reps, [&] {
            select_lowest<float>(temp.view(radix_bytes), radix_bytes, scores, {}, ids.view(), k, st.view(), stream,
                                 select_algorithm::radix_select);
        });
        out.add("victims", "cub::DeviceTopK (flashinfer/top_k.cuh)", n, 1, topk_us, "radix select (select.cuh)",
                radix_us);
    }
}

}  // namespace
}  // namespace flashinfer_bench

int main(int argc, char** argv) {
    using namespace flashinfer_bench;
    const kvpolicy::bench::options opt = kvpolicy::bench::parse(argc, argv, /*takes_tokens=*/true);
    if (const int skip = kvpolicy::bench::skip_without_gpu("flashinfer_bench")) return skip;
    std::printf("flashinfer_bench on %s\n", kvpolicy::bench::gpu_name().c_str());
    const kvpolicy::cuda::stream_handle stream;
    const int reps = opt.reps > 0 ? opt.reps : 20;
    row_writer out;
    dense_decode(stream.get(), reps, out);
    quest_rows(stream.get(), reps, out);
    victims(stream.get(), reps, out);
    minference_rows(stream.get(), opt.reps,
                    opt.tokens.empty() ? std::vector<std::uint32_t>{32768, 65536, 131072} : opt.tokens, out);
    out.json.write(opt.json);
    return 0;
}
