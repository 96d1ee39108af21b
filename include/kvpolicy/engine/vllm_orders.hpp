// vLLM's own orders, by name: the registry's second list (the first is
// eviction/registry.hpp's eviction_policies). An adapter that offers
// "decide exactly as vLLM does" looks the name up here, once, and nowhere
// else:
//
// - `vllm_cache_policies`: vLLM 0.21 and later's CachePolicy classes
//   (engine/vllm_lru.hpp, engine/vllm_arc.hpp), named `vllm_lru`, `vllm_arc`.
// - `vllm_0_11_orders`: the OffloadingManager's orders of vLLM 0.11 to 0.20
//   (engine/vllm_legacy_orders.hpp), named `vllm_0_11_lru`, `vllm_0_11_arc`.
//   That manager is only ever 0.11-0.20's, so there the names its users
//   already give, `vllm_lru` and `vllm_arc`, mean these
//   (`vllm_0_11_name`).
//
// Every name is unique across the three lists (checked below).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/type_list.hpp"
#include "kvpolicy/engine/vllm_arc.hpp"
#include "kvpolicy/engine/vllm_legacy_orders.hpp"
#include "kvpolicy/engine/vllm_lru.hpp"
#include "kvpolicy/eviction/registry.hpp"

namespace kvpolicy::engine {

/// vLLM's CachePolicy (0.21 and later), decided exactly.
using vllm_cache_policies = type_list<vllm_lru, vllm_arc>;

/// vLLM's OffloadingManager orders (0.11 to 0.20), decided exactly.
using vllm_0_11_orders = type_list<vllm_legacy_lru_order, vllm_legacy_arc_order>;

/// A name the 0.11-0.20 OffloadingManager also accepts, and the order it means.
struct vllm_name_alias {
    std::string_view given;
    std::string_view name;
};
inline constexpr vllm_name_alias vllm_0_11_aliases[] = {{"vllm_lru", "vllm_0_11_lru"}, {"vllm_arc", "vllm_0_11_arc"}};

/// The registered name `given` stands for in the 0.11-0.20 OffloadingManager:
/// `vllm_lru` -> `vllm_0_11_lru`, `vllm_arc` -> `vllm_0_11_arc`, any other
/// name itself.
[[nodiscard]] constexpr std::string_view vllm_0_11_name(std::string_view given) noexcept {
    for (const vllm_name_alias& a : vllm_0_11_aliases)
        if (a.given == given) return a.name;
    return given;
}

/// What the 0.11-0.20 OffloadingManager accepts: "fifo, ..., belady,
/// vllm_0_11_lru, vllm_0_11_arc, vllm_lru, vllm_arc" (kvpolicy's `Policies`
/// first).
template <class Policies = eviction_policies>
[[nodiscard]] std::string vllm_0_11_accepted_names() {
    std::string out = joined_names<Policies>() + ", " + joined_names<vllm_0_11_orders>();
    for (const vllm_name_alias& a : vllm_0_11_aliases) out += ", " + std::string(a.given);
    return out;
}

/// The options of any registered name (eviction_policies, then vLLM's
/// orders, which take none): describe_options<P>(). Throws:
/// unknown_name_error "unknown eviction policy 'NAME'; accepted: fifo, ...,
/// vllm_lru, vllm_arc, vllm_0_11_lru, vllm_0_11_arc".
[[nodiscard]] inline std::vector<option_description> registered_options(std::string_view name) {
    const auto described = [&]<class P>() {
        return describe_options<P>();
    };  // [&]: no conversion to a function pointer (nvcc)
    if (has_name<eviction_policies>(name)) return visit_by_name<eviction_policies>(name, described);
    if (has_name<vllm_cache_policies>(name) || has_name<vllm_0_11_orders>(name)) return {};
    throw unknown_name_error("unknown eviction policy '" + std::string(name) +
                             "'; accepted: " + joined_names<eviction_policies>() + ", " +
                             joined_names<vllm_cache_policies>() + ", " + joined_names<vllm_0_11_orders>());
}

namespace detail {
template <class... Ls>
constexpr bool names_unique_across() {
    std::array<std::string_view, (Ls::size + ...)> all{};
    std::size_t n = 0;
    ((n =
          [&] {
              for (std::string_view name : names_of<Ls>()) all[n++] = name;
              return n;
          }()),
     ...);
    for (std::size_t i = 0; i < all.size(); ++i)
        for (std::size_t j = i + 1; j < all.size(); ++j)
            if (all[i] == all[j]) return false;
    return true;
}
}  // namespace detail

static_assert(detail::names_unique_across<eviction_policies, vllm_cache_policies, vllm_0_11_orders>(),
              "a vLLM order shares a name with another registered policy; every registered name must be unique");
static_assert(has_name<vllm_0_11_orders>(vllm_0_11_name("vllm_lru")) &&
                  has_name<vllm_0_11_orders>(vllm_0_11_name("vllm_arc")),
              "vllm_0_11_aliases must name registered 0.11-0.20 orders");

}  // namespace kvpolicy::engine
