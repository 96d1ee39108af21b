// ring: stream offloaded KV back to the GPU through a ring of device slots,
// and carry out swap plans between device and pinned host memory.
//
// The CPU tier is a pinned (page-locked, device-mapped) host arena; the GPU
// side is N slots, each holding up to `slot_blocks` blocks of one layer.
// Loads run on a copy stream and computation on a compute stream; per slot,
// a `ready` event (load finished) and a `compute_done` event (the slot may
// be overwritten) order the two, so the load of layer l+1 (or of the next
// chunk of blocks) overlaps the attention over layer l. This is seed 001's
// ring-buffer pipeline (nano-vLLM's OffloadEngine: load_to_slot_layer /
// wait_slot_layer / record_slot_compute_done) and seed 004's layer-wise
// offload; `run_ring_pipeline` is its loop, written once.
//
// A load gathers scattered CPU blocks into one contiguous slot, two ways:
// - `batch_memcpy`: one cudaMemcpyBatchAsync (CUDA 12.8+; CUDA 13 signature,
//   no failIdx; never on the legacy default stream, so the loader owns
//   non-blocking streams), runs of consecutive block ids merged into one copy;
// - `gather_kernel`: a kernel that reads the mapped pinned memory directly
//   (zero-copy), 16-byte loads, one thread block per slice of a block.
// Which is faster depends on the platform (PCIe vs C2C, block size): the
// default is batch_memcpy until bench/loader_bench.cu says otherwise on the
// target GPU; both stay selectable (`ring_config::method`).
//
// The loader moves bytes: fp32 K/V, or the bf16 / fp16 K/V engines store
// (`slot_view<T>` types a slot for the attention that reads it).
//
// Memory spaces in the types (core/memory_space.hpp): the pinned arena is
// host memory (`block`, `host_view`) and, mapped, device memory
// (`device_view`); device arenas and ring slots are device spans only.
//
// `device_transfer_engine` is the `transfer_engine` model for a GPU: it runs a
// swap plan's ordered transfers between a device block arena and the pinned
// arena (`exchange` ops through a device bounce block), in order, on one
// stream, and reports each op's status, like host_memcpy_engine.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/core/tier.hpp"
#include "kvpolicy/core/transfer.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/sparse/kv_element.hpp"
#include "kvpolicy/sparse/ring_gather_math.hpp"

