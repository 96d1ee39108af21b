// The ring loader's host-to-device bandwidth and its overlap with compute.
//
// Part 1: 128 MiB of scattered blocks (random ids out of a 512 MiB pinned
// arena) gathered into one slot, for blocks of 16 KiB to 2 MiB, by
// cudaMemcpyBatchAsync and by the gather kernel (mapped pinned memory),
// against one contiguous cudaMemcpyAsync of the same bytes in the same run.
// The method with the higher GB/s on the target GPU should be ring_config's
// default (batch_memcpy until measured otherwise).
// Part 2: seed 001's pipeline over 8 layers of 4K tokens each (K and V in
// fp32, then bf16, then fp16; 8 KV heads x 128, 32 query heads): load-only
// time, compute-only time (decode attention over a slot), and the pipelined
// time; overlap = the part of the shorter one hidden behind the longer.
// Each figure is printed with its bound: the contiguous copy for the gather,
// max(load, compute) (perfect overlap) for the pipeline.
// Medians of --reps runs (default 10).
//
//   loader_bench [--reps N] [--json FILE]
#include <kvpolicy/cuda/attention.cuh>
#include <kvpolicy/cuda/ring.cuh>
#include <kvpolicy/sparse/kv_element.hpp>

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_bench.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace loader_bench {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

constexpr std::size_t mib = 1024 * 1024;

const char* method_name(gather_method m) { return m == gather_method::batch_memcpy ? "batch_memcpy" : "gather_kernel"; }

void bench_bandwidth(int reps, bench::json_rows& json) {
    constexpr std::size_t arena_bytes = 512 * mib, load_bytes = 128 * mib;
    std::printf(
        "\nscattered H2D gather of %zu MiB into one slot (GB/s, higher is better; the bound is one contiguous "
        "pinned copy of the same bytes, measured in the same run: batch/con and kernel/con are the distance "
        "to it)\n",
        load_bytes / mib);
    std::printf("%10s %8s %14s %14s %14s %10s %10s\n", "block", "blocks", "batch_memcpy", "gather_kernel", "contiguous",
                "batch/con", "kernel/con");
    std::mt19937_64 rng(7);
    for (std::size_t block_bytes : {16 * 1024ul, 64 * 1024ul, 256 * 1024ul, 1 * mib, 2 * mib}) {
        const std::size_t capacity = arena_bytes / block_bytes, count = load_bytes / block_bytes;
        pinned_block_arena host(capacity, block_bytes);
        std::memset(host.host_view().data(), 0x5a, arena_bytes);
        std::vector<block_id> ids(capacity);
        for (std::size_t i = 0; i < capacity; ++i) ids[i] = block_id{static_cast<std::uint32_t>(i)};
        std::shuffle(ids.begin(), ids.end(), rng);
        ids.resize(count);
        double gbps[3] = {};
        for (gather_method m : {gather_method::batch_memcpy, gather_method::gather_kernel}) {
            ring_loader ring(host, {.num_layers = 1,
                                    .blocks_per_layer = static_cast<std::uint32_t>(capacity),
                                    .num_slots = 1,
                                    .slot_blocks = static_cast<std::uint32_t>(count),
                                    .method = m});
            const double us =
                bench::time_gpu_us(ring.copy_stream(), reps, [&] { ring.load_to_slot(0, layer_index{0}, ids); });
            gbps[static_cast<int>(m)] = static_cast<double>(load_bytes) / us / 1e3;
            if (m == gather_method::batch_memcpy) {
                const double con = bench::time_gpu_us(ring.copy_stream(), reps, [&] {
                    KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(ring.slot_data(0).data(), host.host_view().data(), load_bytes,
                                                        cudaMemcpyHostToDevice, ring.copy_stream()));
                });
                gbps[2] = static_cast<double>(load_bytes) / con / 1e3;
            }
            ring.synchronize();
        }
        std::printf("%8zuKi %8zu %14.1f %14.1f %14.1f %10.2f %10.2f\n", block_bytes / 1024, count, gbps[0], gbps[1],
                    gbps[2], gbps[0] / gbps[2], gbps[1] / gbps[2]);
        std::fflush(stdout);
        json.add("{\"part\": \"bandwidth\", \"block_bytes\": " + std::to_string(block_bytes) +
                 ", \"blocks\": " + std::to_string(count) + ", \"batch_memcpy_gbps\": " + std::to_string(gbps[0]) +
                 ", \"gather_kernel_gbps\": " + std::to_string(gbps[1]) +
                 ", \"contiguous_gbps\": " + std::to_string(gbps[2]) + "}");
    }
}

template <kv_element T>
const char* type_name() {
    return std::same_as<T, float> ? "fp32" : std::same_as<T, bf16> ? "bf16" : "fp16";
}

