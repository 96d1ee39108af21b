// expect-error: victim_selector
// A sparse selector passed where a victim selector is required.
#include <kvpolicy/select/nth_element_selector.hpp>
#include <kvpolicy/sparse/full_attention.hpp>

template <kvpolicy::victim_selector S>
struct picks_victims {
    S selector;
};

picks_victims<kvpolicy::full_attention> p;
