// engine::byte_hash_keys against an obviously-correct model: a second
// offload_manager whose keys are the hashes' whole bytes (each distinct byte
// string numbered once, so two hashes never share a key). The table's
// manager folds every hash into a handful of keys (a fold mask of 0, 1 or 3)
// and must answer exactly as the model, call after call, over long random
// runs; the fold itself is checked against a byte-by-byte reading.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/byte_hash_keys.hpp>
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
#include <vector>

namespace {

using namespace kvpolicy;
using engine::byte_hash_keys;
using engine::offload_manager;

// The fold as its comment reads: little-endian words of the bytes, the last
// zero-padded, each mixed into the length's mix64.
std::uint64_t naive_fold(std::string_view b) {
    std::uint64_t k = mix64(b.size());
    for (std::size_t i = 0; i < b.size(); i += 8) {
        std::uint64_t w = 0;
        for (std::size_t j = 0; j < 8 && i + j < b.size(); ++j)
            w |= std::uint64_t{static_cast<unsigned char>(b[i + j])} << (8 * j);
        k = mix64(k ^ w);
    }
    return k;
}

std::string random_bytes(std::mt19937_64& rng, std::size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
}

// One call's items: byte hashes, as an engine hands them over.
struct call {
    std::vector<std::string> hashes;
    std::vector<std::uint64_t> folds;  // fold_bytes of each
    explicit call(std::vector<std::string> h) : hashes(std::move(h)) {
        for (const std::string& x : hashes) folds.push_back(engine::fold_bytes(x));
    }
    auto bytes_of() const {
        return [this](std::size_t i) -> std::optional<std::string_view> { return hashes[i]; };
    }
};

// The table's manager beside the model's, the same order and size.
template <class Order>
struct pair_under_test {
    offload_manager<Order> m, ref;
    byte_hash_keys table;
    std::map<std::string, std::uint64_t> ids;     // the model's keys: each distinct hash numbered once
    std::map<std::uint32_t, std::string> stored;  // the table's manager: slot -> hash stored there

    pair_under_test(std::size_t n, std::uint64_t mask) : m(n, {}, false), ref(n, {}, false) {
        table.set_fold_mask(mask);
    }
    std::vector<std::uint64_t> model_keys(const call& c) {
        std::vector<std::uint64_t> k;
        for (const std::string& h : c.hashes) k.push_back(ids.try_emplace(h, ids.size() + 1).first->second);
        return k;
    }
    std::vector<std::uint64_t> table_keys(const call& c) {
        const auto s = table.resolve(m, c.folds, c.bytes_of());
        return {s.begin(), s.end()};
    }
    // Distinct hashes stored are distinct blocks, and each is found again.
    void check_identity() {
        std::set<std::string> seen;
        for (const auto& [slot, h] : stored) {
            REQUIRE(seen.insert(h).second);
            REQUIRE(m.find(table.key_of(m, h)) == slot);
        }
        REQUIRE(stored.size() == m.size());
    }
};

template <class Order>
void random_run(std::uint64_t mask, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::string> universe;
    for (int i = 0; i < 60; ++i) universe.push_back(random_bytes(rng, i % 10 == 0 ? 40 + i : 32));  // some long
    universe.push_back("");
    universe.push_back("short");
    pair_under_test<Order> p(16, mask);
    std::vector<std::vector<std::string>> loading;
    const auto pick = [&] {
        std::vector<std::string> run;
        const std::size_t n = 1 + rng() % 6;
        std::set<std::size_t> used;
        while (run.size() < n)
            if (const std::size_t i = rng() % universe.size(); used.insert(i).second) run.push_back(universe[i]);
        return call(run);
    };
    for (int step = 0; step < 4000; ++step) {
        INFO("step " << step);
        const call c = pick();
        const auto tk = p.table_keys(c);
        const auto store = [&](const std::vector<std::uint64_t>& keys) {
            auto got = p.m.prepare_store(keys);
            if (got)
                for (std::size_t j = 0; j < got->slots.size(); ++j)
                    p.table.name_bytes(p.m, got->slots[j], c.hashes[got->positions[j]], keys[got->positions[j]]);
            return got;
        };
        kvpolicy::testing::offload_pair_step(
            rng, p.ref, p.m, c.hashes, p.model_keys(c), tk, store, p.stored, loading,
            [&](const std::vector<std::string>& done) { return p.model_keys(call(done)); },
            [&](const std::vector<std::string>& done) { return p.table_keys(call(done)); });
        REQUIRE(p.ref.size() == p.m.size());
        p.check_identity();
    }
    for (const std::string& h : universe) {  // every block's state, hash by hash
        const std::uint32_t a = p.ref.find(p.ids.try_emplace(h, p.ids.size() + 1).first->second);
        const std::uint32_t b = p.m.find(p.table.key_of(p.m, h));
        REQUIRE(a == b);
        if (a != no_index) REQUIRE(p.ref.state(a) == p.m.state(b));
    }
}

}  // namespace

