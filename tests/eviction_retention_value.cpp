// retention_value: seed 000's worked example and scenarios, the documented
// edges (just-used items, ties, holds, releases, NaN costs), and long random
// operation sequences against a naive reference that computes cost /
// time_inactive for every item at every pop.
#include <catch2/catch.hpp>

#include <kvpolicy/cost/measured_table.hpp>
#include <kvpolicy/cost/uniform_weights.hpp>
#include <kvpolicy/cost/unit_cost.hpp>
#include <kvpolicy/eviction/retention_value.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/policy_driver.hpp"
#include "support/reference_policies.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

// One layer-chunk of seed 000's layout: `chunk_tokens` tokens per chunk.
access_context item(std::uint64_t session, std::uint32_t chunk, std::uint32_t layer, std::uint32_t num_layers,
                    std::uint32_t total_chunks, timestamp now, std::uint64_t chunk_tokens = 32) {
    access_context c;
    c.now = now;
    c.session = session_id{session};
    c.chunk = chunk_index{chunk};
    c.layer = layer_index{layer};
    c.num_layers = num_layers;
    c.session_total_chunks = total_chunks;
    c.context_length = chunk_tokens * chunk;
    return c;
}

// Seed 000's rule (its weights, each chunk priced alone). scan_fraction 0:
// every pop scans, the exact rule the reference model states.
const seed000_retention_value::config_type seed_config{
    .cost = pensieve_linear({.alpha = 0.001, .beta = 0.01, .const_non_attention = 0.005}), .scan_fraction = 0};
// The default rule (uniform weights, a chunk priced with its dependents).
const retention_value<>::config_type default_config{
    .cost = pensieve_linear({.alpha = 0.001, .beta = 0.01, .const_non_attention = 0.005}), .scan_fraction = 0};

std::vector<std::uint32_t> drain(seed000_retention_value& p, timestamp now) {
    std::vector<std::uint32_t> out;
    while (auto v = p.pop_victim(now)) out.push_back(v->value);
    return out;
}

}  // namespace

TEST_CASE("seed 000's worked example: costs", "[retention_value][seed]") {
    const seed000_retention_value p(4, seed_config);
    REQUIRE(std::abs(p.item_cost(item(1, 0, 0, 2, 2, 0)) - 0.0075) <= 1e-12);
    REQUIRE(std::abs(p.item_cost(item(1, 0, 1, 2, 2, 0)) - 0.00375) <= 1e-12);
    REQUIRE(std::abs(p.item_cost(item(1, 1, 0, 2, 2, 0)) - 0.047) <= 1e-12);
    REQUIRE(std::abs(p.item_cost(item(1, 1, 1, 2, 2, 0)) - 0.0235) <= 1e-12);
}

TEST_CASE("seed 000's worked example: by value, L1C0, L0C0, L1C1, L0C1", "[retention_value][seed]") {
    // The seed lists L1C0, L1C1, L0C1, L0C0, which its own costs contradict:
    // with equal idle times the order is by cost.
    seed000_retention_value p(4, seed_config);
    // ids: 0 = L0C0, 1 = L1C0, 2 = L0C1, 3 = L1C1, all used at t = 0.
    p.on_insert(item_id{0}, item(1, 0, 0, 2, 2, 0));
    p.on_insert(item_id{1}, item(1, 0, 1, 2, 2, 0));
    p.on_insert(item_id{2}, item(1, 1, 0, 2, 2, 0));
    p.on_insert(item_id{3}, item(1, 1, 1, 2, 2, 0));
    REQUIRE(std::abs(*p.retention(item_id{1}, 10) - 0.000375) <= 1e-15);
    SECTION("one at a time") { REQUIRE(drain(p, 10) == std::vector<std::uint32_t>{1, 0, 3, 2}); }
    SECTION("as one batch") {
        item_id out[6];
        REQUIRE(p.pop_victims(out, 10) == 4);
        REQUIRE(out[0] == item_id{1});
        REQUIRE(out[1] == item_id{0});
        REQUIRE(out[2] == item_id{3});
        REQUIRE(out[3] == item_id{2});
        REQUIRE(p.size() == 0);
        REQUIRE(p.counters().evictions == 4);
    }
}