// K/V stored as T (fp32, or the bf16 / fp16 engines keep; the ring moves
// bytes, ring_loader::slot_view<T> types a slot for the attention).
template <kv_element T>
void bench_overlap(int reps, bench::json_rows& json) {
    constexpr std::uint32_t layers = 8, blocks = 256, bs = 16, kv_heads = 8, q_heads = 32, d = 128;
    const std::size_t block_values = 2ul * bs * kv_heads * d;  // [K | V] per block
    pinned_block_arena host(std::size_t{layers} * blocks, block_values * sizeof(T));
    {
        std::mt19937 rng(3);
        std::normal_distribution<float> g;
        std::byte* out = host.host_view().data();
        for (std::size_t i = 0; i < host.capacity() * block_values; ++i) {
            const T v = from_float<T>(g(rng));
            std::memcpy(out + i * sizeof(T), &v, sizeof(T));
        }
    }
    std::vector<block_id> order(blocks);
    for (std::uint32_t i = 0; i < blocks; ++i) order[i] = block_id{(i * 97) % blocks};  // scattered
    std::vector<slot_load> loads;
    for (std::uint32_t l = 0; l < layers; ++l) loads.push_back({layer_index{l}, order});
    std::vector<float> q(std::size_t{q_heads} * d, 0.01f);
    device_buffer<float> d_q(q.size()), d_o(q.size()), d_lse(q_heads);
    device_buffer<std::uint32_t> d_local(blocks);
    std::vector<std::uint32_t> local(blocks);
    std::iota(local.begin(), local.end(), 0u);
    KVPOLICY_CUDA_CHECK(cudaMemcpy(d_q.get(), q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice));
    KVPOLICY_CUDA_CHECK(
        cudaMemcpy(d_local.get(), local.data(), blocks * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
    KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());

    std::printf(
        "\nlayer-wise pipeline, %s K/V: %u layers x %u blocks of %zu KiB (%zu MiB per layer), decode attention "
        "per layer\n",
        type_name<T>(), layers, blocks, block_values * sizeof(T) / 1024, blocks * block_values * sizeof(T) / mib);
    std::printf("%14s %12s %12s %12s %12s %10s %12s %10s\n", "method", "load us", "compute us", "sum us",
                "pipelined us", "overlap", "bound us", "x bound");
    for (gather_method m : {gather_method::batch_memcpy, gather_method::gather_kernel}) {
        ring_loader ring(
            host,
            {.num_layers = layers, .blocks_per_layer = blocks, .num_slots = 2, .slot_blocks = blocks, .method = m});
        const auto args = [&](std::uint32_t slot) {
            const device_span<const T> base = ring.template slot_view<T>(slot);
            return basic_paged_decode_args<T>{.q = d_q.view(),
                                              .k_cache = base,
                                              .v_cache = base.subspan(block_values / 2),
                                              .block_stride = block_values,
                                              .block_table = d_local.view(),
                                              .num_tokens = std::uint64_t{blocks} * bs,
                                              .shape = {.num_q_heads = q_heads,
                                                        .num_kv_heads = kv_heads,
                                                        .head_dim = d,
                                                        .block_size = bs,
                                                        .scale = 0.088f},
                                              .o = d_o.view(),
                                              .lse = d_lse.view()};
        };
        // Split-KV, as a serving engine runs decode: 4K tokens in 32 splits
        // of 128 (8 KV heads x 32 = 256 CTAs, about two per SM).
        constexpr std::uint32_t splits = 32;
        std::size_t temp_bytes = 0;
        paged_decode_attention_split({}, temp_bytes, args(0), splits, ring.compute_stream());
        device_buffer<std::byte> temp(temp_bytes);
        const auto attend = [&](std::uint32_t slot) {
            paged_decode_attention_split(temp.view(), temp_bytes, args(slot), splits, ring.compute_stream());
        };
        const double load = bench::time_wall_us(reps, [&] {
            run_ring_pipeline(ring, loads, [](std::uint32_t, std::size_t) {});
            ring.synchronize();
        });
        const double compute = bench::time_wall_us(reps, [&] {
            for (std::uint32_t l = 0; l < layers; ++l) attend(l % 2);
            ring.synchronize();
        });
        const double pipelined = bench::time_wall_us(reps, [&] {
            run_ring_pipeline(ring, loads, [&](std::uint32_t slot, std::size_t) { attend(slot); });
            ring.synchronize();
        });
        const double overlap = (load + compute - pipelined) / std::min(load, compute);
        // Bound: perfect overlap, the pipeline as long as its longer half.
        const double bound_us = std::max(load, compute);
        std::printf("%14s %12.1f %12.1f %12.1f %12.1f %9.0f%% %12.1f %9.2fx\n", method_name(m), load, compute,
                    load + compute, pipelined, 100.0 * overlap, bound_us, pipelined / bound_us);
        std::fflush(stdout);
        json.add(std::string("{\"part\": \"overlap\", \"kv_type\": \"") + type_name<T>() + "\", \"method\": \"" +
                 method_name(m) + "\", \"load_us\": " + std::to_string(load) + ", \"compute_us\": " +
                 std::to_string(compute) + ", \"pipelined_us\": " + std::to_string(pipelined) + "}");
    }
}

}  // namespace

int run(int argc, char** argv) {
    const bench::options opt = bench::parse(argc, argv);
    if (int rc = bench::skip_without_gpu("loader_bench")) return rc;
    try {
        std::printf("ring loader; GPU: %s\n", bench::gpu_name().c_str());
        const int reps = opt.reps > 0 ? opt.reps : 10;
        bench::json_rows json;
        bench_bandwidth(reps, json);
        bench_overlap<float>(reps, json);
        bench_overlap<bf16>(reps, json);
        bench_overlap<fp16>(reps, json);
        json.write(opt.json);
    } catch (const std::exception& e) {
        std::printf("loader_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace loader_bench

int main(int argc, char** argv) { return loader_bench::run(argc, argv); }
