// The C++ side of kvpolicy.vllm.OffloadingManager (python/kvpolicy/vllm.py
// documents the semantics): block hashes in, vLLM's answers out.
//
// Hashes: a NumPy uint64/int64 array is read in place (answers are arrays);
// any other iterable of ints, bytes or hashable objects is read item by item
// (answers are lists of the caller's own hash objects, as vLLM's scheduler
// expects them back). An int is taken modulo 2^64; bytes (vLLM's sha256
// block hashes) are folded into 64 bits; other objects by Python's hash().
// Two blocks whose 64-bit keys collide would be taken for one: for 10^7
// stored blocks the chance is about 3e-6.
#include <cstring>
#include <memory>

#include <kvpolicy/core/item_key.hpp>

#include "bindings.hpp"
#include "offload_manager.hpp"

namespace kvpolicy::python {

namespace {

/// The 64-bit keys of one call's hashes, and what the caller passed.
struct hash_list {
    std::span<const std::uint64_t> keys;
    nb::object source;  // the array, or the list of the caller's objects
    bool is_array = false;
    std::vector<std::uint64_t> buffer;

    explicit hash_list(nb::handle obj) {
        if (in_array<std::uint64_t> a; nb::try_cast(obj, a, false)) {
            keys = {a.data(), a.shape(0)};
            source = nb::borrow(obj);
            is_array = true;
            return;
        }
        if (in_array<std::int64_t> a; nb::try_cast(obj, a, false)) {  // the same bits
            keys = {reinterpret_cast<const std::uint64_t*>(a.data()), a.shape(0)};
            source = nb::borrow(obj);
            is_array = true;
            return;
        }
        source = PyList_CheckExact(obj.ptr()) ? nb::borrow(obj) : nb::steal(PySequence_List(obj.ptr()));
        if (!source.is_valid()) throw nb::python_error();
        const Py_ssize_t n = PyList_GET_SIZE(source.ptr());
        buffer.resize(static_cast<std::size_t>(n));
        for (Py_ssize_t i = 0; i < n; ++i) buffer[static_cast<std::size_t>(i)] = key_of(PyList_GET_ITEM(source.ptr(), i));
        keys = buffer;
    }

    [[nodiscard]] nb::object item(std::size_t i) const {
        return nb::borrow(PyList_GET_ITEM(source.ptr(), static_cast<Py_ssize_t>(i)));
    }

    static std::uint64_t key_of(PyObject* h) {
        if (PyLong_Check(h)) {
            const unsigned long long v = PyLong_AsUnsignedLongLongMask(h);
            if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
            return v;
        }
        if (PyBytes_Check(h)) {
            const char* p = PyBytes_AS_STRING(h);
            const std::size_t n = static_cast<std::size_t>(PyBytes_GET_SIZE(h));
            std::uint64_t k = mix64(n);
            for (std::size_t i = 0; i < n; i += 8) {
                std::uint64_t chunk = 0;
                std::memcpy(&chunk, p + i, std::min<std::size_t>(8, n - i));
                k = mix64(k ^ chunk);
            }
            return k;
        }
        const Py_hash_t v = PyObject_Hash(h);
        if (v == -1 && PyErr_Occurred()) throw nb::python_error();
        return static_cast<std::uint64_t>(v);
    }
};

class offload_core {
public:
    offload_core(std::size_t num_blocks, const std::string& policy, bool enable_events, const nb::kwargs& options)
        : m_(any_offload_manager::make(num_blocks, policy, options_from(options, policy.c_str()), enable_events)),
          objects_(num_blocks) {}

    std::size_t lookup(nb::handle hashes) {
        const hash_list h(hashes);
        return m_->lookup(h.keys);
    }

    out_array<std::uint32_t> prepare_load(nb::handle hashes) {
        const hash_list h(hashes);
        std::vector<std::uint32_t> slots(h.keys.size());
        m_->prepare_load(h.keys, slots);
        return to_numpy(std::move(slots));
    }

    void touch(nb::handle hashes) {
        const hash_list h(hashes);
        m_->touch(h.keys);
    }

    void complete_load(nb::handle hashes) {
        const hash_list h(hashes);
        m_->complete_load(h.keys);
    }

