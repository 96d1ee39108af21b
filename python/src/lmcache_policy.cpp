// kvpolicy._kvpolicy.KeyOrder: the bookkeeping of kvpolicy.lmcache (LMCache's
// multiprocess-mode EvictionPolicy and local-backend BaseCachePolicy): an
// engine::lmcache_order (include/kvpolicy/engine/lmcache_order.hpp says how
// the policy's order and LMCache's meet) over Python keys, a batch of keys
// per call. Here: each key's id (an engine::hashed_slots under the key's
// hash), and the *front*, a dict of the keys the policy popped that LMCache
// still holds, in the order they were named. The order LMCache sees is
// front ++ policy order, which for lru is LMCache's own OrderedDict
// (python/tests/test_lmcache_policies.py checks every answer on random
// histories).

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <kvpolicy/engine/hashed_slots.hpp>
#include <kvpolicy/engine/lmcache_order.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

// Dict operations with the key's hash computed once per key and call: keys
// such as LMCache's ObjectKey (a frozen dataclass) hash in Python, several
// hundred ns each, more than the rest of the bookkeeping.
#if PY_VERSION_HEX < 0x030D0000
PyObject* dict_get(PyObject* d, PyObject* k, Py_hash_t h) { return _PyDict_GetItem_KnownHash(d, k, h); }
int dict_set(PyObject* d, PyObject* k, PyObject* v, Py_hash_t h) { return _PyDict_SetItem_KnownHash(d, k, v, h); }
int dict_del(PyObject* d, PyObject* k, Py_hash_t h) { return _PyDict_DelItem_KnownHash(d, k, h); }
#else
PyObject* dict_get(PyObject* d, PyObject* k, Py_hash_t) { return PyDict_GetItemWithError(d, k); }
int dict_set(PyObject* d, PyObject* k, PyObject* v, Py_hash_t) { return PyDict_SetItem(d, k, v); }
int dict_del(PyObject* d, PyObject* k, Py_hash_t) { return PyDict_DelItem(d, k); }
#endif

class key_order {
public:
    key_order(const std::string& policy, std::size_t capacity, const nb::dict& options)
            : order_(capacity, {policy, options_from(options, policy.c_str())}), ids_(capacity), keys_(capacity) {}

    [[nodiscard]] std::size_t size() const { return ids_.size() + nb::len(front_); }
    [[nodiscard]] std::size_t ordered() const { return ids_.size(); }
    [[nodiscard]] bool contains(nb::handle key) const {
        return id_of(key.ptr(), static_cast<Py_hash_t>(py_hash(key.ptr()))) != no_index || front_.contains(key);
    }
    [[nodiscard]] nb::dict front() const { return front_; }

    /// Each key in turn becomes the most recent: a tracked key is an access,
    /// a new (or front) key an insert (skipped when `touch_only`, unless it
    /// waits at the front). `reversed`: walk the sequence from its end.
    void put(nb::handle keys, bool reversed, bool touch_only) {
        nb::object keep;
        const std::span<PyObject* const> items = items_of(keys, "keys must be a sequence", keep);
        order_.begin();
        for (std::size_t j = 0; j < items.size(); ++j) {
            PyObject* key = items[reversed ? items.size() - 1 - j : j];
            const auto h = static_cast<Py_hash_t>(py_hash(key));
            if (const std::uint32_t found = id_of(key, h); found != no_index) {
                order_.access(found);
                continue;
            }
            const bool at_front = dict_get(front_.ptr(), key, h) != nullptr;
            if (PyErr_Occurred()) throw nb::python_error();
            if (!at_front && touch_only) continue;
            if (order_.full()) {
                pop_to_front(1);
                if (order_.full()) throw usage_error("kvpolicy.lmcache: no key can be moved out of the order");
            }
            if (at_front && dict_del(front_.ptr(), key, h) != 0) throw nb::python_error();
            const std::uint32_t id = order_.next_id();
            ids_.insert(id, static_cast<std::uint64_t>(h));
            keys_[id] = nb::borrow(key);
            order_.insert(static_cast<std::uint64_t>(h));
        }
        order_.end();
    }

