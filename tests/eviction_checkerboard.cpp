// lexicographic_checkerboard: seed 000's pictures as a fixed order (back
// layers first, then older sessions, then leading chunks), its worked example
// and scenarios, and long random operation sequences against a sort-based
// reference.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/checkerboard.hpp>

#include <algorithm>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

access_context item(std::uint64_t session, std::uint32_t chunk, std::uint32_t layer, timestamp now = 0) {
    access_context c;
    c.now = now;
    c.session = session_id{session};
    c.chunk = chunk_index{chunk};
    c.layer = layer_index{layer};
    c.num_layers = 40;
    c.session_total_chunks = 100;
    c.context_length = 32u * chunk;
    return c;
}

std::vector<std::uint32_t> drain(lexicographic_checkerboard& p) {
    std::vector<std::uint32_t> out;
    while (auto v = p.pop_victim(0)) out.push_back(v->value);
    return out;
}

}  // namespace

TEST_CASE("seed 000's worked example, layer-major: L1C0, L1C1, L0C0, L0C1", "[checkerboard][seed]") {
    // The seed's priority list (Layer39 Chunk0 .. Layer0 ChunkN) in two
    // layers; its "L0C1 before L0C0" contradicts that list.
    lexicographic_checkerboard p(4);
    p.on_insert(item_id{0}, item(1, 0, 0));  // L0C0
    p.on_insert(item_id{1}, item(1, 0, 1));  // L1C0
    p.on_insert(item_id{2}, item(1, 1, 0));  // L0C1
    p.on_insert(item_id{3}, item(1, 1, 1));  // L1C1
    REQUIRE(drain(p) == std::vector<std::uint32_t>{1, 3, 0, 2});
}

TEST_CASE("the seed's visual order: a layer's chunks from the front, then the layer before", "[checkerboard][seed]") {
    lexicographic_checkerboard p(160);
    // Inserted in a scrambled order with scrambled ids.
    std::vector<std::uint32_t> ids(160);
    for (std::uint32_t i = 0; i < 160; ++i) ids[i] = (i * 37) % 160;
    for (std::uint32_t i = 0; i < 160; ++i) p.on_insert(item_id{ids[i]}, item(1, i % 4, i / 4));
    const auto order = drain(p);
    REQUIRE(order.size() == 160);
    for (std::uint32_t k = 0; k < 160; ++k) {
        const std::uint32_t layer = 39 - k / 4, chunk = k % 4;
        REQUIRE(order[k] == ids[layer * 4 + chunk]);
    }
}

TEST_CASE("seed scenario 1: three sessions, the oldest's Layer39 Chunk0, then its Chunk1", "[checkerboard][seed]") {
    // Sessions numbered in arrival order: 4 is the oldest.
    lexicographic_checkerboard p(240);
    std::uint32_t next = 0;
    for (std::uint64_t s : {6u, 4u, 5u})
        for (std::uint32_t c = 0; c < 2; ++c)
            for (std::uint32_t l = 0; l < 40; ++l) p.on_insert(item_id{next++}, item(s, c, l, 1000 - s));
    // ids: session 6 -> 0..79, 4 -> 80..159, 5 -> 160..239; id = base + c * 40 + l.
    item_id out[8];
    REQUIRE(p.pop_victims(out, 5000) == 8);
    const std::uint32_t want[8] = {80 + 39, 80 + 40 + 39, 160 + 39, 160 + 40 + 39, 39, 40 + 39, 80 + 38, 80 + 40 + 38};
    for (int i = 0; i < 8; ++i) REQUIRE(out[i].value == want[i]);
}

TEST_CASE("seed scenario 2: five turns, room for three chunks of two layers", "[checkerboard][seed]") {
    // Layer-major: the back layer of every chunk goes before any front layer,
    // so, unlike retention_value, chunk 0's front layer survives turn 3.
    lexicographic_checkerboard p(6);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> held_by(6);
    std::vector<std::uint32_t> free_slots{5, 4, 3, 2, 1, 0};
    std::vector<std::pair<std::uint32_t, std::uint32_t>> victims;
    for (std::uint32_t turn = 0; turn < 5; ++turn)
        for (std::uint32_t l = 0; l < 2; ++l) {
            if (free_slots.empty()) {
                const auto v = p.pop_victim(turn);
                REQUIRE(v.has_value());
                victims.push_back(held_by[v->index()]);
                free_slots.push_back(v->value);
            }
            const std::uint32_t s = free_slots.back();
            free_slots.pop_back();
            held_by[s] = {turn, l};
            p.on_insert(item_id{s}, item(7, turn, l, turn));
        }
    using cl = std::pair<std::uint32_t, std::uint32_t>;
    // Turn 3: L1C0 then L1C1; turn 4: L1C2 then L1C3 (the new chunk 3's
    // back layer is cheaper in layer-major order than any front layer).
    REQUIRE(victims == std::vector<cl>{{0, 1}, {1, 1}, {2, 1}, {3, 1}});
}

TEST_CASE("seed scenario 3: layer 39 goes before layer 0", "[checkerboard][seed]") {
    lexicographic_checkerboard p(80);
    for (std::uint32_t c = 0; c < 2; ++c)
        for (std::uint32_t l = 0; l < 40; ++l) p.on_insert(item_id{c * 40 + l}, item(3, c, l));
    const auto order = drain(p);
    REQUIRE(order.size() == 80);
    REQUIRE(order[0] == 39);
    REQUIRE(order[1] == 40 + 39);
    REQUIRE(order[78] == 0);
    REQUIRE(order[79] == 40);
}

TEST_CASE("accesses do not reorder, a hold removes, a release puts back at the same key", "[checkerboard]") {
    lexicographic_checkerboard p(4);
    p.on_insert(item_id{2}, item(1, 0, 5));
    p.on_insert(item_id{0}, item(1, 1, 5));
    p.on_insert(item_id{1}, item(2, 0, 5));
    p.on_insert(item_id{3}, item(1, 0, 4));
    p.on_access(item_id{2}, item(1, 0, 5, 99));
    p.on_hold(item_id{2});
    REQUIRE(p.evictable_size() == 3);
    REQUIRE(p.pop_victim(100) == item_id{0});
    p.on_release(item_id{2}, item(1, 0, 5, 120));
    REQUIRE(p.pop_victim(130) == item_id{2});
    p.on_erase(item_id{1});
    REQUIRE(p.pop_victim(130) == item_id{3});
    REQUIRE_FALSE(p.pop_victim(130).has_value());
    REQUIRE(p.counters() ==
            policy_counters{.insertions = 4, .hits = 1, .evictions = 3, .erasures = 1, .ghost_hits = 0});
}

TEST_CASE("equal keys: the lowest id first", "[checkerboard]") {
    lexicographic_checkerboard p(8);
    for (std::uint32_t id : {6u, 1u, 4u}) p.on_insert(item_id{id}, item(9, 2, 3));
    REQUIRE(drain(p) == std::vector<std::uint32_t>{1, 4, 6});
}

TEST_CASE("checkerboard: same victims as the sort-based reference", "[checkerboard][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    lexicographic_checkerboard policy(capacity);
    ref_checkerboard reference;
    const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
    REQUIRE(policy.counters().evictions == victims.size());
    REQUIRE(victims.size() > 100);
}