TEST_CASE("seed scenario 1: three sessions under pressure, the oldest goes first", "[retention_value][seed]") {
    // 3 sessions of 2 chunks x 40 layers, last used at t = 100, 200, 300;
    // room for 2 chunks (80 items) of the 6: 160 victims.
    constexpr std::uint32_t layers = 40;
    seed000_retention_value p(240, seed_config);
    auto id_of = [](std::uint64_t s, std::uint32_t c, std::uint32_t l) {
        return item_id{static_cast<std::uint32_t>(s * 80 + c * 40 + l)};
    };
    for (std::uint64_t s = 0; s < 3; ++s)
        for (std::uint32_t c = 0; c < 2; ++c)
            for (std::uint32_t l = 0; l < layers; ++l)
                p.on_insert(id_of(s, c, l), item(s, c, l, layers, 2, 100 * (s + 1)));
    std::vector<item_id> victims(160);
    REQUIRE(p.pop_victims(victims, 1000) == 160);
    REQUIRE(victims[0] == id_of(0, 0, 39));  // oldest session's Layer39, Chunk0
    std::vector<std::size_t> rank(240, 1000);
    for (std::size_t i = 0; i < victims.size(); ++i) rank[victims[i].index()] = i;
    for (std::uint32_t c = 0; c < 2; ++c)
        for (std::uint32_t l = 0; l < layers; ++l) {
            // Same cost, longer idle: the older session's copy goes first.
            REQUIRE(rank[id_of(0, c, l).index()] <= rank[id_of(1, c, l).index()]);
            REQUIRE(rank[id_of(1, c, l).index()] <= rank[id_of(2, c, l).index()]);
            for (std::uint64_t s = 0; s < 3; ++s) {
                // Within a session: back layers and leading chunks first.
                if (l > 0) REQUIRE(rank[id_of(s, c, l).index()] <= rank[id_of(s, c, l - 1).index()]);
                REQUIRE(rank[id_of(s, 0, l).index()] <= rank[id_of(s, 1, l).index()]);
            }
        }
    // Independently: the victims are the 160 lowest of cost / idle, in
    // ascending order. (Some values tie mathematically, e.g. 36/40 at idle
    // 900 and 32/40 at idle 800, and rounding may split them either way:
    // compare with a relative tolerance.)
    std::vector<double> value(240);
    for (std::uint64_t s = 0; s < 3; ++s)
        for (std::uint32_t c = 0; c < 2; ++c)
            for (std::uint32_t l = 0; l < layers; ++l) {
                const double cost = (40.0 - l) / 40.0 * ((c + 1.0) / 2.0) * (0.001 * 32.0 * c + 0.015);
                value[id_of(s, c, l).index()] = cost / double(1000 - 100 * (s + 1));
            }
    const double tol = 1e-12;
    double highest = 0.0;
    for (std::size_t i = 0; i < victims.size(); ++i) {
        if (i > 0) REQUIRE(value[victims[i - 1].index()] <= value[victims[i].index()] * (1 + tol));
        highest = std::max(highest, value[victims[i].index()]);
    }
    for (std::uint32_t id = 0; id < 240; ++id)
        if (p.contains(item_id{id})) REQUIRE(value[id] >= highest * (1 - tol));
    REQUIRE(p.size() == 80);
}

