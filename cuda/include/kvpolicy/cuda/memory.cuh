// Owning handles for device memory, pinned host memory, streams and events.
//
// Every CUDA resource kvpolicy's device headers hold lives in one of these:
// freed in the destructor, movable, not copyable, and allocated only when a
// buffer must grow (`reserve`), so steady-state calls allocate nothing.
// Failures throw `cuda_error` (check.cuh); destructors ignore errors, since
// they cannot throw and the context may already be gone at exit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/check.cuh"

namespace kvpolicy::cuda {

/// A grow-only array of T in device memory (cudaMalloc).
template <class T>
class device_buffer {
public:
    device_buffer() = default;
    explicit device_buffer(std::size_t n) { reserve(n); }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& o) noexcept
            : ptr_(std::exchange(o.ptr_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
    device_buffer& operator=(device_buffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            capacity_ = std::exchange(o.capacity_, 0);
        }
        return *this;
    }
    ~device_buffer() { release(); }

    /// Effects: room for at least n elements; contents are not kept when it grows.
    void reserve(std::size_t n) {
        if (n <= capacity_) return;
        release();
        void* p = nullptr;
        KVPOLICY_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
        ptr_ = static_cast<T*>(p);
        capacity_ = n;
    }
    [[nodiscard]] T* get() const noexcept { return ptr_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    /// The whole allocation as a device span (memory_space.hpp): the way
    /// device memory enters the typed API.
    [[nodiscard]] device_span<T> view() const noexcept { return device_span<T>{ptr_, capacity_}; }
    /// The first n elements. Throws: usage_error if n > capacity().
    [[nodiscard]] device_span<T> view(std::size_t n) const {
        if (n > capacity_)
            throw usage_error("device_buffer::view: " + std::to_string(n) + " elements asked of a buffer of " +
                              std::to_string(capacity_) + "; reserve(n) first");
        return device_span<T>{ptr_, n};
    }

private:
    void release() noexcept {
        if (ptr_ != nullptr) (void)cudaFree(ptr_);
        ptr_ = nullptr;
        capacity_ = 0;
    }

    T* ptr_ = nullptr;
    std::size_t capacity_ = 0;
};

/// A grow-only array of T in pinned (page-locked) host memory, mapped into
/// the device's address space so kernels may read it directly.
template <class T>
class pinned_buffer {
public:
    pinned_buffer() = default;
    explicit pinned_buffer(std::size_t n) { reserve(n); }
    pinned_buffer(const pinned_buffer&) = delete;
    pinned_buffer& operator=(const pinned_buffer&) = delete;
    pinned_buffer(pinned_buffer&& o) noexcept
            : ptr_(std::exchange(o.ptr_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
    pinned_buffer& operator=(pinned_buffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            capacity_ = std::exchange(o.capacity_, 0);
        }
        return *this;
    }
    ~pinned_buffer() { release(); }

    void reserve(std::size_t n) {
        if (n <= capacity_) return;
        release();
        void* p = nullptr;
        KVPOLICY_CUDA_CHECK(cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable));
        ptr_ = static_cast<T*>(p);
        capacity_ = n;
    }
    [[nodiscard]] T* get() const noexcept { return ptr_; }
    /// The whole allocation as host memory.
    [[nodiscard]] host_span<T> host_view() const noexcept { return host_span<T>{ptr_, capacity_}; }
    /// The same memory as kernels address it (unified addressing makes the
    /// pointer equal to get() on every 64-bit platform CUDA supports, but
    /// ask, not assume): a device span, so only kernels and copies read it.
    [[nodiscard]] device_span<T> device_view() const {
        void* d = nullptr;
        if (ptr_ != nullptr) KVPOLICY_CUDA_CHECK(cudaHostGetDevicePointer(&d, ptr_, 0));
        return device_span<T>{static_cast<T*>(d), capacity_};
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
    void release() noexcept {
        if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
        ptr_ = nullptr;
        capacity_ = 0;
    }

    T* ptr_ = nullptr;
    std::size_t capacity_ = 0;
};

/// A non-blocking stream (never synchronizes with the legacy default stream).
class stream_handle {
public:
    stream_handle() { KVPOLICY_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
    stream_handle(const stream_handle&) = delete;
    stream_handle& operator=(const stream_handle&) = delete;
    stream_handle(stream_handle&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    stream_handle& operator=(stream_handle&& o) noexcept {
        if (this != &o) {
            release();
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    ~stream_handle() { release(); }
    [[nodiscard]] cudaStream_t get() const noexcept { return s_; }

private:
    void release() noexcept {
        if (s_ != nullptr) (void)cudaStreamDestroy(s_);
        s_ = nullptr;
    }
    cudaStream_t s_ = nullptr;
};

/// An event without timing (cheaper to record), for ordering only; pass
/// `timing = true` for one that cudaEventElapsedTime can read.
class event_handle {
public:
    explicit event_handle(bool timing = false) {
        KVPOLICY_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
    }
    event_handle(const event_handle&) = delete;
    event_handle& operator=(const event_handle&) = delete;
    event_handle(event_handle&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    event_handle& operator=(event_handle&& o) noexcept {
        if (this != &o) {
            release();
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    ~event_handle() { release(); }
    [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }

private:
    void release() noexcept {
        if (e_ != nullptr) (void)cudaEventDestroy(e_);
        e_ = nullptr;
    }
    cudaEvent_t e_ = nullptr;
};

}  // namespace kvpolicy::cuda
