// kvpolicy.TieredCache: the composed GPU + CPU cache with policies chosen by
// name at run time.
//
// Compile time and binary size decide the shape: tiered_cache<Gpu, Cpu> for
// every pair of the 18 policies would be 324 cache types (648 with the
// thread-safe traits). Instead both tiers hold a `dyn_policy` (one virtual
// call per policy hook), so two cache types serve every pair of names:
// `tiered_cache<dyn_policy, dyn_policy>` and its thread-safe twin. The
// cache's own work (lookup, allocation, sheltering, the plan) stays
// statically compiled; bench/python measures the whole path per block.
#include <mutex>

#include <kvpolicy/cache/tiered_cache.hpp>

#include "bindings.hpp"
#include "dyn_policy.hpp"

namespace kvpolicy::python {

namespace {


nb::dict plan_dict(const swap_plan& p) {
    const std::size_t n = p.transfers.size();
    std::vector<std::uint8_t> from(n), to(n), exchange(n);
    std::vector<std::uint32_t> src(n), dst(n);
    for (std::size_t i = 0; i < n; ++i) {
        const block_transfer& t = p.transfers[i];
        from[i] = static_cast<std::uint8_t>(t.from);
        to[i] = static_cast<std::uint8_t>(t.to);
        src[i] = t.src.value;
        dst[i] = t.dst.value;
        exchange[i] = t.exchange ? 1 : 0;
    }
    std::vector<std::uint64_t> drop_keys, drop_sessions;
    for (const dropped_item& d : p.drops) {
        drop_keys.push_back(d.key);
        drop_sessions.push_back(d.owner.value);
    }
    std::vector<std::uint64_t> rs, rb, re;
    for (const recovery_range& r : p.recovery) {
        rs.push_back(r.session.value);
        rb.push_back(r.token_begin);
        re.push_back(r.token_end);
    }
    nb::dict d;
    d["step"] = p.step;
    d["transfer_from"] = to_numpy(std::move(from));  // tier: 0 gpu, 1 cpu
    d["transfer_src"] = to_numpy(std::move(src));
    d["transfer_to"] = to_numpy(std::move(to));
    d["transfer_dst"] = to_numpy(std::move(dst));
    d["transfer_exchange"] = to_numpy(std::move(exchange));
    d["swap_outs"] = p.swap_outs();
    d["swap_ins"] = p.swap_ins();
    d["exchanges"] = p.exchanges();
    d["dropped_keys"] = to_numpy(std::move(drop_keys));
    d["dropped_sessions"] = to_numpy(std::move(drop_sessions));
    d["recovery_session"] = to_numpy(std::move(rs));
    d["recovery_token_begin"] = to_numpy(std::move(rb));
    d["recovery_token_end"] = to_numpy(std::move(re));
    return d;
}

nb::dict tier_dict(const tier_metrics& t) {
    nb::dict d;
    d["hit_blocks"] = t.hit_blocks;
    d["hit_tokens"] = t.hit_tokens;
    d["evictions"] = t.evictions;
    d["capacity"] = t.capacity;
    d["used"] = t.used;
    return d;
}

nb::dict metrics_dict(const cache_metrics& m) {
    nb::dict d;
    d["gpu"] = tier_dict(m.gpu);
    d["cpu"] = tier_dict(m.cpu);
    d["requests"] = m.requests;
    d["lookup_blocks"] = m.lookup_blocks;
    d["miss_blocks"] = m.miss_blocks;
    d["miss_tokens"] = m.miss_tokens;
    d["swap_in_items"] = m.swap_in_items;
    d["swap_in_bytes"] = m.swap_in_bytes;
    d["swap_out_items"] = m.swap_out_items;
    d["swap_out_bytes"] = m.swap_out_bytes;
    d["dropped_items"] = m.dropped_items;
    d["failed_transfers"] = m.failed_transfers;
    d["recompute_items"] = m.recompute_items;
    d["dropped_tokens"] = m.dropped_tokens;
    d["recomputed_blocks"] = m.recomputed_blocks;
    d["recomputed_tokens"] = m.recomputed_tokens;
    d["re_prefill_rate"] = m.re_prefill_rate;
    d["fairness"] = m.fairness;
    d["eviction_latency_samples"] = m.eviction_latency.samples;
    d["eviction_latency_total_ns"] = m.eviction_latency.total_ns;
    return d;
}

/// One cache type behind one virtual call per call.
struct any_cache {
    virtual ~any_cache() = default;
    virtual prefix_match lookup(std::span<const block_hash>) const = 0;
    virtual void begin_step() = 0;
    virtual admission admit(session_id, std::span<const block_hash>) = 0;
    virtual const swap_plan& end_step() = 0;
    virtual std::vector<block_id> held_by(session_id) const = 0;
    virtual std::size_t release(session_id, std::uint64_t output_tokens, timestamp expected_return) = 0;
    virtual std::size_t free_session(session_id, bool) = 0;
    virtual void enqueue(std::uint64_t, session_id, std::span<const block_hash>) = 0;
    virtual session_id dequeue(std::uint64_t) = 0;
    virtual std::size_t queued_requests() const = 0;
    virtual transfer_report complete_transfers(const swap_plan&, std::span<const transfer_status>) = 0;
    virtual cache_metrics metrics() const = 0;
    virtual item_state where(block_hash, std::uint32_t) const = 0;
    virtual void pin(block_hash) = 0;
    virtual void unpin(block_hash) = 0;
    virtual std::string check_invariants() const = 0;
    virtual bool in_step() const = 0;
    virtual void set_time(timestamp) = 0;
    virtual timestamp time() = 0;
};

template <class Traits>
struct cache_model final : any_cache {
    tiered_cache<dyn_policy, dyn_policy, Traits> c;
    cache_model(const cache_config& cfg, const dyn_policy::config_type& g, const dyn_policy::config_type& p)
        : c(cfg, g, p) {}
    prefix_match lookup(std::span<const block_hash> h) const override { return c.lookup(h); }
    void begin_step() override { c.begin_step(); }
    admission admit(session_id s, std::span<const block_hash> h) override { return c.admit(s, h); }
    const swap_plan& end_step() override { return c.end_step(); }
    std::vector<block_id> held_by(session_id s) const override { return c.held_by(s); }
    std::size_t release(session_id s, std::uint64_t output_tokens, timestamp expected_return) override {
        return c.release(s, output_tokens, expected_return);
    }
    std::size_t free_session(session_id s, bool f) override { return c.free_session(s, f); }
    void enqueue(std::uint64_t r, session_id s, std::span<const block_hash> h) override { c.enqueue(r, s, h); }
    session_id dequeue(std::uint64_t r) override { return c.dequeue(r); }
    std::size_t queued_requests() const override { return c.queued_requests(); }
    transfer_report complete_transfers(const swap_plan& p, std::span<const transfer_status> st) override {
        return c.complete_transfers(p, st);
    }
    cache_metrics metrics() const override { return c.metrics(); }
    item_state where(block_hash h, std::uint32_t l) const override { return c.where(h, l); }
    void pin(block_hash h) override { c.pin(h); }
    void unpin(block_hash h) override { c.unpin(h); }
    std::string check_invariants() const override { return c.check_invariants(); }
    bool in_step() const override { return c.in_step(); }
    void set_time(timestamp t) override { c.clock().set(t); }
    timestamp time() override { return c.clock().now(); }
};

class cache_handle {
public:
    cache_handle(std::size_t gpu_blocks, std::size_t cpu_blocks, const std::string& gpu_policy,
                 const std::string& cpu_policy, bool inclusive, std::uint32_t block_size, std::uint32_t num_layers,
                 bool per_layer, bool verify_chain, bool thread_safe, std::size_t item_bytes,
                 const nb::dict& gpu_options, const nb::dict& cpu_options)
        : thread_safe_(thread_safe) {
        const cache_config cfg{.gpu_capacity = gpu_blocks,
                               .cpu_capacity = cpu_blocks,
                               .block_size = block_size,
                               .num_layers = num_layers,
                               .items = per_layer ? granularity::per_layer : granularity::whole_block,
                               .item_bytes = item_bytes,
                               .inclusive = inclusive,
                               .verify_chain = verify_chain};
        const dyn_policy::config_type g{gpu_policy, options_from(gpu_options, gpu_policy.c_str())};
        const dyn_policy::config_type c{cpu_policy, options_from(cpu_options, cpu_policy.c_str())};
        if (thread_safe) impl_ = std::make_unique<cache_model<thread_safe_traits>>(cfg, g, c);
        else impl_ = std::make_unique<cache_model<default_cache_traits>>(cfg, g, c);
        gpu_policy_ = gpu_policy;
        cpu_policy_ = cpu_policy;
    }

