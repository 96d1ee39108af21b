// expect-error: layer_weight
// A position weight given where a layer weight belongs: the strong ids keep
// the two seams apart, and the error names the concept.
#include <kvpolicy/cost/uniform_weights.hpp>

template <kvpolicy::layer_weight W>
double weigh(const W& w) {
    return w.weight(kvpolicy::layer_index{0}, 1);
}

double x = weigh(kvpolicy::uniform_position_weight{});
