// The README's code, compiled and run. Each block between `example-begin
// NAME` and `example-end` below must appear verbatim in README.md; the last
// test case checks that it does, so the README cannot drift from code that
// builds.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

// example-begin compose
#include <kvpolicy/kvpolicy.hpp>

using gpu_policy = kvpolicy::lru;  // one `using` line picks the strategy

static_assert(kvpolicy::eviction_policy<gpu_policy>);

std::vector<kvpolicy::item_id> evict_two() {
    using namespace kvpolicy;
    gpu_policy gpu(/*capacity=*/4, {});
    for (std::uint32_t b = 0; b < 4; ++b) gpu.on_insert(item_id{b}, {.now = b});
    gpu.on_access(item_id{0}, {.now = 10});  // block 0 is hot again
    gpu.on_hold(item_id{1});                 // a running request holds block 1

    std::vector<item_id> victims(2);
    victims.resize(gpu.pop_victims(victims, /*now=*/11));
    return victims;  // {2, 3}: never the held block, never the hot one
}

// The same choice made at run time, from a flag:
std::string policy_from_flag(std::string_view flag) {
    return kvpolicy::visit_by_name<kvpolicy::eviction_policies>(
        flag, []<class Policy>() { return std::string(Policy::name); }, "eviction policy");
}
// example-end

TEST_CASE("README: compose a policy and evict", "[readme]") {
    REQUIRE(evict_two() == std::vector{kvpolicy::item_id{2}, kvpolicy::item_id{3}});
    REQUIRE(policy_from_flag("fifo") == "fifo");
    REQUIRE_THROWS_AS(policy_from_flag("nope"), kvpolicy::unknown_name_error);
}

namespace {
std::string slurp(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

TEST_CASE("README quotes this file's examples verbatim", "[readme]") {
    const std::string readme = slurp(std::string(KVPOLICY_SOURCE_DIR) + "/README.md");
    const std::string self = slurp(std::string(KVPOLICY_SOURCE_DIR) + "/tests/readme_examples.cpp");
    std::size_t pos = 0;
    int blocks = 0;
    // Markers count only at the start of a line, not inside this code.
    while ((pos = self.find("\n// example-begin ", pos)) != std::string::npos) {
        const std::size_t body = self.find('\n', pos + 1) + 1;
        const std::size_t end = self.find("\n// example-end", body - 1) + 1;
        REQUIRE(end != 0);
        const std::string code = self.substr(body, end - body);
        INFO("README.md must contain, verbatim:\n" << code);
        REQUIRE(readme.find(code) != std::string::npos);
        pos = end;
        ++blocks;
    }
    REQUIRE(blocks >= 1);
}