namespace kvpolicy::cuda {

/// `capacity` blocks of `block_bytes` bytes in pinned, device-mapped host memory.
class pinned_block_arena {
public:
    /// Throws: config_error if either size is 0; cuda_error if pinning fails.
    pinned_block_arena(std::size_t capacity, std::size_t block_bytes) : block_bytes_(block_bytes), capacity_(capacity) {
        if (capacity == 0 || block_bytes == 0)
            throw config_error("pinned_block_arena: capacity " + std::to_string(capacity) + " x block_bytes " +
                               std::to_string(block_bytes) + " holds nothing; both must be at least 1");
        bytes_.reserve(capacity * block_bytes);
        device_view_ = bytes_.device_view().first(capacity * block_bytes);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
    /// The host bytes of block b. Precondition: b < capacity().
    [[nodiscard]] host_span<std::byte> block(std::size_t b) noexcept {
        return host_span<std::byte>{bytes_.get() + b * block_bytes_, block_bytes_};
    }
    [[nodiscard]] host_span<const std::byte> block(std::size_t b) const noexcept {
        return host_span<const std::byte>{bytes_.get() + b * block_bytes_, block_bytes_};
    }
    /// The whole arena, [capacity][block_bytes], as host memory.
    [[nodiscard]] host_span<std::byte> host_view() const noexcept {
        return host_span<std::byte>{bytes_.get(), capacity_ * block_bytes_};
    }
    /// The arena as kernels see it (mapped pinned memory).
    [[nodiscard]] device_span<const std::byte> device_view() const noexcept { return device_view_; }

private:
    std::size_t block_bytes_;
    std::size_t capacity_;
    pinned_buffer<std::byte> bytes_;  // [capacity][block_bytes]
    device_span<const std::byte> device_view_;
};

/// `capacity` blocks of `block_bytes` bytes in device memory.
class device_block_arena {
public:
    /// Throws: config_error if either size is 0; cuda_error.
    device_block_arena(std::size_t capacity, std::size_t block_bytes) : block_bytes_(block_bytes), capacity_(capacity) {
        if (capacity == 0 || block_bytes == 0)
            throw config_error("device_block_arena: capacity " + std::to_string(capacity) + " x block_bytes " +
                               std::to_string(block_bytes) + " holds nothing; both must be at least 1");
        bytes_.reserve(capacity * block_bytes);
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
    /// Device bytes of block b. Precondition: b < capacity().
    [[nodiscard]] device_span<std::byte> block(std::size_t b) const noexcept {
        return device_span<std::byte>{bytes_.get() + b * block_bytes_, block_bytes_};
    }
    /// The whole arena, [capacity][block_bytes], on the device.
    [[nodiscard]] device_span<std::byte> device_view() const noexcept {
        return device_span<std::byte>{bytes_.get(), capacity_ * block_bytes_};
    }

private:
    std::size_t block_bytes_;
    std::size_t capacity_;
    device_buffer<std::byte> bytes_;  // [capacity][block_bytes]
};

enum class gather_method : std::uint8_t { batch_memcpy, gather_kernel };

struct ring_config {
    std::uint32_t num_layers = 1;
    /// CPU-tier blocks per layer: block b of layer l is arena block l * blocks_per_layer + b.
    std::uint32_t blocks_per_layer = 0;
    std::uint32_t num_slots = 2;
    std::uint32_t slot_blocks = 0;  ///< most blocks one load brings
    gather_method method = gather_method::batch_memcpy;
};

namespace detail {

inline constexpr int gather_threads = 256;
inline constexpr std::uint32_t gather_batch_max = 512;  // ids per launch: 2 KiB of kernel parameters
inline constexpr std::size_t gather_slice_bytes = 64 * 1024;

// Device bytes as 16-byte words (the arena and slots are cudaMalloc'd or
// page-aligned, and the gather kernel needs block_bytes % 16 == 0).
template <class Word, class Byte>
[[nodiscard]] device_span<Word> as_words(device_span<Byte> bytes) noexcept {
    return device_span<Word>{reinterpret_cast<Word*>(bytes.data()), bytes.size() / sizeof(Word)};
}

struct gather_batch {
    std::uint32_t src[gather_batch_max];  // arena block of each destination block
};

// grid (blocks in this batch, slices per block): block j of the batch goes to
// dst block first + j; 16-byte loads from mapped pinned memory, four in
// flight per thread (gather_thread_copy, sparse/ring_gather_math.hpp,
// tested on the CPU for every thread of the grid).
__global__ void __launch_bounds__(gather_threads)
    gather_blocks_kernel(gather_batch batch, device_span<const uint4> host, device_span<uint4> dst,
                         std::size_t block_vecs, std::size_t slice_vecs, std::uint32_t first) {
    const uint4* src = host.data() + std::size_t{batch.src[blockIdx.x]} * block_vecs;
    uint4* out = dst.data() + (std::size_t{first} + blockIdx.x) * block_vecs;
    gather_thread_copy<gather_threads, 4>(src, out, gather_slice_words(blockIdx.y, slice_vecs, block_vecs),
                                          threadIdx.x);
}

}  // namespace detail

class ring_loader {
public:
    /// The CPU tier is `host` (shared, not owned: a transfer engine may fill it).
    /// Throws: config_error if a count is 0, the arena is too small for
    /// num_layers x blocks_per_layer, or the gather kernel is chosen with
    /// blocks that are not a multiple of 16 bytes; cuda_error.
    ring_loader(pinned_block_arena& host, const ring_config& config) : host_(&host), config_(validated(config, host)) {
        slots_.reserve(std::size_t{config_.num_slots} * config_.slot_blocks * host.block_bytes());
        ready_.reserve(config_.num_slots);
        compute_done_.reserve(config_.num_slots);
        for (std::uint32_t s = 0; s < config_.num_slots; ++s) {
            ready_.emplace_back();
            compute_done_.emplace_back();
        }
        slot_count_.assign(config_.num_slots, 0);
        dsts_.reserve(config_.slot_blocks);
        srcs_.reserve(config_.slot_blocks);
        sizes_.reserve(config_.slot_blocks);
    }

