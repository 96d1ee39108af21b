// engine::lmcache_order (engine/lmcache_order.hpp) against a naive model of
// LMCache's own LRU (an ordered list: a use moves a key to the recent end, a
// new key joins it there, victims leave from the old end): with policy lru,
// over long random calls of accesses and inserts (ids repeated within a
// call), erasures and pops, the same victims and the same order by last
// event; with fifo, an access moves nothing.
#include <catch2/catch.hpp>

#include <kvpolicy/engine/lmcache_order.hpp>

#include <algorithm>
#include <cstdint>
#include <list>
#include <random>
#include <vector>

using namespace kvpolicy;

TEST_CASE("lmcache_order with lru keeps LMCache's LRU order", "[engine]") {
    constexpr std::size_t capacity = 12;
    engine::lmcache_order o(capacity, {.policy = "lru"});
    std::list<std::uint32_t> model;  // ids, oldest first
    std::mt19937_64 rng(5);
    for (int call = 0; call < 5000; ++call) {
        INFO("call " << call);
        const auto op = rng() % 10;
        if (op < 6) {
            o.begin();
            for (std::size_t k = rng() % 6; k-- > 0;) {
                if (!model.empty() && rng() % 2) {  // an access to an id in use, maybe one already in this call
                    auto it = model.begin();
                    std::advance(it, static_cast<std::ptrdiff_t>(rng() % model.size()));
                    const std::uint32_t id = *it;
                    o.access(id);
                    model.erase(it);
                    model.push_back(id);
                } else {
                    if (o.full()) {
                        const auto got = o.pop(1);
                        REQUIRE(got.size() == 1);
                        REQUIRE(got[0].value == model.front());
                        model.pop_front();
                    }
                    const std::uint32_t want = o.next_id();
                    REQUIRE(o.insert(rng()) == want);
                    model.push_back(want);
                }
            }
            o.end();
        } else if (op < 8 && !model.empty()) {
            auto it = model.begin();
            std::advance(it, static_cast<std::ptrdiff_t>(rng() % model.size()));
            const item_id gone{*it};
            model.erase(it);
            o.erase(std::span(&gone, 1));
        } else {
            const std::size_t n = rng() % 3;
            const auto got = o.pop(n);
            REQUIRE(got.size() == std::min(n, model.size()));
            for (item_id id : got) {
                REQUIRE(id.value == model.front());
                model.pop_front();
            }
        }
        REQUIRE(o.by_last_event() == std::vector<std::uint32_t>(model.begin(), model.end()));
        REQUIRE(o.policy().size() == model.size());
    }
}

TEST_CASE("lmcache_order with fifo: an access moves nothing", "[engine]") {
    engine::lmcache_order o(4, {.policy = "fifo"});
    o.begin();
    for (int i = 0; i < 3; ++i) (void)o.insert(100 + static_cast<std::uint64_t>(i));
    o.access(0);
    o.access(0);  // twice in one call: two runs
    o.end();
    const auto got = o.pop(3);
    REQUIRE(got == std::vector<item_id>{item_id{0}, item_id{1}, item_id{2}});
    REQUIRE(o.policy().counters().hits == 2);
}
