// engine::any_offload_manager (engine/any_offload_manager.hpp) decides
// exactly as the offload_manager it names: for every registered policy and
// vLLM's two 0.11-0.20 orders, the manager made by name and the concrete
// manager answer every call of a long random run alike (lookups, load slots,
// store plans, events, the errors of bad calls); unknown names are refused
// listing every accepted one.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/any_offload_manager.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace kvpolicy;
using namespace kvpolicy::engine;

bool same(const std::optional<store_plan>& a, const std::optional<store_plan>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->to_store == b->to_store && a->positions == b->positions && a->slots == b->slots &&
                  a->evicted == b->evicted && a->evicted_slots == b->evicted_slots);
}

bool same(const std::vector<offload_event>& a, const std::vector<offload_event>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].hashes != b[i].hashes || a[i].slots != b[i].slots || a[i].removed != b[i].removed) return false;
    return true;
}

// Runs the same random calls on `any` and `alone` and compares every answer.
template <class Order>
void same_answers(any_offload_manager& any, offload_manager<Order>& alone, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<std::uint64_t>> loading;
    for (int step = 0; step < 3000; ++step) {
        INFO("step " << step);
        std::vector<std::uint64_t> run(1 + rng() % 6);
        for (auto& h : run) h = 1 + rng() % 40;
        const auto op = rng() % 100;
        if (op < 35) {
            std::optional<store_plan> a, b;
            std::string ea, eb;
            try {
                a = any.prepare_store(run);
            } catch (const usage_error& e) {
                ea = e.what();
            }
            try {
                b = alone.prepare_store(run);
            } catch (const usage_error& e) {
                eb = e.what();
            }
            REQUIRE(ea == eb);
            REQUIRE(same(a, b));
            if (a) {
                const bool ok = rng() % 10 != 0;
                any.complete_store(a->to_store, ok);
                alone.complete_store(b->to_store, ok);
            }
        } else if (op < 55) {
            REQUIRE(any.lookup(run) == alone.lookup(run));
        } else if (op < 70) {
            any.touch(run);
            alone.touch(run);
        } else if (op < 85) {
            const std::size_t n = alone.lookup(run);
            REQUIRE(any.lookup(run) == n);
            run.resize(n);
            std::vector<std::uint32_t> a(n), b(n);
            any.prepare_load(run, a);
            alone.prepare_load(run, b);
            REQUIRE(a == b);
            if (n > 0) loading.push_back(run);
        } else if (!loading.empty()) {
            const std::size_t i = rng() % loading.size();
            any.complete_load(loading[i]);
            alone.complete_load(loading[i]);
            loading.erase(loading.begin() + static_cast<std::ptrdiff_t>(i));
        } else {  // a bad call: the same error, nothing changed
            std::string ea, eb;
            try {
                any.complete_load(run);
            } catch (const usage_error& e) {
                ea = e.what();
            }
            try {
                alone.complete_load(run);
            } catch (const usage_error& e) {
                eb = e.what();
            }
            REQUIRE(ea == eb);
        }
        REQUIRE(same(any.take_events(), alone.take_events()));
        REQUIRE(any.size() == alone.size());
        REQUIRE(any.num_free() == alone.num_free());
        for (std::uint64_t h = 1; h <= 40; ++h) {
            const std::uint32_t s = any.find(h);
            REQUIRE(s == alone.find(h));
            if (s != no_index) REQUIRE((any.state(s) == alone.state(s) && any.loads(s) == alone.loads(s)));
        }
    }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("any_offload_manager decides exactly as the manager of the policy it names", "[engine]",
                        eviction_policies) {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const auto any = any_offload_manager::make(12, std::string(TestType::name));
    offload_manager<policy_order<TestType>> alone(12);
    REQUIRE(any->policy_name() == TestType::name);
    REQUIRE(any->capacity() == 12);
    same_answers(*any, alone, seed);
    REQUIRE(any->order_state().lists.empty());
}

TEST_CASE("any_offload_manager decides exactly as vLLM's 0.11-0.20 orders, under either name", "[engine]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    for (const char* name : {"vllm_lru", "vllm_0_11_lru"}) {
        const auto any = any_offload_manager::make(12, name);
        offload_manager<vllm_legacy_lru_order> alone(12);
        same_answers(*any, alone, seed);
        REQUIRE(any->policy_name() == name);
        const offload_order_state st = any->order_state();
        REQUIRE(st.lists.size() == 1);
        REQUIRE(st.lists[0].size() == alone.size());
        REQUIRE(!st.target);
        REQUIRE_THROWS_WITH(any->set_arc_target(1),
                            Catch::StartsWith("target_t1_size: policy '" + std::string(name) + "' has no ARC target"));
    }
    for (const char* name : {"vllm_arc", "vllm_0_11_arc"}) {
        const auto any = any_offload_manager::make(12, name);
        offload_manager<vllm_legacy_arc_order> alone(12);
        any->set_arc_target(3);
        alone.order().set_target(3);
        same_answers(*any, alone, seed);
        const offload_order_state st = any->order_state();
        REQUIRE(st.lists.size() == 4);
        REQUIRE(st.target == alone.order().target());
        REQUIRE(st.lists[2] == alone.order().b1_keys());
        REQUIRE_THROWS_AS(any->set_arc_target(13), usage_error);
    }
}

TEST_CASE("any_offload_manager refuses an unknown name or a bad size, naming what it accepts", "[engine][errors]") {
    REQUIRE_THROWS_AS(any_offload_manager::make(4, "nope"), unknown_name_error);
    REQUIRE_THROWS_WITH(any_offload_manager::make(4, "nope"), Catch::Contains("'nope'") && Catch::Contains("lru") &&
                                                                  Catch::Contains("vllm_0_11_arc") &&
                                                                  Catch::Contains("vllm_arc"));
    REQUIRE_THROWS_AS(any_offload_manager::make(0, "lru"), config_error);
    const option_value bad[] = {{"no_such_option", 1}};
    REQUIRE_THROWS_AS(any_offload_manager::make(4, "lru", bad), config_error);
    // A smaller list of policies offers fewer names.
    REQUIRE_THROWS_AS(any_offload_manager::make<type_list<lru>>(4, "fifo"), unknown_name_error);
    REQUIRE(any_offload_manager::make<type_list<lru>>(4, "vllm_lru")->policy_name() == "vllm_lru");
}

TEST_CASE("any_offload_manager records events only when asked", "[engine]") {
    const auto quiet = any_offload_manager::make(4, "lru", {}, false);
    const std::uint64_t h[] = {1, 2};
    const auto plan = quiet->prepare_store(h);
    REQUIRE(plan);
    quiet->complete_store(h, true);
    REQUIRE(quiet->take_events().empty());
}
