// The C++ side of kvpolicy.vllm.OffloadingManager (python/kvpolicy/vllm/_legacy.py
// documents the semantics): block hashes in, vLLM's answers out.
//
// Hashes: a 1-D array of native 64-bit ints (a NumPy uint64 or int64 array,
// array.array('Q'), a DLPack producer) is read in place through nanobind's
// ndarray, a strided one copied (answers are arrays); any other iterable of
// ints, bytes or hashable objects is read item by item (answers are lists
// of the caller's own hash objects, as vLLM's scheduler expects them back),
// small ints without a call each, and a list of the last list's objects not
// at all (hash_reader). An int is taken modulo 2^64; bytes (vLLM's sha256
// block hashes) are folded into 64 bits; other objects by Python's hash().
//
// Bytes hashes are kept whole (engine::byte_hash_resolver, over
// engine::byte_hash_keys, which holds the fold and the probe sequence): two
// distinct hashes always stay two blocks. Ints and other objects are their
// 64-bit keys; a block stored through a uint64 array has no bytes and is
// named by its key. The manager is an engine::any_offload_manager chosen by
// name.
#include <memory>
#include <optional>
#include <string>

#include <kvpolicy/engine/any_offload_manager.hpp>
#include <kvpolicy/engine/byte_hash_resolver.hpp>
#include <kvpolicy/engine/object_list_memo.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

using engine::any_offload_manager;
using engine::offload_event;
using engine::slot_state;
using engine::store_plan;

/// The 64-bit key of an int or bytes object (see the file's header), read
/// without running Python code; false for any other object.
inline bool plain_key_of(PyObject* h, std::uint64_t& k) noexcept {
    if (PyLong_CheckExact(h)) {  // the common case, an int below 2^30, read without a call
#if PY_VERSION_HEX >= 0x030C0000
        auto* l = reinterpret_cast<PyLongObject*>(h);
        if (PyUnstable_Long_IsCompact(l)) {
            k = static_cast<std::uint64_t>(PyUnstable_Long_CompactValue(l));
            return true;
        }
#else
        const Py_ssize_t size = Py_SIZE(h);  // the sign times the number of 30-bit digits
        if (size >= -1 && size <= 1) {
            k = static_cast<std::uint64_t>(static_cast<std::int64_t>(size) *
                                           static_cast<std::int64_t>(reinterpret_cast<PyLongObject*>(h)->ob_digit[0]));
            return true;
        }
#endif
    }
    if (PyLong_Check(h)) {  // an int object's own value: no __index__ call, cannot fail
        k = PyLong_AsUnsignedLongLongMask(h);
        return true;
    }
    if (const auto b = bytes_of(h)) {
        k = engine::fold_bytes(*b);
        return true;
    }
    return false;
}

/// The 64-bit key of any hash object: other objects by Python's hash().
/// Throws: usage_error naming `what` (the argument, or the list item) for
/// an unhashable object; an exception its __hash__ raises passes through.
inline std::uint64_t key_of(PyObject* h, const std::string& what) {
    if (std::uint64_t k = 0; plain_key_of(h, k)) return k;
    const Py_hash_t v = PyObject_Hash(h);
    if (v == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
        PyErr_Clear();
        throw usage_error(what + ": type '" + Py_TYPE(h)->tp_name +
                          "' is not hashable; a block hash is an int, bytes or another hashable object");
    }
    return static_cast<std::uint64_t>(v);
}

/// The 64-bit keys of one call's hashes, and what the caller passed.
struct hash_list {
    std::span<const std::uint64_t> keys;
    nb::object source;  // the array, or the list of the caller's objects
    bool is_array = false;
    engine::hash_list_ref from;       // keys are the reader's memo's (its whole list or a part)
    nb::ndarray<> array;              // an array's memory, held while keys view it
    std::vector<std::uint64_t> copy;  // a strided array's keys