TEST_CASE("seed scenario 2: five turns, room for three chunks, leading chunks of old turns go",
          "[retention_value][seed]") {
    const std::uint32_t layers = GENERATE(1u, 2u);
    seed000_retention_value p(3 * layers, seed_config);
    // Slots are reused: which (chunk, layer) each one holds.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> held_by(3 * layers);
    std::vector<std::uint32_t> free_slots;
    for (std::uint32_t s = 0; s < 3 * layers; ++s) free_slots.push_back(3 * layers - 1 - s);
    std::vector<std::uint32_t> chunk_of_victim;
    for (std::uint32_t turn = 0; turn < 5; ++turn) {
        const timestamp now = 10 * (turn + 1);
        // The turn reads every chunk still cached (attention over the
        // history), then stores its own chunk: all of them are just used,
        // so the victims are chosen by cost alone.
        for (std::uint32_t s = 0; s < 3 * layers; ++s)
            if (p.contains(item_id{s}))
                p.on_access(item_id{s}, item(7, held_by[s].first, held_by[s].second, layers, turn + 1, now));
        for (std::uint32_t l = 0; l < layers; ++l) {
            if (free_slots.empty()) {
                const auto v = p.pop_victim(now);
                REQUIRE(v.has_value());
                chunk_of_victim.push_back(held_by[v->index()].first);
                free_slots.push_back(v->value);
            }
            const std::uint32_t s = free_slots.back();
            free_slots.pop_back();
            held_by[s] = {turn, l};
            p.on_insert(item_id{s}, item(7, turn, l, layers, turn + 1, now));
        }
    }
    // Turns 3 and 4 each evict one chunk's worth: chunk 0, then chunk 1.
    std::vector<std::uint32_t> want;
    for (std::uint32_t c = 0; c < 2; ++c)
        for (std::uint32_t l = 0; l < layers; ++l) want.push_back(c);
    REQUIRE(chunk_of_victim == want);
    std::vector<std::uint32_t> kept;
    for (std::uint32_t s = 0; s < 3 * layers; ++s) {
        REQUIRE(p.contains(item_id{s}));
        kept.push_back(held_by[s].first);
    }
    std::sort(kept.begin(), kept.end());
    REQUIRE(kept.front() == 2);  // chunks 2, 3 and 4 stay
    REQUIRE(kept.back() == 4);
}

TEST_CASE("seed scenario 3 under retention value: layer 39 goes before layer 0", "[retention_value][seed]") {
    seed000_retention_value p(80, seed_config);
    for (std::uint32_t c = 0; c < 2; ++c)
        for (std::uint32_t l = 0; l < 40; ++l) p.on_insert(item_id{c * 40 + l}, item(3, c, l, 40, 2, 0));
    const auto order = drain(p, 50);
    REQUIRE(order.size() == 80);
    auto rank = [&](std::uint32_t c, std::uint32_t l) {
        return std::find(order.begin(), order.end(), c * 40 + l) - order.begin();
    };
    for (std::uint32_t c39 = 0; c39 < 2; ++c39)
        for (std::uint32_t c0 = 0; c0 < 2; ++c0) REQUIRE(rank(c39, 39) < rank(c0, 0));
    REQUIRE(order.front() == 39);     // Layer39, Chunk0: cheapest
    REQUIRE(order.back() == 40 + 0);  // Layer0, Chunk1: most expensive, kept longest
}

TEST_CASE("a just-used item is never preferred over an idle one, among just-used, lowest cost",
          "[retention_value][edges]") {
    seed000_retention_value p(8, seed_config);
    // Idle and expensive (layer 0, trailing chunk of a long context).
    p.on_insert(item_id{5}, item(1, 9, 0, 4, 10, 0));
    // Just used at t = 100 and much cheaper; the higher cost has the lower id.
    p.on_insert(item_id{0}, item(2, 1, 0, 4, 10, 100));
    p.on_insert(item_id{1}, item(2, 0, 3, 4, 10, 100));
    p.on_insert(item_id{2}, item(2, 0, 0, 4, 10, 100));
    REQUIRE(std::isinf(*p.retention(item_id{0}, 100)));
    REQUIRE(std::isinf(*p.retention(item_id{0}, 50)));  // `now` before the last use reads as just used
    REQUIRE(std::isfinite(*p.retention(item_id{0}, 101)));
    item_id out[4];
    REQUIRE(p.pop_victims(out, 100) == 4);
    REQUIRE(out[0] == item_id{5});
    REQUIRE(out[1] == item_id{1});  // cost 0.25 * 0.1 * 0.015
    REQUIRE(out[2] == item_id{2});  // cost 1 * 0.1 * 0.015
    REQUIRE(out[3] == item_id{0});  // cost 1 * 0.2 * 0.047
}

