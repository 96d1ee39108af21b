// The C++ side of kvpolicy.vllm's cache policies (vLLM >= 0.21's CachePolicy
// seam; python/kvpolicy/vllm/_policies.py gives the Python face).
//
// `CachePolicyCore` keeps vLLM's OffloadKeys (bytes) in a Python dict it
// owns, `chunks` (key -> vLLM's ChunkStatus, which the manager reads and
// writes; the adapter's `get` is that dict's own `get`), and each key's slot
// in an engine::hashed_slots under the key's Python hash (cached on a bytes
// object; no int object made per chunk, no dict entry to keep), so equal
// hashes stay two chunks.
// Everything else is the engine room's: engine::any_cache_policy
// (include/kvpolicy/engine/any_cache_policy.hpp), the policy chosen by name,
// its order and victims over dense slots. A batch call (touch, a request's
// finish, evict) walks the Python keys here, one dict probe each, with no
// Python frame per key.
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/stl/pair.h>

#include <kvpolicy/engine/any_cache_policy.hpp>
#include <kvpolicy/engine/hashed_slots.hpp>
#include <kvpolicy/engine/replay_clock.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

using engine::any_cache_policy;
using engine::key_walk;

/// The adapters' clock (kvpolicy.vllm.set_time_ms sets a replay's time).
engine::replay_clock adapter_clock;

/// Python's hash() of a bytes object holding `b`, without making it.
Py_hash_t bytes_hash(std::string_view b) noexcept {
#if PY_VERSION_HEX >= 0x030E0000
    return Py_HashBuffer(b.data(), static_cast<Py_ssize_t>(b.size()));
#else
    return _Py_HashBytes(b.data(), static_cast<Py_ssize_t>(b.size()));
#endif
}

class cache_policy_binding {
public:
    cache_policy_binding(const std::string& policy, std::size_t capacity, const nb::dict& options)
            : capacity_(capacity), slots_(capacity) {
        // vLLM builds a manager of 0 chunks (nothing is ever stored): the
        // policy behind it has one slot that is never handed out.
        const std::size_t slots = std::max<std::size_t>(capacity, 1);
        if (has_name<engine::vllm_cache_policies>(policy) && nb::len(options) != 0)
            throw config_error(policy + ": takes no options (it is vLLM's own policy, exactly); got " +
                               nb::cast<std::string>(nb::str(options)));
        core_ = any_cache_policy::make(policy, slots, options_from(options, policy.c_str()));
        free_.reserve(capacity);
        for (std::size_t s = capacity; s-- > 0;) free_.push_back(static_cast<std::uint32_t>(s));
        keys_.resize(slots);
    }

    nb::dict chunks;  // OffloadKey -> ChunkStatus

    [[nodiscard]] bool orders_by_request() const { return core_->orders_by_request(); }
    std::int64_t new_request_rank() { return core_->new_request_rank(); }
    [[nodiscard]] std::size_t size() const { return nb::len(chunks); }

    void insert(nb::handle key, nb::handle chunk, std::optional<std::int64_t> position, std::int64_t request_rank,
                int ref_cnt, std::uint64_t session) {
        const std::uint64_t hash = py_hash(key.ptr());
        if (slot_of(key.ptr(), hash) != no_index) remove(key);  // vLLM overwrites
        if (free_.empty())
            throw usage_error("insert: the policy already holds cache_capacity=" + std::to_string(capacity_) +
                              " chunks; evict or remove one first");
        const std::uint32_t id = free_.back();
        access_context c = clock(session);
        c.key = hash;
        core_->insert(id, bytes_of(key.ptr()).value_or(std::string_view()), c.key, position, request_rank, ref_cnt, c);
        free_.pop_back();
        keys_[id] = nb::borrow(key);
        chunks[key] = chunk;
        slots_.insert(id, hash);
    }

