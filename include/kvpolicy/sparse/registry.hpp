// Every sparse block selector kvpolicy ships, by the name a flag or config
// uses: `visit_by_name<sparse_selectors>("quest", f)`. Adding a selector:
// write its header, include it here, add it to the list. The CUDA selector
// (kvpolicy/cuda/quest.cuh) is not listed: host code must not need nvcc.
#pragma once

#include "kvpolicy/core/type_list.hpp"
#include "kvpolicy/sparse/full_attention.hpp"
#include "kvpolicy/sparse/minference.hpp"
#include "kvpolicy/sparse/quest.hpp"
#include "kvpolicy/sparse/sink_window.hpp"

namespace kvpolicy {

using sparse_selectors = type_list<full_attention, sink_window, quest, minference>;

}  // namespace kvpolicy
