// kvpolicy.policies() and kvpolicy.EvictionPolicy: one policy chosen by name,
// driven over integer ids. Each call validates every id first (the C++
// policies have preconditions, not checks, on their hot path), then makes
// one virtual call that loops over the batch inside the concrete policy.
#include <cmath>
#include <limits>
#include <optional>

#include <kvpolicy/engine/vllm_orders.hpp>
#include <kvpolicy/eviction/dyn_policy.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

static_assert(sizeof(item_id) == sizeof(std::uint32_t) && alignof(item_id) == alignof(std::uint32_t) &&
                  std::is_standard_layout_v<item_id>,
              "item_id must be a bare uint32 so NumPy uint32 arrays can be viewed as ids without a copy");

std::span<const item_id> as_ids(std::span<const std::uint32_t> s) {
    return {reinterpret_cast<const item_id*>(s.data()), s.size()};
}

class policy_handle {
public:
    enum class state : std::uint8_t { untracked, evictable, held };

    policy_handle(const std::string& name, std::size_t capacity, const nb::kwargs& options)
            : policy_(capacity, {name, options_from(options, name.c_str())}),
              state_(capacity, state::untracked),
              mark_(capacity, 0) {}

    void miss(nb::handle keys, std::optional<timestamp> now) {
        nb::object keep;
        item_batch b;
        b.keys = as_span<std::uint64_t>(keys, "miss: keys", keep);
        b.now = tick(now);
        policy_.miss_batch(b);
    }

    void insert(nb::handle ids, std::optional<timestamp> now, nb::handle keys, nb::handle priorities,
                nb::handle next_use) {
        batch_args a(ids, keys, priorities, next_use, "insert");
        begin_check();
        for (item_id id : a.b.ids) {
            check_range("insert", id);
            if (state_[id.index()] != state::untracked)
                throw usage_error("insert: id " + std::to_string(id.value) +
                                  " is already tracked; erase it (or pop it as a victim) first");
            check_once("insert", id);
        }
        a.b.now = tick(now);
        policy_.insert_batch(a.b);
        for (item_id id : a.b.ids) state_[id.index()] = state::evictable;
    }

    void access(nb::handle ids, std::optional<timestamp> now, nb::handle keys, nb::handle priorities,
                nb::handle next_use) {
        batch_args a(ids, keys, priorities, next_use, "access");
        for (item_id id : a.b.ids) {
            check_range("access", id);
            if (state_[id.index()] == state::untracked)
                throw usage_error("access: id " + std::to_string(id.value) + " is not tracked; insert it first");
        }
        a.b.now = tick(now);
        policy_.access_batch(a.b);
    }

    void hold(nb::handle ids) {
        nb::object keep;
        const auto s = as_ids(as_span<std::uint32_t>(ids, "hold: ids", keep));
        begin_check();
        for (item_id id : s) {
            check_range("hold", id);
            if (state_[id.index()] != state::evictable)
                throw usage_error("hold: id " + std::to_string(id.value) + " is " +
                                  (state_[id.index()] == state::held ? "already held" : "not tracked") +
                                  "; hold an evictable item once");
            check_once("hold", id);
        }
        policy_.hold_batch(s);
        for (item_id id : s) state_[id.index()] = state::held;
    }

    void release(nb::handle ids, std::optional<timestamp> now, nb::handle keys) {
        batch_args a(ids, keys, nb::none(), nb::none(), "release");
        begin_check();
        for (item_id id : a.b.ids) {
            check_range("release", id);
            if (state_[id.index()] != state::held)
                throw usage_error("release: id " + std::to_string(id.value) +
                                  " is not held (released twice, or never held)");
            check_once("release", id);
        }
        a.b.now = tick(now);
        policy_.release_batch(a.b);
        for (item_id id : a.b.ids) state_[id.index()] = state::evictable;
    }

    void erase(nb::handle ids) {
        nb::object keep;
        const auto s = as_ids(as_span<std::uint32_t>(ids, "erase: ids", keep));
        begin_check();
        for (item_id id : s) {
            check_range("erase", id);
            if (state_[id.index()] == state::untracked)
                throw usage_error("erase: id " + std::to_string(id.value) + " is not tracked");
            check_once("erase", id);
        }
        policy_.erase_batch(s);
        for (item_id id : s) state_[id.index()] = state::untracked;
    }

    out_array<std::uint32_t> pop_victims(std::size_t n, std::optional<timestamp> now) {
        std::vector<std::uint32_t> out(std::min(n, policy_.evictable_size()));
        const timestamp t = tick(now);
        const std::size_t got = policy_.pop_victims({reinterpret_cast<item_id*>(out.data()), out.size()}, t);
        out.resize(got);
        for (std::uint32_t v : out) state_[v] = state::untracked;
        return to_numpy(std::move(out));
    }

