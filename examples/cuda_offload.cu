// CUDA: choose victims on the device, then stream offloaded blocks back
// through the ring loader, the two device halves of a KV-cache step.
//
// 1. Victim selection: 2^20 GPU blocks each carry a score (the lower, the
//    cheaper to lose), computed where the metadata lives, on the device.
//    `select_lowest` picks the 4096 lowest there, in the host selector's
//    order (ascending score, ties by id), with CUB's two-phase temporary
//    storage (a size query first, so the hot path never allocates) on an
//    explicit stream.
// 2. Streaming: the CPU tier is a pinned arena of 4 layers x 256 blocks.
//    A decode step needs 32 offloaded blocks of every layer; with two ring
//    slots, `run_ring_pipeline` loads layer l + 1 on the copy stream while a
//    kernel reads layer l on the compute stream.
// Both results are checked against the host. Where there is no GPU the
// program says so and exits 0: building it was the point.
//
//   cuda_offload
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <utility>
#include <vector>

#include <kvpolicy/cuda/memory.cuh>
#include <kvpolicy/cuda/ring.cuh>
#include <kvpolicy/cuda/select.cuh>

namespace kc = kvpolicy::cuda;

namespace {

// A synthetic score for block i, identical on host and device (small
// integers are exact in float); many ties, which the selection breaks by id.
__host__ __device__ float block_score(std::uint32_t i) {
    std::uint32_t h = i * 2654435761u;
    h ^= h >> 16;
    return static_cast<float>(h % 65536u);
}

// Kernels take device spans (kvpolicy/core/memory_space.hpp): handing one a
// host vector or a host_span does not compile.
__global__ void score_blocks(kvpolicy::device_span<float> scores) {
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < scores.size();
         i += std::size_t{gridDim.x} * blockDim.x)
        scores[i] = block_score(static_cast<std::uint32_t>(i));
}

// Stands in for attention over the blocks in a slot: sums their words.
__global__ void sum_words(kvpolicy::device_span<const std::uint32_t> words,
                          kvpolicy::device_span<unsigned long long> sum) {
    unsigned long long local = 0;
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < words.size();
         i += std::size_t{gridDim.x} * blockDim.x)
        local += words[i];
    atomicAdd(&sum[0], local);
}

bool select_victims(cudaStream_t stream) {
    constexpr std::uint32_t n = 1u << 20, k = 4096;
    kc::device_buffer<float> scores(n);
    kc::device_buffer<std::uint32_t> victims(k);
    kc::device_buffer<kc::select_status> status(1);
    score_blocks<<<256, 256, 0, stream>>>(scores.view());
    KVPOLICY_CUDA_CHECK(cudaGetLastError());

    std::size_t temp_bytes = 0;  // no ids: block i has id i
    kc::select_lowest<float>({}, temp_bytes, scores.view(), {}, victims.view(), k, status.view(), stream);
    kc::device_buffer<std::byte> temp(temp_bytes);
    kc::select_lowest<float>(temp.view(), temp_bytes, scores.view(), {}, victims.view(), k, status.view(), stream);

    std::vector<std::uint32_t> got(k);
    kc::select_status st{};
    KVPOLICY_CUDA_CHECK(
        cudaMemcpyAsync(got.data(), victims.get(), k * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, stream));
    KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(&st, status.get(), sizeof st, cudaMemcpyDeviceToHost, stream));
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));

    std::vector<std::pair<float, std::uint32_t>> all(n);
    for (std::uint32_t i = 0; i < n; ++i) all[i] = {block_score(i), i};
    std::partial_sort(all.begin(), all.begin() + k, all.end());
    const bool same =
        st.nan_count == 0 && st.selected == k &&
        std::equal(got.begin(), got.end(), all.begin(), [](std::uint32_t id, const auto& p) { return id == p.second; });
    std::printf("select: %u victims of %u blocks on the device, first %u %u %u (score %.0f): %s\n", k, n, got[0],
                got[1], got[2], static_cast<double>(block_score(got[0])), same ? "as on the host" : "WRONG");
    return same;
}

bool stream_layers() {
    constexpr std::uint32_t layers = 4, per_layer = 256, needed = 32;
    constexpr std::size_t block_bytes = 16 * 1024, block_words = block_bytes / sizeof(std::uint32_t);
    kc::pinned_block_arena cpu_tier(layers * per_layer, block_bytes);  // [layer][block][bytes]
    for (std::size_t b = 0; b < cpu_tier.capacity(); ++b) {
        auto* words = reinterpret_cast<std::uint32_t*>(cpu_tier.block(b).data());
        std::iota(words, words + block_words, static_cast<std::uint32_t>(b * 7));
    }
    kc::ring_loader ring(cpu_tier,
                         {.num_layers = layers, .blocks_per_layer = per_layer, .num_slots = 2, .slot_blocks = needed});

    std::vector<kvpolicy::block_id> blocks(needed);  // every 8th block of a layer
    for (std::uint32_t i = 0; i < needed; ++i) blocks[i] = kvpolicy::block_id{i * 8};
    std::vector<kc::slot_load> loads;
    for (std::uint32_t l = 0; l < layers; ++l) loads.push_back({kvpolicy::layer_index{l}, blocks});

    kc::device_buffer<unsigned long long> sums(layers);
    KVPOLICY_CUDA_CHECK(cudaMemsetAsync(sums.get(), 0, layers * sizeof(unsigned long long), ring.compute_stream()));
    kc::run_ring_pipeline(ring, loads, [&](std::uint32_t slot, std::size_t i) {
        const auto bytes = ring.slot_data(slot).first(ring.slot_block_count(slot) * block_bytes);
        const kvpolicy::device_span<const std::uint32_t> words{reinterpret_cast<const std::uint32_t*>(bytes.data()),
                                                               bytes.size() / sizeof(std::uint32_t)};
        sum_words<<<64, 256, 0, ring.compute_stream()>>>(words, sums.view().subspan(i, 1));
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    });
    ring.synchronize();

    std::vector<unsigned long long> got(layers);
    KVPOLICY_CUDA_CHECK(
        cudaMemcpy(got.data(), sums.get(), layers * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    bool same = true;
    for (std::uint32_t l = 0; l < layers; ++l) {
        unsigned long long want = 0;
        for (const kvpolicy::block_id b : blocks) {
            const auto* words = reinterpret_cast<const std::uint32_t*>(cpu_tier.block(l * per_layer + b.value).data());
            want = std::accumulate(words, words + block_words, want);
        }
        same = same && got[l] == want;
    }
    std::printf("ring: %u layers x %u blocks streamed through 2 slots, layer l+1 loading while l computes: %s\n",
                layers, needed, same ? "as on the host" : "WRONG");
    return same;
}

}  // namespace

int main() {
    if (kc::device_count() == 0) {
        std::printf("cuda_offload: no GPU here; built, not run\n");
        return 0;
    }
    try {
        kc::stream_handle stream;
        const bool selected = select_victims(stream.get());
        const bool streamed = stream_layers();
        return selected && streamed ? 0 : 1;
    } catch (const kvpolicy::error& e) {  // cuda_error names the call, file and line
        std::fprintf(stderr, "cuda_offload: %s\n", e.what());
        return 2;
    }
}
