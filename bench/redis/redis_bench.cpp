// redis_bench: the remote tier's transfer engine against raw pipelined
// SET/GET of the same sizes, on one redis-server this program starts on a
// free loopback port (and kills at exit).
//
// For each block size (64 KiB .. 2 MiB), `--mib` MiB of blocks are written
// (write-backs: header + checksum + SET) and read back (fetches: GET +
// verify + copy into a CPU slot) through redis::engine, and the same bytes
// are SET and GET raw through hiredis in batches of the same in-flight
// bytes, no header, no check, no copy. Best of `--runs` runs, each side
// on an empty server, which side goes first alternating; the ratio is
// engine GB/s over raw GB/s, same run, same server.
// Each size runs four engines against the same raw side: `plain` (items
// named by their 64-bit key), `digest` (named by a 32-byte block digest:
// ns.identities, a 64-hex-digit key and the digest in the header), `hmac`
// (digest plus HMAC-SHA-256 of header and payload under a deployment
// secret, made on SET and checked on GET) and `poly` (digest plus
// redis::poly1305_mac). `--mode plain|digest|hmac|poly` runs one.
// Then the block identity's hashing cost: 16-token blocks hashed by the
// 64-bit chain hash (kvpolicy::hash_blocks, mix64) and by SHA-256 through
// OpenSSL (redis::sha256_block_hasher), same run.
// Then the latency a step's remote lookup adds: 256 requests of 2k tokens
// (128 blocks of 16), each asking the store how far its prefix extends,
// one pipelined EXISTS batch per request (admit_through) against one batch
// for the whole step (present_prefixes, as admit_all_through asks).
#include <kvpolicy/redis.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

using namespace kvpolicy;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct figures {
    double set_gbs = 0, get_gbs = 0;
    double get_cpu_s = 1e9;  // this thread's CPU seconds in the GET phase (system time included)
};

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Raw pipelined SET then GET of `count` values of `bytes`, in batches of
// `batch_bytes`, through one plain hiredis connection, as a redis-benchmark
// style client drives it: redisAppendCommandArgv for each command of a
// batch, redisBufferWrite until the batch is out, redisGetReply for each
// reply. No kvpolicy code on this side.
struct raw_connection {
    explicit raw_connection(int port) : ctx(redisConnect("127.0.0.1", port)) {
        if (ctx == nullptr || ctx->err) std::abort();
        const timeval tv{30, 0};
        redisSetTimeout(ctx, tv);
    }
    ~raw_connection() { redisFree(ctx); }
    raw_connection(const raw_connection&) = delete;
    raw_connection& operator=(const raw_connection&) = delete;

    void flush() {
        int done = 0;
        while (!done)
            if (redisBufferWrite(ctx, &done) != REDIS_OK) std::abort();
    }
    redis::reply_ptr reply() {
        void* r = nullptr;
        if (redisGetReply(ctx, &r) != REDIS_OK || r == nullptr) std::abort();
        return redis::reply_ptr(static_cast<redisReply*>(r));
    }
    redisContext* ctx;
};

figures raw_run(raw_connection& c, std::size_t bytes, std::size_t count, std::size_t batch_bytes,
                std::vector<std::byte>& payload) {
    figures f;
    const std::size_t per_batch = std::max<std::size_t>(1, batch_bytes / bytes);
    std::vector<std::string> keys(count);
    for (std::size_t i = 0; i < count; ++i) keys[i] = "raw:" + std::to_string(bytes) + ":" + std::to_string(i);
    auto t0 = clock_type::now();
    for (std::size_t b = 0; b < count; b += per_batch) {
        const std::size_t e = std::min(count, b + per_batch);
        for (std::size_t i = b; i < e; ++i) {
            const char* argv[] = {"SET", keys[i].data(), reinterpret_cast<const char*>(payload.data())};
            const std::size_t lens[] = {3, keys[i].size(), bytes};
            if (redisAppendCommandArgv(c.ctx, 3, argv, lens) != REDIS_OK) std::abort();
        }
        c.flush();
        for (std::size_t i = b; i < e; ++i) {
            const redis::reply_ptr r = c.reply();
            if (r->type != REDIS_REPLY_STATUS) std::abort();
        }
    }
    f.set_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    t0 = clock_type::now();
    const double cpu0 = thread_cpu_seconds();
    for (std::size_t b = 0; b < count; b += per_batch) {
        const std::size_t e = std::min(count, b + per_batch);
        for (std::size_t i = b; i < e; ++i) {
            const char* argv[] = {"GET", keys[i].data()};
            const std::size_t lens[] = {3, keys[i].size()};
            if (redisAppendCommandArgv(c.ctx, 2, argv, lens) != REDIS_OK) std::abort();
        }
        c.flush();
        for (std::size_t i = b; i < e; ++i) {
            const redis::reply_ptr r = c.reply();
            if (r->type != REDIS_REPLY_STRING || r->len != bytes) std::abort();
        }
    }
    f.get_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    f.get_cpu_s = thread_cpu_seconds() - cpu0;
    return f;
}

