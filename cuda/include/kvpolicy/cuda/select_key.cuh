// select_key: a (score, id) pair as one unsigned radix key, for the device
// victim-selection back ends (select.cuh, thrust_selector.cuh).
//
// A float or double score maps to an unsigned integer whose order is the
// score's order (the usual radix-sort twiddle: flip every bit of a negative
// number, only the sign bit of a non-negative one), with -0.0 mapped like
// +0.0 because the host selector compares them equal. The id follows as the
// less significant part, so ascending keys are ascending (score, id): the
// host selector's order, ties broken by id. NaN has no place in the order;
// callers reject it first.
//
// Plain C++ plus libcu++: this header also compiles with g++ against the
// CCCL headers (the Thrust CPP system in tests), so it uses nothing that
// needs nvcc. Functions are __host__ __device__ under nvcc.
#pragma once

#include <cuda/std/bit>
#include <cuda/std/cstdint>
#include <cuda/std/tuple>
#include <cuda/std/type_traits>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy::cuda {

/// The unsigned type a score's bits fit in: float -> uint32, double -> uint64.
template <class Score>
using score_bits_t = ::cuda::std::conditional_t<sizeof(Score) == 4, ::cuda::std::uint32_t, ::cuda::std::uint64_t>;

/// Order-preserving bits of a non-NaN score: a < b (or a == b) as floats iff
/// ordered_bits(a) < (or ==) ordered_bits(b) as integers.
template <class Score>
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr score_bits_t<Score> ordered_bits(Score s) noexcept {
    static_assert(::cuda::std::is_same_v<Score, float> || ::cuda::std::is_same_v<Score, double>,
                  "ordered_bits: scores are float or double");
    using bits = score_bits_t<Score>;
    constexpr bits sign = bits{1} << (sizeof(bits) * 8 - 1);
    bits u = ::cuda::std::bit_cast<bits>(s);
    if ((u & ~sign) == 0) u = 0;  // -0.0 -> +0.0
    return (u & sign) != 0 ? static_cast<bits>(~u) : static_cast<bits>(u | sign);
}

/// (score, id) as one key, most significant part first.
template <class Score>
struct select_key {
    score_bits_t<Score> score;
    ::cuda::std::uint32_t id;
};

template <class Score>
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr select_key<Score> make_select_key(Score s,
                                                                               ::cuda::std::uint32_t id) noexcept {
    return {ordered_bits(s), id};
}

/// CUB's decomposer for select_key: the score bits are more significant.
struct select_key_decomposer {
    template <class Score>
    KVPOLICY_HOST_DEVICE ::cuda::std::tuple<score_bits_t<Score>&, ::cuda::std::uint32_t&> operator()(
        select_key<Score>& key) const noexcept {
        return {key.score, key.id};
    }
};

}  // namespace kvpolicy::cuda
