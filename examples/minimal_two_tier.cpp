// The smallest complete use of kvpolicy: a two-tier KV cache composed in one
// `using` line, driven for a few scheduler steps. Each step admits requests
// (their block hashes), ends with a swap plan (the copies to run before the
// forward pass) and releases the requests that finished.
//
//   minimal_two_tier
#include <cstdio>
#include <vector>

#include <kvpolicy/cache/block_hasher.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/fifo.hpp>
#include <kvpolicy/eviction/lru.hpp>

// LRU over 4 GPU blocks; their victims go to 4 CPU blocks, which drop FIFO.
using cache_type = kvpolicy::tiered_cache<kvpolicy::lru, kvpolicy::fifo>;

namespace {

// A session's prompt: block i of every session shares the system prompt up
// to `shared` blocks, then diverges.
std::vector<kvpolicy::block_hash> prompt(std::uint32_t session, std::size_t blocks, std::size_t shared = 1) {
    std::vector<kvpolicy::block_hash> hashes;
    kvpolicy::block_hash parent = kvpolicy::root_block_hash;
    for (std::size_t i = 0; i < blocks; ++i) {
        const std::int32_t token = i < shared ? -1 : static_cast<std::int32_t>(session);
        const std::int32_t tokens[] = {token, static_cast<std::int32_t>(i)};
        hashes.push_back(parent = kvpolicy::hash_block(parent, tokens));
    }
    return hashes;
}

void print(const kvpolicy::swap_plan& plan) {
    for (const kvpolicy::block_transfer& t : plan.transfers)
        std::printf("  %-9s %s[%u] %s %s[%u]\n",
                    t.exchange                      ? "exchange"
                    : t.from == kvpolicy::tier::gpu ? "swap-out"
                                                    : "swap-in",
                    to_string(t.from).data(), t.src.value, t.exchange ? "<->" : "->", to_string(t.to).data(),
                    t.dst.value);
    for (const kvpolicy::recovery_range& r : plan.recovery)
        std::printf("  dropped: session %llu tokens [%llu, %llu) to recompute\n",
                    static_cast<unsigned long long>(r.session.value), static_cast<unsigned long long>(r.token_begin),
                    static_cast<unsigned long long>(r.token_end));
    if (plan.empty()) std::printf("  (nothing to move)\n");
}

}  // namespace

int main() {
    cache_type cache({.gpu_capacity = 4, .cpu_capacity = 4, .block_size = 16});
    // Each step: which sessions run, with how many prompt blocks.
    const std::vector<std::vector<std::pair<std::uint32_t, std::size_t>>> steps = {
        {{1, 3}}, {{2, 3}}, {{1, 4}}, {{3, 4}}, {{2, 4}}};
    for (std::size_t step = 0; step < steps.size(); ++step) {
        cache.clock().advance(1);
        cache.begin_step();
        for (const auto& [session, blocks] : steps[step]) {
            const kvpolicy::admission a = cache.admit(kvpolicy::session_id{session}, prompt(session, blocks));
            std::printf("step %zu: session %u, %zu blocks: %zu on gpu, %zu swapped in, %zu computed\n", step, session,
                        blocks, a.match.gpu_blocks, a.match.cpu_blocks, a.computed_blocks);
        }
        print(cache.end_step());  // run these copies, then the forward pass
        for (const auto& [session, blocks] : steps[step]) cache.release(kvpolicy::session_id{session});
    }
    const kvpolicy::cache_metrics m = cache.metrics();
    std::printf("gpu hits %llu blocks, cpu hits %llu, swap-outs %llu, dropped %llu\n",
                static_cast<unsigned long long>(m.gpu.hit_blocks), static_cast<unsigned long long>(m.cpu.hit_blocks),
                static_cast<unsigned long long>(m.swap_out_items), static_cast<unsigned long long>(m.dropped_items));
    return 0;
}
