// engine::byte_hash_resolver against an obviously-correct model: a second
// offload_manager whose keys are the items' identities (each distinct byte
// string, and each int, numbered once, so two items never share a key). The
// resolver's manager folds every byte hash into a handful of keys (a fold
// mask of 0, 1 or 3), takes ints as their own keys (ints away from those
// folds: an int equal to a stored byte hash's key is taken as its block),
// and is handed lists as vLLM's connector hands them: one list, then
// its prefix or its tail, again and again, so that the remembered keys
// answer most calls. It must answer exactly as the model, call after call.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/byte_hash_resolver.hpp>
#include <kvpolicy/engine/offload_manager.hpp>
#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lru.hpp>

#include "support/offload_pair_step.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace {

using namespace kvpolicy;
using engine::byte_hash_resolver;
using engine::hash_list_ref;
using engine::offload_manager;

// A block hash as an engine gives it: bytes, or an int (its own key).
using hash_item = std::variant<std::string, std::uint64_t>;

template <class Order>
struct resolver_under_test {
    offload_manager<Order> m, ref;
    byte_hash_resolver r;
    std::map<hash_item, std::uint64_t> ids;     // the model's keys: each distinct item numbered once
    std::map<std::uint32_t, hash_item> stored;  // the resolver's manager: slot -> item stored there
    std::uint64_t lists = 0;                    // the numbers given to lists

    resolver_under_test(std::size_t n, std::uint64_t mask) : m(n, {}, false), ref(n, {}, false) {
        r.set_fold_mask(mask);
    }

    std::vector<std::uint64_t> model_keys(const std::vector<hash_item>& c) {
        std::vector<std::uint64_t> k;
        for (const hash_item& x : c) k.push_back(ids.try_emplace(x, ids.size() + 1).first->second);
        return k;
    }
    static auto bytes_of(const std::vector<hash_item>& c) {
        return [&c](std::size_t i) -> std::optional<std::string_view> {
            if (const auto* s = std::get_if<std::string>(&c[i])) return *s;
            return std::nullopt;
        };
    }
    std::vector<std::uint64_t> keys(const std::vector<hash_item>& c, hash_list_ref from) {
        std::vector<std::uint64_t> given;
        for (const hash_item& x : c)
            given.push_back(std::holds_alternative<std::string>(x) ? engine::fold_bytes(std::get<std::string>(x))
                                                                   : std::get<std::uint64_t>(x));
        const auto s = r.resolve(m, given, bytes_of(c), from);
        return {s.begin(), s.end()};
    }
};

template <class Order>
void random_resolver_run(std::uint64_t mask, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<hash_item> universe;
    for (int i = 0; i < 50; ++i) {
        std::string s(i % 10 == 0 ? 40 + i : 32, '\0');  // some longer than vLLM's 32 bytes
        for (char& c : s) c = static_cast<char>(rng() & 0xff);
        universe.emplace_back(s);
    }
    std::vector<hash_item> ints;
    for (std::uint64_t k = 100; k < 108; ++k) ints.emplace_back(k);
    resolver_under_test<Order> p(16, mask);
    std::vector<hash_item> list;  // the engine's current list, number p.lists
    std::vector<std::vector<hash_item>> loading;
    for (int step = 0; step < 4000; ++step) {
        INFO("step " << step);
        // The call's items: the list again, its prefix, its tail, a new list, or items of no list.
        const auto draw = rng() % 10;
        std::vector<hash_item> c;
        hash_list_ref from;
        if (draw < 2 || list.empty()) {
            const std::vector<hash_item>& from_set = rng() % 4 == 0 ? ints : universe;
            const std::size_t n = 1 + rng() % 6;
            std::set<std::size_t> used;
            while (c.size() < n)
                if (const std::size_t i = rng() % from_set.size(); used.insert(i).second) c.push_back(from_set[i]);
            if (draw == 0) {
                from = {};  // a list read hash_item by hash_item (not remembered)
            } else {
                list = c;
                from = {.list = ++p.lists, .at = 0, .size = c.size()};
            }
        } else {
            const std::size_t n = 1 + rng() % list.size();
            const std::size_t at = draw < 6 ? 0 : list.size() - n;
            c.assign(list.begin() + static_cast<std::ptrdiff_t>(at),
                     list.begin() + static_cast<std::ptrdiff_t>(at + n));
            from = {.list = p.lists, .at = at, .size = list.size()};
        }
        const auto tk = p.keys(c, from);
        kvpolicy::testing::offload_pair_step(
            rng, p.ref, p.m, c, p.model_keys(c), tk,
            [&](const std::vector<std::uint64_t>& keys) {
                return p.r.prepare_store(p.m, keys, resolver_under_test<Order>::bytes_of(c), false);
            },
            p.stored, loading, [&](const std::vector<hash_item>& done) { return p.model_keys(done); },
            [&](const std::vector<hash_item>& done) { return p.keys(done, {}); });
        REQUIRE(p.ref.size() == p.m.size());
        std::set<hash_item> seen;  // distinct items stored are distinct blocks
        for (const auto& [slot, x] : p.stored) REQUIRE(seen.insert(x).second);
        REQUIRE(p.stored.size() == p.m.size());
    }
}

}  // namespace

TEST_CASE("byte_hash_resolver over repeated lists answers as a manager keyed by whole items", "[engine]") {
    for (std::uint64_t mask : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{3}, ~std::uint64_t{0}})
        for (std::uint64_t seed : {1u, 2u, 3u}) {
            INFO("mask " << mask << ", seed " << seed);
            random_resolver_run<engine::vllm_legacy_lru_order>(mask, seed);
            random_resolver_run<engine::policy_order<lru>>(mask, seed);
            random_resolver_run<engine::policy_order<fifo>>(mask, seed);
        }
}

TEST_CASE("byte_hash_resolver: a block stored by its key is any byte hash's that reaches it", "[engine]") {
    resolver_under_test<engine::vllm_legacy_lru_order> p(4, ~std::uint64_t{0});
    const std::vector<hash_item> b{std::string(32, 'b')};
    const std::uint64_t k = engine::fold_bytes(std::get<std::string>(b[0]));
    const auto plan =
        p.r.prepare_store(p.m, std::span(&k, 1), resolver_under_test<engine::vllm_legacy_lru_order>::bytes_of(b),
                          /*by_key=*/true);
    REQUIRE(plan.has_value());
    p.m.complete_store(std::span(&k, 1), true);
    REQUIRE(p.m.lookup(p.keys(b, {})) == 1);
    // The remembered list's keys stay right across stores of other blocks.
    const std::vector<hash_item> two{std::string(32, 'x'), std::string(32, 'y')};
    const auto first = p.keys(two, {.list = 1, .at = 0, .size = 2});
    const std::uint64_t other = 12345;
    (void)p.r.prepare_store(p.m, std::span(&other, 1), resolver_under_test<engine::vllm_legacy_lru_order>::bytes_of(b),
                            true);
    p.m.complete_store(std::span(&other, 1), true);
    REQUIRE(p.keys(two, {.list = 1, .at = 0, .size = 2}) == first);
    REQUIRE(p.keys({two[1]}, {.list = 1, .at = 1, .size = 2}) == std::vector<std::uint64_t>{first[1]});
}
