// Fuzzes what the Redis tier reads from a server: the reply parsers of
// kvpolicy/redis/reply.hpp on the raw input, then the store and the engine
// against a scripted fake server (tests/support/fake_redis.hpp) that
// answers with the input's bytes.
//
// Input: a mode byte (bit 0: a cluster store; bit 1: run the batches twice,
// so that a connection reset by a bad reply is opened again and meets the
// next segment), then segments separated by "\n--\n": segment k is what
// the fake server sends on its k-th connection, all at once in answer to
// the first command (PING) and then end of stream (the client reads EOF
// where the bytes run out, never waits for a deadline); "PORT" in it is
// the fake server's port. The whole input after the mode byte also goes
// to the parsers.
//
// Properties, beyond "no crash, no sanitizer report, nothing thrown but a
// config_error from the store's constructor":
// - scan_reply: a complete reply's length is within the input and, handed
//   to hiredis's reader alone, gives exactly one reply; a prefix of a
//   complete reply is never complete (a shorter one would have been found);
// - parse_redirect: an accepted redirect has a slot below 16384 and a port
//   in 1-65535, and the text names them;
// - parse_cluster_slots (on any reply the reader gives): every range within
//   0-16383, first <= last, ports in 1-65535;
// - the engine (4 blocks of 64 bytes: write-backs, fetches, then
//   present_prefix, once or twice): every op reported done or failed; a
//   failed fetch's slot holds the fill pattern, never part of a value; the
//   next batch after any reply runs (ASan sees a status written for an op
//   of an old batch); the store never connects anywhere but the fake
//   server (accept_node).
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvpolicy/redis.hpp>

#include "fuzz_check.hpp"
#include "support/fake_redis.hpp"

using namespace kvpolicy;
using kvpolicy::fuzzing::fail;
using kvpolicy::fuzzing::require;

namespace {

constexpr std::size_t item_bytes = 64;
constexpr std::uint32_t blocks = 4;

void fill_pattern(std::span<std::byte> b, std::uint64_t key) {
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((key * 131 + i * 7) & 0xff);
}

void check_parsers(std::string_view in) {
    const redis::resp_scan s = redis::scan_reply(in);
    if (s.status == redis::resp_scan::result::complete) {
        require(s.length > 0 && s.length <= in.size(), "scan_reply: a complete reply within the input");
        redisReader* rd = redisReaderCreate();
        require(rd != nullptr, "redisReaderCreate");
        void* r = nullptr;
        require(redisReaderFeed(rd, in.data(), s.length) == REDIS_OK && redisReaderGetReply(rd, &r) == REDIS_OK &&
                    r != nullptr,
                "scan_reply: a reply it calls complete is one reply to hiredis's reader");
        void* again = nullptr;
        require(redisReaderGetReply(rd, &again) == REDIS_OK && again == nullptr, "scan_reply: exactly one reply");
        std::string why;
        if (const auto ranges = redis::parse_cluster_slots(static_cast<redisReply*>(r), why))
            for (const redis::slot_range& x : *ranges)
                require(x.first <= x.last && x.last < 16384 && x.master.port >= 1 && x.master.port <= 65535,
                        "parse_cluster_slots: ranges within 0-16383, ports 1-65535");
        else
            require(!why.empty(), "parse_cluster_slots: a refusal says why");
        freeReplyObject(r);
        redisReaderFree(rd);
        for (std::size_t cut : {s.length - 1, s.length / 2})
            require(redis::scan_reply(in.substr(0, cut)).status != redis::resp_scan::result::complete,
                    "scan_reply: a prefix of a reply is not complete");
    }
    const std::string_view line = in.substr(0, std::min(in.find('\r'), in.size()));
    if (const auto r = redis::parse_redirect(line)) {
        require(r->slot < 16384 && r->to.port >= 1 && r->to.port <= 65535, "parse_redirect: slot and port in range");
        require(line.find(std::to_string(r->to.port)) != std::string_view::npos,
                "parse_redirect: the port is in the text");
    }
    (void)redis::parse_info_field(in, "maxmemory");
}

void check_status(std::span<const transfer_status> s) {
    for (const transfer_status x : s)
        require(x == transfer_status::done || x == transfer_status::failed, "every op reported done or failed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1 || size > 64 * 1024) return 0;
    const std::uint8_t mode = data[0];
    const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
    check_parsers(rest);

    std::vector<std::string> segments;
    for (std::size_t at = 0;;) {
        const std::size_t sep = rest.find("\n--\n", at);
        segments.emplace_back(rest.substr(at, sep == std::string_view::npos ? std::string_view::npos : sep - at));
        if (sep == std::string_view::npos) break;
        at = sep + 4;
    }
    // Reset before the engine closes its sockets (the end of this function):
    // a server that aborts its connections first leaves no TIME_WAIT behind,
    // and hundreds of inputs a second would otherwise use up the ports.
    std::optional<testing::fake_redis> server;
    server.emplace([&](const std::vector<std::string>&, int conn, int) {
        return testing::fake_reply::send_last(static_cast<std::size_t>(conn) < segments.size() ? segments[conn]
                                                                                               : std::string());
    });
    // "PORT" in a segment is the fake server's port (a slot map or a
    // redirect naming it; the seeds do).
    const std::string port_text = std::to_string(server->port());
    for (std::string& seg : segments)
        for (std::size_t at = 0; (at = seg.find("PORT", at)) != std::string::npos; at += port_text.size())
            seg.replace(at, 4, port_text);
    redis::store_config c;
    c.nodes = {{"127.0.0.1", server->port()}};
    c.cluster = (mode & 1) != 0;
    c.connect_timeout = std::chrono::milliseconds(1000);
    c.io_timeout = std::chrono::milliseconds(1000);
    c.ns = {.model = "fuzz", .item_bytes = static_cast<std::uint32_t>(item_bytes)};
    std::optional<redis::store> store;
    try {
        store.emplace(c);
    } catch (const config_error&) {
        return 0;  // refused at construction, with a message: fine
    }
    const int port = server->port();
    store->accept_node = [port](const redis::endpoint& e) {
        if (e.port != port || e.host != "127.0.0.1") return false;  // never anywhere but the fake server
        return true;
    };
    block_arena gpu(blocks, item_bytes), cpu(blocks, item_bytes);
    redis::engine engine(gpu, cpu, *store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> sets, gets;
    for (std::uint32_t i = 0; i < blocks; ++i) {
        keys.push_back(100 + i);
        fill_pattern(gpu.block(block_id{i}), keys.back());
        sets.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
        gets.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
    }
    const int rounds = (mode & 2) != 0 ? 2 : 1;
    for (int round = 0; round < rounds; ++round) {
        std::vector<transfer_status> status(blocks, transfer_status::done);
        try {
            (void)engine.execute(sets, keys, status);
            check_status(status);
            status.assign(blocks, transfer_status::done);
            (void)engine.execute(gets, keys, status);
            check_status(status);
            for (std::uint32_t i = 0; i < blocks; ++i)
                if (status[i] == transfer_status::failed)
                    require(std::all_of(cpu.block(block_id{i}).begin(), cpu.block(block_id{i}).end(),
                                        [](std::byte b) { return b == std::byte{0xee}; }),
                            "a failed fetch's slot holds the fill pattern, never a part of a value");
            (void)store->present_prefix(keys);
        } catch (const std::exception& e) {
            fail(std::string("an exception out of the engine or store: ") + e.what());
        }
    }
    server.reset();
    return 0;
}
