// ring_gather_math: one thread's share of the ring loader's gather kernel.
//
// The ring loader (kvpolicy/cuda/ring.cuh) gathers scattered CPU-tier
// blocks into one contiguous device slot. Its gather kernel gives each
// (destination block, 64 KiB slice) a thread block; thread t copies the
// slice's 16-byte words t, t + threads, ..., four loads in flight, then the
// tail. `gather_slice_words` is a slice's word range and `gather_thread_copy`
// a thread's whole copy, `KVPOLICY_HOST_DEVICE` over any trivially copyable
// word, so tests/sparse_kv_element.cpp runs every thread of the grid on the
// CPU and checks that each destination word is written exactly once, from
// the right source (STYLE.md 13).
//
// The loader moves bytes, whatever the blocks hold: fp32 K/V, or the bf16 /
// fp16 K/V engines store (kv_element.hpp); ring_loader::slot_view<T> is the
// typed device view of a slot that attention over 16-bit K/V reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy {

/// Words [begin, end) of a block that slice `slice` copies.
struct gather_word_range {
    std::size_t begin = 0;
    std::size_t end = 0;
};

[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr gather_word_range gather_slice_words(std::size_t slice,
                                                                                  std::size_t slice_words,
                                                                                  std::size_t block_words) noexcept {
    const std::size_t begin = slice * slice_words;
    const std::size_t end = begin + slice_words < block_words ? begin + slice_words : block_words;
    return {begin < end ? begin : end, end};
}

/// Thread `thread` of `Threads`: copies src[i] to dst[i] for i = r.begin +
/// thread, + Threads, ... below r.end, `Unroll` loads in flight (all loads
/// of a round before its stores), then the tail one by one.
template <unsigned Threads, unsigned Unroll, class Word>
KVPOLICY_HOST_DEVICE inline void gather_thread_copy(const Word* src, Word* dst, gather_word_range r,
                                                    unsigned thread) noexcept {
    std::size_t i = r.begin + thread;
    for (; i + (Unroll - 1) * std::size_t{Threads} < r.end; i += Unroll * std::size_t{Threads}) {
        Word v[Unroll];
        KVPOLICY_UNROLL
        for (unsigned u = 0; u < Unroll; ++u) v[u] = src[i + u * Threads];
        KVPOLICY_UNROLL
        for (unsigned u = 0; u < Unroll; ++u) dst[i + u * Threads] = v[u];
    }
    for (; i < r.end; i += Threads) dst[i] = src[i];
}

}  // namespace kvpolicy
