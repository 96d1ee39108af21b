// MInference on the GPU: vertical-slash sparse prefill attention (index
// estimation + sparse attention) against dense causal prefill attention, both
// the CTA-tiled kernels of kvpolicy/cuda/minference.cuh, at 32K and 64K
// tokens by default (--tokens 131072 for 128K), one layer; and, at the
// smallest length only, the previous design (one warp per (query, head),
// kept in the header as the fallback) as the baseline of the tiled dense
// kernel, measured in the same run.
//
// Shape: 32 query heads, 8 KV heads (GQA 4), head dim 128, fp32 q/k/v.
// Rows per prompt length: dense causal attention; MInference with seed 004's
// adaptive budget 0.3 and with the paper's fixed sizes (1000 columns, 6096
// diagonals), each split into the estimation (last 64 queries' logits, row
// LSE, column/diagonal masses, top-k, sort) and the sparse attention. For
// every row: time, keys actually scored per query, achieved TFLOP/s, and the
// time the FLOP bound (keys scored x 4 x head_dim FLOPs per query-head, at
// the GPU's fp32 peak) and the bytes bound (q, k, v read once, o and lse
// written once, at the memory bandwidth) allow, so the kernels' distance
// from the hardware is visible next to the ratio. Random inputs have no
// vertical-slash structure, so accuracy is not the point here (the tests
// cover it); the kernels' work depends only on the index sizes (and on how
// the kept diagonals spread: random inputs spread them evenly, so their key
// intervals cover nearly every key of each query block and the tiled sparse
// kernel does close to dense tile work). Medians of --reps runs after a
// warm-up (default 3); without --reps, a row whose first run takes a second
// or more is timed by that run alone (launch and lazy loading cost
// microseconds against seconds). Default lengths 32K and 64K: at 10 TFLOP/s
// the default run takes about 50 s (the warp-per-query baseline at 32K about
// 9 s of it); 128K rows are 1.4e14 FLOP each, 14 s per dense run.
//
//   minference_bench [--reps N] [--json FILE] [--tokens N[,N...]]   (default 32768,65536)
#include <kvpolicy/cuda/minference.cuh>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_bench.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace minference_bench {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

struct peaks {
    double fp32_flops;  // per second
    double bytes;       // per second
};

