// Uses both host targets the way a consumer would: a preset cache for one
// scheduler step (kvpolicy::kvpolicy) and a small replay of the built-in
// workload (kvpolicy::sim, which brings zlib). Exits non-zero if either
// gives a wrong answer, so a package that compiles but misbehaves fails too.
#include <cstdio>

#include <kvpolicy/cache/presets.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/workload.hpp>

int main() {
    kvpolicy::vllm_like_cache cache({.gpu_capacity = 8, .cpu_capacity = 8});
    const kvpolicy::block_hash prompt[] = {11, 12, 13};
    cache.begin_step();
    const kvpolicy::admission a = cache.admit(kvpolicy::session_id{1}, prompt);
    (void)cache.end_step();
    cache.release(kvpolicy::session_id{1});

    const auto requests = kvpolicy::sim::generate_chat_workload({.sessions = 20});
    kvpolicy::sim::vector_request_source source(requests);
    const kvpolicy::sim::replay_result r = kvpolicy::sim::replay_requests<kvpolicy::lru, kvpolicy::lru>(
        source, {.capacity = 512, .cpu_capacity = 512}, kvpolicy::sim::replay_mode::tiered);

    std::printf("kvpolicy test_package: %zu blocks computed; %llu requests replayed, hit ratio %.3f\n",
                a.computed_blocks, static_cast<unsigned long long>(r.requests), r.hit_ratio());
    return a.computed_blocks == 3 && r.requests == requests.size() && r.hits > 0 ? 0 : 1;
}