TEST_CASE("fold_bytes reads the bytes as little-endian words after the length", "[engine]") {
    std::mt19937_64 rng(7);
    for (std::size_t n = 0; n < 100; ++n) {
        const std::string b = random_bytes(rng, n);
        REQUIRE(engine::fold_bytes(b) == naive_fold(b));
        REQUIRE(engine::fold_bytes(std::as_bytes(std::span(b.data(), b.size()))) == naive_fold(b));
    }
    REQUIRE(engine::fold_bytes(std::string_view("a\0", 2)) != engine::fold_bytes(std::string_view("a")));
}

TEST_CASE("byte_hash_keys with colliding folds answers as a manager keyed by the whole bytes", "[engine]") {
    for (std::uint64_t mask : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{3}, ~std::uint64_t{0}})
        for (std::uint64_t seed : {1u, 2u}) {
            INFO("mask " << mask << ", seed " << seed);
            random_run<engine::vllm_legacy_lru_order>(mask, seed);
            random_run<engine::policy_order<lru>>(mask, seed);
            random_run<engine::policy_order<fifo>>(mask, seed);
        }
}

TEST_CASE("byte_hash_keys finds a hash stored past its fold after the block at its fold leaves", "[engine]") {
    pair_under_test<engine::vllm_legacy_lru_order> p(2, 0);
    const auto store = [&](const std::string& h) {
        const call c({h});
        const std::uint64_t k = p.table_keys(c)[0];
        const auto plan = p.m.prepare_store(std::span(&k, 1));
        REQUIRE(plan.has_value());
        for (std::uint32_t s : plan->slots) p.table.name_bytes(p.m, s, h, k);
        p.m.complete_store(std::span(&k, 1), true);
        return *plan;
    };
    store("a");
    REQUIRE(p.table.probed() == 0);
    store("b");  // b's fold is a's key: b goes past it
    REQUIRE(p.table.probed() == 1);
    REQUIRE(p.table.key_of(p.m, "b") == byte_hash_keys::probe(0, 1));
    const auto plan = store("c");  // evicts a, the least recent
    REQUIRE(plan.evicted == std::vector<std::uint64_t>{0});
    const std::uint64_t kb = p.table.key_of(p.m, "b"), kc = p.table.key_of(p.m, "c");
    REQUIRE(kb != kc);
    REQUIRE(p.m.find(kb) != no_index);
    REQUIRE(p.m.find(kc) != no_index);
    REQUIRE(p.m.find(p.table.key_of(p.m, "a")) == no_index);
}

TEST_CASE("byte_hash_keys gives new hashes of one fold in one call distinct keys, the same bytes one key", "[engine]") {
    offload_manager<engine::vllm_legacy_lru_order> m(8);
    byte_hash_keys table;
    table.set_fold_mask(0);
    const call c({"x", "y", "z", "y"});
    const auto k = table.resolve(m, c.folds, c.bytes_of());
    REQUIRE(k[0] == 0);
    REQUIRE(k[1] == byte_hash_keys::probe(0, 1));
    REQUIRE(k[2] == byte_hash_keys::probe(0, 2));
    REQUIRE(k[3] == k[1]);
    REQUIRE_THROWS_WITH(m.prepare_store(k), Catch::Contains("appears twice"));
}

TEST_CASE("byte_hash_keys: a block named by its key is any hash's, one named otherwise none's", "[engine]") {
    offload_manager<engine::vllm_legacy_lru_order> m(4);
    byte_hash_keys table;
    table.set_fold_mask(0);
    const std::uint64_t zero = 0;
    const auto plan = m.prepare_store(std::span(&zero, 1));  // a block stored by its key, 0: every fold's
    m.complete_store(std::span(&zero, 1), true);
    REQUIRE(table.key_of(m, "anything") == 0);  // no slot named yet: keys name blocks
    table.name_other(m.capacity(), plan->slots[0]);
    REQUIRE(table.key_of(m, "anything") == byte_hash_keys::probe(0, 1));
    table.name_by_key(plan->slots[0]);
    REQUIRE(table.key_of(m, "anything") == 0);
    // Items that are not byte hashes keep their keys.
    const std::vector<std::uint64_t> keys{0, 5};
    const auto k = table.resolve(m, keys, [](std::size_t) { return std::optional<std::string_view>(); });
    REQUIRE(std::vector<std::uint64_t>(k.begin(), k.end()) == keys);
}
