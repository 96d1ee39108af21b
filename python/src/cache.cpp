// kvpolicy.TieredCache: the composed GPU + CPU cache with policies chosen by
// name at run time: a kvpolicy::any_tiered_cache (cache/any_tiered_cache.hpp,
// whose header says why its tiers hold dyn_policy: two cache types compiled
// instead of one per pair of policies).
//
// The remote tier (remote={...}, where the package was built with Redis
// support: KVPOLICY_PYTHON_REDIS) composes what a C++ engine composes
// (tests/redis/): a redis::store from the dict, two host arenas (the GPU and
// CPU tiers' bytes, NumPy views gpu_arena/cpu_arena) and a redis::engine over
// them; admit_through asks the store past the local prefix (remote_tier.hpp)
// and run_plan runs a step's copies through the engine and reports them.
#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

#include <kvpolicy/cache/any_tiered_cache.hpp>
#include <kvpolicy/cache/block_hasher.hpp>
#include <kvpolicy/engine/cache_steps.hpp>
#ifdef KVPOLICY_PYTHON_REDIS
#include <kvpolicy/redis.hpp>
#include <kvpolicy/redis/store_fields.hpp>
#endif

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

nb::dict plan_dict(const swap_plan& p) {
    const std::vector<block_transfer>& t = p.transfers;
    using x = const block_transfer&;
    return dict_of(
        "step", p.step, "transfer_from", column<std::uint8_t>(t, [](x b) { return b.from; }),  // 0 gpu, 1 cpu
        "transfer_src", column<std::uint32_t>(t, [](x b) { return b.src.value; }),             //
        "transfer_to", column<std::uint8_t>(t, [](x b) { return b.to; }),                      //
        "transfer_dst", column<std::uint32_t>(t, [](x b) { return b.dst.value; }),             //
        "transfer_exchange", column<std::uint8_t>(t, [](x b) { return b.exchange; }), "swap_outs", p.swap_outs(),
        "swap_ins", p.swap_ins(), "exchanges", p.exchanges(), "dropped_keys",
        column<std::uint64_t>(p.drops, [](const dropped_item& d) { return d.key; }), "dropped_sessions",
        column<std::uint64_t>(p.drops, [](const dropped_item& d) { return d.owner.value; }), "recovery_session",
        column<std::uint64_t>(p.recovery, [](const recovery_range& r) { return r.session.value; }),
        "recovery_token_begin",
        column<std::uint64_t>(p.recovery, [](const recovery_range& r) { return r.token_begin; }), "recovery_token_end",
        column<std::uint64_t>(p.recovery, [](const recovery_range& r) { return r.token_end; }));
}

// A plan's report (complete_transfers, run_plan): the copies that failed,
// the items lost with them, the held items to compute again.
nb::dict report_dict(const transfer_report& r) {
    using d = const dropped_item&;
    using x = const recompute_item&;
    return dict_of("failed", r.failed, "dropped_keys", column<std::uint64_t>(r.drops, [](d i) { return i.key; }),
                   "dropped_sessions", column<std::uint64_t>(r.drops, [](d i) { return i.owner.value; }),
                   "recompute_keys", column<std::uint64_t>(r.recompute, [](x i) { return i.key; }),
                   "recompute_sessions", column<std::uint64_t>(r.recompute, [](x i) { return i.session.value; }),
                   "recompute_blocks", column<std::uint32_t>(r.recompute, [](x i) { return i.block.value; }));
}

// The cache's metrics (or a tier's) by their fields' names (for_each_field).
template <class Metrics>
nb::dict fields_dict(const Metrics& m) {
    nb::dict d;
    for_each_field(m, [&](const char* name, const auto& v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, tier_metrics>)
            d[name] = fields_dict(v);
        else
            d[name] = v;
    });
    return d;
}

