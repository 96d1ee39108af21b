// any_tiered_cache: a tiered_cache whose policies and locking are chosen at
// run time (a flag, a config file, Python's kvpolicy.TieredCache).
//
// Both tiers hold a `dyn_policy` (eviction/dyn_policy.hpp: any registered
// policy by name, one virtual call per policy hook), so two cache types serve
// every pair of names: `tiered_cache<dyn_policy, dyn_policy>` with
// default_cache_traits or thread_safe_traits, instead of 29 x 29 x 2. The
// cache's own work (lookup, allocation, sheltering, the plan) stays
// statically compiled behind one virtual call per call. The remote tier's
// calls (admit_through, forget_identities: remote_tier.hpp) take any
// remote_directory through a remote_directory_ref. It decides exactly as the
// cache it holds (tests/cache_any_tiered_cache.cpp). make() compiles both
// caches where it is called: call it from one translation unit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/remote_tier.hpp"
#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/dyn_policy.hpp"

namespace kvpolicy {

/// Any remote_directory, by reference (one indirect call per question).
class remote_directory_ref {
public:
    template <remote_directory Store>
    remote_directory_ref(Store& store) noexcept  // NOLINT(google-explicit-constructor): a view, as std::span
            : store_(&store), ask_([](void* s, std::span<const std::uint64_t> keys) -> std::size_t {
                  return static_cast<Store*>(s)->present_prefix(keys);
              }) {}
    std::size_t present_prefix(std::span<const std::uint64_t> keys) { return ask_(store_, keys); }

private:
    void* store_;
    std::size_t (*ask_)(void*, std::span<const std::uint64_t>);
};
static_assert(remote_directory<remote_directory_ref>);

class any_tiered_cache {
public:
    virtual ~any_tiered_cache() = default;
    // tiered_cache's members (see there).
    [[nodiscard]] virtual prefix_match lookup(std::span<const block_hash>) const = 0;
    virtual void begin_step() = 0;
    virtual admission admit(session_id, std::span<const block_hash>) = 0;
    virtual const swap_plan& end_step() = 0;
    [[nodiscard]] virtual std::vector<block_id> held_by(session_id) const = 0;
    virtual std::size_t release(session_id, std::uint64_t output_tokens, timestamp expected_return) = 0;
    virtual std::size_t free_session(session_id, bool forget_blocks) = 0;
    virtual void enqueue(std::uint64_t request, session_id, std::span<const block_hash>) = 0;
    virtual session_id dequeue(std::uint64_t request) = 0;
    [[nodiscard]] virtual std::size_t queued_requests() const = 0;
    virtual transfer_report complete_transfers(const swap_plan&, std::span<const transfer_status>) = 0;
    [[nodiscard]] virtual cache_metrics metrics() const = 0;
    [[nodiscard]] virtual item_state where(block_hash, std::uint32_t layer) const = 0;
    virtual void pin(block_hash) = 0;
    virtual void unpin(block_hash) = 0;
    [[nodiscard]] virtual std::string check_invariants() const = 0;
    [[nodiscard]] virtual bool in_step() const = 0;
    [[nodiscard]] virtual bool gpu_room_for(std::span<const block_hash>) const = 0;
    /// The cache's clock.
    virtual void set_time(timestamp) = 0;
    virtual timestamp time() = 0;
    // remote_tier.hpp's calls on this cache.
    virtual remote_admission admit_through(remote_directory_ref, session_id, std::span<const block_hash>) = 0;
    virtual remote_admission admit_through(remote_directory_ref, remote_identities&, session_id,
                                           std::span<const block_digest>) = 0;
    virtual std::size_t forget_identities(remote_identities&) = 0;

    /// A cache of `config` whose tiers hold `Policy` (dyn_policy: any
    /// registered policy, by name) configured by `gpu` and `cpu`,
    /// thread-safe (thread_safe_traits) or not. Throws: what tiered_cache's
    /// and the policies' constructors throw.
    template <eviction_policy Policy = dyn_policy>
    static std::unique_ptr<any_tiered_cache> make(const cache_config& config, const typename Policy::config_type& gpu,
                                                  const typename Policy::config_type& cpu, bool thread_safe);
};

/// The cache behind any_tiered_cache::make.
template <cache_traits Traits, eviction_policy Policy = dyn_policy>
class tiered_cache_model final : public any_tiered_cache {
public:
    using cache_type = tiered_cache<Policy, Policy, Traits>;
    tiered_cache_model(const cache_config& cfg, const typename Policy::config_type& g,
                       const typename Policy::config_type& p)
            : c_(cfg, g, p) {}
    [[nodiscard]] prefix_match lookup(std::span<const block_hash> h) const override { return c_.lookup(h); }
    void begin_step() override { c_.begin_step(); }
    admission admit(session_id s, std::span<const block_hash> h) override { return c_.admit(s, h); }
    const swap_plan& end_step() override { return c_.end_step(); }
    [[nodiscard]] std::vector<block_id> held_by(session_id s) const override { return c_.held_by(s); }
    std::size_t release(session_id s, std::uint64_t output_tokens, timestamp expected_return) override {
        return c_.release(s, output_tokens, expected_return);
    }
    std::size_t free_session(session_id s, bool f) override { return c_.free_session(s, f); }
    void enqueue(std::uint64_t r, session_id s, std::span<const block_hash> h) override { c_.enqueue(r, s, h); }
    session_id dequeue(std::uint64_t r) override { return c_.dequeue(r); }
    [[nodiscard]] std::size_t queued_requests() const override { return c_.queued_requests(); }
    transfer_report complete_transfers(const swap_plan& p, std::span<const transfer_status> st) override {
        return c_.complete_transfers(p, st);
    }
    [[nodiscard]] cache_metrics metrics() const override { return c_.metrics(); }
    [[nodiscard]] item_state where(block_hash h, std::uint32_t l) const override { return c_.where(h, l); }
    void pin(block_hash h) override { c_.pin(h); }
    void unpin(block_hash h) override { c_.unpin(h); }
    [[nodiscard]] std::string check_invariants() const override { return c_.check_invariants(); }
    [[nodiscard]] bool in_step() const override { return c_.in_step(); }
    [[nodiscard]] bool gpu_room_for(std::span<const block_hash> h) const override { return c_.gpu_room_for(h); }
    void set_time(timestamp t) override { c_.clock().set(t); }
    timestamp time() override { return c_.clock().now(); }
    remote_admission admit_through(remote_directory_ref s, session_id id, std::span<const block_hash> h) override {
        return kvpolicy::admit_through(c_, s, id, h);
    }
    remote_admission admit_through(remote_directory_ref s, remote_identities& ids, session_id id,
                                   std::span<const block_digest> d) override {
        return kvpolicy::admit_through(c_, s, ids, id, d);
    }
    std::size_t forget_identities(remote_identities& ids) override { return kvpolicy::forget_identities(c_, ids); }
    /// The cache itself.
    [[nodiscard]] const cache_type& cache() const noexcept { return c_; }

private:
    cache_type c_;
};

template <eviction_policy Policy>
std::unique_ptr<any_tiered_cache> any_tiered_cache::make(const cache_config& config,
                                                         const typename Policy::config_type& gpu,
                                                         const typename Policy::config_type& cpu, bool thread_safe) {
    if (thread_safe) return std::make_unique<tiered_cache_model<thread_safe_traits, Policy>>(config, gpu, cpu);
    return std::make_unique<tiered_cache_model<default_cache_traits, Policy>>(config, gpu, cpu);
}

}  // namespace kvpolicy
