// thrust_selector: victim selection written once in Thrust, run on any Thrust
// system: CUDA on a GPU, CPP (or OpenMP, TBB) on the host.
//
// The k lowest (score, id) pairs, ascending, ties broken by id, NaN rejected:
// the contract of the host `nth_element_selector`, which this matches on
// every input (tested on the CPP system in CI, on the CUDA system on a GPU).
// Two stable sorts do it, least significant part first: by id, then by the
// score's order-preserving bits; on the CUDA system both are radix sorts.
// That is O(n log n) on the host and a full sort on the device; for k << n
// on a GPU, `kvpolicy::cuda::select_lowest` (select.cuh, CUB radix select)
// does less work. Use this one where one source must run with and without a
// GPU, e.g. `retention_value<..., thrust_selector<thrust::cpp::tag>>`.
//
// `System` is a Thrust system tag (thrust::cpp::tag, thrust::cuda::tag,
// thrust::device_system_tag). Scratch lives in that system's memory, grows to
// the largest n seen and is reused, so steady-state calls do not allocate.
// Scores are widened to 64-bit keys whatever their type (a float's ordered
// bits keep their order as a uint64), so one set of buffers serves both.
//
// Compiles with g++ against CCCL (-I<cuda>/include/cccl and
// -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP): it includes nothing that
// needs nvcc. Never link a CPP-system and a CUDA-system build of Thrust code
// into one program: THRUST_DEVICE_SYSTEM changes what thrust's types mean.
#pragma once

#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/find.h>
#include <thrust/memory.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/memory_space.hpp"
#include "kvpolicy/cuda/select_key.cuh"

namespace kvpolicy::cuda {

/// Where a Thrust system's memory lives: the CPP system's (and a system
/// whose tag derives from it) is host memory, any other's (CUDA) device
/// memory. With THRUST_DEVICE_SYSTEM=CPP the device system is CPP: host.
template <class System>
inline constexpr memory_space system_memory_space =
    std::is_base_of_v<thrust::cpp::tag, System> ? memory_space::host : memory_space::device;

/// A span of a Thrust system's memory (memory_space.hpp).
template <class T, class System>
using system_span = space_span<T, system_memory_space<System>>;

namespace detail {

/// A grow-only array in the memory of Thrust system `System`.
template <class T, class System>
class system_buffer {
public:
    system_buffer() = default;
    system_buffer(const system_buffer&) = delete;
    system_buffer& operator=(const system_buffer&) = delete;
    system_buffer(system_buffer&& o) noexcept
            : ptr_(std::exchange(o.ptr_, thrust::pointer<T, System>{})), capacity_(std::exchange(o.capacity_, 0)) {}
    system_buffer& operator=(system_buffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, thrust::pointer<T, System>{});
            capacity_ = std::exchange(o.capacity_, 0);
        }
        return *this;
    }
    ~system_buffer() { release(); }

    /// Effects: at least n elements (contents not kept when it grows).
    void reserve(std::size_t n) {
        if (n <= capacity_) return;
        release();
        ptr_ = thrust::malloc<T>(System{}, n);
        capacity_ = n;
    }
    [[nodiscard]] thrust::pointer<T, System> get() const noexcept { return ptr_; }
    [[nodiscard]] T* raw() const noexcept { return thrust::raw_pointer_cast(ptr_); }

private:
    void release() noexcept {
        if (capacity_ != 0) thrust::free(System{}, ptr_);
        capacity_ = 0;
    }

    thrust::pointer<T, System> ptr_{};
    std::size_t capacity_ = 0;
};

template <class Score>
struct is_nan_fn {
    KVPOLICY_HOST_DEVICE bool operator()(Score s) const noexcept { return s != s; }
};

template <class Score>
struct widened_bits_fn {
    KVPOLICY_HOST_DEVICE std::uint64_t operator()(Score s) const noexcept { return ordered_bits(s); }
};

}  // namespace detail

template <class System = thrust::device_system_tag>
class thrust_selector {
public:
    static constexpr std::string_view name = "thrust";
    using system_type = System;

