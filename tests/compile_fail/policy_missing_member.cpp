// expect-error: eviction_policy
// A composition with a class that lacks pop_victims: rejected at the point
// of use, and the diagnostic names the concept.
#include <kvpolicy/core/concepts.hpp>

struct almost_a_policy {
    struct config_type {};
    static constexpr std::string_view name = "almost";
    static constexpr kvpolicy::eviction_order order = kvpolicy::eviction_order::static_between_accesses;
    almost_a_policy(std::size_t, const config_type&) {}
    void on_insert(kvpolicy::item_id, const kvpolicy::access_context&) {}
    void on_access(kvpolicy::item_id, const kvpolicy::access_context&) {}
    void on_hold(kvpolicy::item_id) {}
    void on_release(kvpolicy::item_id, const kvpolicy::access_context&) {}
    void on_erase(kvpolicy::item_id) {}
    std::optional<kvpolicy::item_id> pop_victim(kvpolicy::timestamp) { return {}; }
};

template <kvpolicy::eviction_policy Policy>
struct tier_cache {
    Policy policy;
};

using broken = tier_cache<almost_a_policy>;
broken instance{{0, {}}};