    [[nodiscard]] nb::object item(std::size_t i) const {
        return nb::borrow(PyList_GET_ITEM(source.ptr(), static_cast<Py_ssize_t>(i)));
    }
    /// Whether `obj` is a 1-D array of T, native 64-bit integers (a NumPy
    /// uint64 or int64 array, array.array('Q'), a DLPack producer): its
    /// keys are then read in place (a strided one's copied).
    template <class T>
    bool read_array(nb::handle obj) {
        nb::ndarray<const T, nb::ndim<1>, nb::device::cpu> a;
        if (!nb::try_cast(obj, a, /*convert=*/false)) return false;
        const auto* p = reinterpret_cast<const std::uint64_t*>(a.data());  // int64 has the same bits
        keys = {p, a.shape(0)};
        if (a.shape(0) > 1 && a.stride(0) != 1) {
            copy.resize(a.shape(0));
            for (std::size_t i = 0; i < copy.size(); ++i) copy[i] = p[static_cast<std::int64_t>(i) * a.stride(0)];
            keys = copy;
        }
        array = nb::ndarray<>(a);
        source = nb::borrow(obj);
        is_array = true;
        return true;
    }
};

/// What the reader remembers of a list (engine::object_list_memo): ints
/// and bytes, whose keys cannot change (another object's __hash__ could)
/// and whose release runs no Python code.
struct kept_hashes {
    using object = PyObject;
    static bool key_of(PyObject* o, std::uint64_t& k) noexcept { return plain_key_of(o, k); }
    static void keep(PyObject* o) noexcept { Py_INCREF(o); }
    static void release(PyObject* o) noexcept { Py_DECREF(o); }
};

/// Reads hash lists into keys: a list of the last list's objects, or a
/// prefix or suffix of them, not at all (engine::object_list_memo says why).
class hash_reader {
public:
    /// Reads the keys of `obj`'s hashes into `h`: for an array, views of
    /// the array `h` holds; else the reader's, valid until the next read.
    void read(nb::handle obj, hash_list& h) {
        if (!PyList_CheckExact(obj.ptr())) {
            if (PyBytes_Check(obj.ptr()) || PyUnicode_Check(obj.ptr()))  // iterable, but one hash
                throw usage_error(std::string("block_hashes: one ") + Py_TYPE(obj.ptr())->tp_name +
                                  " object is one block hash, not a list of them; pass [block_hash]");
            if (h.read_array<std::uint64_t>(obj) || h.read_array<std::int64_t>(obj)) return;
            nb::object items = nb::steal(PyObject_GetIter(obj.ptr()));
            if (!items.is_valid()) {
                if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
                PyErr_Clear();
                throw usage_error(std::string("block_hashes: type '") + Py_TYPE(obj.ptr())->tp_name +
                                  "' is not iterable; pass a list (or any iterable) of ints, bytes or "
                                  "hashable objects, or a uint64 array");
            }
            h.source = nb::steal(PySequence_List(items.ptr()));
            if (!h.source.is_valid()) throw nb::python_error();
        } else {
            h.source = nb::borrow(obj);
        }
        const auto items =
            std::span(PySequence_Fast_ITEMS(h.source.ptr()), static_cast<std::size_t>(PyList_GET_SIZE(h.source.ptr())));
        if (const auto keys = memo_.keys_of(items, h.from)) {
            h.keys = *keys;
            return;
        }
        // Some hash is another object: its __hash__ runs Python code, which
        // could change the caller's list under the loop, so read a copy.
        h.source = nb::steal(PyList_GetSlice(h.source.ptr(), 0, PY_SSIZE_T_MAX));
        if (!h.source.is_valid()) throw nb::python_error();
        const std::size_t n = static_cast<std::size_t>(PyList_GET_SIZE(h.source.ptr()));
        keys_.resize(n);
        for (std::size_t i = 0; i < n; ++i)
            keys_[i] = key_of(PyList_GET_ITEM(h.source.ptr(), static_cast<Py_ssize_t>(i)),
                              "block_hashes[" + std::to_string(i) + "]");
        h.keys = keys_;
    }

private:
    engine::object_list_memo<kept_hashes> memo_;
    std::vector<std::uint64_t> keys_;  // the keys of a list holding other objects
};

