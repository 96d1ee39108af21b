// dyn_policy: an eviction policy chosen by name at run time, behind one
// virtual call.
//
// The name picks the concrete policy once (visit_by_name over
// eviction_policies, the registry); then every hook crosses one virtual call
// into it. Where runtime_choice<Ps...> holds one of a few policies of one
// shape in a variant, dyn_policy holds any registered policy, whatever its
// order and whatever it hears: a policy that does not hear session ends or
// the waiting queue ignores those hooks (hears_queue() says which). Two faces:
// - per item, it models `eviction_policy` itself, so one
//   `tiered_cache<dyn_policy, dyn_policy>` serves every (gpu, cpu) pair of
//   names: 2 cache types compiled (plain and thread-safe) instead of
//   29 x 29 x 2, at the price of one indirect call per policy hook (a few ns
//   beside the cache's ~80 ns per block: bench/python measures the whole
//   path). kvpolicy's Python package is built so.
// - per batch (`insert_batch`, ...), the loop runs inside the concrete
//   policy: one virtual call per batch, not per item.
// It decides exactly as the policy it holds (tests/eviction_dyn_policy.cpp).
// `holding<P>(config)` builds P from a whole config of its own, for what no
// option names (a replay's cost model): one compiled replay then serves
// every policy (kvpolicy-sim's instances and offload modes).
// Building one instantiates every policy of its list (29 for the registry's):
// build dyn_policies in few translation units, or define
// KVPOLICY_DYN_POLICY_EXTERN and compile the registry's once (at the end).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/eviction/registry.hpp"

namespace kvpolicy {

/// The per-item fields of a batch call; empty spans mean the default for
/// every item (key = id, default priority, next use unknown).
struct item_batch {
    std::span<const item_id> ids{};
    std::span<const std::uint64_t> keys{};
    std::span<const std::int32_t> priorities{};
    std::span<const std::uint64_t> next_use{};
    timestamp now = 0;

    [[nodiscard]] access_context context(std::size_t i) const noexcept {
        access_context c;
        c.now = now;
        c.key = keys.empty() ? ids[i].value : keys[i];  // miss_batch: keys only
        if (!priorities.empty()) c.priority = priorities[i];
        if (!next_use.empty()) c.next_use = next_use[i];
        return c;
    }
};

/// Any policy of `Policies` (a type_list of eviction policies; an engine
/// offering fewer compiles fewer), chosen by name. Its members instantiate
/// the policies only where a basic_dyn_policy is built.
template <class Policies>
class basic_dyn_policy {
    struct base;  // the concrete policy, behind one virtual call per hook

public:
    struct config_type {
        std::string policy = "lru";
        std::vector<option_value> options{};
        /// Set by `holding<P>`: policy P built from a whole config_type of its
        /// own, for what no option can say (a replay's cost model, a
        /// pointer to its expected returns); `policy` is then P's name and
        /// `options` unused.
        std::function<std::unique_ptr<base>(std::size_t capacity)> make{};
    };

    /// The config of a dyn_policy holding `P` built with `config` (P need not
    /// be one of `Policies`). A replay that runs many policies through one
    /// compiled cache type passes each one's own config so.
    template <eviction_policy P>
    [[nodiscard]] static config_type holding(const typename P::config_type& config) {
        return {.policy = std::string(P::name),
                .options = {},
                .make = [config](std::size_t capacity) -> std::unique_ptr<base> {
                    return std::make_unique<model<P>>(capacity, config);
                }};
    }

    static constexpr std::string_view name = "dynamic";
    // The cache reads no order; time-varying policies choose their victims
    // inside pop_victim(s) either way.
    static constexpr eviction_order order = eviction_order::static_between_accesses;

    /// Throws: unknown_name_error listing every policy; config_error for a
    /// bad capacity or option, or for a name given to one over no named
    /// policy (`basic_dyn_policy<type_list<>>`).
    basic_dyn_policy(std::size_t capacity, const config_type& config) : impl_(made(capacity, config)) {}

