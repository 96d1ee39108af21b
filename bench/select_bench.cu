// Victim selection on the GPU against std::nth_element on the CPU, same data,
// same run: the k = 1% lowest of 10^6 and 10^7 (score, id) pairs.
//
// Rows: CUB radix select, CUB radix sort, Thrust (CUDA system, two stable
// radix sorts), each with scores already on the device; the CPU row is
// nth_element_selector (std::nth_element, then std::sort of the k). Then
// retention-value victims from struct-of-arrays metadata: scoring and
// selection as two steps, and fused (select_lowest_retention), against the
// CPU scoring loop plus nth_element. Every GPU answer is checked against the
// CPU's before it is timed. Each GPU row prints its bound: one read of its
// inputs and the k ids written, at the device-to-device bandwidth measured
// in the same run. Medians of --reps runs (default 20 GPU, 5 CPU).
//
//   select_bench [--reps N] [--json FILE]
#include <kvpolicy/cuda/score.cuh>
#include <kvpolicy/cuda/select.cuh>
#include <kvpolicy/select/nth_element_selector.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu_bench.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace select_bench {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

struct row {
    std::size_t n, k;
    std::string method;
    double us, cpu_us;
    double bytes;  ///< the least a GPU answer moves: one read of its inputs, the k ids written
};

double d2d_bytes_per_s = 1.0;  // measured once in run()

void print(const row& r, bench::json_rows& json) {
    const bench::bound b{r.bytes, d2d_bytes_per_s};
    std::printf("%10zu %8zu  %-44s %12.1f %10.1fx %10.1f %8.1fx\n", r.n, r.k, r.method.c_str(), r.us, r.cpu_us / r.us,
                b.us(), r.us / b.us());
    std::fflush(stdout);
    json.add("{\"n\": " + std::to_string(r.n) + ", \"k\": " + std::to_string(r.k) + ", \"method\": \"" + r.method +
             "\", \"us\": " + std::to_string(r.us) + ", \"speedup_vs_cpu\": " + std::to_string(r.cpu_us / r.us) +
             ", \"bound_us\": " + std::to_string(b.us()) + "}");
}

