// Seed 000's two policies are reachable by name through the registry.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/registry.hpp>

#include <type_traits>

using namespace kvpolicy;

TEST_CASE("registered as retention_value and checkerboard", "[registry][retention_value][checkerboard]") {
    REQUIRE(visit_by_name<eviction_policies>("retention_value", []<class P>() {
        return std::is_same_v<P, retention_value<>> && P::order == eviction_order::time_varying;
    }));
    REQUIRE(visit_by_name<eviction_policies>("checkerboard", []<class P>() {
        return std::is_same_v<P, lexicographic_checkerboard> && P::order == eviction_order::static_between_accesses;
    }));
}