// Digests from a 2-D (n, 32) uint8 array or a sequence of 32-byte bytes objects (vLLM's BlockHash).
std::vector<block_digest> digests_of(nb::handle obj, const char* what) {
    std::vector<block_digest> out;
    using digest_array = nb::ndarray<const std::uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
    if (digest_array a; nb::try_cast(obj, a, false)) {
        if (a.shape(1) != 32)
            throw usage_error(std::string(what) + ": a digest array must be (n, 32) uint8, got (" +
                              std::to_string(a.shape(0)) + ", " + std::to_string(a.shape(1)) + ")");
        out.resize(a.shape(0));
        if (!out.empty()) std::memcpy(out.data(), a.data(), out.size() * 32);
        return out;
    }
    if (nb::isinstance<nb::bytes>(obj) || nb::isinstance<nb::str>(obj) || !PySequence_Check(obj.ptr()))
        throw usage_error(std::string(what) +
                          ": this remote tier names blocks by 32-byte digests (remote "
                          "identity='digest'); give a sequence of 32-byte bytes (vLLM's block hashes, "
                          "kvpolicy.block_digests) or an (n, 32) uint8 array, got " +
                          py_type_name(obj));
    std::size_t i = 0;
    for (nb::handle v : obj) {
        const bool is_bytes = nb::isinstance<nb::bytes>(v);
        if (!is_bytes || nb::len(v) != 32)
            throw usage_error(std::string(what) + "[" + std::to_string(i) +
                              "]: expected 32 bytes (a block digest), got " +
                              (is_bytes ? std::to_string(nb::len(v)) + " bytes" : py_type_name(v)) +
                              (nb::isinstance<nb::int_>(v) ? "; a 64-bit hash needs remote identity='hash64'" : ""));
        block_digest d{};
        std::memcpy(d.data(), nb::borrow<nb::bytes>(v).c_str(), 32);
        out.push_back(d);
        ++i;
    }
    return out;
}

#ifdef KVPOLICY_PYTHON_REDIS
// remote={...}'s fields as redis::store_config_from reads them.
redis::field_value field_of(nb::handle v) {
    using kind = redis::field_value::kind;
    redis::field_value f;
    f.type_name = py_type_name(v);
    if (v.is_none()) return f;
    if (nb::isinstance<nb::bool_>(v)) {
        f.type = kind::boolean;
        f.boolean = nb::cast<bool>(v);
    } else if (nb::isinstance<nb::int_>(v)) {
        f.type = kind::integer;
        f.text = nb::cast<std::string>(nb::str(v));
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
        if (overflow == 0 && !(x == -1 && PyErr_Occurred())) f.integer = x;
        PyErr_Clear();
    } else if (nb::isinstance<nb::str>(v)) {
        f.type = kind::text;
        f.text = nb::cast<std::string>(v);
    } else if (nb::isinstance<nb::bytes>(v)) {
        f.type = kind::bytes;
        f.text = std::string(nb::borrow<nb::bytes>(v).c_str(), nb::len(v));
    } else if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) {
        f.type = kind::sequence;
        f.tuple = nb::isinstance<nb::tuple>(v);
        for (nb::handle item : v) f.items.push_back(field_of(item));
    } else {
        f.type = kind::other;
    }
    return f;
}
redis::store_fields fields_of(const nb::dict& d) {
    redis::store_fields out;
    for (auto [k, v] : d) {
        if (!nb::isinstance<nb::str>(k))
            throw config_error("TieredCache remote: the keys are field names (str), got " + py_type_name(k));
        out.emplace_back(nb::cast<std::string>(k), field_of(v));
    }
    return out;
}

#else
// Why `what` cannot work in this build.
std::string no_redis_message(const std::string& what) {
    return what +
           " needs the Redis remote tier, but this kvpolicy package was built without Redis support "
           "(hiredis or OpenSSL was not found when it was built); install libhiredis-dev and libssl-dev "
           "(scripts/install-deps.sh) and reinstall kvpolicy";
}
#endif