TEST_CASE("equal retention values: the lowest id first", "[retention_value][edges]") {
    seed000_retention_value p(16, seed_config);
    for (std::uint32_t id : {9u, 2u, 14u, 5u}) p.on_insert(item_id{id}, item(1, 0, 0, 1, 1, 0));
    // The same cost and time as the others; and half the cost at half the
    // idle time: the same value, computed another way.
    p.on_insert(item_id{3}, item(1, 1, 0, 1, 2, 0, 0));  // cost 1 * 1 * 0.015, idle 14
    p.on_insert(item_id{1}, item(1, 0, 0, 1, 2, 7, 0));  // cost 1 * 0.5 * 0.015, idle 7
    REQUIRE(*p.retention(item_id{3}, 14) == *p.retention(item_id{1}, 14));
    REQUIRE(*p.retention(item_id{9}, 14) == *p.retention(item_id{1}, 14));
    REQUIRE(drain(p, 14) == std::vector<std::uint32_t>{1, 2, 3, 5, 9, 14});
}

TEST_CASE("a hold removes the item from candidacy, a release is a use at ctx.now", "[retention_value][edges]") {
    seed000_retention_value p(4, seed_config);
    const auto ctx = [](timestamp t) { return item(1, 0, 0, 1, 1, t); };  // all cost the same
    p.on_insert(item_id{0}, ctx(0));
    p.on_insert(item_id{1}, ctx(10));
    p.on_hold(item_id{0});
    REQUIRE_FALSE(p.retention(item_id{0}, 20).has_value());
    REQUIRE(p.evictable_size() == 1);
    p.on_access(item_id{0}, ctx(15));  // a hit while held: the release decides
    REQUIRE(p.pop_victim(20) == item_id{1});
    REQUIRE_FALSE(p.pop_victim(20).has_value());  // only a held item left
    p.on_insert(item_id{2}, ctx(30));
    p.on_release(item_id{0}, ctx(50));  // used at 50, although inserted at 0
    REQUIRE(p.pop_victim(60) == item_id{2});
    REQUIRE(p.pop_victim(60) == item_id{0});
    p.on_insert(item_id{3}, ctx(60));
    p.on_access(item_id{3}, ctx(70));
    p.on_insert(item_id{1}, ctx(65));
    REQUIRE(p.pop_victim(80) == item_id{1});  // 3 was used last at 70
    p.on_erase(item_id{3});
    REQUIRE_FALSE(p.pop_victim(80).has_value());
    REQUIRE(p.counters() ==
            policy_counters{.insertions = 5, .hits = 2, .evictions = 4, .erasures = 1, .ghost_hits = 0});
}

namespace {
// A cost model that returns NaN for one context length: what a broken
// custom model looks like from inside the policy.
struct nan_at_seven {
    static constexpr std::string_view name = "nan_at_seven";
    [[nodiscard]] double cost(std::uint64_t context_length) const noexcept {
        return context_length == 7 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
    }
};
}  // namespace

TEST_CASE("a NaN cost makes the pop throw and remove nothing", "[retention_value][edges]") {
    retention_value<nan_at_seven, uniform_layer_weight, uniform_position_weight> p(4);
    access_context good{}, bad{};
    bad.context_length = 7;
    p.on_insert(item_id{0}, good);
    p.on_insert(item_id{1}, bad);
    item_id out[2];
    REQUIRE_THROWS_AS(p.pop_victims(out, 5), usage_error);
    REQUIRE_THROWS_AS(p.pop_victim(5), usage_error);
    REQUIRE(p.size() == 2);
    REQUIRE(p.evictable_size() == 2);
    p.on_erase(item_id{1});
    REQUIRE(p.pop_victim(5) == item_id{0});
}