    /// victim_selector on host arrays: copies them into the system's memory,
    /// selects there, copies the k ids back.
    /// Effects: writes the min(out.size(), ids.size()) lowest ids, ascending
    /// by (score, id), and returns their count.
    /// Throws: usage_error if scores and ids differ in length or a score is
    /// NaN (naming the first such item); nothing is written then.
    template <class Score>
    std::size_t select_lowest(std::span<const Score> scores, std::span<const item_id> ids, std::span<item_id> out) {
        if (scores.size() != ids.size())
            throw usage_error("select_lowest: " + std::to_string(scores.size()) + " scores for " +
                              std::to_string(ids.size()) + " ids; pass one score per id");
        for (std::size_t i = 0; i < scores.size(); ++i)
            if (std::isnan(static_cast<double>(scores[i]))) throw nan_error(ids[i].value);
        const std::size_t n = ids.size();
        const std::size_t k = std::min(out.size(), n);
        if (k == 0) return 0;
        host_keys_.resize(n);
        host_ids_.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
            host_keys_[i] = ordered_bits(scores[i]);
            host_ids_[i] = ids[i].value;
        }
        reserve(n);
        thrust::copy(host_keys_.data(), host_keys_.data() + n, keys_.get());
        thrust::copy(host_ids_.data(), host_ids_.data() + n, ids_.get());
        sort_pairs(n);
        thrust::copy(ids_.get(), ids_.get() + static_cast<std::ptrdiff_t>(k), host_ids_.data());
        for (std::size_t i = 0; i < k; ++i) out[i] = item_id{host_ids_[i]};
        return k;
    }

    /// The same on arrays already in the system's memory (`system_span`:
    /// device spans for the CUDA system, host spans for CPP): `ids` is empty
    /// (item i has id i) or one per score; `out` receives the
    /// min(out.size(), scores.size()) lowest ids. Returns the count.
    /// Throws: usage_error on a NaN score (naming its item), or if ids is
    /// neither empty nor scores' length; `out` untouched.
    template <class Score>
    std::size_t select_lowest_in_system(system_span<const Score, System> scores_in,
                                        system_span<const std::uint32_t, System> ids_in,
                                        system_span<std::uint32_t, System> out_in) {
        if (!ids_in.empty() && ids_in.size() != scores_in.size())
            throw usage_error("select_lowest_in_system: " + std::to_string(scores_in.size()) + " scores for " +
                              std::to_string(ids_in.size()) + " ids; pass one id per score or none");
        const Score* scores = scores_in.data();
        const std::uint32_t* ids = ids_in.empty() ? nullptr : ids_in.data();
        std::uint32_t* out = out_in.data();
        const std::size_t n = scores_in.size();
        std::size_t k = out_in.size();
        const Score* nan_at = thrust::find_if(System{}, scores, scores + n, detail::is_nan_fn<Score>{});
        if (nan_at != scores + n) {
            const auto i = static_cast<std::size_t>(nan_at - scores);
            std::uint32_t id = static_cast<std::uint32_t>(i);
            if (ids != nullptr)
                thrust::copy(thrust::pointer<const std::uint32_t, System>(ids + i),
                             thrust::pointer<const std::uint32_t, System>(ids + i + 1), &id);
            throw nan_error(id);
        }
        k = std::min(k, n);
        if (k == 0) return 0;
        reserve(n);
        thrust::transform(System{}, scores, scores + n, keys_.raw(), detail::widened_bits_fn<Score>{});
        if (ids != nullptr)
            thrust::copy(System{}, ids, ids + n, ids_.raw());
        else
            thrust::sequence(System{}, ids_.raw(), ids_.raw() + n);
        sort_pairs(n);
        thrust::copy(System{}, ids_.raw(), ids_.raw() + k, out);
        return k;
    }

private:
    [[nodiscard]] static usage_error nan_error(std::uint32_t id) {
        return usage_error("select_lowest: score of item " + std::to_string(id) +
                           " is NaN; check the cost model's parameters");
    }

    void reserve(std::size_t n) {
        keys_.reserve(n);
        ids_.reserve(n);
    }

    // Least significant part first; both sorts are stable, so the result is
    // ordered by (score, id).
    void sort_pairs(std::size_t n) {
        thrust::stable_sort_by_key(System{}, ids_.raw(), ids_.raw() + n, keys_.raw());
        thrust::stable_sort_by_key(System{}, keys_.raw(), keys_.raw() + n, ids_.raw());
    }

    detail::system_buffer<std::uint64_t, System> keys_;  // [n] widened ordered score bits
    detail::system_buffer<std::uint32_t, System> ids_;   // [n] ids, permuted with the keys
    std::vector<std::uint64_t> host_keys_;               // host staging: [n]
    std::vector<std::uint32_t> host_ids_;                // host staging: [n], then [k] results
};

static_assert(victim_selector<thrust_selector<thrust::cpp::tag>>);
static_assert(victim_selector<thrust_selector<thrust::cpp::tag>, float>);
static_assert(victim_selector<thrust_selector<>>);
static_assert(system_memory_space<thrust::cpp::tag> == memory_space::host);

}  // namespace kvpolicy::cuda