    /// None, or (hashes to store, their slots, hashes evicted).
    nb::object prepare_store(nb::handle hashes) {
        const hash_list h(hashes);
        std::optional<store_plan> plan = m_->prepare_store(h.keys);
        if (!plan) return nb::none();
        // The evicted blocks' own objects, read before their slots are reused below.
        nb::object evicted = answer(plan->evicted, plan->evicted_slots, h.is_array);
        take_events();
        nb::object to_store;
        if (h.is_array) {
            to_store = nb::cast(to_numpy(std::move(plan->to_store)));
        } else {
            nb::list l;
            for (std::size_t j = 0; j < plan->positions.size(); ++j) {
                nb::object o = h.item(plan->positions[j]);
                objects_[plan->slots[j]] = o;
                l.append(o);
            }
            to_store = l;
        }
        if (h.is_array)
            for (std::uint32_t s : plan->slots) objects_[s] = nb::object();
        nb::object slots = nb::cast(to_numpy(std::move(plan->slots)));
        return nb::make_tuple(to_store, slots, evicted);
    }

    void complete_store(nb::handle hashes, bool success) {
        const hash_list h(hashes);
        m_->complete_store(h.keys, success);
        take_events();
    }

    /// [(hashes, removed)], oldest first, since the last call.
    nb::list take_event_list() {
        nb::list out = events_;
        events_ = nb::list();
        return out;
    }

    [[nodiscard]] std::size_t num_blocks() const { return m_->capacity(); }
    [[nodiscard]] std::size_t num_free() const { return m_->num_free(); }
    [[nodiscard]] std::size_t size() const { return m_->size(); }
    [[nodiscard]] std::string policy() const { return std::string(m_->policy_name()); }

    /// (state, loads in flight) of one block: state 'ready', 'storing' or None.
    nb::tuple block_state(nb::handle hash) const {
        const std::uint64_t k = hash_list::key_of(hash.ptr());
        const std::uint32_t s = m_->find(k);
        if (s == no_index) return nb::make_tuple(nb::none(), 0);
        return nb::make_tuple(m_->state(s) == slot_state::ready ? "ready" : "storing", m_->loads(s));
    }

private:
    // The blocks' hashes as the caller gave them: an array for array callers,
    // else each block's own object (its int key where none was kept).
    nb::object answer(const std::vector<std::uint64_t>& keys, const std::vector<std::uint32_t>& slots, bool as_array) {
        if (as_array) return nb::cast(to_numpy(std::vector<std::uint64_t>(keys)));
        nb::list l;
        for (std::size_t j = 0; j < keys.size(); ++j)
            l.append(objects_[slots[j]].is_valid() ? objects_[slots[j]] : nb::int_(keys[j]));
        return l;
    }
    void take_events() {
        for (offload_event& e : m_->take_events())
            events_.append(nb::make_tuple(answer(e.hashes, e.slots, false), e.removed));
    }

    std::unique_ptr<any_offload_manager> m_;
    std::vector<nb::object> objects_;  // [slot] the caller's hash object of the block there, if given
    nb::list events_;
};

}  // namespace

void bind_offload(nb::module_& m) {
    using c = offload_core;
    nb::class_<c>(m, "OffloadCore",
                  "The C++ bookkeeping behind kvpolicy.vllm.OffloadingManager (see that class).")
        .def(nb::init<std::size_t, const std::string&, bool, const nb::kwargs&>(), nb::arg("num_blocks"),
             nb::arg("policy") = "lru", nb::arg("enable_events") = false, nb::arg("config"))
        .def("lookup", &c::lookup, nb::arg("block_hashes"),
             "The number of leading blocks that are offloaded and ready.")
        .def("prepare_load", &c::prepare_load, nb::arg("block_hashes"),
             "Protects the blocks from eviction until complete_load; returns their slots (uint32).\n"
             "Raises UsageError for a block not offloaded or still being stored.")
        .def("touch", &c::touch, nb::arg("block_hashes"), "Marks the blocks used, the first most recently.")
        .def("complete_load", &c::complete_load, nb::arg("block_hashes"),
             "Ends one load of each block. Raises UsageError for a block with no load in flight.")
        .def("_prepare_store", &c::prepare_store, nb::arg("block_hashes"),
             "None, or (hashes to store, their slots, hashes evicted).")
        .def("complete_store", &c::complete_store, nb::arg("block_hashes"), nb::arg("success") = true,
             "Stored blocks become loadable; on failure the blocks still being stored are removed.")
        .def("_take_events", &c::take_event_list, "[(hashes, removed)] since the last call.")
        .def("block_state", &c::block_state, nb::arg("block_hash"),
             "(state, loads): state 'ready', 'storing' or None (not offloaded).")
        .def_prop_ro("num_blocks", &c::num_blocks)
        .def_prop_ro("num_free", &c::num_free)
        .def_prop_ro("policy", &c::policy)
        .def("__len__", &c::size);
}

}  // namespace kvpolicy::python