    [[nodiscard]] std::string name() const { return std::string(policy_.policy_name()); }
    [[nodiscard]] std::size_t capacity() const { return policy_.capacity(); }
    [[nodiscard]] std::size_t size() const { return policy_.size(); }
    [[nodiscard]] std::size_t evictable_size() const { return policy_.evictable_size(); }
    [[nodiscard]] timestamp now() const { return now_; }
    [[nodiscard]] std::string state_of(std::uint32_t id) const {
        check_range("state", item_id{id});
        switch (state_[id]) {
            case state::untracked:
                return "untracked";
            case state::evictable:
                return "evictable";
            case state::held:
                return "held";
        }
        return "?";
    }
    [[nodiscard]] nb::dict counters() const {
        const policy_counters& c = policy_.counters();
        nb::dict d;
        d["insertions"] = c.insertions;
        d["hits"] = c.hits;
        d["evictions"] = c.evictions;
        d["erasures"] = c.erasures;
        d["ghost_hits"] = c.ghost_hits;
        return d;
    }

private:
    struct batch_args {
        nb::object keep_ids, keep_keys, keep_priorities, keep_next_use;
        item_batch b;
        batch_args(nb::handle ids, nb::handle keys, nb::handle priorities, nb::handle next_use,
                   const std::string& what) {
            b.ids = as_ids(as_span<std::uint32_t>(ids, (what + ": ids").c_str(), keep_ids));
            if (!keys.is_none()) b.keys = as_span<std::uint64_t>(keys, (what + ": keys").c_str(), keep_keys);
            if (!priorities.is_none())
                b.priorities = as_span<std::int32_t>(priorities, (what + ": priorities").c_str(), keep_priorities);
            if (!next_use.is_none())
                b.next_use = as_span<std::uint64_t>(next_use, (what + ": next_use").c_str(), keep_next_use);
            const auto same = [&](std::size_t n, const char* field) {
                if (n != 0 && n != b.ids.size())
                    throw usage_error(what + ": " + std::to_string(n) + " " + field + " for " +
                                      std::to_string(b.ids.size()) + " ids; give one per id, or none");
            };
            same(b.keys.size(), "keys");
            same(b.priorities.size(), "priorities");
            same(b.next_use.size(), "next_use values");
        }
    };

    timestamp tick(std::optional<timestamp> now) noexcept {
        now_ = now ? *now : now_ + 1;
        return now_;
    }
    void check_range(const char* what, item_id id) const {
        if (id.index() >= state_.size())
            throw usage_error(std::string(what) + ": id " + std::to_string(id.value) +
                              " is out of range; ids are 0 .. " + std::to_string(state_.size() - 1) +
                              " (the capacity is " + std::to_string(state_.size()) + ")");
    }
    // A generation per call marks the ids seen, so a repeat is found in O(1).
    void begin_check() {
        if (++generation_ == 0) {
            std::fill(mark_.begin(), mark_.end(), 0);
            generation_ = 1;
        }
    }
    void check_once(const char* what, item_id id) {
        if (mark_[id.index()] == generation_)
            throw usage_error(std::string(what) + ": id " + std::to_string(id.value) +
                              " appears twice; list each id once");
        mark_[id.index()] = generation_;
    }

    dyn_policy policy_;
    std::vector<state> state_;         // [capacity] mirrors the policy's, for the checks
    std::vector<std::uint32_t> mark_;  // [capacity] generation of the last call that listed the id
    std::uint32_t generation_ = 0;
    timestamp now_ = 0;
};

template <class List>
std::vector<std::string> names_list() {
    std::vector<std::string> out;
    for (std::string_view n : names_of<List>()) out.emplace_back(n);
    return out;
}

/// An option's number as its type: an int, a bool or a float.
nb::object typed(std::string_view type, double v) {
    if (type == "bool") return nb::bool_(v != 0);
    if (type == "int" && std::isfinite(v)) return nb::steal(PyLong_FromDouble(v));
    return nb::float_(v);
}

nb::list options_as_dicts(const std::vector<option_description>& options) {
    nb::list out;
    for (const option_description& d : options) {
        nb::dict o;
        o["name"] = std::string(d.name);
        o["type"] = std::string(d.type);
        o["default"] = typed(d.type, d.default_value);
        o["min"] = typed(d.type, d.range.min);
        o["max"] = typed(d.type, d.range.max);
        o["help"] = std::string(d.help);
        out.append(o);
    }
    return out;
}

}  // namespace

void bind_policy(nb::module_& m) {
    m.def(
        "policies", [] { return names_list<eviction_policies>(); },
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
            out["cache_policies"] = names_list<engine::vllm_cache_policies>();
            out["offloading_manager"] = names_list<engine::vllm_0_11_orders>();
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
