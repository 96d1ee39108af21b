// One random call into two offloading managers that must answer alike: a
// model `ref` keyed by each item's identity, and `m` keyed by the keys under
// test (a table's or a resolver's for byte hashes). A store, a lookup, a
// touch, a load begun, or a load in flight completed, with every answer
// compared. tests/engine_byte_hash_keys.cpp and engine_byte_hash_resolver.cpp
// drive their random runs with it.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace kvpolicy::testing {

/// The call's items `c`, their keys in the model (`rk`) and under test
/// (`tk`). `prepare_store(tk)`: m's prepare_store, naming the blocks it
/// takes; `stored`: which item each of m's slots holds; `loading`: the items
/// of the loads in flight, whose keys `model_keys(items)` and `keys(items)`
/// give again when they complete.
template <class Item, class Ref, class M, class PrepareStore, class ModelKeys, class Keys>
void offload_pair_step(std::mt19937_64& rng, Ref& ref, M& m, const std::vector<Item>& c,
                       const std::vector<std::uint64_t>& rk, const std::vector<std::uint64_t>& tk,
                       PrepareStore&& prepare_store, std::map<std::uint32_t, Item>& stored,
                       std::vector<std::vector<Item>>& loading, ModelKeys&& model_keys, Keys&& keys) {
    const auto op = rng() % 100;
    if (op < 35) {
        const auto want = ref.prepare_store(rk);
        const auto got = prepare_store(tk);
        REQUIRE(want.has_value() == got.has_value());
        if (!want) return;
        REQUIRE(want->positions == got->positions);
        REQUIRE(want->slots == got->slots);
        REQUIRE(want->evicted_slots == got->evicted_slots);
        for (std::uint32_t s : got->evicted_slots) stored.erase(s);
        for (std::size_t j = 0; j < got->slots.size(); ++j) stored[got->slots[j]] = c[got->positions[j]];
        std::vector<std::uint64_t> rs, ts;
        for (std::uint32_t at : want->positions) {
            rs.push_back(rk[at]);
            ts.push_back(tk[at]);
        }
        const bool ok = rng() % 10 != 0;
        ref.complete_store(rs, ok);
        m.complete_store(ts, ok);
        if (!ok)
            for (std::uint32_t s : got->slots) stored.erase(s);
    } else if (op < 50) {  // a load of the hit prefix begun
        const std::size_t n = ref.lookup(rk);
        REQUIRE(m.lookup(tk) == n);
        if (n > 0) {
            std::vector<std::uint32_t> a(n), b(n);
            ref.prepare_load(std::span(rk).first(n), a);
            m.prepare_load(std::span(tk).first(n), b);
            REQUIRE(a == b);
            loading.emplace_back(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n));
        }
    } else if (op < 75) {
        REQUIRE(ref.lookup(rk) == m.lookup(tk));
    } else if (op < 90) {
        ref.touch(rk);
        m.touch(tk);
    } else if (!loading.empty()) {
        const std::size_t i = rng() % loading.size();
        const std::vector<Item> done = loading[i];
        loading.erase(loading.begin() + static_cast<std::ptrdiff_t>(i));
        ref.complete_load(model_keys(done));
        m.complete_load(keys(done));
    }
}

}  // namespace kvpolicy::testing