class cache_handle {
public:
    cache_handle(std::size_t gpu_blocks, std::size_t cpu_blocks, const std::string& gpu_policy,
                 const std::string& cpu_policy, bool inclusive, std::uint32_t block_size, std::uint32_t num_layers,
                 bool per_layer, bool verify_chain, bool thread_safe, std::size_t item_bytes,
                 const nb::dict& gpu_options, const nb::dict& cpu_options, std::optional<nb::dict> remote)
            : thread_safe_(thread_safe) {
        const cache_config cfg{.gpu_capacity = gpu_blocks,
                               .cpu_capacity = cpu_blocks,
                               .block_size = block_size,
                               .num_layers = num_layers,
                               .items = per_layer ? granularity::per_layer : granularity::whole_block,
                               .item_bytes = item_bytes,
                               .inclusive = inclusive,
                               .verify_chain = verify_chain,
                               .remote = remote.has_value()};
        const dyn_policy::config_type g{gpu_policy, options_from(gpu_options, gpu_policy.c_str())};
        const dyn_policy::config_type c{cpu_policy, options_from(cpu_options, cpu_policy.c_str())};
#ifdef KVPOLICY_PYTHON_REDIS
        // The store's configuration is checked before the cache is made and
        // before anything connects; the store connects last.
        std::optional<redis::store_config> store_cfg;
        if (remote)
            store_cfg = redis::node::config_from(fields_of(*remote), block_size, item_bytes, "TieredCache remote");
#else
        if (remote) throw config_error(no_redis_message("TieredCache: remote=...") + ", or leave remote=None");
#endif
        impl_ = any_tiered_cache::make(cfg, g, c, thread_safe);
        steps_.emplace(*impl_);
#ifdef KVPOLICY_PYTHON_REDIS
        if (store_cfg) {
            nb::gil_scoped_release release;  // connecting waits up to connect_timeout + io_timeout
            remote_ = std::make_unique<redis::node>(std::move(*store_cfg), gpu_blocks, cpu_blocks);
        }
#endif
        gpu_policy_ = gpu_policy;
        cpu_policy_ = cpu_policy;
    }

    nb::dict lookup(nb::handle hashes) const {
        nb::object keep;
        const auto h = as_span<std::uint64_t>(hashes, "lookup: block_hashes", keep);
        const prefix_match m = unlocked([&] { return impl_->lookup(h); });
        return dict_of("run", m.run, "gpu_blocks", m.gpu_blocks, "cpu_blocks", m.cpu_blocks);
    }

    void begin_step(std::optional<timestamp> now) {
        if (now) impl_->set_time(*now);
        unlocked([&] { impl_->begin_step(); });
    }

    /// Inside an open step: the admission; outside: a whole step (begin,
    /// admit, end) and its plan merged in.
    nb::dict admit(std::uint64_t session, nb::handle hashes, std::optional<timestamp> now) {
        nb::object keep;
        const auto h = as_span<std::uint64_t>(hashes, "admit: block_hashes", keep);
        return admitted(session, now, nullptr, [&] {
            return remote_admission{impl_->admit(session_id{session}, h), 0};
        });
    }

    nb::dict end_step() {
        return plan_dict(unlocked([&] { return steps_->end_step(); }));
    }

    std::size_t release(std::uint64_t s, std::uint64_t output_tokens, timestamp expected_return) {
        return unlocked([&] { return impl_->release(session_id{s}, output_tokens, expected_return); });
    }
    std::size_t free_session(std::uint64_t s, bool forget) {
        return unlocked([&] { return impl_->free_session(session_id{s}, forget); });
    }

    void enqueue(std::uint64_t request, std::uint64_t session, nb::handle hashes) {
        nb::object keep;
        const auto h = as_span<std::uint64_t>(hashes, "enqueue: block_hashes", keep);
        unlocked([&] { impl_->enqueue(request, session_id{session}, h); });
    }
    std::uint64_t dequeue(std::uint64_t request) {
        return unlocked([&] { return impl_->dequeue(request).value; });
    }
    std::size_t queued_requests() const { return impl_->queued_requests(); }