TEST_CASE("bad cost parameters are rejected before a policy exists", "[retention_value][edges]") {
    using policy = retention_value<>;
    try {
        (void)policy(8, {.cost = pensieve_linear({.alpha = std::numeric_limits<double>::quiet_NaN()})});
        FAIL("NaN alpha accepted");
    } catch (const config_error& e) {
        REQUIRE_THAT(e.what(), Catch::Contains("alpha"));
    }
    REQUIRE_THROWS_AS(policy(8, {.cost = pensieve_linear({.beta = -0.01})}), config_error);
    REQUIRE_THROWS_AS(policy(0, {}), config_error);
    REQUIRE_THROWS_WITH(policy(8, {.scan_fraction = 1.5}),
                        "retention_value: scan_fraction = 1.500000 is not a share of the candidates; give a value in "
                        "[0, 1] (0: scan at every pop)");
    REQUIRE_THROWS_AS(policy(8, {.scan_fraction = std::numeric_limits<double>::quiet_NaN()}), config_error);
    REQUIRE_THROWS_AS(policy(8, {.scan_fraction = -0.1}), config_error);
}

TEST_CASE("other models compose: measured_table, unit cost with uniform weights is LRU", "[retention_value]") {
    retention_value<measured_table, pipelined_depth, session_relative> table(
        4, {.cost = measured_table{{0, 0.01}, {64, 0.05}}, .loss = retention_loss::chunk});
    REQUIRE(seed000_retention_value::config_type{}.loss == retention_loss::chunk);  // the seed's rule by default
    table.on_insert(item_id{0}, item(1, 1, 0, 1, 2, 0));                            // context 32: 0.03 * 1 * 1
    table.on_insert(item_id{1}, item(1, 0, 0, 1, 2, 0));                            // context 0: 0.01 * 1 * 0.5
    REQUIRE(std::abs(table.item_cost(item(1, 1, 0, 1, 2, 0)) - 0.03) < 1e-15);
    REQUIRE(table.pop_victim(1) == item_id{1});

    retention_value<unit_cost, uniform_layer_weight, uniform_position_weight> lru_like(3,
                                                                                       {.loss = retention_loss::chunk});
    lru_like.on_insert(item_id{0}, item(1, 0, 0, 1, 1, 1));
    lru_like.on_insert(item_id{1}, item(1, 0, 0, 1, 1, 2));
    lru_like.on_insert(item_id{2}, item(1, 0, 0, 1, 1, 3));
    lru_like.on_access(item_id{0}, item(1, 0, 0, 1, 1, 4));
    REQUIRE(lru_like.pop_victim(5) == item_id{1});
    REQUIRE(lru_like.pop_victim(5) == item_id{2});
}

TEST_CASE("the default loss is a chunk and every later chunk of its session", "[retention_value][prefix]") {
    // Against the sum written out, chunk by chunk: exact for a linear cost.
    std::mt19937_64 rng(41);
    std::uniform_real_distribution<double> u(0, 0.01);
    for (int trial = 0; trial < 5000; ++trial) {
        const retention_value<> p(
            4, {.cost = pensieve_linear({.alpha = u(rng), .beta = u(rng), .const_non_attention = u(rng)})});
        const auto total = static_cast<std::uint32_t>(1 + rng() % 300);
        const auto chunk = static_cast<std::uint32_t>(rng() % total);
        const std::uint64_t block = 1 + rng() % 1024;
        access_context c = item(rng() % 8, chunk, 0, 1, total, 5, block);
        c.block_tokens = rng() % 2 == 0 ? static_cast<std::uint32_t>(block) : 0;  // 0: derived from the context
        if (chunk == 0) c.block_tokens = static_cast<std::uint32_t>(block);
        double sum = 0;
        for (std::uint32_t j = chunk; j < total; ++j) sum += p.config().cost.cost(j * block);
        INFO("chunk " << chunk << " of " << total << ", " << block << " tokens a block");
        REQUIRE(p.item_cost(c) == Approx(sum).epsilon(1e-12));
    }
}

TEST_CASE("the default rule evicts a session's later chunks before its leading ones", "[retention_value][prefix]") {
    // One request's chunks released together: the last one goes first, as a
    // prefix cache needs (a chunk is no use without those before it).
    // Seed 000's rule takes the leading chunk first.
    retention_value<> p(6);
    seed000_retention_value seed(6, seed_config);
    for (std::uint32_t chunk = 0; chunk < 6; ++chunk) {
        access_context c = item(1, chunk, 0, 1, 6, 10);
        c.block_tokens = 32;
        p.on_insert(item_id{chunk}, c);
        seed.on_insert(item_id{chunk}, c);
    }
    std::vector<std::uint32_t> order;
    while (auto v = p.pop_victim(20)) order.push_back(v->value);
    REQUIRE(order == std::vector<std::uint32_t>{5, 4, 3, 2, 1, 0});
    REQUIRE(drain(seed, 20).front() == 0);
}

