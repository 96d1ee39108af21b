// expect-error: cost_model
// A layer weight given where retention_value wants a cost model: rejected at
// the `using` line, and the diagnostic names the concept.
#include <kvpolicy/eviction/retention_value.hpp>

using broken = kvpolicy::retention_value<kvpolicy::pipelined_depth>;
broken instance{8};