    /// Effects: enqueues on the copy stream, after the slot's last
    /// `record_compute_done`, the gather of `blocks` of `layer` into `slot`,
    /// then records the slot's ready event.
    /// Throws: usage_error if the slot, layer or a block is out of range or
    /// there are more blocks than slot_blocks (nothing enqueued); cuda_error.
    void load_to_slot(std::uint32_t slot, layer_index layer, std::span<const block_id> blocks) {
        if (slot >= config_.num_slots || layer.value >= config_.num_layers || blocks.size() > config_.slot_blocks)
            throw usage_error("ring_loader::load_to_slot: slot " + std::to_string(slot) + " layer " +
                              std::to_string(layer.value) + " with " + std::to_string(blocks.size()) +
                              " blocks; the ring has " + std::to_string(config_.num_slots) + " slots of " +
                              std::to_string(config_.slot_blocks) + " blocks and " +
                              std::to_string(config_.num_layers) + " layers");
        for (block_id b : blocks)
            if (b.value >= config_.blocks_per_layer)
                throw usage_error("ring_loader::load_to_slot: block " + std::to_string(b.value) +
                                  " is outside the CPU tier's " + std::to_string(config_.blocks_per_layer) +
                                  " blocks per layer");
        const cudaStream_t copy = copy_stream_.get();
        KVPOLICY_CUDA_CHECK(cudaStreamWaitEvent(copy, compute_done_[slot].get(), 0));
        const std::size_t base = std::size_t{layer.value} * config_.blocks_per_layer;
        if (!blocks.empty()) {
            if (config_.method == gather_method::batch_memcpy)
                enqueue_batch_memcpy(slot, base, blocks);
            else
                enqueue_gather_kernel(slot, base, blocks);
        }
        KVPOLICY_CUDA_CHECK(cudaEventRecord(ready_[slot].get(), copy));
        slot_count_[slot] = static_cast<std::uint32_t>(blocks.size());
    }

    /// Effects: work enqueued on the compute stream after this waits for the
    /// slot's last load.
    void wait_slot(std::uint32_t slot) {
        check_slot(slot);
        KVPOLICY_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_.get(), ready_[slot].get(), 0));
    }

    /// Effects: the next load into the slot waits for the compute stream's
    /// work enqueued so far.
    void record_compute_done(std::uint32_t slot) {
        check_slot(slot);
        KVPOLICY_CUDA_CHECK(cudaEventRecord(compute_done_[slot].get(), compute_stream_.get()));
    }

    /// Device bytes of the slot: [slot_blocks][block_bytes]; the first
    /// `slot_block_count(slot)` blocks hold the last load, in its order.
    /// Precondition: slot < num_slots().
    [[nodiscard]] device_span<std::byte> slot_data(std::uint32_t slot) const noexcept {
        const std::size_t bytes = std::size_t{config_.slot_blocks} * host_->block_bytes();
        return device_span<std::byte>{slots_.get() + slot * bytes, bytes};
    }
    [[nodiscard]] std::uint32_t slot_block_count(std::uint32_t slot) const noexcept { return slot_count_[slot]; }

    /// The slot as T values (fp32, or the bf16 / fp16 K/V engines store):
    /// [slot_blocks][block_bytes / sizeof(T)], what attention over the slot
    /// reads. The loader moves bytes; this only names their type.
    /// Throws: usage_error if the slot is out of range or a block is not a
    /// whole number of T.
    template <kv_element T>
    [[nodiscard]] device_span<const T> slot_view(std::uint32_t slot) const {
        check_slot(slot);
        if (host_->block_bytes() % sizeof(T) != 0)
            throw usage_error("ring_loader::slot_view: blocks of " + std::to_string(host_->block_bytes()) +
                              " bytes are not a whole number of " + std::to_string(sizeof(T)) +
                              "-byte values; size the blocks in K/V elements");
        const device_span<std::byte> bytes = slot_data(slot);
        return device_span<const T>{reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
    }

    /// Switches the gather method for later loads.
    /// Throws: config_error as the constructor does for the gather kernel.
    void set_method(gather_method m) {
        ring_config c = config_;
        c.method = m;
        config_ = validated(c, *host_);
    }

    /// Waits for both streams.
    void synchronize() {
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(compute_stream_.get()));
    }

