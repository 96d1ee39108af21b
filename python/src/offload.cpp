#include "bindings.hpp"
namespace kvpolicy::python {
void bind_offload(nb::module_&) {}
}
