// any_cache_policy: vLLM's cache-policy seam (0.21 and later's CachePolicy;
// cache_policy_core.hpp describes the calls) with the policy chosen by name
// at run time: vLLM's own orders, decided exactly (vllm_lru, vllm_arc:
// vllm_cache_policies), or any kvpolicy policy (cache_policy_core over
// basic_dyn_policy). Each call is one virtual call; a batch call (touch, a
// request's finish) walks its keys inside the concrete order. The engine's
// requests (arrive, schedule, preempt, finish) are checked by a
// request_lifecycle either way; only a policy that hears the waiting queue
// is told of it, so any other decides exactly as without one.
//
// Python's kvpolicy.vllm cache policies are this type behind the bindings
// (python/src/vllm_policy.cpp keeps vLLM's keys in Python dicts and hands
// over dense slots); tests/engine_any_cache_policy.cpp checks that each
// kind decides exactly as the concrete order. make() instantiates every
// policy of its list: call it from one translation unit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/engine/cache_policy_core.hpp"
#include "kvpolicy/engine/request_lifecycle.hpp"
#include "kvpolicy/engine/vllm_orders.hpp"
#include "kvpolicy/eviction/dyn_policy.hpp"

namespace kvpolicy::engine {

/// One walk of a call's keys: each key's slot (no_index if absent) and
/// 64-bit key, and for finish its flags.
struct key_walk {
    std::vector<std::uint32_t> slots;
    std::vector<std::uint64_t> keys;
    std::vector<std::uint8_t> flags;  ///< finish: 1 inserted only, 2 reused
};

/// A connector's event for one request (request_lifecycle.hpp).
enum class request_event : std::uint8_t { arrive, schedule, preempt, finish };

/// The seam's calls over dense slots (0 .. slots-1): as cache_policy_core's,
/// vllm_lru's and vllm_arc's, each kind taking what it reads (vllm_lru the
/// key's bytes and the request's rank and positions; vllm_arc the 64-bit
/// key; kvpolicy's policies the context).
class any_cache_policy {
public:
    virtual ~any_cache_policy() = default;
    virtual void insert(std::uint32_t id, std::string_view key_bytes, std::uint64_t key,
                        std::optional<std::int64_t> position, std::int64_t request_rank, int ref_cnt,
                        const access_context& ctx) = 0;
    virtual void remove(std::uint32_t id) = 0;
    virtual void touch(const key_walk& w, const access_context& ctx) = 0;
    virtual void store_miss(const key_walk& w, const access_context& ctx) = 0;
    virtual void request_access(std::span<const std::uint32_t> ids, std::span<const std::int64_t> positions,
                                std::int64_t request_rank) = 0;
    virtual void finish(const key_walk& w, const access_context& ctx) = 0;
    virtual void end_session(const access_context&) {}
    virtual void end_request(const access_context&) {}
    /// A request's end with its hints: finish, then, for a request of a
    /// session (ctx.session nonzero), its end, and the session's when
    /// `session_end` (the session will not return: expected_return never).
    /// Otherwise `expected_return_ms`, when given, is when the session is
    /// expected back, that many milliseconds after ctx.now.
    void finish_request(const key_walk& w, access_context ctx, std::optional<double> expected_return_ms,
                        bool session_end) {
        if (session_end)
            ctx.expected_return = never;
        else if (expected_return_ms)
            ctx.expected_return = ctx.now + static_cast<timestamp>(*expected_return_ms);
        finish(w, ctx);
        if (ctx.session.value == 0) return;
        end_request(ctx);
        if (session_end) end_session(ctx);
    }
    virtual void mark_evictable(std::uint32_t id, const access_context& ctx) = 0;
    virtual void mark_non_evictable(std::uint32_t id) = 0;
    /// `n` victims, none of `protected_ids` (slots, absent or repeated
    /// ones allowed); or nothing, changing nothing, if fewer can go.
    virtual std::optional<std::vector<std::uint32_t>> evict(std::size_t n, std::span<const std::uint32_t> protected_ids,
                                                            const access_context& ctx) = 0;
    virtual void clear() = 0;
    virtual std::int64_t new_request_rank() { return 0; }
    /// The engine's requests as a connector sees them (request_lifecycle.hpp).
    virtual lifecycle_result on_request(request_event e, std::string_view id, session_id s,
                                        std::span<const std::uint64_t> keys, const access_context& ctx) = 0;
    [[nodiscard]] virtual std::size_t queued_requests() const { return 0; }
    [[nodiscard]] virtual bool hears_queue() const { return false; }
    /// How many of `fresh` (keys not stored, head first) a store should
    /// take, `free` slots free and `shielded` stored keys in the same offer
    /// (cache_policy_core::admissible); all of them unless the policy ranks
    /// new items (ranks_new()).
    [[nodiscard]] virtual std::size_t admissible(std::span<const std::uint64_t> fresh, std::size_t /*free*/,
                                                 std::size_t /*shielded*/, const access_context&) const {
        return fresh.size();
    }
    [[nodiscard]] virtual bool ranks_new() const { return false; }
    /// Where to cut a store's offer `w` (head first: each key's slot, or
    /// no_index for a key not stored, and its key), `free` slots free, so
    /// that only what the policy admits is stored (admissible): the index of
    /// the first new key declined, or the offer's length.
    [[nodiscard]] std::size_t admitted_prefix(const key_walk& w, std::size_t free, const access_context& ctx) const {
        std::vector<std::uint64_t> fresh;
        std::vector<std::size_t> at;
        for (std::size_t i = 0; i < w.slots.size(); ++i)
            if (w.slots[i] == no_index) {
                fresh.push_back(w.keys[i]);
                at.push_back(i);
            }
        const std::size_t n = admissible(fresh, free, w.slots.size() - fresh.size(), ctx);
        return n < fresh.size() ? at[n] : w.slots.size();
    }
    /// A queue-hearing policy's requests tell it only their keys past a GPU
    /// prefix cache of `gpu_blocks` keys (request_lifecycle's
    /// forecast_front_cache; 0: every key). No effect on any other policy.
    virtual void forecast_front_cache(std::size_t /*gpu_blocks*/) {}
    [[nodiscard]] virtual std::size_t front_cache_blocks() const { return 0; }
    /// Where request `id` is in its lifecycle: waiting, running, or unknown.
    [[nodiscard]] virtual std::optional<engine::request_state> request_state(std::string_view id) const = 0;
    virtual bool orders_by_request() const { return false; }  // vllm_lru: ranks by request and position
    virtual const vllm_arc* arc() const { return nullptr; }
    virtual vllm_arc* arc() { return nullptr; }
    /// vllm_arc's lists and target, for inspection and vLLM's tests.
    /// Throws: usage_error for another policy.
    [[nodiscard]] const vllm_arc& arc_order() const {
        if (arc() == nullptr) throw usage_error("T1, T2, B1, B2 and the target exist only in policy vllm_arc");
        return *arc();
    }
    /// Sets vllm_arc's target_t1_size, as vLLM's tests do. Throws:
    /// usage_error, changing nothing, for another policy or a target outside
    /// 0 .. `capacity` (the cache's chunks).
    void set_arc_target(double t, std::size_t capacity) {
        vllm_arc* a = arc();
        if (a == nullptr) throw usage_error("target_t1_size exists only in policy vllm_arc");
        if (!(t >= 0.0 && t <= static_cast<double>(capacity)))
            throw usage_error("target_t1_size: " + std::to_string(t) +
                              " is outside 0 .. cache_capacity=" + std::to_string(capacity));
        a->set_target_t1_size(t);
    }