// One engine per block size, kept across runs as a serving engine keeps it.
figures engine_run(redis::engine& engine, std::size_t bytes, std::size_t count) {
    figures f;
    std::vector<std::uint64_t> keys(count);
    std::vector<block_transfer> out(count), in(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        keys[i] = 0x1000 + i;
        out[i] = {tier::gpu, block_id{i}, tier::remote, block_id{i}};
        in[i] = {tier::remote, block_id{i}, tier::cpu, block_id{i}};
    }
    std::vector<transfer_status> status(count);
    auto t0 = clock_type::now();
    if (engine.execute(out, keys, status) != count) std::abort();
    f.set_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    t0 = clock_type::now();
    const double cpu0 = thread_cpu_seconds();
    if (engine.execute(in, keys, status) != count) std::abort();
    f.get_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    f.get_cpu_s = thread_cpu_seconds() - cpu0;
    return f;
}

// Blocks hashed per second: the 64-bit chain hash and SHA-256, `blocks`
// blocks of 16 random token ids, best of `runs`.
void hash_speed(int runs) {
    const std::size_t blocks = std::size_t{1} << 18, block_size = 16;
    std::vector<std::int32_t> tokens(blocks * block_size);
    std::mt19937 rng(1);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 150000);
    std::vector<block_hash> h64(blocks);
    std::vector<block_digest> h256(blocks);
    redis::sha256_block_hasher sha;
    double best64 = 1e9, best256 = 1e9;
    std::uint64_t sink = 0;
    for (int r = 0; r < runs; ++r) {
        auto t0 = clock_type::now();
        if (hash_blocks(tokens, block_size, h64) != blocks) std::abort();
        best64 = std::min(best64, seconds_since(t0));
        t0 = clock_type::now();
        if (sha.hash_blocks(tokens, block_size, h256) != blocks) std::abort();
        best256 = std::min(best256, seconds_since(t0));
        sink += h64[blocks - 1] + digest_handle(h256[blocks - 1]);
    }
    const double n = static_cast<double>(blocks);
    std::printf(
        "block identity, %zu blocks of %zu tokens (checksum %llx):\n"
        "  64-bit chain hash (mix64): %7.1f ns per block, %6.2f M blocks/s\n"
        "  SHA-256 (OpenSSL EVP):     %7.1f ns per block, %6.2f M blocks/s, %.1fx the 64-bit hash's time\n",
        blocks, block_size, static_cast<unsigned long long>(sink & 0xffff), best64 * 1e9 / n, n / best64 / 1e6,
        best256 * 1e9 / n, n / best256 / 1e6, best256 / best64);
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t mib = 128;
    int runs = 3;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--mib") == 0)
            mib = std::strtoul(argv[i + 1], nullptr, 10);
        else if (std::strcmp(argv[i], "--runs") == 0)
            runs = std::atoi(argv[i + 1]);
        else if (std::strcmp(argv[i], "--mode") == 0)
            only = argv[i + 1];
    }
    kvpolicy::testing::redis_server server({"--maxmemory", "0"});
    std::printf("redis_bench: redis-server on 127.0.0.1:%d, %zu MiB per size and direction, best of %d\n",
                server.port(), mib, runs);
    std::printf("%10s %7s %12s %12s %7s %12s %12s %7s %21s\n", "block", "mode", "raw SET", "engine SET", "ratio",
                "raw GET", "engine GET", "ratio", "GET client CPU s");
    for (const std::size_t bytes :
         {std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{2} << 20})
        for (const std::string mode : {"plain", "digest", "hmac", "poly"}) {
            if (!only.empty() && mode != only) continue;
            redis::store_config c;
            c.nodes = {{"127.0.0.1", server.port()}};
            c.io_timeout = std::chrono::milliseconds(30000);
            c.ns.model = "bench";
            c.ns.item_bytes = static_cast<std::uint32_t>(bytes);
            const std::size_t count = (mib << 20) / bytes;
            if (mode != "plain") {  // each item named by a random 32-byte digest
                c.ns.identities = std::make_shared<remote_identities>();
                std::mt19937_64 rng(bytes);
                for (std::size_t i = 0; i < count; ++i) {
                    block_digest d{};
                    for (auto& b : d) b = static_cast<std::uint8_t>(rng());
                    c.ns.identities->bind(0x1000 + i, d, 0);
                }
            }
            const std::string_view secret = "bench-deployment-secret-0123456789";
            if (mode == "hmac") c.ns.mac = std::make_shared<redis::hmac_sha256>(secret);
            if (mode == "poly") c.ns.mac = std::make_shared<redis::poly1305_mac>(secret);
            redis::store store(c);
            raw_connection raw(server.port());
            std::vector<std::byte> payload(bytes, std::byte{0x5a});
            block_arena gpu(count, bytes), cpu(count, bytes);
            // Both arenas touched first, as pinned host memory is before serving.
            for (std::size_t i = 0; i < count; ++i) {
                std::memset(gpu.block(block_id{static_cast<std::uint32_t>(i)}).data(), int(i), bytes);
                std::memset(cpu.block(block_id{static_cast<std::uint32_t>(i)}).data(), 0, bytes);
            }
            redis::engine engine(gpu, cpu, store);
            figures best_raw, best_engine;
            // Each side writes and reads on an empty server, the side going
            // first alternating from run to run, so neither gets the other's
            // state (memory in use, the allocator's purge after FLUSHALL).
            auto keep_best = [](figures& best, const figures& f) {
                best.set_gbs = std::max(best.set_gbs, f.set_gbs);
                best.get_gbs = std::max(best.get_gbs, f.get_gbs);
                best.get_cpu_s = std::min(best.get_cpu_s, f.get_cpu_s);
            };
            for (int r = 0; r < runs; ++r)
                for (int side = 0; side < 2; ++side) {
                    if ((side == 0) == (r % 2 == 0))
                        keep_best(best_raw, raw_run(raw, bytes, count, c.max_in_flight_bytes, payload));
                    else
                        keep_best(best_engine, engine_run(engine, bytes, count));
                    server.call({"FLUSHALL"});
                }
            std::printf(
                "%7zu KiB %7s %8.2f GB/s %8.2f GB/s %6.2fx %8.2f GB/s %8.2f GB/s %6.2fx   raw %.3f engine %.3f\n",
                bytes >> 10, mode.c_str(), best_raw.set_gbs, best_engine.set_gbs,
                best_engine.set_gbs / best_raw.set_gbs, best_raw.get_gbs, best_engine.get_gbs,
                best_engine.get_gbs / best_raw.get_gbs, best_raw.get_cpu_s, best_engine.get_cpu_s);
        }

    hash_speed(runs);

    // A step's remote lookup: 256 requests x 128 blocks, half of each prefix in the store.
    redis::store_config c;
    c.nodes = {{"127.0.0.1", server.port()}};
    c.ns.model = "bench";
    c.ns.item_bytes = 64;
    redis::store store(c);
    std::vector<std::vector<std::uint64_t>> requests(256, std::vector<std::uint64_t>(128));
    for (std::size_t r = 0; r < requests.size(); ++r)
        for (std::size_t b = 0; b < 128; ++b) {
            requests[r][b] = mix64(r * 1000 + b);
            if (b < 64) server.call({"SET", c.ns.key(requests[r][b]), "x"});
        }
    const std::vector<std::span<const std::uint64_t>> lists(requests.begin(), requests.end());
    std::vector<std::size_t> present(requests.size());
    double best = 1e9, best_batched = 1e9;
    for (int run = 0; run < runs; ++run) {
        auto t0 = clock_type::now();
        std::size_t found = 0;
        for (const auto& keys : requests) found += store.present_prefix(keys);
        best = std::min(best, seconds_since(t0));
        if (found != 256 * 64) std::abort();
        t0 = clock_type::now();
        store.present_prefixes(lists, present);  // the step's lookups in one batch (admit_all_through)
        best_batched = std::min(best_batched, seconds_since(t0));
        found = 0;
        for (const std::size_t p : present) found += p;
        if (found != 256 * 64) std::abort();
    }
    std::printf(
        "remote lookup of a step, 256 requests x 2048 tokens (128 blocks, 64 in the store):\n"
        "  one EXISTS batch per request: %.2f ms (%.1f us per request)\n"
        "  one batch for the step:       %.2f ms (%.1f us per request), %.2fx faster\n",
        best * 1e3, best * 1e6 / 256, best_batched * 1e3, best_batched * 1e6 / 256, best / best_batched);
    return 0;
}
