// engine::hashed_slots against a naive model: a vector of (slot, key) pairs
// searched linearly. Keys are integers whose hash is the key modulo a small
// number (1, 2, 7: most keys share their hash with others), inserted into
// and erased from random slots over long runs; every key, present or not,
// must be found in exactly the model's slot.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/hashed_slots.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

using kvpolicy::no_index;
using kvpolicy::engine::hashed_slots;

void random_hashed_slots_run(std::uint64_t hashes, std::size_t capacity, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    hashed_slots slots(capacity);
    std::vector<std::optional<std::uint64_t>> key(capacity);  // [slot] the key there: the caller's keys
    std::vector<std::pair<std::uint32_t, std::uint64_t>> model;
    const auto hash = [&](std::uint64_t k) { return k % hashes; };
    const auto find = [&](std::uint64_t k) {
        return slots.find(hash(k), [&](std::uint32_t s) { return key[s] == k; });
    };
    for (int step = 0; step < 20000; ++step) {
        INFO("step " << step);
        const std::uint64_t k = rng() % (3 * capacity);
        const auto in_model = std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.second == k; });
        const std::uint32_t want = in_model == model.end() ? no_index : in_model->first;
        REQUIRE(find(k) == want);
        const auto op = rng() % 100;
        if (op < 45 && want == no_index && model.size() < capacity) {
            std::uint32_t s = static_cast<std::uint32_t>(rng() % capacity);
            while (key[s]) s = (s + 1) % static_cast<std::uint32_t>(capacity);
            slots.insert(s, hash(k));
            key[s] = k;
            model.emplace_back(s, k);
        } else if (op < 90 && !model.empty()) {
            const std::size_t i = rng() % model.size();
            slots.erase(model[i].first);
            key[model[i].first].reset();
            model.erase(model.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (op == 99) {
            slots.clear();
            std::fill(key.begin(), key.end(), std::nullopt);
            model.clear();
        }
        REQUIRE(slots.size() == model.size());
        for (const auto& [s, x] : model) REQUIRE(slots.hash(s) == hash(x));
    }
}

}  // namespace

TEST_CASE("hashed_slots finds each key in its slot whatever keys share its hash", "[engine]") {
    for (std::uint64_t hashes : {1u, 2u, 7u, 1000u})
        for (std::size_t capacity : {1u, 5u, 64u})
            for (std::uint64_t seed : {1u, 2u}) {
                INFO("hashes " << hashes << ", capacity " << capacity << ", seed " << seed);
                random_hashed_slots_run(hashes, capacity, seed);
            }
}

TEST_CASE("hashed_slots: what the caller's comparison throws passes through, nothing changed", "[engine]") {
    hashed_slots slots(4);
    slots.insert(2, 9);
    slots.insert(3, 9);
    REQUIRE_THROWS_AS(slots.find(9, [](std::uint32_t) -> bool { throw std::runtime_error("eq"); }), std::runtime_error);
    REQUIRE(slots.size() == 2);
    REQUIRE(slots.find(9, [](std::uint32_t s) { return s == 3; }) == 3);
    REQUIRE(slots.find(9, [](std::uint32_t s) { return s == 2; }) == 2);
    REQUIRE(slots.find(8, [](std::uint32_t) { return true; }) == no_index);
}
