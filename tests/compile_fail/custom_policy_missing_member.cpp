// expect-error: eviction_policy.*on_release\(id, ctx\)
// examples/custom_policy.cpp with its on_release removed: the README shows
// this diagnostic, and this case keeps it true (the static_assert after the
// class and the `using` line that composes the cache both name the concept
// and the missing member).
#define KVPOLICY_EXAMPLE_FORGET_ON_RELEASE
#include "../../examples/custom_policy.cpp"
