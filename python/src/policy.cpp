// kvpolicy.policies() and kvpolicy.EvictionPolicy: one policy chosen by name,
// driven over integer ids: a kvpolicy::checked_policy
// (eviction/checked_policy.hpp), which checks every id of a call first, then
// makes one virtual call that loops over the batch inside the concrete policy.
#include <cmath>
#include <limits>
#include <optional>

#include <nanobind/stl/array.h>

#include <kvpolicy/engine/vllm_orders.hpp>
#include <kvpolicy/eviction/checked_policy.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

class policy_handle {
public:
    policy_handle(const std::string& name, std::size_t capacity, const nb::kwargs& options)
            : p_(capacity, {name, options_from(options, name.c_str())}) {}

    void miss(nb::handle keys, std::optional<timestamp> now) {
        nb::object keep;
        item_batch b;
        b.keys = as_span<std::uint64_t>(keys, "miss: keys", keep);
        b.now = tick(now);
        p_.miss(b);
    }
    void insert(nb::handle ids, std::optional<timestamp> now, nb::handle keys, nb::handle priorities,
                nb::handle next_use) {
        batch("insert", &checked_policy::insert, ids, now, keys, priorities, next_use);
    }
    void access(nb::handle ids, std::optional<timestamp> now, nb::handle keys, nb::handle priorities,
                nb::handle next_use) {
        batch("access", &checked_policy::access, ids, now, keys, priorities, next_use);
    }
    void release(nb::handle ids, std::optional<timestamp> now, nb::handle keys) {
        batch("release", &checked_policy::release, ids, now, keys, nb::none(), nb::none());
    }
    void hold(nb::handle ids) {
        nb::object keep;
        p_.hold(as_ids(as_span<std::uint32_t>(ids, "hold: ids", keep)));
    }
    void erase(nb::handle ids) {
        nb::object keep;
        p_.erase(as_ids(as_span<std::uint32_t>(ids, "erase: ids", keep)));
    }
    out_array<std::uint32_t> pop_victims(std::size_t n, std::optional<timestamp> now) {
        std::vector<std::uint32_t> out(std::min(n, p_.policy().evictable_size()));
        out.resize(p_.pop_victims(as_ids(std::span(out)), tick(now)));
        return to_numpy(std::move(out));
    }

    [[nodiscard]] std::string name() const { return std::string(p_.policy().policy_name()); }
    [[nodiscard]] std::size_t capacity() const { return p_.policy().capacity(); }
    [[nodiscard]] std::size_t size() const { return p_.policy().size(); }
    [[nodiscard]] std::size_t evictable_size() const { return p_.policy().evictable_size(); }
    [[nodiscard]] timestamp now() const { return now_; }
    [[nodiscard]] std::string state_of(std::uint32_t id) const {
        constexpr const char* names[] = {"untracked", "evictable", "held"};  // id_state's order
        return names[static_cast<int>(p_.state(item_id{id}))];
    }
    [[nodiscard]] nb::dict counters() const {
        const policy_counters& c = p_.policy().counters();
        return dict_of("insertions", c.insertions, "hits", c.hits, "evictions", c.evictions, "erasures", c.erasures,
                       "ghost_hits", c.ghost_hits);
    }

private:
    // A batch call: its arrays read, then the call (which checks every id and
    // column first), timed `now` or the next tick.
    void batch(const std::string& what, void (checked_policy::*call)(const item_batch&), nb::handle ids,
               std::optional<timestamp> now, nb::handle keys, nb::handle priorities, nb::handle next_use) {
        nb::object keep[4];
        item_batch b;
        b.ids = as_ids(as_span<std::uint32_t>(ids, (what + ": ids").c_str(), keep[0]));
        if (!keys.is_none()) b.keys = as_span<std::uint64_t>(keys, (what + ": keys").c_str(), keep[1]);
        if (!priorities.is_none())
            b.priorities = as_span<std::int32_t>(priorities, (what + ": priorities").c_str(), keep[2]);
        if (!next_use.is_none()) b.next_use = as_span<std::uint64_t>(next_use, (what + ": next_use").c_str(), keep[3]);
        b.now = now ? *now : now_ + 1;
        (p_.*call)(b);
        now_ = b.now;
    }
    timestamp tick(std::optional<timestamp> now) noexcept {
        now_ = now ? *now : now_ + 1;
        return now_;
    }

    checked_policy p_;
    timestamp now_ = 0;
};

/// An option's number as its type: an int, a bool or a float.
nb::object typed(std::string_view type, double v) {
    if (type == "bool") return nb::bool_(v != 0);
    if (type == "int" && std::isfinite(v)) return nb::steal(PyLong_FromDouble(v));
    return nb::float_(v);
}

