// The session-aware policies under the request protocol an engine runs, which
// eviction_bench (one access at a time, nothing held) does not exercise: a
// request of a session reads its session's prefix and appends 1-4 blocks;
// each block is a hit (on_access) or a miss (pop_victim when full, then
// on_insert), and is held (on_hold) until the request finishes, when every
// block is released (on_release) saying the request's output tokens and, in
// the `+hints` rows, when the session truly comes back (expected_return).
// Sessions are picked Zipf 0.9 among 4x as many as the cache holds at their
// mean length; a session restarts (a new id) after 64 blocks. Reports ns per
// block operation at 10^3, 10^5 and 10^6 resident blocks, the ratio to LRU in
// the same run, and the miss ratio. The harness's own work (a hash map from
// block to slot) is in every row, LRU's too.
//
//   session_bench [--seconds S]
//
// Each measurement runs for at most S seconds (default 0.5) after the cache
// first fills.
#include <kvpolicy/eviction/registry.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

using namespace kvpolicy;
using clock_type = std::chrono::steady_clock;

struct request {
    std::uint64_t session;
    std::uint32_t length;         // blocks: the prefix read, then the new ones
    std::uint64_t output_tokens;  // 1-2000
    timestamp now;
    timestamp back;  // the session's next request, or never
};

std::vector<request> make_requests(std::size_t capacity, std::size_t count, std::uint64_t seed) {
    const std::size_t sessions = std::max<std::size_t>(4 * capacity / 34, 8);  // mean length 34 blocks
    std::vector<double> cdf(sessions);
    double sum = 0;
    for (std::size_t i = 0; i < sessions; ++i) cdf[i] = (sum += 1.0 / std::pow(static_cast<double>(i + 1), 0.9));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, sum);
    std::vector<std::uint64_t> id(sessions), length(sessions, 0);
    for (std::size_t i = 0; i < sessions; ++i) id[i] = i;
    std::uint64_t next_id = sessions;
    std::vector<request> out(count);
    for (std::size_t r = 0; r < count; ++r) {
        const auto s = std::min<std::size_t>(
            static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()), sessions - 1);
        if (length[s] >= 64) {
            id[s] = next_id++;
            length[s] = 0;
        }
        length[s] += 1 + rng() % 4;
        out[r] = {id[s], static_cast<std::uint32_t>(length[s]), 1 + rng() % 2000, (r + 1) * 1000, never};
    }
    std::unordered_map<std::uint64_t, timestamp> seen;
    for (std::size_t r = count; r-- > 0;) {
        if (const auto it = seen.find(out[r].session); it != seen.end()) out[r].back = it->second;
        seen[out[r].session] = out[r].now;
    }
    return out;
}

struct measurement {
    double ns_per_block = 0;
    double miss_ratio = 0;
};

enum class says { nothing, output, output_and_return };

template <class P>
measurement run(const std::vector<request>& requests, std::size_t capacity, says release_says, double seconds) {
    P policy(capacity, typename P::config_type{});
    std::unordered_map<std::uint64_t, std::uint32_t> slot_of;
    slot_of.reserve(2 * capacity);
    std::vector<std::uint64_t> key_of(capacity, 0);
    std::vector<std::uint32_t> free_slots, held;
    for (std::size_t s = capacity; s-- > 0;) free_slots.push_back(static_cast<std::uint32_t>(s));
    std::size_t blocks = 0, misses = 0;
    auto serve = [&](const request& q) {
        access_context ctx;
        ctx.now = q.now;
        ctx.session = session_id{q.session};
        held.clear();
        for (std::uint32_t i = 0; i < q.length; ++i) {
            ctx.key = q.session << 8 | i;
            ++blocks;
            std::uint32_t s;
            if (const auto it = slot_of.find(ctx.key); it != slot_of.end()) {
                s = it->second;
                policy.on_access(item_id{s}, ctx);
            } else {
                ++misses;
                if (free_slots.empty()) {
                    const std::uint32_t v = policy.pop_victim(ctx.now)->value;
                    slot_of.erase(key_of[v]);
                    free_slots.push_back(v);
                }
                s = free_slots.back();
                free_slots.pop_back();
                policy.on_insert(item_id{s}, ctx);
                slot_of.emplace(ctx.key, s);
                key_of[s] = ctx.key;
            }
            policy.on_hold(item_id{s});
            held.push_back(s);
        }
        if (release_says != says::nothing) ctx.output_tokens = q.output_tokens;
        if (release_says == says::output_and_return) ctx.expected_return = q.back;
        for (auto s = held.rbegin(); s != held.rend(); ++s) {  // tail first, as tiered_cache releases
            ctx.key = key_of[*s];
            policy.on_release(item_id{*s}, ctx);
        }
    };
    std::size_t r = 0;
    while (r < requests.size() && !free_slots.empty()) serve(requests[r++]);
    blocks = misses = 0;
    const auto start = clock_type::now();
    const auto deadline = start + std::chrono::duration<double>(seconds);
    for (; r < requests.size(); ++r) {
        serve(requests[r]);
        if ((r & 63) == 0 && clock_type::now() > deadline) break;
    }
    const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
    const double done = static_cast<double>(std::max<std::size_t>(blocks, 1));
    return {ns / done, static_cast<double>(misses) / done};
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 0.5;
    for (int a = 1; a < argc; ++a) {
        const std::string_view arg = argv[a];
        if (arg == "--seconds" && a + 1 < argc) {
            seconds = std::atof(argv[++a]);
        } else {
            std::fprintf(stderr, "usage: %s [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    const std::size_t sizes[] = {1'000, 100'000, 1'000'000};
    std::vector<std::vector<request>> workloads;
    for (const std::size_t n : sizes) workloads.push_back(make_requests(n, 400'000 + n / 4, n));

    struct row {
        std::string name;
        std::vector<measurement> by_size;
    };
    std::vector<row> rows;
    auto add = [&]<class P>(std::string name, says what) {
        row x{std::move(name), {}};
        for (std::size_t i = 0; i < std::size(sizes); ++i)
            x.by_size.push_back(run<P>(workloads[i], sizes[i], what, seconds));
        rows.push_back(std::move(x));
    };
    add.operator()<lru>("lru", says::output);
    add.operator()<tail_aware_lru>("tail_aware_lru", says::output);
    add.operator()<superseded_lru>("superseded_lru", says::output);
    add.operator()<session_aware_lru>("session_aware_lru (no output)", says::nothing);
    add.operator()<session_aware_lru>("session_aware_lru", says::output);
    add.operator()<session_aware_lru>("session_aware_lru +hints", says::output_and_return);
    add.operator()<adaptive_kv>("adaptive_kv", says::output);
    add.operator()<adaptive_kv>("adaptive_kv +hints", says::output_and_return);
    add.operator()<adaptive_kv_fast>("adaptive_kv_fast", says::output);

    std::printf("%-30s", "policy");
    for (const std::size_t n : sizes)
        std::printf(" %13s %6s %6s", ("ns/block@" + std::to_string(n)).c_str(), "x lru", "miss");
    std::printf("\n");
    for (const row& x : rows) {
        std::printf("%-30s", x.name.c_str());
        for (std::size_t i = 0; i < x.by_size.size(); ++i)
            std::printf(" %13.1f %6.2f %6.3f", x.by_size[i].ns_per_block,
                        x.by_size[i].ns_per_block / rows.front().by_size[i].ns_per_block, x.by_size[i].miss_ratio);
        std::printf("\n");
    }
    return 0;
}
