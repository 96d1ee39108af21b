// Execution-space annotations that vanish without nvcc.
//
// kvpolicy's host headers are plain C++20 and build with g++ alone; the few
// functions that must also run inside a kernel (a span's size, a score, a
// radix key) carry KVPOLICY_HOST_DEVICE, which nvcc reads as
// `__host__ __device__` and every other compiler as nothing. KVPOLICY_DEVICE
// marks what may run only on the device (a device span's element access):
// under nvcc a host call to it is a compile error; without nvcc the
// declarations that use it are left out altogether. KVPOLICY_UNROLL asks
// nvcc to unroll the loop that follows (fixed-size per-thread arrays then
// stay in registers); other compilers see nothing.
#pragma once

#if defined(__CUDACC__)
#define KVPOLICY_HOST_DEVICE __host__ __device__
#define KVPOLICY_DEVICE __device__
#else
#define KVPOLICY_HOST_DEVICE
#define KVPOLICY_DEVICE
#endif

// Device pass only: the host compiler behind nvcc warns on the pragma.
#if defined(__CUDA_ARCH__)
#define KVPOLICY_UNROLL _Pragma("unroll")
#else
#define KVPOLICY_UNROLL
#endif
