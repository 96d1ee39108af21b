#include <catch2/catch.hpp>

#include <kvpolicy/cache/host_memcpy_engine.hpp>

#include <numeric>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {
std::uint64_t checksum(std::span<const std::byte> b) {
    std::uint64_t h = 1469598103934665603ULL;
    for (std::byte x : b) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ULL;
    return h;
}
void fill(std::span<std::byte> b, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (auto& x : b) x = static_cast<std::byte>(rng());
}
}  // namespace

TEST_CASE("host_memcpy_engine moves bytes, data survives round trips", "[transfer]") {
    block_arena gpu(8, 256), cpu(16, 256);
    host_memcpy_engine engine(gpu, cpu);
    // Ground truth: which content id each block holds, by tier.
    std::vector<int> gpu_has(8, -1), cpu_has(16, -1);
    std::vector<std::uint64_t> sums(8);
    for (std::uint32_t b = 0; b < 8; ++b) {
        fill(gpu.block(block_id{b}), b);
        sums[b] = checksum(gpu.block(block_id{b}));
        gpu_has[b] = static_cast<int>(b);
    }
    std::mt19937_64 rng(5);
    for (int round = 0; round < 2000; ++round) {
        const bool out = rng() % 2;
        const block_id g{static_cast<std::uint32_t>(rng() % 8)};
        const block_id c{static_cast<std::uint32_t>(rng() % 16)};
        const block_transfer op =
            out ? block_transfer{tier::gpu, g, tier::cpu, c} : block_transfer{tier::cpu, c, tier::gpu, g};
        transfer_status st{};
        REQUIRE(engine.execute(std::span(&op, 1), std::span(&st, 1)) == 1);
        REQUIRE(st == transfer_status::done);
        if (out)
            cpu_has[c.index()] = gpu_has[g.index()];
        else
            gpu_has[g.index()] = cpu_has[c.index()];
    }
    for (std::uint32_t b = 0; b < 8; ++b)
        if (gpu_has[b] >= 0) REQUIRE(checksum(gpu.block(block_id{b})) == sums[static_cast<std::size_t>(gpu_has[b])]);
    for (std::uint32_t b = 0; b < 16; ++b)
        if (cpu_has[b] >= 0) REQUIRE(checksum(cpu.block(block_id{b})) == sums[static_cast<std::size_t>(cpu_has[b])]);
    REQUIRE(engine.bytes_moved() == 2000u * 256u);
}

TEST_CASE("host_memcpy_engine: bad ops fail alone, others still run", "[transfer]") {
    block_arena gpu(2, 8), cpu(2, 8);
    host_memcpy_engine engine(gpu, cpu);
    fill(gpu.block(block_id{0}), 1);
    const std::vector<block_transfer> ops{
        {tier::gpu, block_id{0}, tier::cpu, block_id{5}},     // out of range
        {tier::gpu, block_id{0}, tier::remote, block_id{0}},  // no remote arena
        {tier::gpu, block_id{0}, tier::cpu, block_id{1}},     // fine
    };
    std::vector<transfer_status> st(3);
    REQUIRE(engine.execute(ops, st) == 1);
    REQUIRE(st == std::vector{transfer_status::failed, transfer_status::failed, transfer_status::done});
    REQUIRE(checksum(cpu.block(block_id{1})) == checksum(gpu.block(block_id{0})));
    std::vector<transfer_status> short_status(1);
    REQUIRE_THROWS_AS(engine.execute(ops, short_status), usage_error);
}

TEST_CASE("arenas refuse sizes that hold nothing or do not match", "[transfer][errors]") {
    REQUIRE_THROWS_WITH(block_arena(0, 16), Catch::Contains("both must be at least 1"));
    block_arena a(1, 16), b(1, 32);
    REQUIRE_THROWS_WITH(host_memcpy_engine(a, b), Catch::Contains("make them equal"));
}