nb::list options_as_dicts(const std::vector<option_description>& options) {
    nb::list out;
    for (const option_description& d : options)
        out.append(dict_of("name", std::string(d.name), "type", std::string(d.type), "default",
                           typed(d.type, d.default_value), "min", typed(d.type, d.range.min), "max",
                           typed(d.type, d.range.max), "help", std::string(d.help)));
    return out;
}

}  // namespace

void bind_policy(nb::module_& m) {
    m.def(
        "policies", [] { return names_of<eviction_policies>(); },
        "The names of every registered eviction policy, in registry order.");
    m.def(
        "policy_options", [](const std::string& name) { return options_as_dicts(engine::registered_options(name)); },
        nb::arg("name"),
        "The options policy `name` takes (any registered name, vLLM's orders included), in declaration\n"
        "order: dicts of name, type ('float', 'int' or 'bool'), default, min, max (inclusive) and help.");
    m.def(
        "_vllm_orders",
        [] {
            nb::dict out;
            out["cache_policies"] = names_of<engine::vllm_cache_policies>();
            out["offloading_manager"] = names_of<engine::vllm_0_11_orders>();
            return out;
        },
        "vLLM's own orders by name (include/kvpolicy/engine/vllm_orders.hpp): vLLM >= 0.21's CachePolicy\n"
        "classes and the 0.11-0.20 OffloadingManager's (which also takes vllm_lru, vllm_arc for them).");

    using h = policy_handle;
    const auto ids_doc = "ids: an int or a 1-D integer sequence; a NumPy uint32 array is read without a copy.";
    nb::class_<h>(m, "EvictionPolicy",
                  "One eviction policy over dense integer ids 0 .. capacity-1, chosen by name.\n\n"
                  "An id is untracked, evictable (inserted) or held (out of candidacy, state kept).\n"
                  "insert/access/hold/release/erase take one id or a batch; every id is checked\n"
                  "before anything changes (kvpolicy.UsageError names the first bad one). `now`\n"
                  "defaults to a counter that ticks once per call. pop_victims(n) removes and\n"
                  "returns up to n victims, never a held id. Options: kvpolicy.policy_options(name).")
        .def(nb::init<const std::string&, std::size_t, const nb::kwargs&>(), nb::arg("name"), nb::arg("capacity"),
             nb::arg("config"),
             "Raises UnknownNameError (listing every policy) or ConfigError (capacity 0, a bad option).")
        .def("miss", &h::miss, nb::arg("keys"), nb::arg("now") = nb::none(),
             "Keys requested that are not tracked: call it for a key before making room for it and\n"
             "inserting it (ARC adapts here and pairs the miss with the key's insert).")
        .def("insert", &h::insert, nb::arg("ids"), nb::arg("now") = nb::none(), nb::arg("keys") = nb::none(),
             nb::arg("priorities") = nb::none(), nb::arg("next_use") = nb::none(),
             (std::string("New items, evictable. keys: stable 64-bit identities (default: the ids), what ghost\n"
                          "lists remember; priorities (qos_aware), next_use (belady): one per id. ") +
              ids_doc)
                 .c_str())
        .def("access", &h::access, nb::arg("ids"), nb::arg("now") = nb::none(), nb::arg("keys") = nb::none(),
             nb::arg("priorities") = nb::none(), nb::arg("next_use") = nb::none(), "Hits on tracked items.")
        .def("hold", &h::hold, nb::arg("ids"), "Takes evictable items out of candidacy (a request uses them).")
        .def("release", &h::release, nb::arg("ids"), nb::arg("now") = nb::none(), nb::arg("keys") = nb::none(),
             "Makes held items evictable again (the policy's hold rule decides where they go).")
        .def("erase", &h::erase, nb::arg("ids"), "Forgets tracked items without evicting them.")
        .def("pop_victims", &h::pop_victims, nb::arg("n") = 1, nb::arg("now") = nb::none(),
             "Removes and returns up to n victims in eviction order, as a uint32 array.")
        .def("state", &h::state_of, nb::arg("id"), "'untracked', 'evictable' or 'held'.")
        .def_prop_ro("name", &h::name)
        .def_prop_ro("capacity", &h::capacity)
        .def_prop_ro("now", &h::now, "The time of the last call.")
        .def("__len__", &h::size)
        .def_prop_ro("evictable_size", &h::evictable_size)
        .def("counters", &h::counters, "insertions, hits, evictions, erasures, ghost_hits.")
        .def("__repr__", [](const h& p) {
            return "EvictionPolicy('" + p.name() + "', capacity=" + std::to_string(p.capacity()) +
                   ", size=" + std::to_string(p.size()) + ")";
        });
}

}  // namespace kvpolicy::python
