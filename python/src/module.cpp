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
                               py_type_name(v));
        out.push_back({name, nb::cast<double>(v)});
    }
    return out;
}

}  // namespace kvpolicy::python

using namespace kvpolicy::python;

namespace {
template <class E>
bool is(const kvpolicy::error& e) {
    if constexpr (std::is_same_v<E, kvpolicy::error>)
        return true;  // (a dynamic_cast to its own type draws -Wnonnull-compare)
    else
        return dynamic_cast<const E*>(&e) != nullptr;
}
// A kvpolicy::error class and its Python class, which derives from its
// parent's (an index into the list; -1: Exception) and from the builtin users
// catch for that kind of mistake. Parents come first; the translator takes
// the last class that matches, the most derived.
struct error_class {
    const char* name;
    int parent;
    PyObject* builtin;
    bool (*matches)(const kvpolicy::error&);
    const char* doc;
    PyObject* type = nullptr;
};
using error_classes = std::array<error_class, 6>;
void translate(const std::exception_ptr& p, void* classes) {
    try {
        std::rethrow_exception(p);
    } catch (const kvpolicy::error& e) {
        const auto& c = *static_cast<const error_classes*>(classes);
        for (auto it = c.rbegin(); it != c.rend(); ++it)
            if (it->matches(e)) return PyErr_SetString(it->type, e.what());
    }
}
}  // namespace

NB_MODULE(_kvpolicy, m) {
    m.doc() = "kvpolicy's C++ core: eviction policies, the tiered cache, victim selection and the simulator";
    static error_classes classes = {{
        {"Error", -1, nullptr, is<kvpolicy::error>, "Base of every error kvpolicy raises."},
        {"ConfigError", 0, PyExc_ValueError, is<kvpolicy::config_error>,
         "A configuration that cannot work (capacity 0, a NaN cost, a bad option)."},
        {"UnknownNameError", 1, PyExc_LookupError, is<kvpolicy::unknown_name_error>,
         "A policy name no registered policy has; the message lists them all."},
        {"UsageError", 0, PyExc_ValueError, is<kvpolicy::usage_error>,
         "A call that breaks the protocol: a NaN score, a double release, a malformed hash chain."},
        {"CapacityError", 0, PyExc_RuntimeError, is<kvpolicy::capacity_error>,
         "A request that cannot be met: more blocks than are free or evictable."},
        {"ParseError", 0, PyExc_ValueError, is<kvpolicy::parse_error>, "A malformed trace line: 'file:line: reason'."},
    }};
    for (error_class& c : classes) {
        PyObject* parent = c.parent < 0 ? PyExc_Exception : classes[static_cast<std::size_t>(c.parent)].type;
        PyObject* bases = c.builtin ? PyTuple_Pack(2, parent, c.builtin) : PyTuple_Pack(1, parent);
        // Shown as kvpolicy.Name: the package re-exports the classes.
        c.type = PyErr_NewExceptionWithDoc((std::string("kvpolicy.") + c.name).c_str(), c.doc, bases, nullptr);
        Py_XDECREF(bases);
        if (c.type == nullptr) throw nb::python_error();
        m.attr(c.name) = nb::handle(c.type);
    }
    nb::register_exception_translator(translate, &classes);
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
