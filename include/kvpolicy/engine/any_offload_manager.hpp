// any_offload_manager: an offload_manager whose order is chosen by name at
// run time (a flag, a config file, Python's kvpolicy.vllm.OffloadingManager).
//
// `make(num_blocks, name, options, events)` looks the name up once, in vLLM's
// 0.11-0.20 orders (vllm_lru, vllm_arc: engine::vllm_0_11_name) and then in
// kvpolicy's eviction_policies (as policy_order<P>), and builds the concrete
// offload_manager; every call afterwards is one virtual call, with the
// per-block loop inside the concrete manager. It decides exactly as that
// manager (tests/engine_any_offload_manager.cpp). Each accepted name is one
// offload_manager instantiation, compiled where make() is called (a
// template, so a file that only includes this header compiles none): call it
// from one translation unit.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/engine/offload_manager.hpp"
#include "kvpolicy/engine/vllm_orders.hpp"
#include "kvpolicy/eviction/registry.hpp"

namespace kvpolicy::engine {

/// An order's lists for introspection (tests, the vLLM test plugin): keys
/// oldest first; vllm_lru has one list, vllm_arc four (T1, T2, B1, B2) and
/// its target; kvpolicy's policies none (their state is their own).
struct offload_order_state {
    std::vector<std::vector<std::uint64_t>> lists;
    std::optional<double> target;
};

template <offload_order Order>
class offload_manager_model;

class any_offload_manager {
public:
    virtual ~any_offload_manager() = default;
    // offload_manager's members (see there).
    [[nodiscard]] virtual std::size_t capacity() const noexcept = 0;
    [[nodiscard]] virtual std::size_t num_free() const noexcept = 0;
    [[nodiscard]] virtual std::size_t size() const noexcept = 0;
    [[nodiscard]] virtual std::uint32_t find(std::uint64_t hash) const noexcept = 0;
    virtual void find_all(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) const noexcept = 0;
    [[nodiscard]] virtual slot_state state(std::uint32_t slot) const noexcept = 0;
    [[nodiscard]] virtual std::uint32_t loads(std::uint32_t slot) const noexcept = 0;
    [[nodiscard]] virtual std::size_t lookup(std::span<const std::uint64_t> hashes) = 0;
    virtual void prepare_load(std::span<const std::uint64_t> hashes, std::span<std::uint32_t> slots) = 0;
    virtual void touch(std::span<const std::uint64_t> hashes) = 0;
    virtual void complete_load(std::span<const std::uint64_t> hashes) = 0;
    virtual std::optional<store_plan> prepare_store(std::span<const std::uint64_t> hashes) = 0;
    virtual void complete_store(std::span<const std::uint64_t> hashes, bool success) = 0;
    virtual std::vector<offload_event> take_events() = 0;
    /// The name given to make().
    [[nodiscard]] virtual std::string_view policy_name() const noexcept = 0;
    [[nodiscard]] virtual offload_order_state order_state() const = 0;
    /// vllm_arc's target_t1_size (vLLM's tests set it). Throws: usage_error
    /// for another policy, or what vllm_legacy_arc_order::set_target throws.
    virtual void set_arc_target(double t) = 0;