    nb::dict lookup(nb::handle hashes) const {
        nb::object keep;
        const auto h = as_span<std::uint64_t>(hashes, "lookup: block_hashes", keep);
        const prefix_match m = unlocked([&] { return impl_->lookup(h); });
        nb::dict d;
        d["run"] = m.run;
        d["gpu_blocks"] = m.gpu_blocks;
        d["cpu_blocks"] = m.cpu_blocks;
        return d;
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
        const bool own_step = !impl_->in_step();
        if (now) impl_->set_time(*now);
        admission a;
        std::vector<block_id> held;
        unlocked([&] {
            if (own_step) impl_->begin_step();
            try {
                a = impl_->admit(session_id{session}, h);
            } catch (...) {
                if (own_step) remember(impl_->end_step());  // an empty step: nothing was admitted
                throw;
            }
            held = impl_->held_by(session_id{session});
        });
        nb::dict d = own_step ? end_step() : nb::dict();
        d["hit_blocks"] = a.match.run;
        d["gpu_hits"] = a.match.gpu_blocks;
        d["cpu_hits"] = a.match.cpu_blocks;
        d["computed_blocks"] = a.computed_blocks;
        d["gpu_evictions"] = a.gpu_evictions;
        std::vector<std::uint32_t> blocks(held.size());
        for (std::size_t i = 0; i < held.size(); ++i) blocks[i] = held[i].value;
        d["blocks"] = to_numpy(std::move(blocks));
        return d;
    }

