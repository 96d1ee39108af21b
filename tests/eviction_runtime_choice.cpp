// runtime_choice<Ps...> (eviction/runtime_choice.hpp) decides exactly as
// the alternative it holds: the same victims, sizes and counters over long
// random sequences of every hook, for every alternative; a name that is
// none of them is refused listing them.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/checkerboard.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/queue_aware.hpp>
#include <kvpolicy/eviction/runtime_choice.hpp>
#include <kvpolicy/eviction/sieve.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {

template <class Choice, class Alone>
void same_decisions(const std::string& name, std::uint64_t seed) {
    constexpr std::size_t capacity = 48;
    Choice choice(capacity, {.policy = name});
    Alone alone(capacity, {});
    REQUIRE(choice.chosen() == Alone::name);
    std::mt19937_64 rng(seed);
    std::vector<int> state(capacity, 0);  // 0 absent, 1 evictable, 2 held
    timestamp now = 0;
    for (int op = 0; op < 40'000; ++op) {
        const auto id = static_cast<std::uint32_t>(rng() % capacity);
        access_context c;
        c.now = ++now;
        c.key = 1000 + id;
        c.layer = layer_index{static_cast<std::uint32_t>(rng() % 4)};
        c.chunk = chunk_index{static_cast<std::uint32_t>(rng() % 8)};
        switch (rng() % 6) {
            case 0:
                if (state[id] == 0) {
                    choice.on_miss(c);
                    alone.on_miss(c);
                    choice.on_insert(item_id{id}, c);
                    alone.on_insert(item_id{id}, c);
                    state[id] = 1;
                }
                break;
            case 1:
                if (state[id] != 0) {
                    choice.on_access(item_id{id}, c);
                    alone.on_access(item_id{id}, c);
                }
                break;
            case 2:
                if (state[id] == 1) {
                    choice.on_hold(item_id{id});
                    alone.on_hold(item_id{id});
                    state[id] = 2;
                } else if (state[id] == 2) {
                    choice.on_release(item_id{id}, c);
                    alone.on_release(item_id{id}, c);
                    state[id] = 1;
                }
                break;
            case 3:
                if (state[id] != 0 && rng() % 4 == 0) {
                    choice.on_erase(item_id{id});
                    alone.on_erase(item_id{id});
                    state[id] = 0;
                }
                break;
            default: {
                std::vector<item_id> a(1 + rng() % 3), b(a.size());
                const std::size_t na = choice.pop_victims(a, now), nb = alone.pop_victims(b, now);
                REQUIRE(na == nb);
                for (std::size_t i = 0; i < na; ++i) {
                    REQUIRE(a[i] == b[i]);
                    state[a[i].index()] = 0;
                }
            }
        }
        REQUIRE(choice.size() == alone.size());
        REQUIRE(choice.evictable_size() == alone.evictable_size());
    }
    REQUIRE(choice.counters().evictions == alone.counters().evictions);
    REQUIRE(choice.counters().hits == alone.counters().hits);
    REQUIRE(choice.capacity() == capacity);
}

}  // namespace

TEST_CASE("runtime_choice decides exactly as the alternative it holds", "[eviction]") {
    using choice = runtime_choice<lru, lexicographic_checkerboard, sieve>;
    static_assert(eviction_policy<choice> && !hears_waiting_queue<choice>);
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    same_decisions<choice, lru>("lru", seed);
    same_decisions<choice, lexicographic_checkerboard>("checkerboard", seed);
    same_decisions<choice, sieve>("sieve", seed);
}

TEST_CASE("runtime_choice of policies that hear the queue hears it", "[eviction]") {
    using choice = runtime_choice<queue_aware<lru>, queue_aware<sieve>>;
    static_assert(eviction_policy<choice> && hears_waiting_queue<choice>);
    choice p(4, {.policy = "queue_aware_sieve"});
    access_context c;
    for (std::uint32_t i = 0; i < 4; ++i) p.on_insert(item_id{i}, c);
    p.on_queued(item_id{0}, 7);  // read by a queued request: goes last
    std::vector<item_id> out(4);
    REQUIRE(p.pop_victims(out, 1) == 4);
    REQUIRE(out.back() == item_id{0});
}

TEST_CASE("runtime_choice refuses a name that is none of its alternatives", "[eviction][errors]") {
    using choice = runtime_choice<lru, lexicographic_checkerboard>;
    REQUIRE_THROWS_AS(choice(4, {.policy = "arc"}), unknown_name_error);
    REQUIRE_THROWS_WITH(choice(4, {.policy = "arc"}),
                        Catch::Contains("arc") && Catch::Contains("lru") && Catch::Contains("checkerboard"));
}
