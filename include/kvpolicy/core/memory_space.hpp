// Memory spaces in the type: host_span<T> and device_span<T>.
//
// A pointer says nothing about where its memory lives, and the first GPU run
// is where a host read of device memory shows up, as a crash. So every view
// kvpolicy hands across the host/device line says where its memory is, in
// its type (STYLE.md 11; Thrust's device_ptr and CuTe's tagged tensors are
// the models):
// - `host_span<T>` views host memory (pageable or pinned). It is a
//   contiguous range: std::ranges algorithms, range-for and std::span take
//   it, and it converts from std::span, std::vector and arrays. Its element
//   access (operator[], begin, end) is host-only.
// - `device_span<T>` views device memory (cudaMalloc). It is not a range and
//   has no begin/end, so no host algorithm can walk it; its operator[]
//   exists only under nvcc and is `__device__`, so host code that indexes
//   it does not compile. It is made only explicitly, `device_span<T>{ptr,
//   n}` (the caller asserts that ptr is device memory), or by a
//   device-memory owner (cuda/memory.cuh: `device_buffer::view()`).
// - There is no conversion between spaces in either direction; within one
//   space T converts to const T, as for std::span. Moving data across is a
//   copy the caller writes (cudaMemcpyAsync with both spans' data()).
// `data()`, `size()`, `size_bytes()`, `empty()`, `first`, `last` and
// `subspan` work in both spaces and in both host and device code: they
// never touch the memory. Pinned host memory mapped into the device is one
// allocation seen two ways: cuda/memory.cuh's pinned_buffer gives a
// host_span of it and a device_span of its device address.
//
// Plain C++20: this header builds with g++ alone and in .cu files, where
// the members are `__host__ __device__` (core/host_device.hpp).
#pragma once

#include <cassert>
#include <concepts>
#include <cstddef>
#include <iterator>
#include <ranges>
#include <span>
#include <type_traits>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy {

/// Where the memory a view refers to lives.
enum class memory_space {
    host,    ///< CPU memory: pageable (new, std::vector) or pinned (cudaHostAlloc)
    device,  ///< GPU memory (cudaMalloc); readable only by kernels and copies
};

/// Host code may read and write memory of space S directly.
template <memory_space S>
concept host_accessible = S == memory_space::host;

/// Device code may read and write memory of space S directly.
template <memory_space S>
concept device_accessible = S == memory_space::device;

template <class T, memory_space S>
class space_span;

namespace detail {
template <class T>
inline constexpr bool is_space_span = false;
template <class T, memory_space S>
inline constexpr bool is_space_span<space_span<T, S>> = true;
}  // namespace detail

/// A view of `size()` contiguous T in memory space S (see the header
/// paragraph). Trivially copyable, so it passes to a kernel by value.
template <class T, memory_space S>
class space_span {
public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using size_type = std::size_t;
    using pointer = T*;
    using reference = T&;
    static constexpr memory_space space = S;

    constexpr space_span() noexcept = default;

    /// A view of [ptr, ptr + n). Explicit: the caller asserts that this is
    /// memory of space S (for a device_span: device memory).
    KVPOLICY_HOST_DEVICE constexpr explicit space_span(T* ptr, size_type n) noexcept : data_(ptr), size_(n) {}

    /// T -> const T (and any qualification conversion) within one space;
    /// never across spaces.
    template <class U>
    requires(!std::same_as<U, T> && std::is_convertible_v<U (*)[], T (*)[]>) KVPOLICY_HOST_DEVICE
        constexpr space_span(const space_span<U, S>& other) noexcept
            : data_(other.data()), size_(other.size()) {}

