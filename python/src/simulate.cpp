#include "bindings.hpp"
namespace kvpolicy::python {
void bind_simulate(nb::module_&) {}
}