    /// `policy`: a name of eviction_policies or engine::vllm_0_11_orders
    /// (or vllm_lru, vllm_arc: vllm_0_11_name). Throws: unknown_name_error
    /// listing every accepted name; config_error for 0 blocks or a bad option.
    /// `Policies`: the kvpolicy policies offered (a type_list; an engine
    /// offering fewer compiles fewer).
    template <class Policies = eviction_policies>
    static std::unique_ptr<any_offload_manager> make(std::size_t num_blocks, const std::string& policy,
                                                     std::span<const option_value> options = {}, bool events = true) {
        const std::string_view name = vllm_0_11_name(policy);
        const auto build = [&]<class Order, class P>() -> std::unique_ptr<any_offload_manager> {
            return std::make_unique<offload_manager_model<Order>>(num_blocks, make_config<P>(options), events, policy);
        };
        if (has_name<vllm_0_11_orders>(name))
            return visit_by_name<vllm_0_11_orders>(name, [&]<class O>() { return build.template operator()<O, O>(); });
        if (!has_name<Policies>(name))
            throw unknown_name_error("unknown eviction policy '" + policy +
                                     "'; accepted: " + vllm_0_11_accepted_names<Policies>());
        return visit_by_name<Policies>(name,
                                       [&]<class P>() { return build.template operator()<policy_order<P>, P>(); });
    }
};

/// The concrete manager behind any_offload_manager::make.
template <offload_order Order>
class offload_manager_model final : public any_offload_manager {
public:
    offload_manager_model(std::size_t n, const typename Order::config_type& c, bool events, std::string given)
            : m_(n, c, events), name_(std::move(given)) {}
    [[nodiscard]] std::size_t capacity() const noexcept override { return m_.capacity(); }
    [[nodiscard]] std::size_t num_free() const noexcept override { return m_.num_free(); }
    [[nodiscard]] std::size_t size() const noexcept override { return m_.size(); }
    [[nodiscard]] std::uint32_t find(std::uint64_t h) const noexcept override { return m_.find(h); }
    void find_all(std::span<const std::uint64_t> h, std::span<std::uint32_t> s) const noexcept override {
        m_.find_all(h, s);
    }
    [[nodiscard]] slot_state state(std::uint32_t s) const noexcept override { return m_.state(s); }
    [[nodiscard]] std::uint32_t loads(std::uint32_t s) const noexcept override { return m_.loads(s); }
    [[nodiscard]] std::size_t lookup(std::span<const std::uint64_t> h) override { return m_.lookup(h); }
    void prepare_load(std::span<const std::uint64_t> h, std::span<std::uint32_t> s) override { m_.prepare_load(h, s); }
    void touch(std::span<const std::uint64_t> h) override { m_.touch(h); }
    void complete_load(std::span<const std::uint64_t> h) override { m_.complete_load(h); }
    std::optional<store_plan> prepare_store(std::span<const std::uint64_t> h) override { return m_.prepare_store(h); }
    void complete_store(std::span<const std::uint64_t> h, bool ok) override { m_.complete_store(h, ok); }
    std::vector<offload_event> take_events() override { return m_.take_events(); }
    [[nodiscard]] std::string_view policy_name() const noexcept override { return name_; }
    [[nodiscard]] offload_order_state order_state() const override {
        offload_order_state st;
        const auto keys = [this](const std::vector<std::uint32_t>& slots) {
            std::vector<std::uint64_t> k;
            k.reserve(slots.size());
            for (std::uint32_t s : slots) k.push_back(m_.key(s));
            return k;
        };
        if constexpr (std::same_as<Order, vllm_legacy_lru_order>) {
            st.lists.push_back(keys(m_.order().slots()));
        } else if constexpr (std::same_as<Order, vllm_legacy_arc_order>) {
            st.lists.push_back(keys(m_.order().t1_slots()));
            st.lists.push_back(keys(m_.order().t2_slots()));
            st.lists.push_back(m_.order().b1_keys());
            st.lists.push_back(m_.order().b2_keys());
            st.target = m_.order().target();
        }
        return st;
    }
    void set_arc_target(double t) override {
        if constexpr (std::same_as<Order, vllm_legacy_arc_order>)
            m_.order().set_target(t);
        else
            throw usage_error("target_t1_size: policy '" + name_ +
                              "' has no ARC target; only policy 'vllm_arc' has one");
    }
    /// The concrete manager.
    [[nodiscard]] const offload_manager<Order>& manager() const noexcept { return m_; }

private:
    offload_manager<Order> m_;
    std::string name_;  // as the caller gave it
};

}  // namespace kvpolicy::engine