TEST_CASE("retention_value: same victims as the reference model", "[retention_value][differential]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const std::size_t capacity = GENERATE(1u, 16u, 97u);
    SECTION("seed 000's rule") {
        seed000_retention_value policy(capacity, seed_config);
        ref_retention_value reference;
        const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
        REQUIRE(policy.counters().evictions == victims.size());
        REQUIRE(victims.size() > 100);
    }
    SECTION("the default rule") {
        retention_value<> policy(capacity, default_config);
        ref_retention_value reference;
        reference.seed_rule = false;
        const auto victims = drive(policy, {.capacity = capacity, .operations = 100'000, .seed = seed}, &reference);
        REQUIRE(policy.counters().evictions == victims.size());
        REQUIRE(victims.size() > 100);
    }
}

namespace {

struct ref_batched_retention {
    double fraction = 0;
    ref_retention_value exact;
    std::vector<std::uint32_t> reserve;  // in order
    std::set<std::uint32_t> voided;      // reserved ids touched since the scan
    std::size_t reserve_hits = 0;

    void touch(item_id id) { voided.insert(id.value); }
    void on_insert(item_id id, const access_context& c) {
        touch(id);
        exact.on_insert(id, c);
    }
    void on_access(item_id id, const access_context& c) {
        touch(id);
        exact.on_access(id, c);
    }
    void on_hold(item_id id) {
        touch(id);
        exact.on_hold(id);
    }
    void on_release(item_id id, const access_context& c) {
        touch(id);
        exact.on_release(id, c);
    }
    void on_erase(item_id id) {
        touch(id);
        exact.on_erase(id);
    }
    std::size_t evictable() const {
        return static_cast<std::size_t>(
            std::count_if(exact.items.begin(), exact.items.end(), [](const auto& e) { return !e.held; }));
    }
    /// A batch of `k` at `now`, as pop_victims takes it.
    std::vector<item_id> pop_batch(std::size_t k, timestamp now) {
        k = std::min(k, evictable());
        std::vector<item_id> out;
        if (k == 0) return out;
        std::vector<item_id> valid;
        for (std::uint32_t id : reserve)
            if (!voided.contains(id) && valid.size() < k) valid.push_back(item_id{id});
        if (valid.size() == k) {
            // drop the used prefix of the reserve (valid ones taken, voided ones skipped)
            std::size_t used = 0, taken = 0;
            while (taken < k) taken += voided.contains(reserve[used++]) ? 0 : 1;
            reserve.erase(reserve.begin(), reserve.begin() + static_cast<std::ptrdiff_t>(used));
            for (item_id v : valid) {
                exact.on_erase(v);
                touch(v);
            }
            reserve_hits += k;
            return valid;
        }
        const std::size_t n = evictable();
        const auto batch = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n)));
        ref_retention_value copy = exact;
        std::vector<item_id> chosen;
        for (std::size_t i = 0; i < std::min(n, std::max(k, batch)); ++i) chosen.push_back(*copy.pop_victim(now));
        reserve.clear();
        voided.clear();
        for (std::size_t i = 0; i < chosen.size(); ++i) {
            if (i < k) {
                out.push_back(chosen[i]);
                exact.on_erase(chosen[i]);
            } else {
                reserve.push_back(chosen[i].value);
            }
        }
        for (item_id v : out) touch(v);
        return out;
    }
};

template <class Reference>
std::vector<item_id> reference_batch(Reference& r, std::size_t k, timestamp now) {
    if constexpr (requires { r.pop_batch(k, now); }) {
        return r.pop_batch(k, now);
    } else {
        std::vector<item_id> out;
        for (std::size_t i = 0; i < k; ++i)
            if (auto v = r.pop_victim(now)) out.push_back(*v);
        return out;
    }
}

