// kvpolicy's device headers, plus every host header. Needs nvcc and CCCL.
//
// One trap: `using namespace kvpolicy;` at global scope in a .cu file brings
// kvpolicy::cuda in as `cuda`, and nvcc's generated kernel stubs name
// ::cuda::std unqualified, so instantiating some CCCL kernels then fails with
// "reference to 'cuda' is ambiguous". Put such using-directives inside a
// named namespace or a function (tests/cuda and bench/*.cu do).
#pragma once

#include "kvpolicy/kvpolicy.hpp"

#include "kvpolicy/cuda/attention.cuh"
#include "kvpolicy/cuda/check.cuh"
#include "kvpolicy/cuda/memory.cuh"
#include "kvpolicy/cuda/merge.cuh"
#include "kvpolicy/cuda/quest.cuh"
#include "kvpolicy/cuda/ring.cuh"
#include "kvpolicy/cuda/score.cuh"
#include "kvpolicy/cuda/select.cuh"
#include "kvpolicy/cuda/select_key.cuh"
#include "kvpolicy/cuda/thrust_selector.cuh"