    nb::dict complete_transfers(nb::handle statuses) {
        nb::object keep;
        const auto st = as_span<std::uint8_t>(statuses, "complete_transfers: statuses", keep);
        return report_dict(unlocked([&] {
            return steps_->complete_transfers({reinterpret_cast<const transfer_status*>(st.data()), st.size()});
        }));
    }

    [[nodiscard]] bool has_remote() const {
#ifdef KVPOLICY_PYTHON_REDIS
        return remote_ != nullptr;
#else
        return false;
#endif
    }

#ifdef KVPOLICY_PYTHON_REDIS
    redis::node& remote_or_throw(const char* call) const {
        if (!remote_)
            throw usage_error(std::string("TieredCache.") + call +
                              ": this cache has no remote tier; construct it with "
                              "remote={...} (the store's address and namespace)");
        return *remote_;
    }

    /// admit with the store asked past the local prefix (redis::node::admit).
    nb::dict admit_through(std::uint64_t session, nb::handle blocks, std::optional<timestamp> now) {
        redis::node& r = remote_or_throw("admit_through");
        nb::object keep;
        std::vector<block_digest> digests;
        std::vector<std::uint64_t> hashes;
        if (r.identities()) {
            digests = digests_of(blocks, "admit_through: blocks");
            hashes = digest_handles(digests);
        } else {
            const auto h =
                as_span<std::uint64_t>(blocks, "admit_through: blocks (64-bit hashes: remote identity='hash64')", keep);
            hashes.assign(h.begin(), h.end());
        }
        // The store answers within io_timeout; other threads run meanwhile if thread_safe.
        nb::dict d = admitted(session, now, &r.mutex(), [&] {
            if (r.identities()) return r.admit(*impl_, session_id{session}, std::span(std::as_const(digests)));
            return r.admit(*impl_, session_id{session}, std::span(std::as_const(hashes)));
        });
        d["hashes"] = to_numpy(std::move(hashes));
        return d;
    }

    /// Runs the last plan through the engine and reports it (complete_transfers).
    nb::dict run_plan() {
        redis::node& r = remote_or_throw("run_plan");
        redis::plan_run run = unlocked([&] {
            std::scoped_lock lock(r.mutex());
            return steps_->run_last("TieredCache.run_plan",
                                    [&](const swap_plan& plan) { return r.run_plan(*impl_, plan); });
        });
        nb::dict d = report_dict(run.report);
        put(d, "statuses", column<std::uint8_t>(run.statuses, [](transfer_status s) { return s; }), "written_keys",
            to_numpy(std::move(run.written_keys)), "fetched_keys", to_numpy(std::move(run.fetched_keys)));
        return d;
    }

    nb::dict remote_stats() const {
        redis::node& r = remote_or_throw("remote_stats");
        std::scoped_lock lock(r.mutex());
        const redis::engine& e = r.transfers();
        const redis::store& s = r.remote();
        return dict_of("round_trips", e.round_trips(), "bytes_sent", e.bytes_sent(), "bytes_received",
                       e.bytes_received(), "rejected_values", e.rejected_values(), "redirects", s.redirects(), "nodes",
                       s.node_count(), "identities", r.identities() ? r.identities()->size() : 0, "key_prefix",
                       s.config().ns.prefix());
    }

    using arena_array = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<2>>;
    arena_array arena(bool gpu) const {
        redis::node& r = remote_or_throw(gpu ? "gpu_arena" : "cpu_arena");
        block_arena& a = gpu ? r.gpu() : r.cpu();
        return arena_array(reinterpret_cast<std::uint8_t*>(a.block(block_id{0}).data()),
                           {a.capacity(), a.block_bytes()}, nb::handle());
    }
#endif