    /// The keys are gone: forgotten (no ghost), wherever they wait.
    void remove(nb::handle keys) {
        nb::object keep;
        std::vector<item_id> gone;
        for (PyObject* key : items_of(keys, "keys must be a sequence", keep)) {
            const auto h = static_cast<Py_hash_t>(py_hash(key));
            const std::uint32_t id = id_of(key, h);
            if (id == no_index) {
                if (dict_del(front_.ptr(), key, h) != 0) {
                    if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw nb::python_error();
                    PyErr_Clear();
                }
                continue;
            }
            ids_.erase(id);
            keys_[id] = nb::object();
            gone.push_back(item_id{id});
        }
        order_.erase(gone);
    }

    /// Up to `n` keys in victim order, each passing `eligible` (None: all);
    /// they stay tracked, at the front, until removed or used again.
    nb::list victims(std::size_t n, nb::handle eligible) {
        nb::list out;
        std::vector<nb::object> next;  // the front's keys, then the policy's victims: held while `eligible` runs
        for (auto [k, v] : front_) next.push_back(nb::borrow(k));
        for (std::size_t i = 0; n > 0; ++i) {
            if (i == next.size()) {  // the policy names more victims, each to the front
                if (ids_.size() == 0) break;
                const std::vector<nb::object> named = pop_to_front(n - nb::len(out));
                if (named.empty()) break;
                next.insert(next.end(), named.begin(), named.end());
            }
            if (eligible.is_none() || truthy(eligible(next[i]))) {
                out.append(next[i]);
                if (nb::len(out) == n) break;
            }
        }
        return out;
    }

    /// Every tracked key, victims first: the front, then the policy's keys by
    /// their last event, oldest first.
    [[nodiscard]] nb::list order() const {
        nb::list out;
        for (auto [k, v] : front_) out.append(k);
        for (std::uint32_t id : order_.by_last_event()) out.append(keys_[id]);
        return out;
    }

private:
    // The id of `key` (of hash `h`), or no_index.
    std::uint32_t id_of(PyObject* key, Py_hash_t h) const {
        return ids_.find(static_cast<std::uint64_t>(h),
                         [&](std::uint32_t id) { return py_equal(keys_[id].ptr(), key); });
    }
    static bool truthy(const nb::object& o) {
        const int r = PyObject_IsTrue(o.ptr());
        if (r < 0) throw nb::python_error();
        return r != 0;
    }

    // Up to `n` of the policy's victims to the front; returns their keys.
    std::vector<nb::object> pop_to_front(std::size_t n) {
        std::vector<nb::object> named;
        for (item_id id : order_.pop(n)) {
            nb::object& key = named.emplace_back(std::move(keys_[id.index()]));
            keys_[id.index()] = nb::object();
            const auto h = static_cast<Py_hash_t>(ids_.hash(id.value));
            ids_.erase(id.value);
            if (dict_set(front_.ptr(), key.ptr(), Py_None, h) != 0) throw nb::python_error();
        }
        return named;
    }

    engine::lmcache_order order_;
    engine::hashed_slots ids_;      // each key's id under its hash, for the keys the policy orders
    nb::dict front_;                // key -> None: named, not yet removed; in order
    std::vector<nb::object> keys_;  // [capacity] the key of each id
};

}  // namespace

void bind_lmcache_policy(nb::module_& m) {
    nb::class_<key_order>(m, "KeyOrder",
                          "kvpolicy.lmcache's bookkeeping: a policy's victim order over Python keys "
                          "(python/src/lmcache_policy.cpp says how).")
        .def(nb::init<const std::string&, std::size_t, const nb::dict&>(), nb::arg("policy"), nb::arg("capacity"),
             nb::arg("options"))
        .def("__len__", &key_order::size)
        .def("__contains__", &key_order::contains)
        .def_prop_ro("ordered", &key_order::ordered)
        .def_prop_ro("front", &key_order::front)
        .def("put", &key_order::put, nb::arg("keys"), nb::arg("reversed") = false, nb::arg("touch_only") = false)
        .def("remove", &key_order::remove, nb::arg("keys"))
        .def("victims", &key_order::victims, nb::arg("n"), nb::arg("eligible").none())
        .def("order", &key_order::order);
}

}  // namespace kvpolicy::python
