// checked_policy (eviction/checked_policy.hpp) against a naive model: a
// dyn_policy of the same policy, driven with the valid calls only, and a
// state per id kept in a plain vector. Random batches (some out of range,
// some repeating an id, some in the wrong state) must be refused exactly
// when the model says a call is bad, naming the id, with nothing changed;
// the others decide as the model. A keys column of another length than the
// ids is refused before any id is looked at.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/checked_policy.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

// Why the model refuses a batch of `what` for ids wanting `ok`, or nothing.
std::optional<std::string> refusal(const std::vector<id_state>& st, const std::vector<item_id>& ids, const char* what,
                                   bool (*ok)(id_state), bool once) {
    std::set<std::uint32_t> seen;
    for (item_id id : ids) {
        if (id.index() >= st.size()) return std::string(what) + ": id " + std::to_string(id.value) + " is out of range";
        if (!ok(st[id.index()])) return std::string(what) + ": id " + std::to_string(id.value) + " is ";
        if (once && !seen.insert(id.value).second)
            return std::string(what) + ": id " + std::to_string(id.value) + " appears twice";
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("checked_policy refuses exactly the bad calls, changing nothing, and decides as its policy",
          "[eviction][errors]") {
    constexpr std::size_t capacity = 16;
    for (const char* name : {"lru", "arc", "s3fifo", "retention_value"}) {
        INFO(name);
        checked_policy p(capacity, {.policy = name});
        dyn_policy model(capacity, {.policy = name});
        std::vector<id_state> st(capacity, id_state::untracked);
        std::mt19937_64 rng(7);
        for (timestamp now = 1; now < 6000; ++now) {
            std::vector<item_id> ids(1 + rng() % 3);
            for (item_id& id : ids) id = item_id{static_cast<std::uint32_t>(rng() % (capacity + 2))};
            // Now and then a keys column: the ids' own keys, or one too many (refused).
            std::vector<std::uint64_t> keys;
            const auto column = rng() % 8;
            if (column < 2)
                for (std::size_t i = 0; i < ids.size() + column; ++i) keys.push_back(ids[i % ids.size()].value);
            const item_batch b{.ids = ids, .keys = keys, .now = now};
            const auto op = rng() % 6;
            const auto columns = [&](const char* what) -> std::optional<std::string> {
                if (column != 1) return std::nullopt;
                return std::string(what) + ": " + std::to_string(keys.size()) + " keys for " +
                       std::to_string(ids.size()) + " ids; give one per id, or none";
            };
            const auto untracked = [](id_state s) { return s == id_state::untracked; };
            const auto tracked = [](id_state s) { return s != id_state::untracked; };
            const auto evictable = [](id_state s) { return s == id_state::evictable; };
            const auto held = [](id_state s) { return s == id_state::held; };
            std::optional<std::string> why;
            std::string got;
            const auto attempt = [&](auto call) {
                try {
                    call();
                } catch (const usage_error& e) {
                    got = e.what();
                }
            };
            switch (op) {
                case 0:
                    why = columns("insert");
                    if (!why) why = refusal(st, ids, "insert", untracked, true);
                    attempt([&] { p.insert(b); });
                    if (!why) {
                        model.insert_batch(b);
                        for (item_id id : ids) st[id.index()] = id_state::evictable;
                    }
                    break;
                case 1:
                    why = columns("access");
                    if (!why) why = refusal(st, ids, "access", tracked, false);
                    attempt([&] { p.access(b); });
                    if (!why) model.access_batch(b);
                    break;
                case 2:
                    why = refusal(st, ids, "hold", evictable, true);
                    attempt([&] { p.hold(ids); });
                    if (!why) {
                        model.hold_batch(ids);
                        for (item_id id : ids) st[id.index()] = id_state::held;
                    }
                    break;
                case 3:
                    why = columns("release");
                    if (!why) why = refusal(st, ids, "release", held, true);
                    attempt([&] { p.release(b); });
                    if (!why) {
                        model.release_batch(b);
                        for (item_id id : ids) st[id.index()] = id_state::evictable;
                    }
                    break;
                case 4:
                    why = refusal(st, ids, "erase", tracked, true);
                    attempt([&] { p.erase(ids); });
                    if (!why) {
                        model.erase_batch(ids);
                        for (item_id id : ids) st[id.index()] = id_state::untracked;
                    }
                    break;
                default: {
                    std::vector<item_id> a(rng() % 3), c(a.size());
                    a.resize(p.pop_victims(a, now));
                    c.resize(model.pop_victims(c, now));
                    REQUIRE(a == c);
                    for (item_id id : a) st[id.index()] = id_state::untracked;
                }
            }
            REQUIRE(why.has_value() == !got.empty());
            if (why) REQUIRE_THAT(got, Catch::StartsWith(*why));
            REQUIRE(p.policy().size() == model.size());
            REQUIRE(p.policy().evictable_size() == model.evictable_size());
            for (std::uint32_t i = 0; i < capacity; ++i) REQUIRE(p.state(item_id{i}) == st[i]);
        }
        REQUIRE(p.policy().counters() == model.counters());
        REQUIRE_THROWS_WITH(p.state(item_id{capacity}), Catch::Contains("the capacity is 16"));
    }
}

TEST_CASE("checked_policy refuses a batch whose column is not one per id, naming the column", "[eviction][errors]") {
    checked_policy p(4, {.policy = "lru"});
    const std::vector<item_id> ids{item_id{0}, item_id{1}};
    const std::vector<std::uint64_t> one_key{9};
    const std::vector<std::int32_t> three{1, 1, 1};
    REQUIRE_THROWS_WITH(p.insert({.ids = ids, .keys = one_key}), "insert: 1 keys for 2 ids; give one per id, or none");
    REQUIRE_THROWS_WITH(p.insert({.ids = ids, .priorities = three}),
                        "insert: 3 priorities for 2 ids; give one per id, or none");
    REQUIRE(p.policy().size() == 0);
    REQUIRE(p.state(item_id{0}) == id_state::untracked);
    p.insert({.ids = ids, .now = 1});
    REQUIRE_THROWS_WITH(p.access({.ids = ids, .next_use = one_key, .now = 2}),
                        "access: 1 next_use values for 2 ids; give one per id, or none");
    REQUIRE(p.policy().counters().hits == 0);
}
