// Every registered policy behind dyn_policy, compiled once for the program:
// each translation unit that links kvpolicy::dyn_policy_instance sees
// KVPOLICY_DYN_POLICY_EXTERN and leaves these to this one
// (eviction/dyn_policy.hpp).
#include <kvpolicy/eviction/dyn_policy.hpp>

template class kvpolicy::basic_dyn_policy<kvpolicy::eviction_policies>;