// The driver of the shared-timestamps differential test, for the exact rule
// (scan_fraction 0 against ref_retention_value) and the batched one.
template <class Policy = seed000_retention_value, class Reference>
void shared_time_differential(std::uint64_t seed, double scan_fraction, std::uint32_t capacity, Reference& reference,
                              typename Policy::config_type config = seed_config) {
    std::mt19937_64 rng(seed);
    config.scan_fraction = scan_fraction;
    Policy policy(capacity, config);
    enum class slot : std::uint8_t { free, evictable, held };
    std::vector<slot> slots(capacity, slot::free);
    auto ctx_for = [&](timestamp now) {
        const std::uint32_t layers = 1 + static_cast<std::uint32_t>(rng() % 4);
        const std::uint32_t total = 1 + static_cast<std::uint32_t>(rng() % 6);
        access_context c =
            item(rng() % 3, static_cast<std::uint32_t>(rng() % total), static_cast<std::uint32_t>(rng() % layers),
                 layers, total, now, rng() % 2 == 0 ? 16 : 32);
        return c;
    };
    auto pick = [&](slot want) -> std::optional<std::uint32_t> {
        const auto start = static_cast<std::uint32_t>(rng() % capacity);
        for (std::uint32_t i = 0; i < capacity; ++i)
            if (slots[(start + i) % capacity] == want) return (start + i) % capacity;
        return std::nullopt;
    };
    timestamp now = 1;
    std::size_t popped = 0, fresh_popped = 0;
    for (int op = 0; op < 20'000; ++op) {
        if (rng() % 3 == 0) now += rng() % 4;  // often unchanged
        const auto dice = rng() % 100;
        if (dice < 35) {
            if (auto s = pick(slot::free)) {
                const auto c = ctx_for(now);
                policy.on_insert(item_id{*s}, c);
                reference.on_insert(item_id{*s}, c);
                slots[*s] = slot::evictable;
            }
        } else if (dice < 55) {
            if (auto s = pick(rng() % 4 == 0 ? slot::held : slot::evictable)) {
                const auto c = ctx_for(now);
                policy.on_access(item_id{*s}, c);
                reference.on_access(item_id{*s}, c);
            }
        } else if (dice < 65) {
            if (auto s = pick(slot::evictable)) {
                policy.on_hold(item_id{*s});
                reference.on_hold(item_id{*s});
                slots[*s] = slot::held;
            }
        } else if (dice < 75) {
            if (auto s = pick(slot::held)) {
                const auto c = ctx_for(now);
                policy.on_release(item_id{*s}, c);
                reference.on_release(item_id{*s}, c);
                slots[*s] = slot::evictable;
            }
        } else if (dice < 80) {
            if (auto s = pick(rng() % 2 ? slot::held : slot::evictable)) {
                policy.on_erase(item_id{*s});
                reference.on_erase(item_id{*s});
                slots[*s] = slot::free;
            }
        } else {
            item_id out[8];
            const std::size_t want = rng() % 9;
            std::vector<bool> fresh_before(capacity);
            for (std::uint32_t s = 0; s < capacity; ++s) {
                const auto r = policy.retention(item_id{s}, now);
                fresh_before[s] = r && std::isinf(*r);
            }
            const std::size_t got = policy.pop_victims(std::span<item_id>(out, want), now);
            const std::vector<item_id> expected = reference_batch(reference, want, now);
            REQUIRE(got == expected.size());
            for (std::size_t i = 0; i < got; ++i) {
                REQUIRE(out[i] == expected[i]);
                REQUIRE(slots[out[i].index()] == slot::evictable);
                slots[out[i].index()] = slot::free;
                fresh_popped += fresh_before[out[i].index()] ? 1 : 0;
            }
            popped += got;
        }
        REQUIRE(policy.size() == static_cast<std::size_t>(std::count_if(slots.begin(), slots.end(),
                                                                        [](slot s) { return s != slot::free; })));
        REQUIRE(policy.evictable_size() ==
                static_cast<std::size_t>(std::count(slots.begin(), slots.end(), slot::evictable)));
    }
    REQUIRE(popped > 1000);
    REQUIRE(fresh_popped > 50);  // the just-used path really ran
}

}  // namespace

