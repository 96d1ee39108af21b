// float_math: the fp32 exp and log that the attention math shared by the host
// and the CUDA kernels calls (decode_attention_math, lse_merge_math,
// grouped_decode_math, prefill_block): expf / logf in device code, std::exp /
// std::log's float overloads on the host, so one function body serves both.
#pragma once

#include <cmath>

#include "kvpolicy/core/host_device.hpp"

namespace kvpolicy::detail {

[[nodiscard]] KVPOLICY_HOST_DEVICE inline float exp_f(float x) noexcept {
#if defined(__CUDA_ARCH__)
    return expf(x);
#else
    return std::exp(x);
#endif
}

[[nodiscard]] KVPOLICY_HOST_DEVICE inline float log_f(float x) noexcept {
#if defined(__CUDA_ARCH__)
    return logf(x);
#else
    return std::log(x);
#endif
}

}  // namespace kvpolicy::detail
