#include <catch2/catch.hpp>

#include <kvpolicy/kvpolicy.hpp>

using namespace kvpolicy;

TEST_CASE("manual_clock moves forward only, and a refused move changes nothing", "[clock]") {
    manual_clock c{10};
    REQUIRE(c.now() == 10);
    c.advance(5);
    REQUIRE(c.now() == 15);
    c.set(20);
    REQUIRE(c.now() == 20);
    REQUIRE_THROWS_AS(c.set(19), usage_error);
    REQUIRE_THROWS_WITH(c.set(19), Catch::Contains("cannot go backwards"));
    REQUIRE(c.now() == 20);
    REQUIRE_THROWS_AS(c.advance(never), config_error);
    REQUIRE(c.now() == 20);
}

TEST_CASE("steady_clock_source is monotonic", "[clock]") {
    steady_clock_source c;
    const timestamp a = c.now();
    const timestamp b = c.now();
    REQUIRE(b >= a);
}

TEST_CASE("replay_clock reads the time a replay set, else the steady clock's milliseconds", "[clock]") {
    engine::replay_clock c;
    const auto steady_ms = [] {
        return static_cast<timestamp>(
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
                .count());
    };
    const timestamp before = steady_ms();
    const timestamp a = c.now();
    REQUIRE(before <= a);
    REQUIRE(a <= steady_ms());
    c.set(5);
    REQUIRE(c.now() == 5);
    c.set(0);
    REQUIRE(c.now() == 0);
    c.set(std::nullopt);
    REQUIRE(c.now() >= a);
}

TEST_CASE("parse_error names file and line", "[errors]") {
    const parse_error e("trace.jsonl", 1042, "hash_ids must be an array of integers");
    REQUIRE(std::string(e.what()) == "trace.jsonl:1042: hash_ids must be an array of integers");
    REQUIRE(e.line() == 1042);
    REQUIRE(e.file() == "trace.jsonl");
    const error& base = e;
    REQUIRE(std::string(base.what()).find("1042") != std::string::npos);
}

TEST_CASE("error hierarchy: one catch for everything kvpolicy throws", "[errors]") {
    STATIC_REQUIRE(std::is_base_of_v<error, config_error>);
    STATIC_REQUIRE(std::is_base_of_v<config_error, unknown_name_error>);
    STATIC_REQUIRE(std::is_base_of_v<error, usage_error>);
    STATIC_REQUIRE(std::is_base_of_v<error, capacity_error>);
    STATIC_REQUIRE(std::is_base_of_v<error, parse_error>);
    STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, error>);
}

TEST_CASE("a policy with capacity 0 is refused with the fix in the message", "[errors]") {
    REQUIRE_THROWS_AS(lru(0, {}), config_error);
    REQUIRE_THROWS_WITH(fifo(0, {}), Catch::Contains("capacity 0") && Catch::Contains("at least 1"));
}
