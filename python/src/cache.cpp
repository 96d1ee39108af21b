#include "bindings.hpp"
namespace kvpolicy::python {
void bind_cache(nb::module_&) {}
}
