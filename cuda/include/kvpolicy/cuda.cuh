// kvpolicy's device headers, plus every host header. Needs nvcc and CCCL.
#pragma once

#include "kvpolicy/kvpolicy.hpp"

#include "kvpolicy/cuda/check.cuh"
