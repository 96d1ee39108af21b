// The seams: every minimal model satisfies its concept, near-misses do not,
// and runtime choice by name reaches the right type.
#include <catch2/catch.hpp>

#include <kvpolicy/kvpolicy.hpp>

#include <string>
#include <type_traits>
#include <utility>

using namespace kvpolicy;

namespace {

// A policy missing one member (pop_victims) must not count as a policy.
struct lru_without_batch_pop {
    struct config_type {};
    static constexpr std::string_view name = "broken";
    static constexpr eviction_order order = eviction_order::static_between_accesses;
    lru_without_batch_pop(std::size_t, const config_type&) {}
    void on_insert(item_id, const access_context&) {}
    void on_access(item_id, const access_context&) {}
    void on_hold(item_id) {}
    void on_release(item_id, const access_context&) {}
    void on_erase(item_id) {}
    std::optional<item_id> pop_victim(timestamp) { return std::nullopt; }
    std::size_t capacity() const { return 0; }
    std::size_t size() const { return 0; }
    std::size_t evictable_size() const { return 0; }
    bool contains(item_id) const { return false; }
    const policy_counters& counters() const { return c; }
    policy_counters c;
};

// A cost model whose cost is a float, not a double.
struct float_cost {
    static constexpr std::string_view name = "float";
    float cost(std::uint64_t) const { return 1.0f; }
};

// A selector whose flags are not compile-time constants.
struct runtime_flag_selector {
    static constexpr std::string_view name = "runtime";
    bool supports_prefill = true;
    bool supports_decode = true;
    bool requires_block_selection = false;
    std::size_t select(std::span<const block_id>, const selection_context&, std::span<block_id>) { return 0; }
    void on_offload(block_id, layer_index, const key_block_view&) {}
};

// Device selectors name the type their keys are stored in (key_element) and
// take keys of that type: a bf16 one, one that names no type, one whose
// on_offload takes another type's keys.
template <class Key, class ViewKey, bool Declares = true>
struct device_selector_shape {
    static constexpr std::string_view name = "device_shape";
    static constexpr bool supports_prefill = false;
    static constexpr bool supports_decode = true;
    static constexpr bool requires_block_selection = true;
    std::size_t select(std::span<const block_id>, const device_selection_context&, std::span<block_id>) { return 0; }
    void on_offload(block_id, layer_index, const basic_device_key_block_view<ViewKey>&) {}
};
template <class Key, class ViewKey>
struct device_selector_shape<Key, ViewKey, true> : device_selector_shape<Key, ViewKey, false> {
    using key_element = Key;
};

}  // namespace

TEST_CASE("device selectors take keys of the type they name", "[concepts][sparse][kv_element]") {
    STATIC_REQUIRE(device_sparse_selector<device_selector_shape<bf16, bf16>>);
    STATIC_REQUIRE(device_sparse_selector<device_selector_shape<float, float>>);
    STATIC_REQUIRE_FALSE(device_sparse_selector<device_selector_shape<bf16, bf16, false>>);  // no key_element
    STATIC_REQUIRE_FALSE(device_sparse_selector<device_selector_shape<fp16, bf16>>);         // keys of another type
    STATIC_REQUIRE_FALSE(device_sparse_selector<device_selector_shape<float, fp16>>);
    STATIC_REQUIRE_FALSE(device_sparse_selector<quest>);  // a host selector: host keys and query
}

TEST_CASE("every shipped model satisfies its concept", "[concepts]") {
    STATIC_REQUIRE(eviction_policy<fifo>);
    STATIC_REQUIRE(eviction_policy<lru>);
    STATIC_REQUIRE(cost_model<unit_cost>);
    STATIC_REQUIRE(layer_weight<uniform_layer_weight>);
    STATIC_REQUIRE(position_weight<uniform_position_weight>);
    STATIC_REQUIRE(victim_selector<nth_element_selector>);
    STATIC_REQUIRE(sparse_selector<full_attention>);
    STATIC_REQUIRE(transfer_engine<host_memcpy_engine>);
    STATIC_REQUIRE(clock_source<manual_clock>);
    STATIC_REQUIRE(clock_source<steady_clock_source>);
}