template <class T>
std::vector<T> download(const T* d, std::size_t n) {
    std::vector<T> h(n);
    KVPOLICY_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

template <class T>
void upload(const std::vector<T>& h, device_buffer<T>& d) {
    d.reserve(h.size());
    KVPOLICY_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
}

bool same(const std::vector<std::uint32_t>& gpu, const std::vector<item_id>& cpu) {
    for (std::size_t i = 0; i < cpu.size(); ++i)
        if (gpu[i] != cpu[i].value) return false;
    return true;
}

template <class Score>
void bench_scores(std::size_t n, int gpu_reps, int cpu_reps, cudaStream_t stream, bench::json_rows& json) {
    const std::size_t k = n / 100;
    // Scores and ids read once, the k ids written.
    const double selection_bytes = static_cast<double>(n) * (sizeof(Score) + 4) + 4.0 * static_cast<double>(k);
    std::mt19937_64 rng(n);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<Score> scores(n);
    std::vector<item_id> ids(n);
    std::vector<std::uint32_t> raw(n);
    for (std::size_t i = 0; i < n; ++i) {
        scores[i] = static_cast<Score>(u(rng));
        raw[i] = static_cast<std::uint32_t>(i);
        ids[i] = item_id{raw[i]};
    }
    nth_element_selector cpu;
    std::vector<item_id> cpu_out(k);
    const double cpu_us = bench::time_wall_us(cpu_reps, [&] { cpu.select_lowest<Score>(scores, ids, cpu_out); });
    const std::string type = sizeof(Score) == 8 ? "double" : "float";
    std::printf("%10zu %8zu  %-44s %12.1f %10s\n", n, k, ("CPU std::nth_element, " + type).c_str(), cpu_us, "1.0x");

    device_buffer<Score> d_scores;
    device_buffer<std::uint32_t> d_ids, d_out(k);
    device_buffer<select_status> d_status(1);
    upload(scores, d_scores);
    upload(raw, d_ids);
    for (auto algo : {select_algorithm::radix_select, select_algorithm::radix_sort}) {
        std::size_t bytes = 0;
        select_lowest<Score>({}, bytes, d_scores.view(n), d_ids.view(n), d_out.view(k), static_cast<std::uint32_t>(k),
                             d_status.view(), stream, algo);
        device_buffer<std::byte> temp(bytes);
        const auto run = [&] {
            select_lowest<Score>(temp.view(), bytes, d_scores.view(n), d_ids.view(n), d_out.view(k),
                                 static_cast<std::uint32_t>(k), d_status.view(), stream, algo);
        };
        run();
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (!same(download(d_out.get(), k), cpu_out)) std::printf("  MISMATCH against the CPU\n");
        const double us = bench::time_gpu_us(stream, gpu_reps, run);
        print({n, k,
               std::string(algo == select_algorithm::radix_select ? "CUB radix select, " : "CUB radix sort, ") + type,
               us, cpu_us, selection_bytes},
              json);
    }
    thrust_selector<thrust::cuda::tag> thrust_sel;
    const auto run = [&] {
        thrust_sel.select_lowest_in_system<Score>(d_scores.view(n), d_ids.view(n), d_out.view(k));
        KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
    };
    run();
    if (!same(download(d_out.get(), k), cpu_out)) std::printf("  MISMATCH against the CPU\n");
    print({n, k, "Thrust (CUDA system, 2 stable sorts), " + type, bench::time_wall_us(gpu_reps, run), cpu_us,
           selection_bytes},
          json);
}

void bench_retention(std::size_t n, int gpu_reps, int cpu_reps, cudaStream_t stream, bench::json_rows& json) {
    const std::size_t k = n / 100;
    std::mt19937_64 rng(n + 1);
    const retention_params params{.cost = {}, .num_layers = 40, .now = 2'000'000};
    std::vector<std::uint32_t> layer(n), chunk(n), total(n), raw(n);
    std::vector<std::uint64_t> context(n);
    std::vector<timestamp> last(n);
    for (std::size_t i = 0; i < n; ++i) {
        layer[i] = static_cast<std::uint32_t>(i % 40);
        total[i] = 100;
        chunk[i] = static_cast<std::uint32_t>((i / 40) % 100);
        context[i] = 32u * chunk[i];
        last[i] = rng() % 1'000'000;
        raw[i] = static_cast<std::uint32_t>(i);
    }
    // CPU: the same formula in a loop, then nth_element.
    std::vector<double> scores(n);
    std::vector<item_id> ids(n), cpu_out(k);
    for (std::size_t i = 0; i < n; ++i) ids[i] = item_id{raw[i]};
    nth_element_selector cpu;
    const double cpu_us = bench::time_wall_us(cpu_reps, [&] {
        for (std::size_t i = 0; i < n; ++i)
            scores[i] = retention_score(layer[i], chunk[i], total[i], context[i], last[i], params);
        cpu.select_lowest<double>(scores, ids, cpu_out);
    });
    std::printf("%10zu %8zu  %-44s %12.1f %10s\n", n, k, "CPU retention scores + std::nth_element", cpu_us, "1.0x");

    device_buffer<std::uint32_t> d_layer, d_chunk, d_total, d_ids, d_out(k);
    device_buffer<std::uint64_t> d_context;
    device_buffer<timestamp> d_last;
    device_buffer<double> d_scores(n);
    device_buffer<select_status> d_status(1);
    upload(layer, d_layer);
    upload(chunk, d_chunk);
    upload(total, d_total);
    upload(context, d_context);
    upload(last, d_last);
    upload(raw, d_ids);
    const retention_items_view items{.layer = d_layer.view(n),
                                     .chunk = d_chunk.view(n),
                                     .session_total_chunks = d_total.view(n),
                                     .context_length = d_context.view(n),
                                     .last_use = d_last.view(n),
                                     .ids = d_ids.view(n)};
    std::size_t bytes = 0, fused_bytes = 0;
    select_lowest<double>({}, bytes, d_scores.view(n), d_ids.view(n), d_out.view(k), static_cast<std::uint32_t>(k),
                          d_status.view(), stream);
    select_lowest_retention<double>({}, fused_bytes, items, params, d_out.view(k), static_cast<std::uint32_t>(k),
                                    d_status.view(), stream);
    device_buffer<std::byte> temp(std::max(bytes, fused_bytes));
    const auto two_steps = [&] {
        compute_retention<double>(items, params, d_scores.view(n), stream);
        select_lowest<double>(temp.view(), bytes, d_scores.view(n), d_ids.view(n), d_out.view(k),
                              static_cast<std::uint32_t>(k), d_status.view(), stream);
    };
    const auto fused = [&] {
        select_lowest_retention<double>(temp.view(), fused_bytes, items, params, d_out.view(k),
                                        static_cast<std::uint32_t>(k), d_status.view(), stream);
    };
    for (int variant = 0; variant < 2; ++variant) {
        if (variant == 0)
            two_steps();
        else
            fused();
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (!same(download(d_out.get(), k), cpu_out)) std::printf("  MISMATCH against the CPU\n");
        const double us = variant == 0 ? bench::time_gpu_us(stream, gpu_reps, two_steps)
                                       : bench::time_gpu_us(stream, gpu_reps, fused);
        // Five metadata arrays and the ids read once, the k ids written.
        const double bytes =
            static_cast<double>(n) * (3 * 4 + 8 + sizeof(timestamp) + 4) + 4.0 * static_cast<double>(k);
        print({n, k, variant == 0 ? "GPU compute_retention + radix select" : "GPU select_lowest_retention (fused)", us,
               cpu_us, bytes},
              json);
    }
}

}  // namespace

int run(int argc, char** argv) {
    const bench::options opt = bench::parse(argc, argv);
    if (int rc = bench::skip_without_gpu("select_bench")) return rc;
    try {
        std::printf("victim selection, k = 1%% of n; GPU: %s\n", bench::gpu_name().c_str());
        stream_handle stream;
        d2d_bytes_per_s = bench::measure_d2d_bytes_per_s(stream.get());
        std::printf(
            "bound: one read of the inputs and the k ids written at the measured device-to-device "
            "bandwidth, %.0f GB/s (read + write)\n",
            d2d_bytes_per_s / 1e9);
        std::printf("%10s %8s  %-44s %12s %11s %10s %9s\n", "n", "k", "method", "median us", "vs CPU", "bound us",
                    "x bound");
        bench::json_rows json;
        const int gpu_reps = opt.reps > 0 ? opt.reps : 20;
        const int cpu_reps = opt.reps > 0 ? opt.reps : 5;
        for (std::size_t n : {std::size_t{1'000'000}, std::size_t{10'000'000}}) {
            bench_scores<double>(n, gpu_reps, cpu_reps, stream.get(), json);
            bench_scores<float>(n, gpu_reps, cpu_reps, stream.get(), json);
            bench_retention(n, gpu_reps, cpu_reps, stream.get(), json);
        }
        json.write(opt.json);
    } catch (const std::exception& e) {
        std::printf("select_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace select_bench

int main(int argc, char** argv) { return select_bench::run(argc, argv); }