    nb::dict metrics() const {
        return fields_dict(unlocked([&] { return impl_->metrics(); }));
    }
    std::string to_prometheus(const std::string& prefix) const {
        return unlocked([&] { return impl_->metrics(); }).to_prometheus(prefix);
    }
    std::string where(std::uint64_t h, std::uint32_t layer) const {
        return std::string(to_string(impl_->where(h, layer)));
    }
    void pin(std::uint64_t h) { impl_->pin(h); }
    void unpin(std::uint64_t h) { impl_->unpin(h); }
    std::string check_invariants() const {
        return unlocked([&] { return impl_->check_invariants(); });
    }
    [[nodiscard]] bool thread_safe() const { return thread_safe_; }
    [[nodiscard]] const std::string& gpu_policy() const { return gpu_policy_; }
    [[nodiscard]] const std::string& cpu_policy() const { return cpu_policy_; }

private:
    // One admission (`admit_one`, under `lock` if any) as admit's answer:
    // inside an open step as it is; outside one, a whole step (begin, admit,
    // end) whose plan is merged in.
    template <class Admit>
    nb::dict admitted(std::uint64_t session, std::optional<timestamp> now, std::mutex* lock, Admit admit_one) {
        if (now) impl_->set_time(*now);
        const auto a = unlocked([&] { return steps_->admit(session_id{session}, admit_one, lock); });
        nb::dict d = a.plan ? plan_dict(*a.plan) : nb::dict();
        const admission& local = a.admission.local;
        put(d, "hit_blocks", local.match.run, "gpu_hits", local.match.gpu_blocks, "cpu_hits", local.match.cpu_blocks);
        if (lock) d["remote_blocks"] = a.admission.remote_blocks;
        put(d, "computed_blocks", local.computed_blocks, "gpu_evictions", local.gpu_evictions, "blocks",
            column<std::uint32_t>(a.held, [](block_id b) { return b.value; }));
        return d;
    }

    // The thread-safe cache locks itself: other Python threads run while it works.
    template <class F>
    auto unlocked(F f) const -> decltype(f()) {
        if (!thread_safe_) return f();
        nb::gil_scoped_release release;
        return f();
    }

    std::unique_ptr<any_tiered_cache> impl_;
    std::optional<engine::cache_steps> steps_;  // impl_'s steps and last plan
#ifdef KVPOLICY_PYTHON_REDIS
    std::unique_ptr<redis::node> remote_;  // declared after impl_: gone before the cache it serves
#endif
    bool thread_safe_;
    std::string gpu_policy_, cpu_policy_;
};

}  // namespace

