// kvpolicy._kvpolicy.KeyOrder: the bookkeeping of kvpolicy.lmcache (LMCache's
// multiprocess-mode EvictionPolicy and local-backend BaseCachePolicy): any
// registered policy (dyn_policy) over Python keys, a batch of keys per call.
//
// LMCache names victims without removing them: a victim stays resident, and
// may be used again, until LMCache says it is gone. kvpolicy's policies pop a
// victim when they name it. The *front* reconciles the two: a key the policy
// popped but LMCache still holds waits there (a Python dict, in the order the
// keys were named), ahead of every key the policy still orders; it is offered
// first on the next request; used again it goes back into the policy as a new
// key; removed it is forgotten. The order LMCache sees is front ++ policy
// order, which for lru is LMCache's own OrderedDict (python/tests/
// test_lmcache_policies.py checks every answer on random histories).
//
// Capacity: the policy orders at most `capacity` keys (ids are reused); a new
// key beyond that first pops one victim to the front, so the policy still
// decides who goes and no key is dropped untracked.
//
// Time: one tick per C++ batch call. Each id remembers the sequence number of
// its last event, key by key (`order()` sorts by it for LMCache's checkpoint).

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <kvpolicy/eviction/dyn_policy.hpp>

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
            : policy_(capacity, {policy, options_from(options, policy.c_str())}),
              keys_(capacity),
              ids_obj_(capacity),
              hash_(capacity, 0),
              last_(capacity, 0),
              mark_(capacity, 0) {
        free_.resize(capacity);
        std::iota(free_.rbegin(), free_.rend(), 0u);
    }

    [[nodiscard]] std::size_t size() const { return nb::len(ids_) + nb::len(front_); }
    [[nodiscard]] std::size_t ordered() const { return nb::len(ids_); }
    [[nodiscard]] bool contains(nb::handle key) const { return ids_.contains(key) || front_.contains(key); }
    [[nodiscard]] nb::dict front() const { return front_; }

    /// Each key in turn becomes the most recent: a tracked key is an access,
    /// a new (or front) key an insert (skipped when `touch_only`, unless it
    /// waits at the front). `reversed`: walk the sequence from its end.
    void put(nb::handle keys, bool reversed, bool touch_only) {
        nb::object keep;
        const std::span<PyObject* const> items = items_of(keys, "keys must be a sequence", keep);
        begin_run(false);
        for (std::size_t j = 0; j < items.size(); ++j) {
            PyObject* key = items[reversed ? items.size() - 1 - j : j];
            const Py_hash_t h = PyObject_Hash(key);
            if (h == -1 && PyErr_Occurred()) throw nb::python_error();  // an unhashable key
            PyObject* found = dict_get(ids_.ptr(), key, h);
            if (found != nullptr) {
                const auto id = static_cast<std::uint32_t>(PyLong_AsUnsignedLong(found));
                if (inserting_ || mark_[id] == generation_) begin_run(false);
                add(id, 0);
                continue;
            }
            if (PyErr_Occurred()) throw nb::python_error();
            const bool at_front = dict_get(front_.ptr(), key, h) != nullptr;
            if (PyErr_Occurred()) throw nb::python_error();
            if (!at_front && touch_only) continue;
            if (!inserting_) begin_run(true);
            if (free_.empty()) {
                begin_run(true);
                pop_to_front(1);
                if (free_.empty()) throw usage_error("kvpolicy.lmcache: no key can be moved out of the order");
            }
            if (at_front && dict_del(front_.ptr(), key, h) != 0) throw nb::python_error();
            const std::uint32_t id = free_.back();
            if (!ids_obj_[id].is_valid()) ids_obj_[id] = nb::int_(id);
            if (dict_set(ids_.ptr(), key, ids_obj_[id].ptr(), h) != 0) throw nb::python_error();
            free_.pop_back();
            keys_[id] = nb::borrow(key);
            hash_[id] = h;
            add(id, static_cast<std::uint64_t>(h));
        }
        flush();
    }

    /// The keys are gone: forgotten (no ghost), wherever they wait.
    void remove(nb::handle keys) {
        nb::object keep;
        std::vector<item_id> gone;
        for (PyObject* key : items_of(keys, "keys must be a sequence", keep)) {
            const Py_hash_t h = PyObject_Hash(key);
            if (h == -1 && PyErr_Occurred()) throw nb::python_error();
            PyObject* found = dict_get(ids_.ptr(), key, h);
            if (found == nullptr) {
                if (PyErr_Occurred()) throw nb::python_error();
                if (dict_del(front_.ptr(), key, h) != 0) {
                    if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw nb::python_error();
                    PyErr_Clear();
                }
                continue;
            }
            const auto id = static_cast<std::uint32_t>(PyLong_AsUnsignedLong(found));
            if (dict_del(ids_.ptr(), key, h) != 0) throw nb::python_error();
            keys_[id] = nb::object();
            free_.push_back(id);
            gone.push_back(item_id{id});
        }
        if (!gone.empty()) policy_.erase_batch(gone);
    }

    /// Up to `n` keys in victim order, each passing `eligible` (None: all);
    /// they stay tracked, at the front, until removed or used again.
    nb::list victims(std::size_t n, nb::handle eligible) {
        nb::list out;
        if (n == 0) return out;
        const bool all = eligible.is_none();
        Py_ssize_t pos = 0;
        PyObject* key = nullptr;
        PyObject* value = nullptr;
        std::vector<nb::object> seen;  // the front's keys, held while `eligible` runs
        while (PyDict_Next(front_.ptr(), &pos, &key, &value)) seen.push_back(nb::borrow(key));
        for (const nb::object& k : seen) {
            if (all || truthy(eligible(k))) {
                out.append(k);
                if (nb::len(out) == n) return out;
            }
        }
        while (nb::len(out) < n && nb::len(ids_) != 0) {
            const std::size_t first = nb::len(front_);
            pop_to_front(n - nb::len(out));
            if (nb::len(front_) == first) break;
            std::vector<nb::object> named;
            pos = static_cast<Py_ssize_t>(0);
            std::size_t i = 0;
            while (PyDict_Next(front_.ptr(), &pos, &key, &value))
                if (i++ >= first) named.push_back(nb::borrow(key));
            for (const nb::object& k : named)
                if (all || truthy(eligible(k))) out.append(k);
        }
        return out;
    }

    /// Every tracked key, victims first: the front, then the policy's keys by
    /// their last event, oldest first.
    [[nodiscard]] nb::list order() const {
        nb::list out;
        Py_ssize_t pos = 0;
        PyObject* key = nullptr;
        PyObject* value = nullptr;
        while (PyDict_Next(front_.ptr(), &pos, &key, &value)) out.append(nb::borrow(key));
        std::vector<std::uint32_t> ids;
        for (std::uint32_t id = 0; id < keys_.size(); ++id)
            if (keys_[id].is_valid()) ids.push_back(id);
        std::stable_sort(ids.begin(), ids.end(), [&](std::uint32_t a, std::uint32_t b) { return last_[a] < last_[b]; });
        for (std::uint32_t id : ids) out.append(keys_[id]);
        return out;
    }

