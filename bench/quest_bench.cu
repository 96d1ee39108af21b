// Quest on the GPU: scoring every block and choosing the top-K, against full
// decode attention over the same context, at 32K and 128K tokens.
//
// Shape: 16-token blocks, 8 KV heads x 128 channels, 32 query heads (GQA 4),
// K and V (and Quest's metadata) in fp32, then bf16, then fp16, with fp32
// accumulation; token budget 4096 (256 blocks). Rows, per type and context
// length: full attention (split-KV, the best of 16..256 splits), Quest
// scoring + top-K (select_top_device: query check, scores and radix select
// enqueued back to back, no host round trip), attention over the 256 chosen
// blocks, and device_quest::select end to end (synchronous, host ids in and
// out). The ratio full / (score + top-K + sparse attention) is what Quest
// saves when the KV is already on the GPU. With the KV offloaded (pinned
// CPU memory, Quest's metadata on the GPU), the "offloaded K/V" line times
// loading every block then full attention against device_quest::select,
// loading the chosen blocks, then sparse attention. The bf16 full-attention rows print
// their ratio to PyTorch SDPA bf16 on an H100 (issue #13's 90.8 us at 32K,
// 207.9 us at 128K), meaningful only when this runs on an H100.
// Under each row, every figure with its bound: the bytes it must move at the
// device-to-device bandwidth measured in the same run (read + write).
// Medians of --reps runs (default 20).
//
//   quest_bench [--reps N] [--json FILE]
#include <kvpolicy/cuda/attention.cuh>
#include <kvpolicy/cuda/quest.cuh>
#include <kvpolicy/cuda/ring.cuh>
#include <kvpolicy/cuda/select.cuh>
#include <kvpolicy/sparse/kv_element.hpp>

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_bench.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace quest_bench {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

// PyTorch 2.11 SDPA, bf16, the same shape, on an H100 80GB HBM3 (issue #13):
// the figure the bf16 rows are compared with (its GPU, not this run's).
struct sdpa_reference {
    std::uint32_t tokens;
    double us;
};
constexpr sdpa_reference sdpa_bf16_h100[] = {{32768, 90.8}, {131072, 207.9}};

template <kv_element T>
const char* type_name() {
    return std::same_as<T, float> ? "fp32" : std::same_as<T, bf16> ? "bf16" : "fp16";
}

// Every row for K/V (and Quest metadata) stored as T; query, scores and
// arithmetic fp32.
template <kv_element T>
void run_type(int reps, double d2d, cudaStream_t stream, bench::json_rows& json) {
    constexpr std::uint32_t bs = 16, kv_heads = 8, q_heads = 32, d = 128, budget_tokens = 4096;
    const std::size_t block_values = 2ul * bs * kv_heads * d;  // [K | V] per block
    std::printf("\nK/V and Quest metadata in %s (fp32 accumulation)\n", type_name<T>());
    std::printf("%9s %7s %12s %7s %12s %12s %12s %12s %9s\n", "context", "blocks", "full us", "splits", "score+topK",
                "sparse attn", "quest total", "select() us", "full/qst");
    for (std::uint32_t tokens : {32768u, 131072u}) {
        const std::uint32_t blocks = tokens / bs;
        device_buffer<T> d_cache(blocks * block_values);
        device_buffer<float> d_q(q_heads * d), d_o(q_heads * d), d_lse(q_heads);
        bench::fill_uniform(d_cache.get(), blocks * block_values, tokens);
        bench::fill_uniform(d_q.get(), q_heads * d, 99);
        std::vector<std::uint32_t> ids(blocks), valid(blocks, bs);
        std::iota(ids.begin(), ids.end(), 0u);
        device_buffer<std::uint32_t> d_ids(blocks), d_valid(blocks), d_sel(blocks);
        KVPOLICY_CUDA_CHECK(cudaMemcpy(d_ids.get(), ids.data(), blocks * 4ul, cudaMemcpyHostToDevice));
        KVPOLICY_CUDA_CHECK(cudaMemcpy(d_valid.get(), valid.data(), blocks * 4ul, cudaMemcpyHostToDevice));
        KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());

        const decode_attention_shape shape{
            .num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = d, .block_size = bs, .scale = 0.088f};
        const auto args = [&](std::uint32_t n_blocks) {
            return basic_paged_decode_args<T>{.q = d_q.view(),
                                              .k_cache = d_cache.view(),
                                              .v_cache = d_cache.view().subspan(block_values / 2),
                                              .block_stride = block_values,
                                              .block_table = d_ids.view(n_blocks),
                                              .num_tokens = std::uint64_t{n_blocks} * bs,
                                              .shape = shape,
                                              .o = d_o.view(),
                                              .lse = d_lse.view()};
        };
        const auto split_attention = [&](std::uint32_t n_blocks, std::uint32_t& best_splits) {
            double best = 1e30;
            for (std::uint32_t splits : {16u, 32u, 64u, 128u, 256u}) {
                std::size_t bytes = 0;
                paged_decode_attention_split({}, bytes, args(n_blocks), splits, stream);
                device_buffer<std::byte> temp(bytes);
                const double us = bench::time_gpu_us(stream, reps, [&] {
                    paged_decode_attention_split(temp.view(), bytes, args(n_blocks), splits, stream);
                });
                if (us < best) {
                    best = us;
                    best_splits = splits;
                }
            }
            return best;
        };
        std::uint32_t full_splits = 0, sparse_splits = 0;
        const double full_us = split_attention(blocks, full_splits);

        const quest_config cfg{.num_layers = 1,
                               .num_blocks = blocks,
                               .num_kv_heads = kv_heads,
                               .head_dim = d,
                               .token_budget = budget_tokens};
        basic_device_quest<T> quest(cfg, stream);
        quest.on_offload_blocks(layer_index{0}, d_cache.view(std::size_t{blocks} * block_values), block_values,
                                d_ids.view(blocks), d_valid.view(blocks));
        const quest_plan plan = plan_quest_selection(blocks, bs, cfg);
        const auto middle = static_cast<std::uint32_t>(plan.middle_end - plan.middle_begin);
        const auto keep = static_cast<std::uint32_t>(plan.middle_keep);
        device_buffer<select_status> d_status(1);
        device_buffer<std::uint32_t> d_flag(1);
        const auto candidates = d_ids.view(blocks).subspan(plan.middle_begin, middle);
        const auto query = d_q.view(std::size_t{q_heads} * d);
        std::size_t bytes = 0;
        quest.select_top_device({}, bytes, layer_index{0}, candidates, query, q_heads, keep, d_sel.view(keep),
                                d_status.view(), d_flag.view());
        device_buffer<std::byte> temp(bytes);
        const double score_us = bench::time_gpu_us(stream, reps, [&] {
            quest.select_top_device(temp.view(), bytes, layer_index{0}, candidates, query, q_heads, keep,
                                    d_sel.view(keep), d_status.view(), d_flag.view());
        });
        const std::uint32_t budget_blocks = budget_tokens / bs;
        const double sparse_us = split_attention(budget_blocks, sparse_splits);

        std::vector<block_id> available(blocks), out(blocks);
        for (std::uint32_t i = 0; i < blocks; ++i) available[i] = block_id{i};
        const device_selection_context ctx{.layer = layer_index{0},
                                           .block_size = bs,
                                           .num_q_heads = q_heads,
                                           .num_kv_heads = kv_heads,
                                           .head_dim = d,
                                           .query = d_q.view(std::size_t{q_heads} * d)};
        const double select_us = bench::time_wall_us(reps, [&] { (void)quest.select(available, ctx, out); });

        // The offload case: K/V in pinned CPU memory (the CPU tier), Quest's
        // metadata on the GPU (kept at offload time). Full attention must
        // bring every block over PCIe first; Quest brings the blocks it
        // selects. Both load with the gather kernel into one ring slot and
        // attend over it (split-KV); wall time, host ids included.
        pinned_block_arena host(blocks, block_values * sizeof(T));
        KVPOLICY_CUDA_CHECK(
            cudaMemcpy(host.host_view().data(), d_cache.get(), host.host_view().size(), cudaMemcpyDeviceToHost));
        ring_loader ring(host, {.num_layers = 1,
                                .blocks_per_layer = blocks,
                                .num_slots = 1,
                                .slot_blocks = blocks,
                                .method = gather_method::gather_kernel});
        std::vector<block_id> all_ids(blocks), chosen(blocks);
        for (std::uint32_t i = 0; i < blocks; ++i) all_ids[i] = block_id{i};
        std::size_t slot_temp_bytes = 0;
        const auto slot_args = [&](std::uint32_t n_blocks) {
            const device_span<const T> slot = ring.template slot_view<T>(0);
            return basic_paged_decode_args<T>{.q = d_q.view(),
                                              .k_cache = slot,
                                              .v_cache = slot.subspan(block_values / 2),
                                              .block_stride = block_values,
                                              .block_table = d_ids.view(n_blocks),
                                              .num_tokens = std::uint64_t{n_blocks} * bs,
                                              .shape = shape,
                                              .o = d_o.view(),
                                              .lse = d_lse.view()};
        };
        paged_decode_attention_split({}, slot_temp_bytes, slot_args(blocks), full_splits, ring.compute_stream());
        device_buffer<std::byte> slot_temp(slot_temp_bytes);
        const auto load_and_attend = [&](std::span<const block_id> ids, std::uint32_t splits) {
            ring.load_to_slot(0, layer_index{0}, ids);
            ring.wait_slot(0);
            const auto n = static_cast<std::uint32_t>(ids.size());
            std::size_t bytes = 0;
            paged_decode_attention_split({}, bytes, slot_args(n), splits, ring.compute_stream());
            paged_decode_attention_split(slot_temp.view(), bytes, slot_args(n), splits, ring.compute_stream());
            ring.record_compute_done(0);
            ring.synchronize();
        };
        const double offload_full_us = bench::time_wall_us(reps, [&] { load_and_attend(all_ids, full_splits); });
        const double offload_quest_us = bench::time_wall_us(reps, [&] {
            const std::size_t n = quest.select(all_ids, ctx, chosen);
            load_and_attend(std::span<const block_id>(chosen).first(n), sparse_splits);
        });

        const double total = score_us + sparse_us;
        std::printf("%8uK %7u %12.1f %7u %12.1f %12.1f %12.1f %12.1f %8.1fx\n", tokens / 1024, blocks, full_us,
                    full_splits, score_us, sparse_us, total, select_us, full_us / total);
        // Bounds: K and V of the blocks read once (plus the query, o and
        // lse); Quest reads min and max (as T) per block and channel and
        // writes one score per candidate; top-K adds its ids.
        const double kv_bytes = static_cast<double>(sizeof(T)) * static_cast<double>(block_values);
        const double io_bytes = 4.0 * (2.0 * q_heads * d + q_heads);
        const double meta_bytes = 2.0 * sizeof(T) * static_cast<double>(blocks) * kv_heads * d;
        bench::print_bound("full attention", full_us, {static_cast<double>(blocks) * kv_bytes + io_bytes, d2d});
        bench::print_bound("Quest score + top-K", score_us,
                           {meta_bytes + 4.0 * q_heads * d + 8.0 * middle + 4.0 * keep, d2d});
        bench::print_bound("sparse attention", sparse_us,
                           {static_cast<double>(budget_blocks) * kv_bytes + io_bytes, d2d});
        std::printf(
            "    offloaded K/V (pinned CPU memory, gather kernel): load all + full attention %.1f us, "
            "Quest select + load chosen + sparse attention %.1f us: %.1fx\n",
            offload_full_us, offload_quest_us, offload_full_us / offload_quest_us);
        if constexpr (std::same_as<T, bf16>)
            for (const sdpa_reference& r : sdpa_bf16_h100)
                if (r.tokens == tokens)
                    std::printf(
                        "    full attention vs PyTorch SDPA bf16 on an H100 (issue #13: %.1f us; compare "
                        "only on an H100): SDPA / this = %.2fx\n",
                        r.us, r.us / full_us);
        std::fflush(stdout);
        json.add(std::string("{\"kv_type\": \"") + type_name<T>() + "\", \"tokens\": " + std::to_string(tokens) +
                 ", \"full_attention_us\": " + std::to_string(full_us) + ", \"quest_score_topk_us\": " +
                 std::to_string(score_us) + ", \"sparse_attention_us\": " + std::to_string(sparse_us) +
                 ", \"select_end_to_end_us\": " + std::to_string(select_us) + ", \"offload_full_us\": " +
                 std::to_string(offload_full_us) + ", \"offload_quest_us\": " + std::to_string(offload_quest_us) +
                 ", \"d2d_bytes_per_s\": " + std::to_string(d2d) + "}");
    }
}

}  // namespace

int run(int argc, char** argv) {
    const bench::options opt = bench::parse(argc, argv);
    if (int rc = bench::skip_without_gpu("quest_bench")) return rc;
    try {
        const int reps = opt.reps > 0 ? opt.reps : 20;
        std::printf("Quest scoring + top-K vs full decode attention; GPU: %s\n", bench::gpu_name().c_str());
        stream_handle stream;
        bench::json_rows json;
        const double d2d = bench::measure_d2d_bytes_per_s(stream.get());
        std::printf(
            "measured device-to-device bandwidth (read + write): %.0f GB/s; each figure's bound below is "
            "its bytes at that rate\n",
            d2d / 1e9);
        run_type<float>(reps, d2d, stream.get(), json);
        run_type<bf16>(reps, d2d, stream.get(), json);
        run_type<fp16>(reps, d2d, stream.get(), json);
        json.write(opt.json);
    } catch (const std::exception& e) {
        std::printf("quest_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace quest_bench

int main(int argc, char** argv) { return quest_bench::run(argc, argv); }