    [[nodiscard]] cudaStream_t copy_stream() const noexcept { return copy_stream_.get(); }
    [[nodiscard]] cudaStream_t compute_stream() const noexcept { return compute_stream_.get(); }
    [[nodiscard]] std::uint32_t num_slots() const noexcept { return config_.num_slots; }
    [[nodiscard]] const ring_config& config() const noexcept { return config_; }
    [[nodiscard]] pinned_block_arena& host() const noexcept { return *host_; }

private:
    static ring_config validated(const ring_config& c, const pinned_block_arena& host) {
        if (c.num_layers == 0 || c.blocks_per_layer == 0 || c.num_slots == 0 || c.slot_blocks == 0)
            throw config_error(
                "ring_loader: num_layers, blocks_per_layer, num_slots and slot_blocks must all be "
                "at least 1");
        if (host.capacity() < std::size_t{c.num_layers} * c.blocks_per_layer)
            throw config_error("ring_loader: the pinned arena holds " + std::to_string(host.capacity()) +
                               " blocks, fewer than num_layers x blocks_per_layer = " +
                               std::to_string(std::size_t{c.num_layers} * c.blocks_per_layer));
        if (c.method == gather_method::gather_kernel && host.block_bytes() % 16 != 0)
            throw config_error("ring_loader: the gather kernel moves 16-byte words, but blocks have " +
                               std::to_string(host.block_bytes()) + " bytes; use batch_memcpy or pad the blocks");
        return c;
    }

    void check_slot(std::uint32_t slot) const {
        if (slot >= config_.num_slots)
            throw usage_error("ring_loader: slot " + std::to_string(slot) + " of a ring of " +
                              std::to_string(config_.num_slots));
    }

    void enqueue_batch_memcpy(std::uint32_t slot, std::size_t base, std::span<const block_id> blocks) {
        const std::size_t bb = host_->block_bytes();
        std::byte* dst = slot_data(slot).data();
        dsts_.clear();
        srcs_.clear();
        sizes_.clear();
        for (std::size_t i = 0; i < blocks.size(); ++i) {
            // Consecutive ids are adjacent on both sides: one copy for the run.
            if (i > 0 && blocks[i].value == blocks[i - 1].value + 1) {
                sizes_.back() += bb;
                continue;
            }
            dsts_.push_back(dst + i * bb);
            srcs_.push_back(host_->block(base + blocks[i].value).data());
            sizes_.push_back(bb);
        }
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
        std::size_t attr_index = 0;
        KVPOLICY_CUDA_CHECK(cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), dsts_.size(), &attr,
                                                 &attr_index, 1, copy_stream_.get()));
    }

    void enqueue_gather_kernel(std::uint32_t slot, std::size_t base, std::span<const block_id> blocks) {
        const std::size_t vecs = host_->block_bytes() / 16;
        const std::size_t slice = detail::gather_slice_bytes / 16;
        const auto slices = static_cast<unsigned>((vecs + slice - 1) / slice);
        for (std::size_t first = 0; first < blocks.size(); first += detail::gather_batch_max) {
            const auto count =
                static_cast<std::uint32_t>(std::min<std::size_t>(detail::gather_batch_max, blocks.size() - first));
            detail::gather_batch batch{};
            for (std::uint32_t j = 0; j < count; ++j)
                batch.src[j] = static_cast<std::uint32_t>(base + blocks[first + j].value);
            detail::gather_blocks_kernel<<<dim3(count, slices), detail::gather_threads, 0, copy_stream_.get()>>>(
                batch, detail::as_words<const uint4>(host_->device_view()), detail::as_words<uint4>(slot_data(slot)),
                vecs, slice, static_cast<std::uint32_t>(first));
            KVPOLICY_CUDA_CHECK(cudaGetLastError());
        }
    }

    pinned_block_arena* host_;
    ring_config config_;
    device_buffer<std::byte> slots_;  // [num_slots][slot_blocks][block_bytes]
    stream_handle copy_stream_;
    stream_handle compute_stream_;
    std::vector<event_handle> ready_;         // [num_slots] load finished
    std::vector<event_handle> compute_done_;  // [num_slots] slot free again
    std::vector<std::uint32_t> slot_count_;   // [num_slots] blocks of the last load
    std::vector<void*> dsts_;                 // batch memcpy arguments, reused
    std::vector<const void*> srcs_;
    std::vector<std::size_t> sizes_;
};

/// One load of the pipeline: these blocks of this layer.
struct slot_load {
    layer_index layer{};
    std::span<const block_id> blocks;
};