    // Per item: what tiered_cache calls.
    void on_miss(const access_context& c) { impl_->on_miss(c); }
    void on_insert(item_id id, const access_context& c) { impl_->on_insert(id, c); }
    void on_access(item_id id, const access_context& c) { impl_->on_access(id, c); }
    void on_hold(item_id id) { impl_->on_hold(id); }
    void on_release(item_id id, const access_context& c) { impl_->on_release(id, c); }
    void on_erase(item_id id) { impl_->on_erase(id); }
    /// Heard by the concrete policies that hear session ends; a no-op for the rest.
    void on_session_end(session_id s, timestamp now) { impl_->on_session_end(s, now); }
    /// Heard by the concrete policies that hear request ends (predicted_return); a no-op for the rest.
    void on_request_end(session_id s, timestamp now) { impl_->on_request_end(s, now); }
    /// Heard by the concrete policies that hear the waiting queue (queue_aware_*); a no-op for the rest.
    void on_queued(item_id id, std::uint64_t position) { impl_->on_queued(id, position); }
    void on_unqueued(item_id id, const access_context& c) { impl_->on_unqueued(id, c); }
    std::optional<item_id> pop_victim(timestamp now) { return impl_->pop_victim(now); }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) { return impl_->pop_victims(out, now); }
    [[nodiscard]] std::size_t capacity() const { return impl_->capacity(); }
    [[nodiscard]] std::size_t size() const { return impl_->size(); }
    [[nodiscard]] std::size_t evictable_size() const { return impl_->evictable_size(); }
    [[nodiscard]] bool contains(item_id id) const { return impl_->contains(id); }
    [[nodiscard]] const policy_counters& counters() const { return impl_->counters(); }

    // Per batch: one virtual call, the loop inside. Preconditions as the
    // per-item hooks', for every item (the caller validates).
    void miss_batch(const item_batch& b) { impl_->miss_batch(b); }
    void insert_batch(const item_batch& b) { impl_->insert_batch(b); }
    void access_batch(const item_batch& b) { impl_->access_batch(b); }
    void hold_batch(std::span<const item_id> ids) { impl_->hold_batch(ids); }
    void release_batch(const item_batch& b) { impl_->release_batch(b); }
    void erase_batch(std::span<const item_id> ids) { impl_->erase_batch(ids); }

    /// The concrete policy's registered name.
    [[nodiscard]] std::string_view policy_name() const { return impl_->policy_name(); }
    /// Whether the concrete policy hears the waiting queue (on_queued above
    /// reaches it): the caller may skip the queue's bookkeeping otherwise.
    [[nodiscard]] bool hears_queue() const { return impl_->hears_queue(); }
    /// The concrete policy's count where it ranks new items
    /// (ranks_new_items), else `limit`; ranks_new() says which.
    [[nodiscard]] std::size_t evictable_before(const access_context& c, std::size_t limit) const {
        return impl_->evictable_before(c, limit);
    }
    [[nodiscard]] bool ranks_new() const { return impl_->ranks_new(); }

private:
    struct base {
        virtual ~base() = default;
        virtual void on_miss(const access_context&) = 0;
        virtual void on_insert(item_id, const access_context&) = 0;
        virtual void on_access(item_id, const access_context&) = 0;
        virtual void on_hold(item_id) = 0;
        virtual void on_release(item_id, const access_context&) = 0;
        virtual void on_erase(item_id) = 0;
        virtual void on_session_end(session_id, timestamp) = 0;
        virtual void on_request_end(session_id, timestamp) = 0;
        virtual void on_queued(item_id, std::uint64_t) = 0;
        virtual void on_unqueued(item_id, const access_context&) = 0;
        virtual std::optional<item_id> pop_victim(timestamp) = 0;
        virtual std::size_t pop_victims(std::span<item_id>, timestamp) = 0;
        [[nodiscard]] virtual std::size_t capacity() const = 0;
        [[nodiscard]] virtual std::size_t size() const = 0;
        [[nodiscard]] virtual std::size_t evictable_size() const = 0;
        [[nodiscard]] virtual bool contains(item_id) const = 0;
        [[nodiscard]] virtual const policy_counters& counters() const = 0;
        virtual void miss_batch(const item_batch&) = 0;
        virtual void insert_batch(const item_batch&) = 0;
        virtual void access_batch(const item_batch&) = 0;
        virtual void hold_batch(std::span<const item_id>) = 0;
        virtual void release_batch(const item_batch&) = 0;
        virtual void erase_batch(std::span<const item_id>) = 0;
        [[nodiscard]] virtual std::string_view policy_name() const = 0;
        [[nodiscard]] virtual bool hears_queue() const = 0;
        [[nodiscard]] virtual std::size_t evictable_before(const access_context&, std::size_t) const = 0;
        [[nodiscard]] virtual bool ranks_new() const = 0;
    };

    // Out of the class and not inline, so that an explicit instantiation
    // declaration (KVPOLICY_DYN_POLICY_EXTERN, below) keeps the 29 models it
    // builds out of every translation unit but the one that instantiates them.
    static std::unique_ptr<base> made(std::size_t capacity, const config_type& config);

