// Shared pieces of the extension module: NumPy in and out, the bind_*
// functions each translation unit defines (one per Python-facing area, so
// the two cores compile them in parallel).
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/core/policy_options.hpp>

namespace kvpolicy::python {

namespace nb = nanobind;

template <class T>
using in_array = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using out_array = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

/// A NumPy array that owns `v` (no copy of the elements).
template <class T>
out_array<T> to_numpy(std::vector<T>&& v) {
    auto* owned = new std::vector<T>(std::move(v));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    return out_array<T>(owned->data(), {owned->size()}, owner);
}

/// A NumPy array of f(x) for each x of `range`, as T.
template <class T, class Range, class F>
out_array<T> column(const Range& range, F f) {
    std::vector<T> v;
    v.reserve(std::size(range));
    for (const auto& x : range) v.push_back(static_cast<T>(f(x)));
    return to_numpy(std::move(v));
}

static_assert(sizeof(item_id) == sizeof(std::uint32_t) && alignof(item_id) == alignof(std::uint32_t) &&
                  std::is_standard_layout_v<item_id>,
              "item_id must be a bare uint32 so NumPy uint32 arrays can be viewed as ids without a copy");

/// uint32 values (a NumPy uint32 array's) as item ids, in place.
inline std::span<const item_id> as_ids(std::span<const std::uint32_t> s) {
    return {reinterpret_cast<const item_id*>(s.data()), s.size()};
}
inline std::span<item_id> as_ids(std::span<std::uint32_t> s) {
    return {reinterpret_cast<item_id*>(s.data()), s.size()};
}

/// The items of `obj`: a list's or tuple's in place, another iterable's
/// copied into a list, which `keep` holds. Throws: TypeError saying `error`.
inline std::span<PyObject* const> items_of(nb::handle obj, const char* error, nb::object& keep) {
    keep = nb::steal(PySequence_Fast(obj.ptr(), error));
    if (!keep.is_valid()) throw nb::python_error();
    return {PySequence_Fast_ITEMS(keep.ptr()), static_cast<std::size_t>(PySequence_Fast_GET_SIZE(keep.ptr()))};
}

/// The bytes of `o`, in place, where it is a bytes object.
inline std::optional<std::string_view> bytes_of(PyObject* o) noexcept {
    if (!PyBytes_Check(o)) return std::nullopt;
    return std::string_view(PyBytes_AS_STRING(o), static_cast<std::size_t>(PyBytes_GET_SIZE(o)));
}

/// type(h).__name__, for messages.
inline std::string py_type_name(nb::handle h) { return nb::cast<std::string>(h.type().attr("__name__")); }

/// Python's hash() of `o`, as 64 bits. Throws: what hash() raises (an
/// unhashable key's TypeError).
inline std::uint64_t py_hash(PyObject* o) {
    const Py_hash_t h = PyObject_Hash(o);
    if (h == -1 && PyErr_Occurred()) throw nb::python_error();
    return static_cast<std::uint64_t>(h);
}

/// Whether `a == b`, as a dict's probe asks it (the same object: no call).
inline bool py_equal(PyObject* a, PyObject* b) {
    if (a == b) return true;
    const int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) throw nb::python_error();
    return eq == 1;
}

/// A list of `n` items, item j the object f(j).
template <class F>
nb::list list_of(std::size_t n, F f) {
    nb::list l = nb::steal<nb::list>(PyList_New(static_cast<Py_ssize_t>(n)));
    if (!l.is_valid()) throw nb::python_error();
    for (std::size_t j = 0; j < n; ++j) {
        nb::object item = f(j);  // a copy: f may return a reference to an object kept elsewhere
        PyList_SET_ITEM(l.ptr(), static_cast<Py_ssize_t>(j), item.release().ptr());
    }
    return l;
}

/// dict_of("a", x, "b", y): a dict of those items, in that order.
inline void put(nb::dict&) {}
template <class V, class... Rest>
void put(nb::dict& d, const char* key, V&& value, Rest&&... rest) {
    d[key] = std::forward<V>(value);
    put(d, std::forward<Rest>(rest)...);
}
template <class... Items>
nb::dict dict_of(Items&&... items) {
    nb::dict d;
    put(d, std::forward<Items>(items)...);
    return d;
}

/// A 1-D contiguous array of T viewing `obj` without a copy when it is one
/// already (a NumPy array of that dtype); otherwise NumPy converts it (an int,
/// a list, another integer dtype), refusing values T cannot hold exactly.
/// `keep` holds the converted array alive. Throws: usage_error naming `what`.
template <class T>
std::span<const T> as_span(nb::handle obj, const char* what, nb::object& keep);

/// Options for a policy from Python keyword arguments (numbers or bools).
std::vector<option_value> options_from(const nb::dict& kwargs, const char* what);

void bind_policy(nb::module_& m);
void bind_select(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_offload(nb::module_& m);
void bind_simulate(nb::module_& m);
void bind_vllm_policy(nb::module_& m);
void bind_lmcache_policy(nb::module_& m);

}  // namespace kvpolicy::python
