// KVPOLICY_HOST_DEVICE: marks a function that runs on the host and, under
// nvcc, on the device too (`__host__ __device__`); empty for a host compiler.
//
// STYLE.md rule 13: a kernel's per-thread or per-tile math lives in such
// functions, in host headers, so CPU tests drive them over every thread
// index against the naive host reference, and the `__global__` wrapper only
// maps indices. Identical to the definition in kvpolicy/cuda/select_key.cuh
// (a macro may be defined twice with the same tokens).
#pragma once

#if defined(__CUDACC__)
#define KVPOLICY_HOST_DEVICE __host__ __device__
#else
#define KVPOLICY_HOST_DEVICE
#endif