    template <class P>
    struct model final : base {
        P p;
        model(std::size_t capacity, const typename P::config_type& c) : p(capacity, c) {}
        void on_miss(const access_context& c) override { p.on_miss(c); }
        void on_insert(item_id id, const access_context& c) override { p.on_insert(id, c); }
        void on_access(item_id id, const access_context& c) override { p.on_access(id, c); }
        void on_hold(item_id id) override { p.on_hold(id); }
        void on_release(item_id id, const access_context& c) override { p.on_release(id, c); }
        void on_erase(item_id id) override { p.on_erase(id); }
        void on_session_end(session_id s, timestamp now) override {
            if constexpr (hears_session_ends<P>) p.on_session_end(s, now);
        }
        void on_request_end(session_id s, timestamp now) override {
            if constexpr (hears_request_ends<P>) p.on_request_end(s, now);
        }
        void on_queued(item_id id, std::uint64_t position) override {
            if constexpr (hears_waiting_queue<P>) p.on_queued(id, position);
        }
        void on_unqueued(item_id id, const access_context& c) override {
            if constexpr (hears_waiting_queue<P>) p.on_unqueued(id, c);
        }
        std::optional<item_id> pop_victim(timestamp now) override { return p.pop_victim(now); }
        std::size_t pop_victims(std::span<item_id> out, timestamp now) override { return p.pop_victims(out, now); }
        [[nodiscard]] std::size_t capacity() const override { return p.capacity(); }
        [[nodiscard]] std::size_t size() const override { return p.size(); }
        [[nodiscard]] std::size_t evictable_size() const override { return p.evictable_size(); }
        [[nodiscard]] bool contains(item_id id) const override { return p.contains(id); }
        [[nodiscard]] const policy_counters& counters() const override { return p.counters(); }
        void miss_batch(const item_batch& b) override {
            for (std::size_t i = 0; i < b.keys.size(); ++i) p.on_miss(b.context(i));
        }
        void insert_batch(const item_batch& b) override {
            for (std::size_t i = 0; i < b.ids.size(); ++i) p.on_insert(b.ids[i], b.context(i));
        }
        void access_batch(const item_batch& b) override {
            for (std::size_t i = 0; i < b.ids.size(); ++i) p.on_access(b.ids[i], b.context(i));
        }
        void hold_batch(std::span<const item_id> ids) override {
            for (item_id id : ids) p.on_hold(id);
        }
        void release_batch(const item_batch& b) override {
            for (std::size_t i = 0; i < b.ids.size(); ++i) p.on_release(b.ids[i], b.context(i));
        }
        void erase_batch(std::span<const item_id> ids) override {
            for (item_id id : ids) p.on_erase(id);
        }
        [[nodiscard]] std::string_view policy_name() const override { return P::name; }
        [[nodiscard]] bool hears_queue() const override { return hears_waiting_queue<P>; }
        [[nodiscard]] std::size_t evictable_before(const access_context& c, std::size_t limit) const override {
            if constexpr (ranks_new_items<P>)
                return p.evictable_before(c, limit);
            else
                return limit;
        }
        [[nodiscard]] bool ranks_new() const override { return ranks_new_items<P>; }
    };

    std::unique_ptr<base> impl_;
};

template <class Policies>
auto basic_dyn_policy<Policies>::made(std::size_t capacity, const config_type& config) -> std::unique_ptr<base> {
    if (config.make) return config.make(capacity);
    if constexpr (Policies::size == 0) {  // one that only holds: nothing compiled per name
        throw config_error("dyn_policy over no named policy: '" + config.policy +
                           "' given by name; build its config with holding<P>(config)");
    } else {
        return visit_by_name<Policies>(
            config.policy,
            [&]<class P>() -> std::unique_ptr<base> {
                return std::make_unique<model<P>>(capacity, make_config<P>(config.options));
            },
            "eviction policy");
    }
}

/// Any registered policy (eviction/registry.hpp), chosen by name.
using dyn_policy = basic_dyn_policy<eviction_policies>;
// Building a dyn_policy compiles every registered policy (about 27 CPU s at
// -O3, 48 under ASan, per translation unit). A program that builds them in
// several translation units may compile them once: define
// KVPOLICY_DYN_POLICY_EXTERN in every one, and in exactly one .cpp write
//     template class kvpolicy::basic_dyn_policy<kvpolicy::eviction_policies>;
// (kvpolicy's tests and Python package do so: src/dyn_policy/).
#ifdef KVPOLICY_DYN_POLICY_EXTERN
extern template class basic_dyn_policy<eviction_policies>;
#endif

static_assert(eviction_policy<dyn_policy>);

}  // namespace kvpolicy
