// The code of the README and the docs site, compiled and run. Each block
// between `example-begin NAME` and `example-end` below must appear verbatim
// in README.md or a page under docs/; the last test case checks that it
// does, so the pages cannot drift from code that builds
// (tests/docs/test_docs.py checks the other way: every C++ block of the site
// names the example it quotes, and equals it).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
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

// example-begin cache
#include <kvpolicy/cache/presets.hpp>

// A GPU tier of 4 blocks over a CPU tier of 8, LRU on both (vLLM's choice).
kvpolicy::vllm_like_cache cache({.gpu_capacity = 4, .cpu_capacity = 8, .block_size = 16});

// One scheduler step for one request: its blocks' chained hashes in, the
// copies to run before the forward pass out.
std::vector<kvpolicy::block_transfer> schedule(std::uint64_t session, const std::vector<kvpolicy::block_hash>& blocks) {
    using namespace kvpolicy;
    cache.begin_step();
    const admission a = cache.admit(session_id{session}, blocks);  // hits held, CPU hits swapped in, misses allocated
    const swap_plan& plan = cache.end_step();                      // run plan.transfers in order
    std::vector<block_transfer> copies = plan.transfers;
    cache.release(session_id{session});  // after the forward pass
    (void)a;
    return copies;
}
// example-end

// example-begin memory-spaces
#include <kvpolicy/core/memory_space.hpp>

// Host memory: a host_span, from any contiguous host range.
float sum_on_host(kvpolicy::host_span<const float> values) {
    float s = 0.0f;
    for (float v : values) s += v;  // host code reads host memory
    return s;
}

// Device memory: a device_span, made only on purpose (device_buffer::view(),
// or device_span<T>{ptr, n} where the caller knows ptr is cudaMalloc'd).
// Host code may cut it and pass it to kernels and copies, never read it:
using device_query = kvpolicy::device_span<const float>;
static_assert(!std::ranges::range<device_query>);                             // no host loop, no std::ranges algorithm
static_assert(!std::is_convertible_v<device_query, std::span<const float>>);  // no host function
static_assert(!std::is_convertible_v<kvpolicy::host_span<const float>, device_query>);  // no host data to a kernel

device_query head_of(device_query query, std::size_t head, std::size_t head_dim) {
    return query.subspan(head * head_dim, head_dim);  // size, data, first, last, subspan: anywhere
}
// example-end

TEST_CASE("README: memory spaces", "[readme]") {
    const std::vector<float> v{1.0f, 2.0f, 3.5f};
    CHECK(sum_on_host(v) == 6.5f);
    // A device span's pointer is never read on the host: any address will do.
    const float* fake_device = reinterpret_cast<const float*>(std::uintptr_t{4096});
    const auto h = head_of(device_query{fake_device, 8 * 128}, 3, 128);
    CHECK(h.data() == fake_device + 384);
    CHECK(h.size() == 128);
}

TEST_CASE("README: one scheduler step of the composed cache", "[readme]") {
    using namespace kvpolicy;
    REQUIRE(schedule(1, {11, 12, 13}).empty());     // 3 new blocks: room enough, no copies
    const auto second = schedule(2, {21, 22, 23});  // needs 3: 1 free + 2 victims, sheltered
    REQUIRE(second.size() == 2);
    REQUIRE(second[0].from == tier::gpu);
    REQUIRE(second[0].to == tier::cpu);
    const auto third = schedule(1, {11, 12, 13});  // the sheltered blocks come back
    REQUIRE(cache.lookup(std::vector<block_hash>{11, 12, 13}).run == 3);
    REQUIRE_FALSE(third.empty());
    REQUIRE(cache.check_invariants().empty());
}

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

TEST_CASE("README or docs quote this file's examples verbatim", "[readme]") {
    std::string readme = slurp(std::string(KVPOLICY_SOURCE_DIR) + "/README.md");
    for (const auto& page : std::filesystem::recursive_directory_iterator(std::string(KVPOLICY_SOURCE_DIR) + "/docs"))
        if (page.path().extension() == ".md") readme += slurp(page.path().string());
    const std::string self = slurp(std::string(KVPOLICY_SOURCE_DIR) + "/tests/readme_examples.cpp");
    std::size_t pos = 0;
    int blocks = 0;
    // Markers count only at the start of a line, not inside this code.
    while ((pos = self.find("\n// example-begin ", pos)) != std::string::npos) {
        const std::size_t body = self.find('\n', pos + 1) + 1;
        const std::size_t end = self.find("\n// example-end", body - 1) + 1;
        REQUIRE(end != 0);
        const std::string code = self.substr(body, end - body);
        INFO("README.md or a page under docs/ must contain, verbatim:\n" << code);
        REQUIRE(readme.find(code) != std::string::npos);
        pos = end;
        ++blocks;
    }
    REQUIRE(blocks >= 1);
}