TEST_CASE("retention_value: same victims as the reference with shared timestamps and batches",
          "[retention_value][differential]") {
    // The driver gives every operation its own time, so no item is ever
    // just used at a pop. Here time moves only now and then: just-used
    // items, exact ties and batches mixing idle and just-used items occur.
    const std::uint64_t seed = GENERATE(11u, 12u, 13u, 14u);
    SECTION("seed 000's rule") {
        ref_retention_value reference;
        shared_time_differential(seed, 0.0, 40, reference);
    }
    SECTION("the default rule") {
        ref_retention_value reference;
        reference.seed_rule = false;
        shared_time_differential<retention_value<>>(seed, 0.0, 40, reference, default_config);
    }
}

TEST_CASE("retention_value: scans choose scan_fraction of the candidates, the reserve is used in order while valid",
          "[retention_value][differential]") {
    // A naive model of the batched rule: a scan pops max(k, ceil(f n))
    // victims from a copy of the exact reference at `now`; the ones beyond
    // the batch wait, voided by any event on their slot.
    const std::uint64_t seed = GENERATE(21u, 22u, 23u);
    const double fraction = GENERATE(0.25, 0.5, 1.0);
    ref_batched_retention reference;
    reference.fraction = fraction;
    shared_time_differential(seed, fraction, 40, reference);
    INFO("fraction " << fraction << ", seed " << seed);
    REQUIRE(reference.reserve_hits > 10);  // pops really came from a reserve
}

TEST_CASE(
    "retention_value: at thousands of candidates (the sampled-threshold selection), same victims as the references",
    "[retention_value][differential]") {
    // Above 4096 candidates a scan selects among the items at or below a
    // sampled threshold; the victims must be those of the full selection.
    // Many items share a context, so exact score ties occur; some are used
    // at `now` (infinite score).
    const double fraction = GENERATE(0.0, 0.01);
    constexpr std::uint32_t capacity = 6000;
    std::mt19937_64 rng(31);
    seed000_retention_value::config_type config = seed_config;
    config.scan_fraction = fraction;
    seed000_retention_value policy(capacity, config);
    ref_batched_retention reference;
    reference.fraction = fraction;
    auto ctx_at = [&](timestamp now) {
        return item(rng() % 4, static_cast<std::uint32_t>(rng() % 8), static_cast<std::uint32_t>(rng() % 4), 4, 8, now,
                    32);
    };
    std::vector<std::uint32_t> free_slots;
    for (std::uint32_t s = 0; s < capacity; ++s) {
        const auto c = ctx_at(1 + rng() % 5000);
        policy.on_insert(item_id{s}, c);
        reference.on_insert(item_id{s}, c);
    }
    timestamp now = 6000;
    std::size_t popped = 0;
    for (int round = 0; round < 60; ++round) {
        now += 1 + rng() % 50;
        for (int a = 0; a < 20; ++a) {  // hits, some at `now`
            const std::uint32_t s = static_cast<std::uint32_t>(rng() % capacity);
            if (!policy.contains(item_id{s})) continue;
            const auto c = ctx_at(rng() % 2 ? now : now - 1);
            policy.on_access(item_id{s}, c);
            reference.on_access(item_id{s}, c);
        }
        const std::size_t want = 1 + rng() % 40;
        std::vector<item_id> out(want);
        const std::size_t got = policy.pop_victims(out, now);
        const std::vector<item_id> expected = reference.pop_batch(want, now);
        REQUIRE(got == expected.size());
        for (std::size_t i = 0; i < got; ++i) {
            REQUIRE(out[i] == expected[i]);
            free_slots.push_back(out[i].value);
        }
        popped += got;
        while (free_slots.size() > 20) {  // refill, so the tier stays above 4096 candidates
            const std::uint32_t s = free_slots.back();
            free_slots.pop_back();
            const auto c = ctx_at(now);
            policy.on_insert(item_id{s}, c);
            reference.on_insert(item_id{s}, c);
        }
    }
    REQUIRE(popped > 600);
}