    /// vLLM's insert(key, chunk, req_context) for a policy that hears
    /// hints: the context's session is asked of `sessions` (set by
    /// hear_sessions) once per context, since vLLM inserts a step's chunks
    /// (128 on the agentic trace) one call each with one context.
    void insert_hinted(nb::handle key, nb::handle chunk, nb::handle req_context) {
        if (req_context.ptr() != session_of_.ptr()) {
            if (!sessions_.is_valid()) throw usage_error("insert_hinted: call hear_sessions(session_of) first");
            const auto s = nb::cast<std::uint64_t>(sessions_(req_context));
            session_of_ = nb::borrow(req_context);
            session_ = s;
        }
        static PyObject* const ref_cnt_name = PyUnicode_InternFromString("ref_cnt");  // a name made once
        const nb::object ref_cnt = nb::steal(PyObject_GetAttr(chunk.ptr(), ref_cnt_name));
        if (!ref_cnt.is_valid()) throw nb::python_error();
        insert(key, chunk, std::nullopt, 0, nb::cast<int>(ref_cnt), session_);
    }
    void hear_sessions(nb::object session_of) {
        sessions_ = std::move(session_of);
        session_of_ = nb::object();
    }

    /// vLLM's order_request_keys over `positions`, a request context's key
    /// -> end-token dict (engine::order_request_keys): the groups' keys
    /// flattened, in vLLM's order. None where a position is not an int64,
    /// for the caller to ask vLLM's own.
    static std::optional<nb::list> order_keys(nb::handle key_groups, const nb::dict& positions) {
        nb::list keys;
        for (nb::handle group : key_groups)
            for (nb::handle k : group) keys.append(k);
        const auto key = [&](std::size_t i) { return PyList_GET_ITEM(keys.ptr(), static_cast<Py_ssize_t>(i)); };
        std::vector<std::int64_t> at;
        for (std::size_t i = 0; i < nb::len(keys); ++i) {
            PyObject* p = PyDict_GetItemWithError(positions.ptr(), key(i));
            if (p == nullptr || p == Py_None) {
                if (PyErr_Occurred()) throw nb::python_error();
                return keys;  // not every key has a position: vLLM keeps the groups' order
            }
            int overflow = 0;
            const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
            if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return std::nullopt;
            }
            at.push_back(v);
        }
        const auto order =
            engine::order_request_keys(at, [&](std::uint32_t i, std::uint32_t j) { return py_equal(key(i), key(j)); });
        if (!order) return keys;
        return list_of(order->size(), [&](std::size_t j) { return nb::borrow(key((*order)[j])); });
    }

    void remove(nb::handle key) {
        const std::uint32_t id = slot_of(key.ptr());
        if (id == no_index) throw nb::key_error(nb::cast<std::string>(nb::repr(key)).c_str());
        core_->remove(id);
        forget(id);
    }

    void touch(nb::handle keys, std::uint64_t session) { core_->touch(walk(keys, /*reversed=*/true), clock(session)); }
    void store_miss(nb::handle keys) { core_->store_miss(walk(keys, /*reversed=*/true), clock()); }

    /// vllm_lru's on_request_access: `positions` maps keys to end-token positions.
    void request_access(nb::handle keys, nb::handle positions, std::int64_t request_rank) {
        std::vector<std::uint32_t> ids;
        std::vector<std::int64_t> pos;
        nb::object keep;
        for (PyObject* k : items_of(keys, "keys must be iterable", keep)) {
            PyObject* p = PyDict_GetItemWithError(positions.ptr(), k);
            if (p == nullptr) {
                if (PyErr_Occurred()) throw nb::python_error();
                continue;
            }
            const std::uint32_t id = slot_of(k);
            if (id == no_index) continue;
            ids.push_back(id);
            pos.push_back(PyLong_AsLongLong(p));
            if (PyErr_Occurred()) throw nb::python_error();
        }
        core_->request_access(ids, pos, request_rank);
    }

    /// A request's end: `ordered` head to tail; walked tail to head.
    /// `session` (0: none), `expected_return_s` (seconds from now until the
    /// session's next request; none: no hint) and `session_end` are the
    /// request's hints (kvpolicy.vllm._policies parses them).
    void finish(nb::handle ordered, nb::handle insertion_only, nb::handle reused, std::uint64_t session,
                std::optional<double> expected_return_s, bool session_end) {
        nb::object keep;
        const std::span<PyObject* const> items = items_of(ordered, "keys must be iterable", keep);
        key_walk w = walk(items, /*reversed=*/true);
        w.flags.resize(items.size());
        for (std::size_t i = 0; i < items.size(); ++i) {
            PyObject* k = items[items.size() - 1 - i];
            if (PySet_Contains(insertion_only.ptr(), k) == 1)
                w.flags[i] = 1;
            else if (PySet_Contains(reused.ptr(), k) == 1)
                w.flags[i] = 2;
        }
        core_->finish_request(w, clock(session),
                              expected_return_s ? std::optional(*expected_return_s * 1000.0) : std::nullopt,
                              session_end);
    }

    /// A connector's event for request `id` (engine/request_lifecycle.hpp):
    /// None when applied, else why it was ignored (the caller logs it).
    /// `keys`: the request's offload keys in block order (arrive, preempt), or
    /// their hashes as a uint64 array (_offload_key_hashes: no key made).
    template <engine::request_event E>
    std::optional<std::string> on_request(std::string_view id, nb::handle keys, std::uint64_t session) {
        std::vector<std::uint64_t> k;
        nb::object keep;
        in_array<std::uint64_t> a;
        const bool hashed = !keys.is_none() && nb::try_cast(keys, a, false);  // the keys' hashes
        if (!hashed && !keys.is_none())
            for (PyObject* key : items_of(keys, "keys must be iterable", keep)) k.push_back(py_hash(key));
        const auto h =
            hashed ? std::span<const std::uint64_t>(a.data(), a.shape(0)) : std::span<const std::uint64_t>(k);
        const engine::lifecycle_result r = core_->on_request(E, id, session_id{session}, h, clock());
        return r ? std::nullopt : std::optional(r.reason);
    }
    [[nodiscard]] std::size_t queued_requests() const { return core_->queued_requests(); }
    void forecast_front_cache(std::size_t gpu_blocks) { core_->forecast_front_cache(gpu_blocks); }
    [[nodiscard]] std::size_t front_cache_blocks() const { return core_->front_cache_blocks(); }
    [[nodiscard]] bool hears_queue() const { return core_->hears_queue(); }
    [[nodiscard]] bool ranks_new() const { return core_->ranks_new(); }

    /// Where to cut a store's offer `keys` (head first), `free` chunks free,
    /// so that only what the policy admits is stored
    /// (cache_policy_core::admissible): the index of the first new key
    /// declined, or len(keys).
    std::size_t admitted(nb::handle keys, std::size_t free, std::uint64_t session) const {
        return core_->admitted_prefix(walk(keys, /*reversed=*/false), free, clock(session));
    }
    [[nodiscard]] std::optional<std::string> request_state(std::string_view id) const {
        const auto state = core_->request_state(id);
        if (!state) return std::nullopt;
        return *state == engine::request_state::waiting ? "waiting" : "running";
    }

    void mark_evictable(nb::handle key) {
        const std::uint32_t id = slot_of(key.ptr());
        if (id != no_index) core_->mark_evictable(id, clock());
    }
    void mark_non_evictable(nb::handle key) {
        const std::uint32_t id = slot_of(key.ptr());
        if (id != no_index) core_->mark_non_evictable(id);
    }

    /// [(key, chunk)] of `n` victims, or None (nothing changed).
    nb::object evict(std::size_t n, nb::handle protected_keys) {
        std::vector<std::uint32_t> prot;
        nb::object it = nb::steal(PyObject_GetIter(protected_keys.ptr()));
        if (!it.is_valid()) throw nb::python_error();
        while (PyObject* k = PyIter_Next(it.ptr())) {
            const std::uint32_t id = slot_of(k);
            Py_DECREF(k);
            if (id != no_index) prot.push_back(id);
        }
        if (PyErr_Occurred()) throw nb::python_error();
        const std::optional<std::vector<std::uint32_t>> out = core_->evict(n, prot, clock());
        if (!out) return nb::none();
        return list_of(out->size(), [&](std::size_t i) {
            const std::uint32_t id = (*out)[i];
            PyObject* chunk = PyDict_GetItemWithError(chunks.ptr(), keys_[id].ptr());  // borrowed
            if (chunk == nullptr) throw nb::python_error();
            nb::object pair = nb::make_tuple(keys_[id], nb::handle(chunk));
            forget(id);
            return pair;
        });
    }

    void clear() {
        core_->clear();
        PyDict_Clear(chunks.ptr());
        slots_.clear();
        free_.clear();
        for (std::size_t s = capacity_; s-- > 0;) free_.push_back(static_cast<std::uint32_t>(s));
        for (auto& k : keys_) k = nb::object();
        session_of_ = nb::object();
    }

    // vllm_arc's lists, for tests and inspection (keys, least recent first).
    [[nodiscard]] nb::list arc_list(int which) const {
        const engine::vllm_arc& a = core_->arc_order();
        nb::list out;
        for (std::uint32_t id : which == 1 ? a.t1_order() : a.t2_order()) out.append(keys_[id]);
        return out;
    }
    [[nodiscard]] double target_t1_size() const { return core_->arc_order().target_t1_size(); }
    void set_target_t1_size(double t) { core_->set_arc_target(t, capacity_); }
    [[nodiscard]] bool in_ghost(nb::handle key, int which) const {
        const std::uint64_t k = py_hash(key.ptr());
        return which == 1 ? core_->arc_order().in_b1(k) : core_->arc_order().in_b2(k);
    }
    [[nodiscard]] std::size_t ghost_size(int which) const {
        return which == 1 ? core_->arc_order().b1_size() : core_->arc_order().b2_size();
    }