peaks device_peaks() {
    int dev = 0, sms = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0, major = 0;
    KVPOLICY_CUDA_CHECK(cudaGetDevice(&dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    KVPOLICY_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const double lanes = major == 8 ? 64.0 : 128.0;  // fp32 lanes per SM: sm_80 64, sm_86 .. sm_90 128 (sm_86 too)
    return {static_cast<double>(sms) * lanes * 2.0 * clock_khz * 1e3, 2.0 * mem_khz * 1e3 * bus_bits / 8.0};
}

// Median microseconds of `reps` runs after a warm-up; with `long_once`, a
// first run of a second or more is the measurement.
template <class F>
double time_row_us(cudaStream_t stream, int reps, bool long_once, F&& enqueue) {
    return long_once ? bench::time_long_us(stream, reps, enqueue) : bench::time_gpu_us(stream, reps, enqueue);
}

// The previous dense kernel: one warp per (query, head).
void dense_warp_per_query(const device_prefill_qkv_view& in, const device_prefill_output_view& out,
                          cudaStream_t stream) {
    namespace kd = kvpolicy::cuda::detail;
    kd::prefill_attention_kernel<true>
        <<<dim3(kd::blocks_for(in.num_tokens, kd::prefill_warps), in.num_q_heads), kd::prefill_warps * 32, 0, stream>>>(
            kd::device_head_args(in, out), in.num_tokens, {});
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
}

// Keys scored per query-head, summed: dense i + 1; sparse the candidates of
// vertical_slash_keys (columns <= i plus offsets <= i).
double scored_keys_dense(std::uint32_t n, std::uint32_t heads) {
    return static_cast<double>(heads) * n * (n + 1.0) / 2.0;
}
double scored_keys_sparse(const vertical_slash_index& x) {
    double total = 0.0;
    for (std::uint32_t h = 0; h < x.num_heads; ++h) {
        const auto v = x.vertical(h), s = x.slash(h);
        for (std::uint32_t i = 0; i < x.num_tokens; ++i)
            total += static_cast<double>(std::upper_bound(v.begin(), v.end(), i) - v.begin()) +
                     static_cast<double>(std::upper_bound(s.begin(), s.end(), i) - s.begin());
    }
    return total;
}

}  // namespace

int run(int argc, char** argv) {
    const bench::options opt = bench::parse(argc, argv, /*takes_tokens=*/true);
    const std::vector<std::uint32_t> lengths =
        opt.tokens.empty() ? std::vector<std::uint32_t>{32768u, 65536u} : opt.tokens;
    if (int rc = bench::skip_without_gpu("minference_bench")) return rc;
    try {
        constexpr std::uint32_t q_heads = 32, kv_heads = 8, d = 128;
        const int reps = opt.reps > 0 ? opt.reps : 3;
        const bool long_once = opt.reps <= 0;
        const std::uint32_t smallest = *std::min_element(lengths.begin(), lengths.end());
        const peaks peak = device_peaks();
        cudaStream_t stream = cudaStreamPerThread;
        bench::json_rows json;
        std::printf(
            "minference_bench on %s: one layer, %u query heads, %u KV heads, head_dim %u, fp32; fp32 peak "
            "%.1f TFLOP/s, memory %.0f GB/s (from the device's attributes); medians of %d runs\n",
            bench::gpu_name().c_str(), q_heads, kv_heads, d, peak.fp32_flops / 1e12, peak.bytes / 1e9, reps);
        std::printf("%-8s %-24s %12s %12s %10s %12s %12s %12s\n", "tokens", "row", "time ms", "keys/query", "TFLOP/s",
                    "FLOP bnd ms", "byte bnd ms", "dense/row");
        for (const std::uint32_t n : lengths) {
            const std::size_t q_size = std::size_t{n} * q_heads * d, kv_size = std::size_t{n} * kv_heads * d;
            device_buffer<float> q(q_size), k(kv_size), v(kv_size), o(q_size), lse(std::size_t{n} * q_heads);
            bench::fill_uniform(q.get(), q_size, 1);
            bench::fill_uniform(k.get(), kv_size, 2);
            bench::fill_uniform(v.get(), kv_size, 3);
            const device_prefill_qkv_view in{.q = device_span<const float>{q.get(), q_size},
                                             .k = device_span<const float>{k.get(), kv_size},
                                             .v = device_span<const float>{v.get(), kv_size},
                                             .num_tokens = n,
                                             .num_q_heads = q_heads,
                                             .num_kv_heads = kv_heads,
                                             .head_dim = d,
                                             .scale = 0.08838834764831845f};
            const device_prefill_output_view out{.o = o.view(q_size), .lse = lse.view(std::size_t{n} * q_heads)};
            const double bytes = 4.0 * (2.0 * static_cast<double>(q_size) + 2.0 * static_cast<double>(kv_size) +
                                        static_cast<double>(n) * q_heads);
            const double byte_bound_ms = bytes / peak.bytes * 1e3;

            const auto row = [&](const std::string& name, double us, double keys, double dense_us) {
                const double flops = keys * 4.0 * d;
                const double per_query = keys / (static_cast<double>(n) * q_heads);
                std::printf("%-8u %-24s %12.3f %12.0f %10.2f %12.3f %12.3f %12.2f\n", n, name.c_str(), us / 1e3,
                            per_query, keys > 0 ? flops / (us * 1e-6) / 1e12 : 0.0, flops / peak.fp32_flops * 1e3,
                            byte_bound_ms, dense_us / us);
                json.add("{\"tokens\": " + std::to_string(n) + ", \"row\": \"" + name +
                         "\", \"us\": " + std::to_string(us) + ", \"keys_per_query\": " + std::to_string(per_query) +
                         ", \"flop_bound_us\": " + std::to_string(flops / peak.fp32_flops * 1e6) +
                         ", \"byte_bound_us\": " + std::to_string(byte_bound_ms * 1e3) +
                         ", \"dense_over_row\": " + std::to_string(dense_us / us) + "}");
            };

            const double dense_us =
                time_row_us(stream, reps, long_once, [&] { prefill_attention_dense(in, out, stream); });
            row("dense causal", dense_us, scored_keys_dense(n, q_heads), dense_us);
            if (n == smallest) {
                const double warp_us =
                    time_row_us(stream, reps, long_once, [&] { dense_warp_per_query(in, out, stream); });
                row("dense, warp per query", warp_us, scored_keys_dense(n, q_heads), dense_us);
                std::printf("%-8u tiled dense kernel over the warp-per-query one (same run): %.1fx faster\n", n,
                            warp_us / dense_us);
            }

            const minference_config budget{};                                // seed 004: adaptive_budget 0.3
            const minference_config fixed{.adaptive_budget = std::nullopt};  // 1000 columns, 6096 diagonals
            for (const auto& [label, cfg] :
                 {std::pair{std::string("budget 0.3"), budget}, std::pair{std::string("fixed 1000/6096"), fixed}}) {
                device_minference dm(cfg, stream);
                const double est_us = time_row_us(stream, reps, long_once, [&] { dm.estimate(in); });
                dm.wait();
                const vertical_slash_index index = dm.copy_index(n);
                const double keys = scored_keys_sparse(index);
                const double attn_us = time_row_us(
                    stream, reps, long_once, [&] { prefill_attention_vertical_slash(in, dm.index(), out, stream); });
                const double total_us =
                    time_row_us(stream, reps, long_once, [&] { dm.sparse_prefill_attention(in, layer_index{0}, out); });
                dm.wait();
                row(label + ": estimate", est_us, 0.0, dense_us);
                row(label + ": attention", attn_us, keys, dense_us);
                row(label + ": total", total_us, keys, dense_us);
                std::printf("%-8u %-24s estimation share of total %.1f%%\n", n, label.c_str(),
                            100.0 * est_us / total_us);
            }
        }
        json.write(opt.json);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "minference_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace minference_bench

int main(int argc, char** argv) { return minference_bench::run(argc, argv); }