void bind_cache(nb::module_& m) {
    using c = cache_handle;
    nb::class_<c>(m, "TieredCache",
                  "kvpolicy's composed GPU + CPU cache (tiered_cache) with policies chosen by name.\n\n"
                  "Blocks are identified by chained 64-bit hashes. admit(session, hashes) holds the\n"
                  "longest cached prefix (swapping CPU hits in) and allocates the miss tail; outside an\n"
                  "open step it runs a whole step and returns the plan with the admission. Block ids in\n"
                  "plans are slots of each tier. thread_safe=True uses thread_safe_traits and releases\n"
                  "the GIL during calls.")
        .def(nb::init<std::size_t, std::size_t, const std::string&, const std::string&, bool, std::uint32_t,
                      std::uint32_t, bool, bool, bool, std::size_t, const nb::dict&, const nb::dict&,
                      std::optional<nb::dict>>(),
             nb::arg("gpu_blocks"), nb::arg("cpu_blocks") = 0, nb::arg("gpu_policy") = "lru",
             nb::arg("cpu_policy") = "lru", nb::arg("inclusive") = false, nb::arg("block_size") = 16,
             nb::arg("num_layers") = 1, nb::arg("per_layer") = false, nb::arg("verify_chain") = true,
             nb::arg("thread_safe") = false, nb::arg("item_bytes") = 0, nb::arg("gpu_policy_options") = nb::dict(),
             nb::arg("cpu_policy_options") = nb::dict(), nb::arg("remote") = nb::none())
        .def("lookup", &c::lookup, nb::arg("block_hashes"),
             "{'run', 'gpu_blocks', 'cpu_blocks'}: the longest prefix cached in either tier.")
        .def("begin_step", &c::begin_step, nb::arg("now") = nb::none(), "Opens a step (several admits, one plan).")
        .def("admit", &c::admit, nb::arg("session"), nb::arg("block_hashes"), nb::arg("now") = nb::none(),
             "Admits a request: {'blocks' (GPU slots held), 'hit_blocks', 'gpu_hits', 'cpu_hits',\n"
             "'computed_blocks', 'gpu_evictions'} plus, outside an open step, the step's plan\n"
             "(as end_step). Raises CapacityError or UsageError (a malformed chain), changing nothing.")
        .def("end_step", &c::end_step,
             "The step's plan: transfers in order (transfer_from/src/to/dst/exchange arrays; tier 0 gpu,\n"
             "1 cpu), dropped_keys/sessions, recovery_session/token_begin/token_end, counts.")
        .def("release", &c::release, nb::arg("session"), nb::arg("output_tokens") = 0, nb::arg("expected_return") = 0,
             "Releases the session's holds (its request finished, having generated output_tokens tokens;\n"
             "0 = unknown: session_aware_lru predicts the session's return from it); returns how many.\n"
             "expected_return: when the engine expects the session's next request, on the cache's clock\n"
             "(after now; 0 = no hint; kvpolicy.NEVER: it will not return): session_aware_lru takes it\n"
             "over its own prediction. Raises UsageError for a hint not after now, releasing nothing.")
        .def("free_session", &c::free_session, nb::arg("session"), nb::arg("forget_blocks") = false)
        .def("enqueue", &c::enqueue, nb::arg("request"), nb::arg("session"), nb::arg("block_hashes"),
             "Request `request` (an id unique among queued requests) of `session` is queued and will read\n"
             "block_hashes: queue-aware policies (queue_aware_*) keep what queued requests read, the one\n"
             "read last going first; others are unaffected. Call dequeue(request) when it starts (before\n"
             "its admit) or is dropped. Raises UsageError if the request is already queued.")
        .def("dequeue", &c::dequeue, nb::arg("request"),
             "The request left the queue (started, or dropped); returns its session. Raises UsageError\n"
             "for a request not queued (dequeued twice, or never enqueued), changing nothing.")
        .def_prop_ro("queued_requests", &c::queued_requests, "Requests queued now.")
        .def("complete_transfers", &c::complete_transfers, nb::arg("statuses"),
             "Reports the last plan's copies (0 done, 1 failed, one per transfer, in order); returns failed,\n"
             "dropped_keys/sessions (items whose only copy was lost), recompute_keys/sessions/blocks.")
        .def("metrics", &c::metrics, "The cache's counters as a dict.")
        .def("to_prometheus", &c::to_prometheus, nb::arg("prefix") = "kvpolicy", "Prometheus text exposition.")
        .def("where", &c::where, nb::arg("block_hash"), nb::arg("layer") = 0, "'gpu', 'cpu' or 'free'.")
        .def("pin", &c::pin, nb::arg("block_hash"))
        .def("unpin", &c::unpin, nb::arg("block_hash"))
        .def("check_invariants", &c::check_invariants, "'' when every invariant holds, else what is broken.")
        .def_prop_ro("has_remote", &c::has_remote, "Whether the cache has a remote tier (remote={...}).")
#ifdef KVPOLICY_PYTHON_REDIS
        .def("admit_through", &c::admit_through, nb::arg("session"), nb::arg("blocks"), nb::arg("now") = nb::none(),
             "admit with the remote store asked past the local prefix: the store's run of blocks is staged\n"
             "into the CPU tier with a planned fetch each, then admitted (C++ kvpolicy::admit_through).\n"
             "blocks: 32-byte digests (a sequence of bytes, or an (n, 32) uint8 array) with identity='digest'\n"
             "(the default), 64-bit chain hashes with identity='hash64'. Returns admit's dict plus\n"
             "'remote_blocks' (staged from the store) and 'hashes' (the blocks' 64-bit handles). Outside an\n"
             "open step it runs a whole step (call run_plan() next). Raises UsageError, changing nothing, for\n"
             "a digest whose handle is another held block's (two digests sharing their first 8 bytes).")
        .def("run_plan", &c::run_plan,
             "Runs the last plan's copies through the remote tier's engine (local copies between gpu_arena and\n"
             "cpu_arena, write-backs as SET, fetches as GET verified by digest, namespace and MAC, one\n"
             "deadline, io_timeout_ms, per batch) and reports them (complete_transfers). Returns 'statuses'\n"
             "(0 done, 1 failed per transfer), 'failed', 'written_keys', 'fetched_keys', 'dropped_keys'/\n"
             "'dropped_sessions' (items whose only copy was lost) and 'recompute_keys'/'recompute_sessions'/\n"
             "'recompute_blocks' (GPU slots to compute again). A store that is down makes misses and failed\n"
             "copies, never an exception.")
        .def("remote_stats", &c::remote_stats,
             "The remote engine's counters: round_trips, bytes_sent, bytes_received, rejected_values (refused\n"
             "by verification), redirects, nodes, identities, key_prefix.")
        .def_prop_ro(
            "gpu_arena", [](const c& h) { return h.arena(true); }, nb::rv_policy::reference_internal,
            "The GPU tier's bytes, (gpu_blocks, item_bytes) uint8, slot i = the plans' GPU block i.")
        .def_prop_ro(
            "cpu_arena", [](const c& h) { return h.arena(false); }, nb::rv_policy::reference_internal,
            "The CPU tier's bytes, (cpu_blocks, item_bytes) uint8.")
#endif
        .def_prop_ro("thread_safe", &c::thread_safe)
        .def_prop_ro("gpu_policy", &c::gpu_policy)
        .def_prop_ro("cpu_policy", &c::cpu_policy);

#ifdef KVPOLICY_PYTHON_REDIS
    m.attr("HAS_REDIS") = true;
#else
    m.attr("HAS_REDIS") = false;
#endif
    m.def(
        "block_digests",
        []([[maybe_unused]] nb::handle tokens, [[maybe_unused]] std::uint32_t block_size,
           [[maybe_unused]] nb::bytes extra) {
#ifdef KVPOLICY_PYTHON_REDIS
            nb::object keep;
            const auto t = as_span<std::int32_t>(tokens, "block_digests: tokens", keep);
            if (block_size == 0) throw usage_error("block_digests: block_size is 0; give the tokens per block");
            std::vector<block_digest> out(t.size() / block_size);
            redis::sha256_block_hasher hasher;
            const auto x = std::as_bytes(std::span<const char>(extra.c_str(), extra.size()));
            (void)hasher.hash_blocks(t, block_size, out, x);
            auto* owned = new std::vector<block_digest>(std::move(out));
            nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<block_digest>*>(p); });
            return nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<2>>(reinterpret_cast<std::uint8_t*>(owned->data()),
                                                                     {owned->size(), std::size_t{32}}, owner);
#else
            throw config_error(no_redis_message("block_digests"));
#endif
        },
        nb::arg("tokens"), nb::arg("block_size") = 16, nb::arg("extra") = nb::bytes(""),
        "SHA-256 chained digests of the full blocks of `tokens` ((n, 32) uint8), as C++'s\n"
        "redis::sha256_block_hasher: each block's digest covers its parent's, `extra` (a LoRA id, a cache\n"
        "salt) and its token ids.");
    m.def(
        "digest_handles",
        [](nb::handle digests) { return to_numpy(digest_handles(digests_of(digests, "digest_handles: digests"))); },
        nb::arg("digests"), "The 64-bit handles (first 8 bytes) the cache keys digests by.");
}

}  // namespace kvpolicy::python