TEST_CASE("near-misses and unrelated types satisfy no concept", "[concepts]") {
    STATIC_REQUIRE_FALSE(eviction_policy<int>);
    STATIC_REQUIRE_FALSE(eviction_policy<lru_without_batch_pop>);
    STATIC_REQUIRE_FALSE(eviction_policy<unit_cost>);
    STATIC_REQUIRE_FALSE(cost_model<int>);
    STATIC_REQUIRE_FALSE(cost_model<float_cost>);
    STATIC_REQUIRE_FALSE(cost_model<lru>);
    STATIC_REQUIRE_FALSE(layer_weight<uniform_position_weight>);
    STATIC_REQUIRE_FALSE(position_weight<uniform_layer_weight>);
    STATIC_REQUIRE_FALSE(victim_selector<lru>);
    STATIC_REQUIRE_FALSE(sparse_selector<runtime_flag_selector>);
    STATIC_REQUIRE_FALSE(sparse_selector<nth_element_selector>);
    STATIC_REQUIRE_FALSE(transfer_engine<fifo>);
    STATIC_REQUIRE_FALSE(clock_source<int>);
}

TEST_CASE("full_attention declares its phases and keeps every block", "[concepts][sparse]") {
    STATIC_REQUIRE(full_attention::supports_prefill);
    STATIC_REQUIRE(full_attention::supports_decode);
    STATIC_REQUIRE_FALSE(full_attention::requires_block_selection);
    full_attention sel;
    const std::vector<block_id> available{block_id{7}, block_id{2}, block_id{9}};
    std::vector<block_id> out(3);
    REQUIRE(sel.select(available, selection_context{}, out) == 3);
    REQUIRE(out == available);
    std::vector<block_id> too_small(2);
    REQUIRE_THROWS_WITH(sel.select(available, selection_context{}, too_small),
                        Catch::Contains("output holds 2 ids for 3 available blocks"));
}

TEST_CASE("visit_by_name reaches the registered type", "[registry]") {
    const std::string got = visit_by_name<eviction_policies>("lru", []<class P>() { return std::string(P::name); });
    REQUIRE(got == "lru");
    int visited = 0;
    visit_by_name<eviction_policies>("fifo", [&]<class P>() {
        STATIC_REQUIRE(eviction_policy<P>);
        visited += std::is_same_v<P, fifo> ? 1 : 100;
    });
    REQUIRE(visited == 1);
}

TEST_CASE("an unknown name lists every accepted name", "[registry]") {
    try {
        visit_by_name<eviction_policies>(
            "lur", []<class P>() {}, "eviction policy");
        FAIL("no error for an unknown name");
    } catch (const unknown_name_error& e) {
        const std::string what = e.what();
        REQUIRE_THAT(what, Catch::StartsWith("unknown eviction policy 'lur'; accepted: "));
        for (std::string_view n : names_of<eviction_policies>()) REQUIRE_THAT(what, Catch::Contains(std::string(n)));
    }
}

TEST_CASE("a name looked up once is dispatched by its index", "[registry]") {
    constexpr std::size_t arc_at = index_of_name<eviction_policies>("arc");
    STATIC_REQUIRE(arc_at == index_of_type<eviction_policies, arc>);
    STATIC_REQUIRE(index_of_name<eviction_policies>("ARC") == eviction_policies::size);
    STATIC_REQUIRE(index_of_type<type_list<int, char, long>, long> == 2);
    for_each_type<eviction_policies>([]<class P>() {
        const std::string got = visit_by_index<eviction_policies>(index_of_type<eviction_policies, P>,
                                                                  []<class Q>() { return std::string(Q::name); });
        REQUIRE(got == P::name);
    });
    REQUIRE_THROWS_AS(visit_by_index<eviction_policies>(eviction_policies::size, []<class P>() {}), usage_error);
}

TEST_CASE("for_each_type visits the list in order", "[registry]") {
    std::string seen;
    for_each_type<eviction_policies>([&]<class P>() { seen += std::string(P::name) + ";"; });
    REQUIRE(seen == joined_names<eviction_policies>(";") + ";");
    REQUIRE(has_name<eviction_policies>("lru"));
    REQUIRE_FALSE(has_name<eviction_policies>("LRU"));
}

