#include <kvpolicy/sim/policy_choice.hpp>

#include <array>
#include <utility>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/eviction/registry.hpp>

namespace kvpolicy::sim {

namespace {

/// Every registered policy as a choice, in registry order.
constexpr auto choices = []<class... Ps>(type_list<Ps...>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<policy_choice, sizeof...(Ps)>{
            policy_choice{.index = I, .name = Ps::name, .built_for = built_for<Ps>(), .uses_future = uses_future<Ps>}...};
    }(std::index_sequence_for<Ps...>{});
}(eviction_policies{});

}  // namespace

policy_choice choose_policy(std::string_view name) {
    const std::size_t index = index_of_name<eviction_policies>(name);
    if (index == eviction_policies::size)
        throw unknown_name_error("unknown eviction policy '" + std::string(name) + "'; accepted: " +
                                 accepted_policy_names());
    return choices[index];
}

std::vector<std::string> expand_all(const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& n : names) {
        if (n != "all") {
            out.push_back(n);
            continue;
        }
        for (std::string_view each : names_of<eviction_policies>()) out.emplace_back(each);
    }
    return out;
}

std::string accepted_policy_names() { return "all, " + joined_names<eviction_policies>(); }

}  // namespace kvpolicy::sim
