// Execution-space annotations that vanish without nvcc.
//
// kvpolicy's host headers are plain C++20 and build with g++ alone; the few
// functions that must also run inside a kernel (a span's size, a score, a
// radix key) carry KVPOLICY_HOST_DEVICE, which nvcc reads as
// `__host__ __device__` and every other compiler as nothing. KVPOLICY_DEVICE
// marks what may run only on the device (a device span's element access):
// under nvcc a host call to it is a compile error; without nvcc the
// declarations that use it are left out altogether.
#pragma once

#if defined(__CUDACC__)
#define KVPOLICY_HOST_DEVICE __host__ __device__
#define KVPOLICY_DEVICE __device__
#else
#define KVPOLICY_HOST_DEVICE
#define KVPOLICY_DEVICE
#endif