private:
    static access_context clock(std::uint64_t session = 0) noexcept {
        access_context c;
        c.now = adapter_clock.now();
        c.session = session_id{session};
        return c;
    }
    std::uint32_t slot_of(PyObject* key) const { return slot_of(key, py_hash(key)); }
    std::uint32_t slot_of(PyObject* key, std::uint64_t hash) const {
        return slots_.find(hash, [&](std::uint32_t s) { return py_equal(keys_[s].ptr(), key); });
    }
    void forget(std::uint32_t id) {
        nb::object key = std::move(keys_[id]);
        keys_[id] = nb::object();
        if (PyDict_DelItem(chunks.ptr(), key.ptr()) != 0) throw nb::python_error();
        slots_.erase(id);
        free_.push_back(id);
    }
    key_walk walk(std::span<PyObject* const> items, bool reversed) const {
        key_walk w;
        w.slots.reserve(items.size());
        w.keys.reserve(items.size());
        for (std::size_t i = 0; i < items.size(); ++i) {
            PyObject* k = items[reversed ? items.size() - 1 - i : i];
            const std::uint64_t hash = py_hash(k);
            w.slots.push_back(slot_of(k, hash));
            w.keys.push_back(hash);
        }
        return w;
    }
    key_walk walk(nb::handle keys, bool reversed) const {
        nb::object keep;
        return walk(items_of(keys, "keys must be iterable", keep), reversed);
    }

    // The cyclic GC sees the Python objects held here (chunks are the
    // engine's objects, which may reach back to the policy), and breaks
    // such a cycle by dropping them.
    friend int traverse(PyObject* self, visitproc visit, void* arg);

    std::size_t capacity_;
    std::unique_ptr<any_cache_policy> core_;
    engine::hashed_slots slots_;       // each key's slot under its Python hash
    std::vector<nb::object> keys_;     // [capacity] the key in each slot
    std::vector<std::uint32_t> free_;  // free slots, the next at the back
    nb::object sessions_;              // req_context -> session id (hear_sessions)
    nb::object session_of_;            // the last context insert_hinted read a session of
    std::uint64_t session_ = 0;        // ... and that session
};

