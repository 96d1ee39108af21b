// runtime_choice<Ps...>: one of several eviction policies of the same shape,
// picked by name when the policy is built.
//
// A cache is one type per policy pair (tiered_cache<Gpu, Cpu>), so a program
// that offers N policies for a tier compiles N caches, and their replay
// loops, for every policy of the other tier. Where the alternatives have the
// same traits (their order, whether they hear session ends or the waiting
// queue), one type can hold any of them: every hook is one switch over the
// alternative held (a std::variant visit), the price of choosing at run
// time. kvpolicy-sim's CPU tier uses it (lru or checkerboard): half the
// request-mode caches to compile, the same decisions.
//
// A runtime_choice decides exactly as the alternative it holds (tested over
// every alternative against the alternative itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/type_list.hpp"

namespace kvpolicy {

template <eviction_policy First, eviction_policy... Rest>
class runtime_choice {
    static_assert(
        ((Rest::order == First::order) && ...),
        "runtime_choice: the alternatives must share one eviction_order (the cache reads it at compile time)");
    static_assert(((hears_session_ends<Rest> == hears_session_ends<First>)&&...),
                  "runtime_choice: either every alternative hears session ends or none does");
    static_assert(((hears_waiting_queue<Rest> == hears_waiting_queue<First>)&&...),
                  "runtime_choice: either every alternative hears the waiting queue or none does");
    static_assert(((hears_request_ends<Rest> == hears_request_ends<First>)&&...),
                  "runtime_choice: either every alternative hears request ends or none does");

public:
    using alternatives = type_list<First, Rest...>;

    struct config_type {
        std::string policy{First::name};  ///< the alternative's registered name
        std::tuple<typename First::config_type, typename Rest::config_type...> configs{};
    };

    static constexpr std::string_view name = "runtime_choice";
    static constexpr eviction_order order = First::order;

    /// Throws: unknown_name_error listing the alternatives for a name that
    /// is none of them; what the alternative's constructor throws.
    runtime_choice(std::size_t capacity, const config_type& config) : p_(make(capacity, config)) {}

    void on_miss(const access_context& ctx) {
        std::visit([&](auto& p) { p.on_miss(ctx); }, p_);
    }
    void on_insert(item_id id, const access_context& ctx) {
        std::visit([&](auto& p) { p.on_insert(id, ctx); }, p_);
    }
    void on_access(item_id id, const access_context& ctx) {
        std::visit([&](auto& p) { p.on_access(id, ctx); }, p_);
    }
    void on_hold(item_id id) {
        std::visit([&](auto& p) { p.on_hold(id); }, p_);
    }
    void on_release(item_id id, const access_context& ctx) {
        std::visit([&](auto& p) { p.on_release(id, ctx); }, p_);
    }
    void on_erase(item_id id) {
        std::visit([&](auto& p) { p.on_erase(id); }, p_);
    }
    void on_session_end(session_id session, timestamp now) requires hears_session_ends<First> {
        std::visit([&](auto& p) { p.on_session_end(session, now); }, p_);
    }
    void on_request_end(session_id session, timestamp now) requires hears_request_ends<First> {
        std::visit([&](auto& p) { p.on_request_end(session, now); }, p_);
    }
    void on_queued(item_id id, std::uint64_t position) requires hears_waiting_queue<First> {
        std::visit([&](auto& p) { p.on_queued(id, position); }, p_);
    }
    void on_unqueued(item_id id, const access_context& ctx) requires hears_waiting_queue<First> {
        std::visit([&](auto& p) { p.on_unqueued(id, ctx); }, p_);
    }
    std::optional<item_id> pop_victim(timestamp now) {
        return std::visit([&](auto& p) { return p.pop_victim(now); }, p_);
    }
    std::size_t pop_victims(std::span<item_id> out, timestamp now) {
        return std::visit([&](auto& p) { return p.pop_victims(out, now); }, p_);
    }

    [[nodiscard]] std::size_t capacity() const {
        return std::visit([](const auto& p) { return p.capacity(); }, p_);
    }
    [[nodiscard]] std::size_t size() const {
        return std::visit([](const auto& p) { return p.size(); }, p_);
    }
    [[nodiscard]] std::size_t evictable_size() const {
        return std::visit([](const auto& p) { return p.evictable_size(); }, p_);
    }
    [[nodiscard]] bool contains(item_id id) const {
        return std::visit([&](const auto& p) { return p.contains(id); }, p_);
    }
    [[nodiscard]] const policy_counters& counters() const {
        return std::visit([](const auto& p) -> const policy_counters& { return p.counters(); }, p_);
    }
    /// The name of the alternative held.
    [[nodiscard]] std::string_view chosen() const noexcept {
        return std::visit([](const auto& p) { return std::remove_cvref_t<decltype(p)>::name; }, p_);
    }

private:
    using held = std::variant<First, Rest...>;

    static held make(std::size_t capacity, const config_type& config) {
        return visit_by_name<alternatives>(
            config.policy,
            [&]<class P>() -> held {
                constexpr std::size_t i = index_of<P>();
                return held(std::in_place_index<i>, capacity, std::get<i>(config.configs));
            },
            "policy of a runtime_choice");
    }
    template <class P>
    static constexpr std::size_t index_of() noexcept {
        constexpr bool same[] = {std::is_same_v<P, First>, std::is_same_v<P, Rest>...};
        for (std::size_t i = 0; i < sizeof...(Rest) + 1; ++i)
            if (same[i]) return i;
        return 0;
    }

    held p_;
};

/// Whether P is a runtime_choice (its config names the alternative).
template <class P>
inline constexpr bool is_runtime_choice = false;
template <class... Ps>
inline constexpr bool is_runtime_choice<runtime_choice<Ps...>> = true;

}  // namespace kvpolicy