/// Seed 001's ring-buffer pipeline: preloads the first num_slots loads, then
/// for each load i waits for its slot, calls `compute(slot, i)` (which must
/// enqueue its work on ring.compute_stream()), marks the slot done and
/// starts load i + num_slots into it. One load per layer is the layer-wise
/// pipeline (layer l+1 loads while layer l computes). Returns when all work
/// is enqueued; synchronize the ring to wait for it.
template <class Compute>
void run_ring_pipeline(ring_loader& ring, std::span<const slot_load> loads, Compute&& compute) {
    const std::size_t slots = ring.num_slots();
    for (std::size_t i = 0; i < std::min(slots, loads.size()); ++i)
        ring.load_to_slot(static_cast<std::uint32_t>(i), loads[i].layer, loads[i].blocks);
    for (std::size_t i = 0; i < loads.size(); ++i) {
        const auto slot = static_cast<std::uint32_t>(i % slots);
        ring.wait_slot(slot);
        compute(slot, i);
        ring.record_compute_done(slot);
        if (i + slots < loads.size()) ring.load_to_slot(slot, loads[i + slots].layer, loads[i + slots].blocks);
    }
}

/// A transfer_engine between a device block arena (the GPU tier) and a
/// pinned host arena (the CPU tier).
class device_transfer_engine {
public:
    /// Throws: config_error if the arenas' block sizes differ; cuda_error.
    device_transfer_engine(device_block_arena& gpu, pinned_block_arena& cpu)
            : gpu_(&gpu), cpu_(&cpu), bounce_(gpu.block_bytes()) {
        if (gpu.block_bytes() != cpu.block_bytes())
            throw config_error("device_transfer_engine: gpu blocks have " + std::to_string(gpu.block_bytes()) +
                               " bytes, cpu blocks " + std::to_string(cpu.block_bytes()) + "; make them equal");
    }

    /// Effects: enqueues each op's copy in order on the engine's stream
    /// (an exchange is three copies through a device bounce block), then
    /// waits for them. An op naming a tier without an arena (remote), a
    /// block out of range, or the same block on both sides fails and copies
    /// nothing. Returns the number done.
    /// Throws: usage_error if `status` is shorter than `ops` (nothing
    /// copied); cuda_error if the copies fail on the device, after which the
    /// contents of every destination in `ops` are unspecified.
    std::size_t execute(std::span<const block_transfer> ops, std::span<transfer_status> status) {
        if (status.size() < ops.size())
            throw usage_error("device_transfer_engine::execute: " + std::to_string(status.size()) +
                              " status slots for " + std::to_string(ops.size()) + " ops; give one per op");
        const cudaStream_t s = stream_.get();
        const std::size_t bb = gpu_->block_bytes();
        std::size_t done = 0;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const block_transfer& op = ops[i];
            std::byte* from = address(op.from, op.src);
            std::byte* to = address(op.to, op.dst);
            bool ok = from != nullptr && to != nullptr && from != to;
            if (ok && op.exchange) {
                ok = cudaMemcpyAsync(bounce_.get(), to, bb, cudaMemcpyDefault, s) == cudaSuccess &&
                     cudaMemcpyAsync(to, from, bb, cudaMemcpyDefault, s) == cudaSuccess &&
                     cudaMemcpyAsync(from, bounce_.get(), bb, cudaMemcpyDefault, s) == cudaSuccess;
                if (ok) bytes_moved_ += 2 * bb;
            } else if (ok) {
                ok = cudaMemcpyAsync(to, from, bb, cudaMemcpyDefault, s) == cudaSuccess;
                if (ok) bytes_moved_ += bb;
            }
            if (!ok) (void)cudaGetLastError();  // an enqueue error is this op's, not sticky
            done += ok ? 1 : 0;
            status[i] = ok ? transfer_status::done : transfer_status::failed;
        }
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(s));
        return done;
    }

    [[nodiscard]] std::size_t bytes_moved() const noexcept { return bytes_moved_; }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_.get(); }

private:
    [[nodiscard]] std::byte* address(tier t, block_id b) const noexcept {
        if (t == tier::gpu) return b.index() < gpu_->capacity() ? gpu_->block(b.index()).data() : nullptr;
        if (t == tier::cpu) return b.index() < cpu_->capacity() ? cpu_->block(b.index()).data() : nullptr;
        return nullptr;
    }

    device_block_arena* gpu_;
    pinned_block_arena* cpu_;
    device_buffer<std::byte> bounce_;  // one block, for exchanges
    stream_handle stream_;
    std::size_t bytes_moved_ = 0;
};

static_assert(transfer_engine<device_transfer_engine>);

}  // namespace kvpolicy::cuda
