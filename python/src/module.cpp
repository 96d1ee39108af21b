// kvpolicy's Python extension: the module, its exceptions and conversions.
//
// Every kvpolicy::error becomes the matching kvpolicy.Error subclass with
// the C++ message; the classes also derive from the builtin Python users
// catch for that kind of mistake (ValueError for bad values and misuse,
// RuntimeError for a request the cache cannot meet).
#include <kvpolicy/core/clock.hpp>

#include "bindings.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <type_traits>

namespace kvpolicy::python {

// NumPy's name of T's dtype: "float64", "uint32", "int64", ...
template <class T>
std::string dtype_name() {
    return (std::is_floating_point_v<T> ? "float"
            : std::is_signed_v<T>       ? "int"
                                        : "uint") +
           std::to_string(8 * sizeof(T));
}

// str(h), whatever h is.
std::string text_of(nb::handle h) {
    nb::object s = nb::steal(PyObject_Str(h.ptr()));
    if (!s.is_valid()) throw nb::python_error();
    return nb::cast<std::string>(s);
}

template <class T>
std::span<const T> as_span(nb::handle obj, const char* what, nb::object& keep) {
    if (in_array<T> a; nb::try_cast(obj, a, /*convert=*/false)) {
        keep = nb::borrow(obj);
        return {a.data(), a.shape(0)};
    }
    nb::module_ np = nb::module_::import_("numpy");
    nb::object arr = np.attr("asarray")(obj);
    if (nb::cast<int>(arr.attr("ndim")) == 0) arr = np.attr("reshape")(arr, 1);
    if (nb::cast<int>(arr.attr("ndim")) != 1)
        throw usage_error(std::string(what) + ": expected a 1-D sequence, got " + text_of(arr.attr("shape")) +
                          " dimensions");
    const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
    const std::size_t n = nb::cast<std::size_t>(arr.attr("size"));
    if constexpr (std::is_integral_v<T>) {
        if (n > 0) {
            if (kind != "i" && kind != "u" && kind != "b")
                throw usage_error(std::string(what) + ": expected integers, got dtype " + text_of(arr.attr("dtype")));
            // astype would wrap a negative or too large value silently.
            const nb::object lo = arr.attr("min")().attr("item")(), hi = arr.attr("max")().attr("item")();
            const nb::int_ tmin(std::numeric_limits<T>::min()), tmax(std::numeric_limits<T>::max());
            for (const auto& [v, bound, op] : {std::tuple{lo, tmin, Py_LT}, std::tuple{hi, tmax, Py_GT}})
                if (PyObject_RichCompareBool(v.ptr(), bound.ptr(), op) == 1)
                    throw usage_error(std::string(what) + ": " + text_of(v) + " is out of range; give values from " +
                                      std::to_string(std::numeric_limits<T>::min()) + " to " +
                                      std::to_string(std::numeric_limits<T>::max()));
        }
    }
    arr = np.attr("ascontiguousarray")(arr, nb::arg("dtype") = dtype_name<T>());
    in_array<T> a = nb::cast<in_array<T>>(arr);
    keep = arr;
    return {a.data(), a.shape(0)};
}

template std::span<const std::uint32_t> as_span<std::uint32_t>(nb::handle, const char*, nb::object&);
template std::span<const std::uint64_t> as_span<std::uint64_t>(nb::handle, const char*, nb::object&);
template std::span<const std::int32_t> as_span<std::int32_t>(nb::handle, const char*, nb::object&);
template std::span<const std::int64_t> as_span<std::int64_t>(nb::handle, const char*, nb::object&);
template std::span<const std::uint8_t> as_span<std::uint8_t>(nb::handle, const char*, nb::object&);
template std::span<const double> as_span<double>(nb::handle, const char*, nb::object&);

std::vector<option_value> options_from(const nb::dict& kwargs, const char* what) {
    std::vector<option_value> out;
    for (auto [k, v] : kwargs) {
        const std::string name = nb::cast<std::string>(k);
        if (!nb::isinstance<nb::int_>(v) && !nb::isinstance<nb::float_>(v) && !nb::isinstance<nb::bool_>(v))
            throw config_error(std::string(what) + ": option " + name + " must be a number or a bool, got " +
                               text_of(v.type().attr("__name__")));
        out.push_back({name, nb::cast<double>(v)});
    }
    return out;
}

}  // namespace kvpolicy::python

using namespace kvpolicy::python;

namespace {
PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
    // Shown as kvpolicy.Name: the package re-exports the classes.
    const std::string qualified = std::string("kvpolicy.") + name;
    PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
    if (type == nullptr) throw nb::python_error();
    m.attr(name) = nb::handle(type);
    return type;
}
PyObject* bases(std::initializer_list<PyObject*> types) {
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(types.size()));
    Py_ssize_t i = 0;
    for (PyObject* p : types) {
        Py_INCREF(p);
        PyTuple_SET_ITEM(t, i++, p);
    }
    return t;
}

// Each kvpolicy::error class and its Python class, most derived first.
template <class E>
bool is(const kvpolicy::error& e) {
    if constexpr (std::is_same_v<E, kvpolicy::error>)
        return true;
    else
        return dynamic_cast<const E*>(&e) != nullptr;
}
using error_kinds = std::array<std::pair<PyObject*, bool (*)(const kvpolicy::error&)>, 6>;
void translate(const std::exception_ptr& p, void* kinds) {
    try {
        std::rethrow_exception(p);
    } catch (const kvpolicy::error& e) {
        for (const auto& [type, matches] : *static_cast<const error_kinds*>(kinds))
            if (matches(e)) return PyErr_SetString(type, e.what());
    }
}
}  // namespace

NB_MODULE(_kvpolicy, m) {
    m.doc() = "kvpolicy's C++ core: eviction policies, the tiered cache, victim selection and the simulator";

    PyObject* error = new_exception(m, "Error", PyExc_Exception, "Base of every error kvpolicy raises.");
    PyObject* config = new_exception(m, "ConfigError", bases({error, PyExc_ValueError}),
                                     "A configuration that cannot work (capacity 0, a NaN cost, a bad option).");
    PyObject* unknown_name = new_exception(m, "UnknownNameError", bases({config, PyExc_LookupError}),
                                           "A policy name no registered policy has; the message lists them all.");
    PyObject* usage =
        new_exception(m, "UsageError", bases({error, PyExc_ValueError}),
                      "A call that breaks the protocol: a NaN score, a double release, a malformed hash chain.");
    PyObject* capacity = new_exception(m, "CapacityError", bases({error, PyExc_RuntimeError}),
                                       "A request that cannot be met: more blocks than are free or evictable.");
    PyObject* parse = new_exception(m, "ParseError", bases({error, PyExc_ValueError}),
                                    "A malformed trace line: 'file:line: reason'.");
    static const error_kinds kinds = {{{unknown_name, is<kvpolicy::unknown_name_error>},
                                       {config, is<kvpolicy::config_error>},
                                       {usage, is<kvpolicy::usage_error>},
                                       {capacity, is<kvpolicy::capacity_error>},
                                       {parse, is<kvpolicy::parse_error>},
                                       {error, is<kvpolicy::error>}}};
    nb::register_exception_translator(translate, const_cast<error_kinds*>(&kinds));
    // TieredCache.release(expected_return=NEVER): the session will not return.
    m.attr("NEVER") = kvpolicy::never;

    bind_policy(m);
    bind_select(m);
    bind_cache(m);
    bind_offload(m);
    bind_simulate(m);
    bind_vllm_policy(m);
    bind_lmcache_policy(m);
}