class offload_core {
public:
    offload_core(std::size_t num_blocks, const std::string& policy, bool enable_events, const nb::kwargs& options)
            : m_(any_offload_manager::make(num_blocks, policy, options_from(options, policy.c_str()), enable_events)) {}

    /// Tests: bytes hashes fold to (fold & mask) instead of the full fold,
    /// so that distinct hashes collide at will (mask 0: all of them).
    void set_fold_mask_for_testing(std::uint64_t mask) {
        if (m_->size() != 0)
            throw usage_error("_set_fold_mask_for_testing: the manager holds blocks; set it on an empty manager");
        hashes_.set_fold_mask(mask);
    }
    [[nodiscard]] std::size_t probed_hashes() const noexcept { return hashes_.table().probed(); }

    std::size_t lookup(nb::handle hashes) {
        return with_keys(hashes, [&](const hash_list&, keys_t keys) { return m_->lookup(keys); });
    }

    out_array<std::uint32_t> prepare_load(nb::handle hashes) {
        return with_keys(hashes, [&](const hash_list&, keys_t keys) {
            std::vector<std::uint32_t> slots(keys.size());
            m_->prepare_load(keys, slots);
            return to_numpy(std::move(slots));
        });
    }

    void touch(nb::handle hashes) {
        with_keys(hashes, [&](const hash_list&, keys_t keys) { m_->touch(keys); });
    }

    void complete_load(nb::handle hashes) {
        with_keys(hashes, [&](const hash_list&, keys_t keys) { m_->complete_load(keys); });
    }

    /// None, or (hashes to store, their slots, hashes evicted).
    nb::object prepare_store(nb::handle hashes) {
        return with_keys(hashes, [&](const hash_list& h, keys_t keys) { return store_answer(h, keys); });
    }

