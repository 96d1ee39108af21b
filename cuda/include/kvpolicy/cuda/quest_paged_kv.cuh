// quest_paged_kv (device): Quest's chosen blocks as FlashInfer's paged-KV
// indices (`indices`, `last_page_len`) on the GPU, so the Quest decode path
// (score, top-K, this, sparse attention) has no host round trip.
//
// The layout of a batch (page tables, lengths, Quest's plan per request,
// FlashInfer's indptr) is planned once on the host (`plan_quest_paged_rows`,
// sparse/paged_kv_row.hpp) and uploaded here (`device_quest_paged_layout`);
// each decode step then enqueues one kernel: a CTA per request, a thread per
// entry of its row, each thread's slot and block from `quest_paged_entry`
// (the same function the CPU test runs thread by thread), and the thread of
// the row's last slot writes its last_page_len. `positions` is the device
// top-K output of every request, request r's at rows[r].positions_begin
// (basic_device_quest::select_top_device writes one request's there).
// FlashInfer's decode plan needs only the indptr, which the layout fixes: plan
// it once per layout too (flashinfer/decode.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/sparse/paged_kv_row.hpp"

namespace kvpolicy::cuda {

namespace detail {
inline constexpr int quest_paged_threads = 128;

// grid.x = requests; each thread walks its row's entries t, t + blockDim.x, ...
__global__ void __launch_bounds__(quest_paged_threads)
    quest_paged_kv_kernel(device_span<const quest_paged_row> rows, device_span<const std::int32_t> pages,
                          device_span<const std::uint32_t> positions, std::uint32_t page_size,
                          device_span<std::int32_t> indices, device_span<std::int32_t> last_page_len) {
    const quest_paged_row row = rows[blockIdx.x];
    const std::uint32_t count = row.count();
    for (std::uint32_t t = threadIdx.x; t < count; t += blockDim.x) {
        const quest_paged_entry_value e = quest_paged_entry(row, positions.data(), t);
        indices[row.out_begin + e.slot] = pages[row.table_begin + e.logical];
        if (e.slot + 1 == count)
            last_page_len[blockIdx.x] = static_cast<std::int32_t>(quest_paged_last_page_len(row, e.logical, page_size));
    }
}
}  // namespace detail

/// A planned layout on the device, and FlashInfer's indptr of it (read by
/// the decode's plan on the host, and by its kernels here).
class device_quest_paged_layout {
public:
    device_quest_paged_layout() = default;

    /// Effects: uploads `layout` (synchronously on `stream`); replaces any
    /// earlier one. Throws: usage_error for a layout without rows; cuda_error.
    void upload(const quest_paged_layout& layout, cudaStream_t stream) {
        if (layout.rows.empty() || layout.indptr.size() != layout.rows.size() + 1)
            throw usage_error("device_quest_paged_layout::upload: the layout has " +
                              std::to_string(layout.rows.size()) + " rows and " + std::to_string(layout.indptr.size()) +
                              " indptr entries; plan it with plan_quest_paged_rows");
        rows_.reserve(layout.rows.size());
        pages_.reserve(std::max<std::size_t>(layout.pages.size(), 1));
        indptr_.reserve(layout.indptr.size());
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), layout.rows.data(),
                                            layout.rows.size() * sizeof(quest_paged_row), cudaMemcpyHostToDevice,
                                            stream));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(pages_.get(), layout.pages.data(),
                                            layout.pages.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                            stream));
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(indptr_.get(), layout.indptr.data(),
                                            layout.indptr.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                            stream));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        batch_ = static_cast<std::uint32_t>(layout.rows.size());
        num_pages_ = layout.pages.size();
        max_middle_ = 0;
        for (const quest_paged_row& row : layout.rows)
            max_middle_ = std::max(max_middle_, row.middle_end - row.middle_begin);
        page_bound_ = 0;
        for (const std::int32_t page : layout.pages)
            page_bound_ = std::max(page_bound_, static_cast<std::uint32_t>(page) + 1);
        entries_ = static_cast<std::uint32_t>(layout.indptr.back());
        positions_ = layout.positions;
        page_size_ = layout.page_size;
    }

    /// Effects: enqueues the rows of every request from `positions` (device,
    /// at least positions() of them) into `indices` (at least entries()) and
    /// `last_page_len` (at least batch()).
    /// Throws: usage_error if nothing is uploaded or a span is too short
    /// (nothing enqueued); cuda_error.
    void write(device_span<const std::uint32_t> positions, device_span<std::int32_t> indices,
               device_span<std::int32_t> last_page_len, cudaStream_t stream) const {
        if (batch_ == 0 || positions.size() < positions_ || indices.size() < entries_ || last_page_len.size() < batch_)
            throw usage_error("device_quest_paged_layout::write: " + std::to_string(positions.size()) +
                              " positions, room for " + std::to_string(indices.size()) + " indices and " +
                              std::to_string(last_page_len.size()) + " last-page lengths; the layout (" +
                              std::to_string(batch_) + " requests) needs " + std::to_string(positions_) + ", " +
                              std::to_string(entries_) + " and " + std::to_string(batch_) + " (upload one first)");
        detail::quest_paged_kv_kernel<<<batch_, detail::quest_paged_threads, 0, stream>>>(
            device_span<const quest_paged_row>{rows_.get(), batch_},
            device_span<const std::int32_t>{pages_.get(), num_pages_}, positions, page_size_, indices, last_page_len);
        KVPOLICY_CUDA_CHECK(cudaGetLastError());
    }

    /// FlashInfer's indptr of the layout, on the device ([batch + 1]).
    [[nodiscard]] device_span<const std::int32_t> indptr() const noexcept {
        return device_span<const std::int32_t>{indptr_.get(), batch_ == 0 ? 0 : std::size_t{batch_} + 1};
    }
    [[nodiscard]] std::uint32_t batch() const noexcept { return batch_; }
    [[nodiscard]] std::uint32_t entries() const noexcept { return entries_; }
    [[nodiscard]] std::uint32_t positions() const noexcept { return positions_; }
    [[nodiscard]] std::uint32_t page_size() const noexcept { return page_size_; }
    /// The rows and the flattened page tables, on the device (what the
    /// batched Quest selection, basic_device_quest::select_top_paged, reads).
    [[nodiscard]] device_span<const quest_paged_row> rows() const noexcept {
        return device_span<const quest_paged_row>{rows_.get(), batch_};
    }
    [[nodiscard]] device_span<const std::int32_t> pages() const noexcept {
        return device_span<const std::int32_t>{pages_.get(), num_pages_};
    }
    /// The most middle blocks (Quest's candidates) of any row.
    [[nodiscard]] std::uint32_t max_middle() const noexcept { return max_middle_; }
    /// One past the highest page id the tables hold.
    [[nodiscard]] std::uint32_t page_bound() const noexcept { return page_bound_; }

private:
    device_buffer<quest_paged_row> rows_;  // [batch]
    device_buffer<std::int32_t> pages_;    // [sum of num_blocks] page tables
    device_buffer<std::int32_t> indptr_;   // [batch + 1]
    std::uint32_t batch_ = 0;
    std::size_t num_pages_ = 0;
    std::uint32_t entries_ = 0;
    std::uint32_t positions_ = 0;
    std::uint32_t page_size_ = 0;
    std::uint32_t max_middle_ = 0;
    std::uint32_t page_bound_ = 0;
};

}  // namespace kvpolicy::cuda