    /// Host spaces only: a view of a contiguous host range (std::span,
    /// std::vector, std::array, a C array). A temporary range is accepted
    /// only for const T, as for std::span.
    template <class R>
    requires(
        host_accessible<S> && !detail::is_space_span<std::remove_cvref_t<R>> && std::ranges::contiguous_range<R> &&
        std::ranges::sized_range<R> &&
        (std::ranges::borrowed_range<R> || std::is_const_v<T>)&&std::is_convertible_v<
            std::remove_reference_t<std::ranges::range_reference_t<R>> (*)[],
            T (*)[]>) constexpr space_span(R&& range) noexcept(noexcept(std::ranges::
                                                                            data(range)) && noexcept(std::ranges::
                                                                                                         size(range)))
            : data_(std::ranges::data(range)), size_(static_cast<size_type>(std::ranges::size(range))) {}

    // --- in both spaces, host and device code: nothing here reads memory ---

    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr size_type size() const noexcept { return size_; }
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr size_type size_bytes() const noexcept { return size_ * sizeof(T); }
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr bool empty() const noexcept { return size_ == 0; }

    /// The first n elements. Precondition: n <= size().
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr space_span first(size_type n) const noexcept {
        assert(n <= size_);
        return space_span{data_, n};
    }
    /// The last n elements. Precondition: n <= size().
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr space_span last(size_type n) const noexcept {
        assert(n <= size_);
        return space_span{data_ + (size_ - n), n};
    }
    /// `count` elements from `offset`, or all from `offset` to the end with
    /// std::dynamic_extent. Precondition: offset <= size() and, unless
    /// dynamic_extent, offset + count <= size().
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr space_span subspan(
        size_type offset, size_type count = std::dynamic_extent) const noexcept {
        assert(offset <= size_);
        assert(count == std::dynamic_extent || count <= size_ - offset);
        return space_span{data_ + offset, count == std::dynamic_extent ? size_ - offset : count};
    }

    // --- element access: only where the memory is reachable ---

    /// Host memory, host code only (not constexpr, so that nvcc's
    /// --expt-relaxed-constexpr cannot open it to device code either).
    /// Precondition: i < size().
    [[nodiscard]] T& operator[](size_type i) const noexcept requires host_accessible<S> {
        assert(i < size_);
        return data_[i];
    }
    [[nodiscard]] T* begin() const noexcept requires host_accessible<S> { return data_; }
    [[nodiscard]] T* end() const noexcept requires host_accessible<S> { return data_ + size_; }

#if defined(__CUDACC__)
    /// Device memory, device code only (a host call does not compile).
    /// Precondition: i < size().
    [[nodiscard]] KVPOLICY_DEVICE T& operator[](size_type i) const noexcept requires device_accessible<S> {
        assert(i < size_);
        return data_[i];
    }
#endif

private:
    T* data_ = nullptr;
    size_type size_ = 0;
};

/// A view of host memory (see the header paragraph).
template <class T>
using host_span = space_span<T, memory_space::host>;

/// A view of device memory: made only as `device_span<T>{ptr, n}` (the
/// caller asserts ptr is device memory) or by a device-memory owner.
template <class T>
using device_span = space_span<T, memory_space::device>;

}  // namespace kvpolicy

/// A host span does not own its memory: views taken from it outlive it.
template <class T, kvpolicy::memory_space S>
inline constexpr bool std::ranges::enable_borrowed_range<kvpolicy::space_span<T, S>> = true;

namespace kvpolicy {

static_assert(std::is_trivially_copyable_v<device_span<const float>>);
static_assert(std::ranges::contiguous_range<host_span<float>>);
static_assert(!std::ranges::range<device_span<float>>, "a device span must not be walkable by host algorithms");
static_assert(std::is_convertible_v<host_span<float>, host_span<const float>>);
static_assert(!std::is_convertible_v<host_span<const float>, host_span<float>>);
static_assert(!std::is_constructible_v<device_span<const float>, host_span<const float>>);
static_assert(!std::is_constructible_v<host_span<const float>, device_span<const float>>);
static_assert(!std::is_constructible_v<std::span<const float>, device_span<const float>>);

}  // namespace kvpolicy