    void complete_store(nb::handle hashes, bool success) {
        with_keys(hashes, [&](const hash_list&, keys_t keys) { m_->complete_store(keys, success); });
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

    /// The order's lists (64-bit keys, oldest first) and vllm_arc's target.
    nb::tuple order_state() const {
        engine::offload_order_state st = m_->order_state();
        nb::list lists;
        for (auto& l : st.lists) lists.append(nb::cast(to_numpy(std::move(l))));
        return nb::make_tuple(lists, st.target ? nb::cast(*st.target) : nb::none());
    }
    void set_arc_target(double t) { m_->set_arc_target(t); }
    static std::uint64_t key(nb::handle hash) { return key_of(hash.ptr(), "block_hash"); }

    /// (state, loads in flight) of one block: state 'ready', 'storing' or None.
    nb::tuple block_state(nb::handle hash) const {
        const std::uint64_t k0 = key_of(hash.ptr(), "block_hash");
        const auto b = bytes_of(hash.ptr());
        const std::uint64_t k = b ? hashes_.table().key_of(*m_, *b) : k0;
        const std::uint32_t s = m_->find(k);
        if (s == no_index) return nb::make_tuple(nb::none(), 0);
        return nb::make_tuple(m_->state(s) == slot_state::ready ? "ready" : "storing", m_->loads(s));
    }

private:
    // f(h, keys): the call's hashes as read (h) and the manager's keys for
    // them: each bytes hash resolved (engine::byte_hash_resolver), the others
    // as read. vLLM's connector passes one request's list, or its prefix or
    // tail, to lookup, touch, the loads and the store: the reader's memo.
    using keys_t = std::span<const std::uint64_t>;
    template <class F>
    std::invoke_result_t<F, const hash_list&, keys_t> with_keys(nb::handle hashes, F f) {
        hash_list h;
        reader_.read(hashes, h);
        return f(h, h.is_array ? h.keys : hashes_.resolve(*m_, h.keys, bytes_in(h), h.from));
    }
    static auto bytes_in(const hash_list& h) {  // item i's bytes, where it is a bytes hash
        return [&h](std::size_t i) {
            return h.is_array ? std::nullopt : bytes_of(PyList_GET_ITEM(h.source.ptr(), static_cast<Py_ssize_t>(i)));
        };
    }
    // prepare_store's answer, for the call's hashes and keys.
    nb::object store_answer(const hash_list& h, keys_t keys) {
        std::optional<store_plan> plan = hashes_.prepare_store(*m_, keys, bytes_in(h), h.is_array);
        if (!plan) return nb::none();
        // The evicted blocks' own objects, read before their slots are reused below.
        nb::object evicted = answer(plan->evicted, plan->evicted_slots, h.is_array);
        take_events();
        nb::object to_store;
        if (h.is_array) {
            to_store = nb::cast(to_numpy(std::move(plan->to_store)));
            if (!objects_.empty())
                for (std::uint32_t s : plan->slots) objects_[s] = nb::object();
        } else {
            if (objects_.empty()) objects_.resize(m_->capacity());
            to_store = list_of(plan->positions.size(),
                               [&](std::size_t j) { return objects_[plan->slots[j]] = h.item(plan->positions[j]); });
        }
        nb::object slots = nb::cast(to_numpy(std::move(plan->slots)));
        return nb::make_tuple(to_store, slots, evicted);
    }

    // The blocks' hashes as the caller gave them: an array for array callers,
    // else each block's own object (its int key where none was kept).
    nb::object answer(const std::vector<std::uint64_t>& keys, const std::vector<std::uint32_t>& slots, bool as_array) {
        if (as_array) return nb::cast(to_numpy(std::vector<std::uint64_t>(keys)));
        const std::size_t n = keys.size();
        constexpr std::size_t ahead = 8;  // evicted blocks' objects are cold: their entries, then themselves
        return list_of(n, [&](std::size_t j) -> nb::object {
            if (!objects_.empty()) {
                if (j + 2 * ahead < n) __builtin_prefetch(&objects_[slots[j + 2 * ahead]]);
                if (j + ahead < n)
                    if (PyObject* p = objects_[slots[j + ahead]].ptr()) __builtin_prefetch(p);
            }
            if (!objects_.empty() && objects_[slots[j]].is_valid()) return objects_[slots[j]];
            return nb::int_(keys[j]);
        });
    }
    void take_events() {
        for (offload_event& e : m_->take_events())
            events_.append(nb::make_tuple(answer(e.hashes, e.slots, false), e.removed));
    }

    hash_reader reader_;
    std::unique_ptr<any_offload_manager> m_;
    // [slot] the caller's hash object of the block there, if given; empty
    // until a list is stored (an array caller never pays for it).
    std::vector<nb::object> objects_;
    nb::list events_;
    engine::byte_hash_resolver hashes_;  // bytes hashes' keys, their whole bytes kept
};

}  // namespace

void bind_offload(nb::module_& m) {
    using c = offload_core;
    nb::class_<c>(m, "OffloadCore", "The C++ bookkeeping behind kvpolicy.vllm.OffloadingManager (see that class).")
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
        .def("_order_state", &c::order_state,
             "([lists of 64-bit keys, oldest first], target): vllm_lru's one list; vllm_arc's T1, T2, B1, B2 "
             "and target_t1_size; no lists for kvpolicy's policies (their state is their own).")
        .def("_set_arc_target", &c::set_arc_target, nb::arg("target"),
             "vllm_arc: sets target_t1_size (vLLM's tests set it). UsageError outside [0, num_blocks] "
             "or for another policy.")
        .def("_set_fold_mask_for_testing", &c::set_fold_mask_for_testing, nb::arg("mask"),
             "Tests: bytes hashes fold to (fold & mask), so that distinct hashes collide (mask 0: all).")
        .def_prop_ro("_probed_hashes", &c::probed_hashes, "Bytes hashes remembered past their fold.")
        .def_static("_key", &c::key, nb::arg("block_hash"), "The 64-bit key kvpolicy keeps for a block hash.")
        .def("block_state", &c::block_state, nb::arg("block_hash"),
             "(state, loads): state 'ready', 'storing' or None (not offloaded).")
        .def_prop_ro("num_blocks", &c::num_blocks)
        .def_prop_ro("num_free", &c::num_free)
        .def_prop_ro("policy", &c::policy)
        .def("__len__", &c::size);
}

}  // namespace kvpolicy::python