int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self)) return 0;
    const cache_policy_binding* b = nb::inst_ptr<cache_policy_binding>(self);
    Py_VISIT(b->chunks.ptr());
    for (const nb::object& k : b->keys_) Py_VISIT(k.ptr());
    Py_VISIT(b->sessions_.ptr());
    Py_VISIT(b->session_of_.ptr());
    return 0;
}
int clear_refs(PyObject* self) {
    cache_policy_binding* b = nb::inst_ptr<cache_policy_binding>(self);
    b->clear();  // drops every chunk and key it holds
    b->hear_sessions(nb::object());
    return 0;
}
PyType_Slot gc_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(traverse)},
                          {Py_tp_clear, reinterpret_cast<void*>(clear_refs)},
                          {0, nullptr}};

}  // namespace

void bind_vllm_policy(nb::module_& m) {
    m.def(
        "_set_time_ms",
        [](std::optional<std::int64_t> ms) {
            if (ms && *ms < 0)
                throw config_error("set_time_ms: " + std::to_string(*ms) +
                                   " is before the clock's start; give a time >= 0 in milliseconds, or None");
            adapter_clock.set(ms);
        },
        nb::arg("ms").none(), "The vLLM adapters' clock reads `ms` from now on (None: the steady clock again).");
    m.def(
        "_uses_future",
        [](const std::string& name) {
            return visit_by_name<eviction_policies>(
                name, []<class P>() { return uses_future<P>; }, "eviction policy");
        },
        "Whether the policy reads each access's next use (only a simulator knows it).");
    m.def(
        "_offload_key_hashes",
        [](nb::handle block_hashes, const std::vector<std::pair<std::size_t, nb::bytes>>& groups) {
            nb::object keep;
            const std::span<PyObject* const> hashes = items_of(block_hashes, "block_hashes must be iterable", keep);
            std::vector<std::uint64_t> out;
            std::string key;
            for (const auto& [step, suffix] : groups) {
                if (step == 0) throw usage_error("offload_key_hashes: a group's hashes_per_chunk is 0");
                for (std::size_t i = step - 1; i < hashes.size(); i += step) {
                    const auto h = bytes_of(hashes[i]);
                    if (!h)
                        throw usage_error(std::string("offload_key_hashes: block_hashes[") + std::to_string(i) +
                                          "] is " + Py_TYPE(hashes[i])->tp_name + ", not bytes");
                    key.assign(*h);
                    key.append(suffix.c_str(), suffix.size());
                    out.push_back(static_cast<std::uint64_t>(bytes_hash(key)));
                }
            }
            return to_numpy(std::move(out));
        },
        nb::arg("block_hashes"), nb::arg("groups"),
        "hash(h + suffix) (Python's own hash of the bytes key vLLM would make) of every step-th block hash "
        "(the chunk's last), for each (step, suffix) group in turn, as uint64: a request's offload keys' "
        "hashes without making the keys.");
    nb::class_<cache_policy_binding>(m, "CachePolicyCore", nb::type_slots(gc_slots))
        .def(nb::init<const std::string&, std::size_t, const nb::dict&>(), nb::arg("policy"), nb::arg("capacity"),
             nb::arg("options"))
        .def_rw("chunks", &cache_policy_binding::chunks)
        .def_prop_ro("orders_by_request", &cache_policy_binding::orders_by_request)
        .def("new_request_rank", &cache_policy_binding::new_request_rank)
        .def("__len__", &cache_policy_binding::size)
        .def("insert", &cache_policy_binding::insert, nb::arg("key"), nb::arg("chunk"), nb::arg("position").none(),
             nb::arg("request_rank"), nb::arg("ref_cnt"), nb::arg("session") = 0)
        .def("insert_hinted", &cache_policy_binding::insert_hinted, nb::arg("key"), nb::arg("chunk"),
             nb::arg("req_context"),
             "vLLM's insert(key, chunk, req_context), the session asked of hear_sessions' callable once per "
             "context.")
        .def("hear_sessions", &cache_policy_binding::hear_sessions, nb::arg("session_of").none(),
             "insert_hinted reads a request context's session with session_of(req_context) -> int.")
        .def_static("order_keys", &cache_policy_binding::order_keys, nb::arg("key_groups"), nb::arg("positions"),
                    "vLLM's order_request_keys over a context's key -> position dict; None: ask vLLM's.")
        .def("remove", &cache_policy_binding::remove)
        .def("touch", &cache_policy_binding::touch, nb::arg("keys"), nb::arg("session") = 0)
        .def("store_miss", &cache_policy_binding::store_miss)
        .def("request_access", &cache_policy_binding::request_access)
        .def("finish", &cache_policy_binding::finish, nb::arg("ordered"), nb::arg("insertion_only"), nb::arg("reused"),
             nb::arg("session") = 0, nb::arg("expected_return_s").none() = nb::none(), nb::arg("session_end") = false)
        .def("request_arrived", &cache_policy_binding::on_request<engine::request_event::arrive>, nb::arg("request_id"),
             nb::arg("keys"), nb::arg("session") = 0)
        .def("request_scheduled", &cache_policy_binding::on_request<engine::request_event::schedule>,
             nb::arg("request_id"), nb::arg("keys") = nb::none(), nb::arg("session") = 0)
        .def("request_preempted", &cache_policy_binding::on_request<engine::request_event::preempt>,
             nb::arg("request_id"), nb::arg("keys"), nb::arg("session") = 0)
        .def("request_finished", &cache_policy_binding::on_request<engine::request_event::finish>,
             nb::arg("request_id"), nb::arg("keys") = nb::none(), nb::arg("session") = 0)
        .def_prop_ro("queued_requests", &cache_policy_binding::queued_requests)
        .def("forecast_front_cache", &cache_policy_binding::forecast_front_cache, nb::arg("gpu_blocks"),
             "Queued requests tell the policy only their keys past the hit a GPU prefix cache of `gpu_blocks` "
             "keys is forecast to give them (engine/front_cache_forecast.hpp); 0: every key.")
        .def_prop_ro("front_cache_blocks", &cache_policy_binding::front_cache_blocks)
        .def_prop_ro("hears_queue", &cache_policy_binding::hears_queue)
        .def_prop_ro("ranks_new", &cache_policy_binding::ranks_new,
                     "Whether the policy can decline a store (predicted_return and its queue_aware_ form).")
        .def("admitted", &cache_policy_binding::admitted, nb::arg("keys"), nb::arg("free"), nb::arg("session") = 0,
             "How many of a store's offered keys, head first, to store with `free` chunks free: up to the "
             "first new key the policy ranks its own next victim.")
        .def("request_state", &cache_policy_binding::request_state, nb::arg("request_id"),
             "'waiting', 'running', or None for a request never heard of or ended.")
        .def("mark_evictable", &cache_policy_binding::mark_evictable)
        .def("mark_non_evictable", &cache_policy_binding::mark_non_evictable)
        .def("evict", &cache_policy_binding::evict)
        .def("clear", &cache_policy_binding::clear)
        .def("arc_list", &cache_policy_binding::arc_list)
        .def_prop_rw("target_t1_size", &cache_policy_binding::target_t1_size, &cache_policy_binding::set_target_t1_size)
        .def("in_ghost", &cache_policy_binding::in_ghost)
        .def("ghost_size", &cache_policy_binding::ghost_size);
}

}  // namespace kvpolicy::python