    /// `policy`: vllm_lru or vllm_arc (vllm_cache_policies: vLLM's own, which
    /// take no options) or a name of `Policies` (cache_policy_core over
    /// basic_dyn_policy<Policies>), over `slots` slots. Throws:
    /// unknown_name_error listing the policies; config_error for a bad
    /// capacity or option.
    template <class Policies = eviction_policies>
    static std::unique_ptr<any_cache_policy> make(const std::string& policy, std::size_t slots,
                                                  std::span<const option_value> options = {});
};

namespace detail {

template <class Life>
lifecycle_result dispatch(Life& life, request_event e, std::string_view id, session_id s,
                          std::span<const std::uint64_t> keys, const access_context& ctx) {
    switch (e) {
        case request_event::arrive:
            return life.arrive(id, s, keys);
        case request_event::schedule:
            return life.schedule(id, ctx);
        case request_event::preempt:
            return life.preempt(id, keys);
        case request_event::finish:
            return life.finish(id, ctx);
    }
    return {};
}

/// vLLM's own orders hear no queue: their requests are still checked (the
/// same reasons for an unknown or repeated id), their decisions untouched.
struct no_queue {
    void enqueue(std::uint64_t, session_id, std::span<const std::uint64_t>) noexcept {}
    void dequeue(std::uint64_t, const access_context&) noexcept {}
};

/// What vllm_lru and vllm_arc share behind the seam: pins, the protected
/// scratch as eviction's predicate, clear.
template <class Order>
class vllm_order_core : public any_cache_policy {
public:
    explicit vllm_order_core(std::size_t n) : p_(n), protected_(n, 0) {}
    void mark_evictable(std::uint32_t id, const access_context&) override { p_.mark_evictable(id); }
    void mark_non_evictable(std::uint32_t id) override { p_.mark_non_evictable(id); }
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, std::span<const std::uint32_t> protected_ids,
                                                    const access_context&) override {
        const auto mark = [&](std::uint8_t v) {
            for (std::uint32_t id : protected_ids)
                if (id < protected_.size()) protected_[id] = v;
        };
        mark(1);
        try {
            auto out = p_.evict(n, [&](std::uint32_t id) { return protected_[id] != 0; });
            mark(0);
            return out;
        } catch (...) {
            mark(0);
            throw;
        }
    }
    // A cache reset drops chunks; the engine's requests are still there.
    void clear() override { p_.clear(); }
    lifecycle_result on_request(request_event e, std::string_view id, session_id s, std::span<const std::uint64_t> keys,
                                const access_context& ctx) override {
        return dispatch(life_, e, id, s, keys, ctx);
    }
    [[nodiscard]] std::optional<engine::request_state> request_state(std::string_view id) const override {
        return life_.state(id);
    }

protected:
    Order p_;
    std::vector<std::uint8_t> protected_;  // [slot] scratch of evict, all 0 between calls
    no_queue queue_;
    request_lifecycle<no_queue> life_{queue_};
};

class lru_core final : public vllm_order_core<vllm_lru> {
public:
    using vllm_order_core::vllm_order_core;
    void insert(std::uint32_t id, std::string_view bytes, std::uint64_t, std::optional<std::int64_t> position,
                std::int64_t request_rank, int ref_cnt, const access_context&) override {
        p_.insert(id, bytes, position, request_rank, ref_cnt == 0);
    }
    void remove(std::uint32_t id) override { p_.remove(id); }
    void touch(const key_walk& w, const access_context&) override { p_.refresh(w.slots); }
    void store_miss(const key_walk& w, const access_context& c) override { touch(w, c); }  // vLLM's default: a touch
    void request_access(std::span<const std::uint32_t> ids, std::span<const std::int64_t> positions,
                        std::int64_t request_rank) override {
        for (std::size_t i = 0; i < ids.size(); ++i)
            if (ids[i] != no_index) p_.raise(ids[i], request_rank, positions[i]);
    }
    void finish(const key_walk& w, const access_context&) override { p_.refresh(w.slots); }
    std::int64_t new_request_rank() override { return p_.new_request_rank(); }
    bool orders_by_request() const override { return true; }
};

class arc_core final : public vllm_order_core<vllm_arc> {
public:
    using vllm_order_core::vllm_order_core;
    void insert(std::uint32_t id, std::string_view, std::uint64_t key, std::optional<std::int64_t>, std::int64_t,
                int ref_cnt, const access_context&) override {
        p_.insert(id, key, ref_cnt >= 0, ref_cnt == 0);
    }
    void remove(std::uint32_t id) override { p_.remove(id); }
    void touch(const key_walk& w, const access_context&) override {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p_.touch(w.slots[i], w.keys[i]);
    }
    void store_miss(const key_walk& w, const access_context&) override {
        for (std::uint64_t k : w.keys) (void)p_.adapt_to_ghost(k);
    }
    void request_access(std::span<const std::uint32_t>, std::span<const std::int64_t>, std::int64_t) override {}
    void finish(const key_walk& w, const access_context&) override {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p_.finish(w.slots[i], w.flags[i] == 1, w.flags[i] == 2);
    }
    const vllm_arc* arc() const override { return &p_; }
    vllm_arc* arc() override { return &p_; }
};

/// Any kvpolicy policy of `Policies`: a store is its insert, a request's
/// reuse its hit (an insertion alone is not a second use).
template <class Policies>
class kvpolicy_core final : public any_cache_policy {
public:
    using policy_type = basic_dyn_policy<Policies>;
    kvpolicy_core(std::size_t n, const typename policy_type::config_type& c)
            : p_(n, c), config_(c), hears_(p_.policy().hears_queue()) {}
    void insert(std::uint32_t id, std::string_view, std::uint64_t, std::optional<std::int64_t>, std::int64_t,
                int ref_cnt, const access_context& ctx) override {
        p_.insert(id, ctx, ref_cnt == 0);
    }
    void remove(std::uint32_t id) override { p_.remove(id); }
    void touch(const key_walk& w, const access_context& ctx) override {
        for (std::uint32_t id : w.slots) p_.touch(id, ctx);
    }
    void store_miss(const key_walk&, const access_context&) override {}  // on_miss comes with the insert
    void request_access(std::span<const std::uint32_t>, std::span<const std::int64_t>, std::int64_t) override {}
    void finish(const key_walk& w, const access_context& ctx) override {
        for (std::size_t i = 0; i < w.slots.size(); ++i) p_.finish(w.slots[i], w.flags[i] == 2, ctx);
    }
    void end_session(const access_context& ctx) override { p_.end_session(ctx.session, ctx); }
    void end_request(const access_context& ctx) override { p_.end_request(ctx.session, ctx); }
    void mark_evictable(std::uint32_t id, const access_context& ctx) override { p_.mark_evictable(id, ctx); }
    void mark_non_evictable(std::uint32_t id) override { p_.mark_non_evictable(id); }
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, std::span<const std::uint32_t> protected_ids,
                                                    const access_context& ctx) override {
        return p_.evict(n, protected_ids, ctx);
    }
    // A cache reset drops chunks; the engine's requests, queued or
    // running, are still there (cache_policy_core::reset keeps the queue).
    void clear() override { p_.reset(config_); }
    // A policy that does not hear the queue gets no queue at all (the same
    // checks of the events, no bookkeeping): it decides as without one.
    lifecycle_result on_request(request_event e, std::string_view id, session_id s, std::span<const std::uint64_t> keys,
                                const access_context& ctx) override {
        return hears_ ? dispatch(life_, e, id, s, keys, ctx) : dispatch(unheard_, e, id, s, keys, ctx);
    }
    [[nodiscard]] std::optional<engine::request_state> request_state(std::string_view id) const override {
        return hears_ ? life_.state(id) : unheard_.state(id);
    }
    [[nodiscard]] std::size_t queued_requests() const override { return p_.queued_requests(); }
    [[nodiscard]] bool hears_queue() const override { return hears_; }
    [[nodiscard]] std::size_t admissible(std::span<const std::uint64_t> fresh, std::size_t free, std::size_t shielded,
                                         const access_context& ctx) const override {
        return p_.admissible(fresh, free, shielded, ctx);
    }
    [[nodiscard]] bool ranks_new() const override { return p_.policy().ranks_new(); }
    void forecast_front_cache(std::size_t gpu_blocks) override {
        if (hears_) life_.forecast_front_cache(gpu_blocks);
    }
    [[nodiscard]] std::size_t front_cache_blocks() const override { return life_.front_cache_blocks(); }

private:
    cache_policy_core<policy_type> p_;
    typename policy_type::config_type config_;
    bool hears_;
    request_lifecycle<cache_policy_core<policy_type>> life_{p_};
    no_queue no_queue_;
    request_lifecycle<no_queue> unheard_{no_queue_};
};

}  // namespace detail

template <class Policies>
std::unique_ptr<any_cache_policy> any_cache_policy::make(const std::string& policy, std::size_t slots,
                                                         std::span<const option_value> options) {
    if (has_name<vllm_cache_policies>(policy)) {
        if (!options.empty()) throw config_error(policy + ": takes no options (it is vLLM's own policy, exactly)");
        if (policy == vllm_lru::name) return std::make_unique<detail::lru_core>(slots);
        return std::make_unique<detail::arc_core>(slots);
    }
    return std::make_unique<detail::kvpolicy_core<Policies>>(
        slots, typename basic_dyn_policy<Policies>::config_type{policy, {options.begin(), options.end()}});
}

}  // namespace kvpolicy::engine