private:
    static bool truthy(const nb::object& o) {
        const int r = PyObject_IsTrue(o.ptr());
        if (r < 0) throw nb::python_error();
        return r != 0;
    }

    void begin_run(bool inserting) {
        flush();
        inserting_ = inserting;
        if (++generation_ == 0) {
            std::fill(mark_.begin(), mark_.end(), 0);
            generation_ = 1;
        }
    }
    void add(std::uint32_t id, std::uint64_t hash) {
        mark_[id] = generation_;
        run_.push_back(item_id{id});
        if (inserting_) hashes_.push_back(hash);
    }
    void flush() {
        if (run_.empty()) return;
        item_batch b;
        b.ids = run_;
        b.now = ++now_;
        if (inserting_) {
            b.keys = hashes_;
            item_batch m;
            m.ids = run_;
            m.keys = hashes_;
            m.now = now_;
            policy_.miss_batch(m);
            policy_.insert_batch(b);
        } else {
            policy_.access_batch(b);
        }
        for (item_id id : run_) last_[id.index()] = ++seq_;  // in the order applied
        run_.clear();
        hashes_.clear();
    }
    void pop_to_front(std::size_t n) {
        std::vector<item_id> got(std::min(n, policy_.evictable_size()));
        got.resize(policy_.pop_victims(got, ++now_));
        for (item_id id : got) {
            nb::object key = std::move(keys_[id.index()]);
            keys_[id.index()] = nb::object();
            const Py_hash_t h = hash_[id.index()];
            if (dict_del(ids_.ptr(), key.ptr(), h) != 0 || dict_set(front_.ptr(), key.ptr(), Py_None, h) != 0)
                throw nb::python_error();
            free_.push_back(id.value);
        }
    }

    dyn_policy policy_;
    nb::dict ids_;                     // key -> id, for the keys the policy orders
    nb::dict front_;                   // key -> None: named, not yet removed; in order
    std::vector<nb::object> keys_;     // [capacity] the key of each id
    std::vector<nb::object> ids_obj_;  // [capacity] each id as a Python int, made once
    std::vector<Py_hash_t> hash_;      // [capacity] the key's hash
    std::vector<std::uint32_t> free_;  // ids not in use, the next at the back
    std::vector<std::uint64_t> last_;  // [capacity] sequence number of the id's last event
    std::vector<std::uint32_t> mark_;  // [capacity] generation of the run that last listed the id
    std::uint32_t generation_ = 0;
    std::vector<item_id> run_;
    std::vector<std::uint64_t> hashes_;
    bool inserting_ = false;
    timestamp now_ = 0;
    std::uint64_t seq_ = 0;
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