namespace {
/// The names of `Parts` slices of the registry cut as kvpolicy-sim cuts it
/// (part p holds positions p * n / Parts to (p + 1) * n / Parts), joined in
/// part order.
template <std::size_t Parts, std::size_t... Part>
std::string names_of_parts(std::index_sequence<Part...>) {
    constexpr std::size_t n = eviction_policies::size;
    std::string joined;
    (for_each_type<type_list_slice<eviction_policies, Part * n / Parts, (Part + 1) * n / Parts>>(
         [&]<class P>() { joined += std::string(P::name) + ";"; }),
     ...);
    return joined;
}
}  // namespace

TEST_CASE("type_list_slice cuts a list into parts that cover it once, in order", "[registry]") {
    STATIC_REQUIRE(std::is_same_v<type_list_slice<type_list<int, char, long>, 1, 3>, type_list<char, long>>);
    STATIC_REQUIRE(std::is_same_v<type_list_slice<type_list<int, char, long>, 2, 2>, type_list<>>);
    STATIC_REQUIRE(std::is_same_v<type_list_slice<eviction_policies, 0, eviction_policies::size>, eviction_policies>);
    // Names are unique, so equal strings mean every name in exactly one part.
    const std::string all = joined_names<eviction_policies>(";") + ";";
    REQUIRE(names_of_parts<1>(std::make_index_sequence<1>{}) == all);
    REQUIRE(names_of_parts<5>(std::make_index_sequence<5>{}) == all);
    REQUIRE(names_of_parts<6>(std::make_index_sequence<6>{}) == all);
    REQUIRE(names_of_parts<eviction_policies::size>(std::make_index_sequence<eviction_policies::size>{}) == all);
}

TEST_CASE("throw_unknown_name throws what visit_by_name throws", "[registry]") {
    std::string from_visit;
    try {
        visit_by_name<eviction_policies>(
            "lur", []<class P>() {}, "eviction policy");
    } catch (const unknown_name_error& e) {
        from_visit = e.what();
    }
    REQUIRE_FALSE(from_visit.empty());
    REQUIRE_THROWS_MATCHES(throw_unknown_name<eviction_policies>("lur", "eviction policy"), unknown_name_error,
                           Catch::Message(from_visit));
}

TEST_CASE("strong ids do not mix and order by value", "[ids]") {
    STATIC_REQUIRE_FALSE(std::is_convertible_v<block_id, item_id>);
    STATIC_REQUIRE_FALSE(std::is_convertible_v<std::uint32_t, block_id>);
    STATIC_REQUIRE(sizeof(block_id) == 4);
    REQUIRE(block_id{3} < block_id{4});
    REQUIRE_FALSE(block_id::invalid().is_valid());
    REQUIRE(std::hash<block_id>{}(block_id{5}) == std::hash<std::uint32_t>{}(5));
}

TEST_CASE("item keys: layer-chunk keys are distinct for distinct coordinates", "[ids]") {
    std::vector<std::uint64_t> keys;
    for (std::uint64_t s = 0; s < 20; ++s)
        for (std::uint32_t c = 0; c < 30; ++c)
            for (std::uint32_t l = 0; l < 40; ++l)
                keys.push_back(key_of(layer_chunk_key{session_id{s}, chunk_index{c}, layer_index{l}}));
    std::sort(keys.begin(), keys.end());
    REQUIRE(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
    REQUIRE(key_of(block_key{42}) == 42);
}

TEST_CASE("tier and state names", "[ids]") {
    REQUIRE(to_string(tier::gpu) == "gpu");
    REQUIRE(to_string(item_state::dropped) == "dropped");
    REQUIRE(is_resident(resident_in(tier::cpu)));
    REQUIRE_FALSE(is_resident(item_state::free));
    REQUIRE_FALSE(is_resident(item_state::dropped));
    REQUIRE(to_string(granularity::per_layer) == "per_layer");
}
