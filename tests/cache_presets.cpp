// The presets compose and run, and seed 000's three scenarios hold on the
// composed per-layer cache (pensieve_cache).
#include <catch2/catch.hpp>

#include <kvpolicy/cache/presets.hpp>

#include <vector>

using namespace kvpolicy;

namespace {
// Two turns' worth of one session's chunks, as block hashes.
std::vector<block_hash> chunks(std::uint64_t session, std::size_t n) {
    std::vector<block_hash> h;
    for (std::size_t c = 0; c < n; ++c) h.push_back(mix64((session << 32) | c));
    return h;
}
}  // namespace

TEST_CASE("every preset composes and serves a step", "[cache][presets]") {
    auto run = [](auto& cache) {
        cache.begin_step();
        const admission a = cache.admit(session_id{1}, chunks(1, 2));
        (void)cache.end_step();
        cache.release(session_id{1});
        return a.computed_blocks;
    };
    vllm_like_cache v({.gpu_capacity = 8, .cpu_capacity = 8});
    trtllm_like_cache t({.gpu_capacity = 8, .cpu_capacity = 8});
    offload_v0_cache o({.gpu_capacity = 8, .cpu_capacity = 8});
    pensieve_cache p({.gpu_capacity = 8, .cpu_capacity = 8, .num_layers = 2, .items = granularity::per_layer});
    REQUIRE(run(v) == 2);
    REQUIRE(run(t) == 2);
    REQUIRE(run(o) == 2);
    REQUIRE(run(p) == 2);
    REQUIRE(p.gpu().num_cached_blocks() == 4);  // 2 chunks x 2 layers
}

TEST_CASE("seed 000 scenario 3: layer 39 leaves before layer 0", "[cache][presets][seed000]") {
    // 40 layers; the GPU holds 2 chunks (80 items), the CPU 1 chunk.
    pensieve_cache cache(
        {.gpu_capacity = 80, .cpu_capacity = 40, .block_size = 32, .num_layers = 40, .items = granularity::per_layer});
    cache.begin_step();
    cache.admit(session_id{1}, chunks(1, 2));
    (void)cache.end_step();
    cache.release(session_id{1});
    cache.clock().advance(10);
    cache.begin_step();
    cache.admit(session_id{2}, chunks(2, 1));  // 40 items of room: 40 victims among session 1's 80
    (void)cache.end_step();
    const auto s1 = chunks(1, 2);
    // The cheapest items leave: back layers of the leading chunk first.
    REQUIRE(cache.where(s1[0], 39) == item_state::in_cpu);
    REQUIRE(cache.where(s1[1], 0) == item_state::in_gpu);  // the trailing chunk's first layer: the dearest
    std::size_t leading_gone = 0, trailing_gone = 0;
    for (std::uint32_t l = 0; l < 40; ++l) {
        leading_gone += cache.where(s1[0], l) != item_state::in_gpu;
        trailing_gone += cache.where(s1[1], l) != item_state::in_gpu;
    }
    REQUIRE(leading_gone + trailing_gone == 40);
    REQUIRE(leading_gone > trailing_gone);
    // Within a chunk, a deeper layer never stays while a shallower one left.
    for (std::uint32_t l = 1; l < 40; ++l)
        for (const block_hash h : s1)
            if (cache.where(h, l) == item_state::in_gpu) REQUIRE(cache.where(h, l - 1) == item_state::in_gpu);
}

TEST_CASE("seed 000 scenario 1: under pressure the oldest session's items go first", "[cache][presets][seed000]") {
    // 3 sessions of 1 chunk x 2 layers; the GPU holds 2 chunks' items.
    pensieve_cache cache(
        {.gpu_capacity = 4, .cpu_capacity = 4, .block_size = 32, .num_layers = 2, .items = granularity::per_layer});
    for (std::uint64_t s = 1; s <= 2; ++s) {
        cache.clock().advance(100);
        cache.begin_step();
        cache.admit(session_id{s}, chunks(s, 1));
        (void)cache.end_step();
        cache.release(session_id{s});
    }
    cache.clock().advance(100);
    cache.begin_step();
    cache.admit(session_id{3}, chunks(3, 1));  // 2 victims: session 1's, idle longest
    (void)cache.end_step();
    REQUIRE(cache.where(chunks(1, 1)[0], 0) == item_state::in_cpu);
    REQUIRE(cache.where(chunks(1, 1)[0], 1) == item_state::in_cpu);
    REQUIRE(cache.where(chunks(2, 1)[0], 0) == item_state::in_gpu);
    REQUIRE(cache.where(chunks(2, 1)[0], 1) == item_state::in_gpu);
}

TEST_CASE("seed 000 scenario 2: five turns, room for three chunks: leading chunks leave", "[cache][presets][seed000]") {
    // One session, one layer; each turn reads the whole conversation so far
    // plus one new chunk. The GPU holds 3 chunks, the CPU 1; so by turn 5 the
    // leading chunks have been pushed down and out, the recent ones stay.
    pensieve_cache cache({.gpu_capacity = 3,
                          .cpu_capacity = 1,
                          .block_size = 32,
                          .num_layers = 1,
                          .items = granularity::per_layer,
                          .verify_chain = true});
    const auto conversation = chunks(9, 5);
    for (std::size_t turn = 1; turn <= 3; ++turn) {
        cache.clock().advance(50);
        cache.begin_step();
        cache.admit(session_id{9}, std::span(conversation).subspan(turn - 1, 1));  // one new chunk per turn
        (void)cache.end_step();
        cache.release(session_id{9});
    }
    for (std::size_t turn = 4; turn <= 5; ++turn) {
        cache.clock().advance(50);
        cache.begin_step();
        cache.admit(session_id{9}, std::span(conversation).subspan(turn - 1, 1));
        (void)cache.end_step();
        cache.release(session_id{9});
    }
    // The most recent chunks are kept; the leading chunk 0 is the one dropped.
    REQUIRE(cache.where(conversation[4]) == item_state::in_gpu);
    REQUIRE(cache.where(conversation[3]) == item_state::in_gpu);
    REQUIRE(cache.where(conversation[0]) == item_state::free);
}