    nb::dict end_step() {
        swap_plan p = unlocked([&] { return remember(impl_->end_step()); });
        return plan_dict(p);
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
        const transfer_report r = unlocked([&] {
            swap_plan plan;
            {
                std::scoped_lock lock(plan_mutex_);
                plan = last_plan_;
            }
            return impl_->complete_transfers(plan, {reinterpret_cast<const transfer_status*>(st.data()), st.size()});
        });
        nb::dict d;
        d["failed"] = r.failed;
        std::vector<std::uint64_t> keys, rk, rs;
        for (const dropped_item& x : r.drops) keys.push_back(x.key);
        for (const recompute_item& x : r.recompute) {
            rk.push_back(x.key);
            rs.push_back(x.session.value);
        }
        d["dropped_keys"] = to_numpy(std::move(keys));
        d["recompute_keys"] = to_numpy(std::move(rk));
        d["recompute_sessions"] = to_numpy(std::move(rs));
        return d;
    }

    nb::dict metrics() const { return metrics_dict(unlocked([&] { return impl_->metrics(); })); }
    std::string to_prometheus(const std::string& prefix) const {
        return unlocked([&] { return impl_->metrics(); }).to_prometheus(prefix);
    }
    std::string where(std::uint64_t h, std::uint32_t layer) const {
        switch (impl_->where(h, layer)) {
            case item_state::in_gpu: return "gpu";
            case item_state::in_cpu: return "cpu";
            case item_state::in_remote: return "remote";
            case item_state::dropped: return "dropped";
            case item_state::free: return "free";
        }
        return "?";
    }
    void pin(std::uint64_t h) { impl_->pin(h); }
    void unpin(std::uint64_t h) { impl_->unpin(h); }
    std::string check_invariants() const { return unlocked([&] { return impl_->check_invariants(); }); }
    [[nodiscard]] bool thread_safe() const { return thread_safe_; }
    [[nodiscard]] const std::string& gpu_policy() const { return gpu_policy_; }
    [[nodiscard]] const std::string& cpu_policy() const { return cpu_policy_; }

private:
    // The thread-safe cache locks itself: other Python threads run while it works.
    template <class F>
    auto unlocked(F f) const -> decltype(f()) {
        if (!thread_safe_) return f();
        nb::gil_scoped_release release;
        return f();
    }
    const swap_plan& remember(const swap_plan& p) {
        std::scoped_lock lock(plan_mutex_);
        last_plan_ = p;
        return p;
    }

    std::unique_ptr<any_cache> impl_;
    bool thread_safe_;
    std::string gpu_policy_, cpu_policy_;
    mutable std::mutex plan_mutex_;
    swap_plan last_plan_;  // what complete_transfers reports on
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
                      std::uint32_t, bool, bool, bool, std::size_t, const nb::dict&, const nb::dict&>(),
             nb::arg("gpu_blocks"), nb::arg("cpu_blocks") = 0, nb::arg("gpu_policy") = "lru",
             nb::arg("cpu_policy") = "lru", nb::arg("inclusive") = false, nb::arg("block_size") = 16,
             nb::arg("num_layers") = 1, nb::arg("per_layer") = false, nb::arg("verify_chain") = true,
             nb::arg("thread_safe") = false, nb::arg("item_bytes") = 0, nb::arg("gpu_policy_options") = nb::dict(),
             nb::arg("cpu_policy_options") = nb::dict())
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
        .def("release", &c::release, nb::arg("session"), nb::arg("output_tokens") = 0,
             nb::arg("expected_return") = 0,
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
             "Reports the last plan's copies (0 done, 1 failed, one per transfer, in order).")
        .def("metrics", &c::metrics, "The cache's counters as a dict.")
        .def("to_prometheus", &c::to_prometheus, nb::arg("prefix") = "kvpolicy", "Prometheus text exposition.")
        .def("where", &c::where, nb::arg("block_hash"), nb::arg("layer") = 0, "'gpu', 'cpu' or 'free'.")
        .def("pin", &c::pin, nb::arg("block_hash"))
        .def("unpin", &c::unpin, nb::arg("block_hash"))
        .def("check_invariants", &c::check_invariants, "'' when every invariant holds, else what is broken.")
        .def_prop_ro("thread_safe", &c::thread_safe)
        .def_prop_ro("gpu_policy", &c::gpu_policy)
        .def_prop_ro("cpu_policy", &c::cpu_policy);
}

}  // namespace kvpolicy::python
