// Host <-> device data helpers shared by the CUDA test programs that compare
// device results with host references (cuda_sparse_ring, cuda_16bit):
// synchronous uploads and downloads, poisoned outputs, a relative
// comparison, an exception probe, raw block ids, random inputs, and the
// host Quest rule's selection from given scores.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/core/memory_space.hpp>
#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/cuda/check.cuh>
#include <kvpolicy/cuda/memory.cuh>

#include "support/random_floats.hpp"

namespace kvpolicy::cuda::testing {

using kvpolicy::testing::random_floats;

// cudaMemcpy and cudaMemset run on the legacy stream, which does not order
// with the non-blocking streams the code under test uses: settle first.
inline void settle() { KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize()); }

template <class T>
T* upload(const std::vector<T>& h, device_buffer<T>& d) {
    d.reserve(std::max<std::size_t>(h.size(), 1));
    if (!h.empty()) KVPOLICY_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    settle();
    return d.get();
}

// The same upload, as the device span the typed API takes.
template <class T>
device_span<T> upload_span(const std::vector<T>& h, device_buffer<T>& d) {
    upload(h, d);
    return d.view(h.size());
}

template <class T>
std::vector<T> download(const T* d, std::size_t n) {
    std::vector<T> h(n);
    if (n > 0) KVPOLICY_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

inline void poison(void* d, std::size_t bytes) {
    KVPOLICY_CUDA_CHECK(cudaMemset(d, 0xff, bytes));
    settle();
}

template <class T>
inline void poison(device_span<T> d) {
    poison(d.data(), d.size_bytes());
}

template <class T>
std::vector<std::remove_const_t<T>> download(device_span<T> d) {
    return download(static_cast<const T*>(d.data()), d.size());
}

inline bool close(float got, float want, float tol) {
    if (std::isinf(want)) return got == want;
    return std::abs(got - want) <= tol * (1.0f + std::abs(want));
}

template <class E, class F>
bool throws(F&& f) {
    try {
        f();
    } catch (const E&) {
        return true;
    }
    return false;
}

inline std::vector<std::uint32_t> raw_ids(const std::vector<block_id>& b) {
    std::vector<std::uint32_t> r(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) r[i] = b[i].value;
    return r;
}

// What Quest selects from `available` with one score per block: every
// block when the plan loads all, else the sinks, the middle's top blocks by
// the host rule, and the recent blocks, in that order.
inline std::vector<block_id> host_quest_selection(const std::vector<block_id>& available,
                                                  const std::vector<float>& scores, std::uint32_t block_size,
                                                  const quest_config& cfg) {
    const quest_plan plan = plan_quest_selection(available.size(), block_size, cfg);
    if (plan.load_all) return available;
    std::vector<block_id> want;
    std::vector<std::uint32_t> scratch, chosen(plan.middle_end - plan.middle_begin);
    const std::size_t kept = quest_top_positions(
        std::span<const float>(scores).subspan(plan.middle_begin, plan.middle_end - plan.middle_begin),
        plan.middle_keep, scratch, chosen);
    for (std::size_t i = 0; i < plan.middle_begin; ++i) want.push_back(available[i]);
    for (std::size_t i = 0; i < kept; ++i) want.push_back(available[plan.middle_begin + chosen[i]]);
    for (std::size_t i = plan.middle_end; i < available.size(); ++i) want.push_back(available[i]);
    return want;
}

}  // namespace kvpolicy::cuda::testing
