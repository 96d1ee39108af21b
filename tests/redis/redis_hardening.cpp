// The Redis tier against servers that misbehave (label `redis`): bad
// configuration refused with the field and the fix; every malformed or
// mistyped reply, redirect, slot map and INFO from a scripted fake server
// (tests/support/fake_redis.hpp) fails its ops and resets the connection,
// nothing throws out of the engine and the next batch runs clean on a new
// connection; a real redis-server paused (SIGSTOP), a trickling server and
// a dead one cost a batch at most one deadline.
#include <catch2/catch.hpp>

#include <kvpolicy/redis.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_redis.hpp"
#include "support/redis_config.hpp"
#include "support/redis_server.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using kvpolicy::testing::config_for;
using kvpolicy::testing::fake_redis;
using kvpolicy::testing::fake_reply;
using kvpolicy::testing::has_pattern;
using kvpolicy::testing::item_bytes;
using kvpolicy::testing::redis_server;
using kvpolicy::testing::write_pattern;

namespace {

using ms = std::chrono::milliseconds;

// n blocks in the GPU arena, each with its key's pattern; a batch that
// writes them all back, then one that fetches them into the CPU arena.
struct rig {
    redis::store store;
    block_arena gpu, cpu;
    redis::engine engine;
    std::vector<std::uint64_t> keys;

    rig(const redis::store_config& c, std::uint32_t n)
            : store(c), gpu(n, item_bytes), cpu(n, item_bytes), engine(gpu, cpu, store) {
        for (std::uint32_t i = 0; i < n; ++i) {
            keys.push_back(7000 + i);
            write_pattern(gpu.block(block_id{i}), keys.back());
        }
    }
    std::vector<transfer_status> write_back() {
        std::vector<block_transfer> ops;
        for (std::uint32_t i = 0; i < keys.size(); ++i)
            ops.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
        std::vector<transfer_status> status(ops.size(), transfer_status::done);
        REQUIRE_NOTHROW(engine.execute(ops, keys, status));
        return status;
    }
    std::vector<transfer_status> fetch() {
        std::vector<block_transfer> ops;
        for (std::uint32_t i = 0; i < keys.size(); ++i)
            ops.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
        std::vector<transfer_status> status(ops.size(), transfer_status::done);
        REQUIRE_NOTHROW(engine.execute(ops, keys, status));
        for (std::uint32_t i = 0; i < keys.size(); ++i)
            if (status[i] == transfer_status::done) REQUIRE(has_pattern(cpu.block(block_id{i}), keys[i]));
        return status;
    }
};

std::size_t count(const std::vector<transfer_status>& s, transfer_status want) {
    return static_cast<std::size_t>(std::count(s.begin(), s.end(), want));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("redis: bad configuration is refused before connecting, naming the field and the fix", "[redis][errors]") {
    redis::store_config c = config_for(6379);
    SECTION("a port out of range") {
        c.nodes[0].port = 72953;
        REQUIRE_THROWS_WITH(redis::store(c),
                            Catch::Contains("store_config::nodes[0].port is 72953") && Catch::Contains("1-65535"));
        c.nodes = {{"127.0.0.1", 6379}, {"127.0.0.1", 0}};
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::nodes[1].port is 0"));
    }
    SECTION("an empty host") {
        c.nodes[0].host.clear();
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::nodes[0].host is empty") &&
                                                 Catch::Contains("give the server's address"));
    }
    SECTION("no node") {
        c.nodes.clear();
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("list at least one in store_config::nodes"));
    }
    SECTION("a negative or zero connect timeout, a zero or negative io_timeout") {
        c.connect_timeout = ms(-5);
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::connect_timeout is -5 ms") &&
                                                 Catch::Contains("give a positive time"));
        c.connect_timeout = ms(0);
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::connect_timeout is 0 ms"));
        c.connect_timeout = ms(500);
        c.io_timeout = ms(0);
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::io_timeout is 0 ms") &&
                                                 Catch::Contains("does not switch it off"));
        c.io_timeout = ms(-1);
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::io_timeout is -1 ms"));
    }
    SECTION("an ACL user without a password, a client certificate without its key") {
        c.user = "alice";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::user is \"alice\"") &&
                                                 Catch::Contains("store_config::password is empty"));
        c.user.clear();
        c.tls.enabled = true;
        c.tls.cert_file = "client.pem";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("tls.cert_file and tls.key_file go together"));
    }
    SECTION("a hash tag in the model name would put every key on one cluster master") {
        fake_redis server;
        c = config_for(server.port(), true);
        c.ns.model = "llama{70b}";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("llama{70b}") && Catch::Contains("one master") &&
                                                 Catch::Contains("without braces"));
        c.ns.model = "llama}70b";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("has '{' or '}'"));
        // Refused on a single server too: a configuration moved to a cluster
        // later must not change where its keys go.
        c.cluster = false;
        c.ns.model = "llama{70b}";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("has '{' or '}'"));
        c.ns.model = "llama-70b";
        REQUIRE_NOTHROW(redis::store(c));
        REQUIRE(server.connections() == 1);  // the refused ones never connected
    }
}

TEST_CASE("redis: a malformed or mistyped reply fails its ops and resets the connection, and the next batch runs clean",
          "[redis][hostile]") {
    struct bad_case {
        const char* name;
        const char* to;  // the command the bad reply answers: "SET" or "GET"
        std::string bytes;
        bool cluster;
    };
    const std::string huge_array = "*99999999999\r\n";
    const std::vector<bad_case> cases = {
        {"MOVED with a slot that is not a number", "GET", "-MOVED abc 127.0.0.1:7000\r\n", true},
        {"MOVED with a slot over 16383", "GET", "-MOVED 16384 127.0.0.1:7000\r\n", true},
        {"MOVED with a port out of range", "SET", "-MOVED 10 127.0.0.1:72953\r\n", true},
        {"MOVED without an address", "SET", "-MOVED 10\r\n", true},
        {"ASK with a negative slot", "GET", "-ASK -1 127.0.0.1:7000\r\n", true},
        {"ASK with a port that is not a number", "GET", "-ASK 5 127.0.0.1:x\r\n", true},
        {"SET answered by an integer", "SET", ":1\r\n", false},
        {"SET answered by a bulk string", "SET", "$2\r\nOK\r\n", false},
        {"GET answered by an array", "GET", "*1\r\n:1\r\n", false},
        {"GET answered by a status", "GET", "+OK\r\n", false},
        {"an unknown reply type", "GET", "?what\r\n", false},
        {"a negative bulk length", "GET", "$-5\r\n", false},
        {"a bulk length that is not a number", "GET", "$4x\r\nabcd\r\n", false},
        {"a bulk string over 512 MiB", "GET", "$1099511627776\r\n", false},
        {"an array of 10^11 elements", "GET", huge_array, false},
        {"arrays nested 9 deep", "GET", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", false},
        {"an integer that is not a number", "SET", ":12a\r\n", false},
        {"a line without \\r", "GET", "+OK\n", false},
        {"a value of the right length not closed by \\r\\n", "GET", "", false},
        {"a bulk string not closed by \\r\\n", "GET", "$3\r\nabcXY", false},
    };
    for (const bad_case& bc : cases) {
        DYNAMIC_SECTION(bc.name) {
            const std::uint32_t n = 6;
            // Connection 0 answers command 2 of the batch under test (after
            // PING, and CLUSTER SLOTS in cluster mode) with the bad bytes.
            std::atomic<int> bad_sent{0};
            std::string right_length_unclosed = "$" + std::to_string(item_bytes + remote_value_header::size) + "\r\n" +
                                                std::string(item_bytes + remote_value_header::size, 'v') + "XY";
            std::atomic<bool> fetch_phase{false};
            fake_redis server([&](const std::vector<std::string>& args, int conn, int) {
                if (conn == 0 && args[0] == bc.to && bad_sent == 0 && (bc.to == std::string("SET") || fetch_phase)) {
                    ++bad_sent;
                    return fake_reply::send(bc.bytes.empty() ? right_length_unclosed : bc.bytes);
                }
                return fake_reply::normal();
            });
            rig r(config_for(server.port(), bc.cluster), n);
            std::vector<transfer_status> s = r.write_back();
            if (std::string(bc.to) == "GET") {
                REQUIRE(count(s, transfer_status::done) == n);
                fetch_phase = true;
                s = r.fetch();
            }
            REQUIRE(bad_sent == 1);
            // The op the bad reply answered failed, and so did every later
            // one of its batch: its connection was reset, its replies unread.
            REQUIRE(s[0] == transfer_status::failed);
            REQUIRE(count(s, transfer_status::failed) == n);
            REQUIRE(server.connections() == 1);
            // The next batch of the same kind runs clean on a new connection.
            s = std::string(bc.to) == "SET" ? r.write_back() : r.fetch();
            REQUIRE(count(s, transfer_status::done) == n);
            REQUIRE(server.connections() == 2);
            if (std::string(bc.to) == "SET") REQUIRE(count(r.fetch(), transfer_status::done) == n);
        }
    }
}

TEST_CASE("redis cluster: MOVED and ASK with and without a host (Redis 7's \":port\") are followed",
          "[redis][hostile]") {
    for (const bool ask : {false, true}) {
        for (const bool with_host : {false, true}) {
            DYNAMIC_SECTION((ask ? "ASK" : "MOVED") << (with_host ? " host:port" : " :port")) {
                std::atomic<int> redirected{0};
                std::atomic<int> askings{0};
                fake_redis* self = nullptr;
                fake_redis server([&](const std::vector<std::string>& args, int, int) {
                    if (args[0] == "ASKING") ++askings;
                    if (args[0] == "GET" && redirected == 0) {
                        ++redirected;
                        return fake_reply::send(std::string(ask ? "-ASK " : "-MOVED ") + "3999 " +
                                                (with_host ? "127.0.0.1" : "") + ":" + std::to_string(self->port()) +
                                                "\r\n");
                    }
                    return fake_reply::normal();
                });
                self = &server;
                rig r(config_for(server.port(), true), 4);
                REQUIRE(count(r.write_back(), transfer_status::done) == 4);
                REQUIRE(count(r.fetch(), transfer_status::done) == 4);
                REQUIRE(redirected == 1);
                REQUIRE(r.store.redirects() == 1);
                REQUIRE(askings == (ask ? 1 : 0));
                REQUIRE(r.store.node_count() == 1);  // the same node, not a second connection to it
            }
        }
    }
}

TEST_CASE("redis cluster: a slot map with bad ranges or masters is refused whole, with the reason",
          "[redis][hostile]") {
    const std::vector<std::pair<std::string, std::string>> maps = {
        {"*1\r\n*3\r\n:-1\r\n:100\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n", "not within 0-16383"},
        {"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n", "not within 0-16383"},
        {"*1\r\n*3\r\n:200\r\n:100\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n", "not within 0-16383"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n", "port 1-65535"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n:1\r\n:7000\r\n", "port 1-65535"},
        {"*1\r\n*2\r\n:0\r\n:16383\r\n", "is not [start, end, [host, port, ...], ...]"},
        {"*1\r\n$3\r\nabc\r\n", "is not [start, end"},
        {"*0\r\n", "not a non-empty array"},
        {":5\r\n", "not a non-empty array"},
    };
    for (const auto& [map, why] : maps) {
        DYNAMIC_SECTION(why << ": " << map.substr(0, 24)) {
            fake_redis server;
            server.set_cluster_slots(map);
            REQUIRE_THROWS_WITH(redis::store(config_for(server.port(), true)),
                                Catch::Contains("no seed gave a slot map") && Catch::Contains(why));
        }
    }
    SECTION("an empty or \"?\" host is the node that answered") {
        fake_redis server;
        server.set_cluster_slots("*2\r\n*3\r\n:0\r\n:8000\r\n*2\r\n$0\r\n\r\n:" + std::to_string(server.port()) +
                                 "\r\n*3\r\n:8001\r\n:16383\r\n*2\r\n$1\r\n?\r\n:" + std::to_string(server.port()) +
                                 "\r\n");
        rig r(config_for(server.port(), true), 8);
        REQUIRE(r.store.node_count() == 1);
        REQUIRE(count(r.write_back(), transfer_status::done) == 8);
        REQUIRE(count(r.fetch(), transfer_status::done) == 8);
    }
}

TEST_CASE("redis: INFO whose maxmemory is not a number is a config_error naming the check", "[redis][hostile]") {
    fake_redis server;
    redis::store_config c = config_for(server.port());
    c.required_memory_bytes = 1 << 20;
    for (const std::string info :
         {"maxmemory:abc\r\n", "x:1\r\nmaxmemory:\r\n", "maxmemory:99999999999999999999999\r\n", "maxmemory:-1\r\n"}) {
        server.set_info(info);
        REQUIRE_THROWS_WITH(redis::store(c),
                            Catch::Contains("maxmemory is not a number") && Catch::Contains("required_memory_bytes"));
    }
    server.set_info("used_memory:5\r\nmaxmemory:1024\r\n");
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("maxmemory is 1024 bytes"));
    server.set_info("used_memory:5\r\nmaxmemory:0\r\n");
    REQUIRE_NOTHROW(redis::store(c));
}

TEST_CASE("redis deadlines: a paused server costs a batch at most one io_timeout, however many blocks and sends",
          "[redis][deadline]") {
    redis_server server;
    redis::store_config c = config_for(server.port());
    c.io_timeout = ms(400);
    const std::uint32_t n = GENERATE(32u, 128u);
    // Small batches: the engine sends several times within one execute.
    c.max_in_flight_bytes = GENERATE(std::size_t{64} << 20, 8 * item_bytes);
    rig r(c, n);
    REQUIRE(count(r.write_back(), transfer_status::done) == n);
    const double bound = 0.4 + 1.0;  // one deadline, and generous slack for a loaded machine

    server.pause();
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(count(r.fetch(), transfer_status::failed) == n);
    CHECK(seconds_since(t0) <= bound);
    // The connection was reset; the next batch's connect is accepted by the
    // paused server's kernel, and its PING meets the deadline: one deadline.
    t0 = std::chrono::steady_clock::now();
    REQUIRE(count(r.write_back(), transfer_status::failed) == n);
    CHECK(seconds_since(t0) <= bound);
    // That failed open marked the node down (a backoff): the batch right
    // after fails at once, or (past the backoff, on a slow machine) after
    // one more deadline.
    t0 = std::chrono::steady_clock::now();
    REQUIRE(count(r.fetch(), transfer_status::failed) == n);
    CHECK(seconds_since(t0) <= bound);
    server.resume();
    // After the backoff (100 ms), the node is tried again and the values are there.
    std::this_thread::sleep_for(ms(250));
    REQUIRE(count(r.fetch(), transfer_status::done) == n);
}

TEST_CASE("redis deadlines: a trickling server and a dead one cost a batch at most one io_timeout",
          "[redis][deadline]") {
    SECTION("a value sent one byte every 20 ms") {
        std::atomic<bool> trickle{false};
        fake_redis server([&](const std::vector<std::string>& args, int, int) {
            if (trickle && args[0] == "GET")
                return fake_reply::send("$" + std::to_string(item_bytes + remote_value_header::size) + "\r\n" +
                                            std::string(item_bytes, 'x'),
                                        ms(20));
            return fake_reply::normal();
        });
        rig r(config_for(server.port()), 16);
        REQUIRE(count(r.write_back(), transfer_status::done) == 16);
        trickle = true;
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(count(r.fetch(), transfer_status::failed) == 16);
        CHECK(seconds_since(t0) <= 0.3 + 1.0);
    }
    SECTION("a server killed: refused connects, then backoff") {
        redis_server server;
        rig r(config_for(server.port()), 32);
        REQUIRE(count(r.write_back(), transfer_status::done) == 32);
        server.kill();
        for (int i = 0; i < 3; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            REQUIRE(count(r.fetch(), transfer_status::failed) == 32);
            CHECK(seconds_since(t0) <= 0.3 + 1.0);
        }
        server.start();  // back, empty: after the backoff the node is used again
        std::this_thread::sleep_for(ms(600));
        REQUIRE(count(r.write_back(), transfer_status::done) == 32);
        REQUIRE(count(r.fetch(), transfer_status::done) == 32);
    }
}

TEST_CASE("redis scan_reply: it calls a reply complete exactly when hiredis's reader takes it whole",
          "[redis][hostile]") {
    // Numbers as Redis writes them (string2ll): no '+', no leading zero, no
    // "-0" (the fuzz harness found "*-0" taken by scan_reply, refused by the reader).
    const std::vector<std::string> replies = {
        "*-0\r\n",
        "$-0\r\n",
        ":-0\r\n",
        "$03\r\nabc\r\n",
        "*01\r\n:1\r\n",
        ":+5\r\n",
        "$+1\r\na\r\n",
        ":99999999999999999999\r\n",
        ":-9223372036854775808\r\n",
        ":9223372036854775807\r\n",
        "*-1\r\n",
        "$-1\r\n",
        "*0\r\n",
        "$0\r\n\r\n",
        ":0\r\n",
        "+\r\n",
        "-\r\n",
        "*2\r\n$1\r\na\r\n*1\r\n:-12\r\n",
        "*-2\r\n",
        "$-2\r\n",
        ":1 \r\n",
        ": 1\r\n",
        "*1\r\n*0\r\n",
        "*3\r\n$-1\r\n*-1\r\n+x\r\n",
    };
    for (const std::string& text : replies) {
        INFO(text);
        const redis::resp_scan s = redis::scan_reply(text);
        std::unique_ptr<redisReader, void (*)(redisReader*)> rd(redisReaderCreate(), redisReaderFree);
        void* r = nullptr;
        const bool hiredis_takes = redisReaderFeed(rd.get(), text.data(), text.size()) == REDIS_OK &&
                                   redisReaderGetReply(rd.get(), &r) == REDIS_OK && r != nullptr;
        if (r != nullptr) freeReplyObject(r);
        REQUIRE(s.status != redis::resp_scan::result::incomplete);
        REQUIRE((s.status == redis::resp_scan::result::complete) == hiredis_takes);
        if (hiredis_takes) REQUIRE(s.length == text.size());
    }
}

TEST_CASE("redis deadlines: a node whose connect failed is down for the rest of the batch, then backs off",
          "[redis][deadline]") {
    // Connection 0 works until a GET, which it answers by hanging up; later
    // connections answer PING with an error (a failed open) until `healthy`.
    std::atomic<bool> healthy{false};
    fake_redis server([&](const std::vector<std::string>& args, int conn, int) {
        if (conn == 0 && args[0] == "GET") return fake_reply::hang_up();
        if (conn > 0 && args[0] == "PING" && !healthy) return fake_reply::send("-ERR not now\r\n");
        return fake_reply::normal();
    });
    redis::store_config c = config_for(server.port());
    c.max_in_flight_bytes = 1;  // every op its own round trip: 16 sends in one execute
    rig r(c, 16);
    REQUIRE(count(r.write_back(), transfer_status::done) == 16);
    REQUIRE(server.connections() == 1);
    // The first GET loses the connection; the next send's connect fails
    // (PING refused): the node is down for the other 14 sends of the batch.
    REQUIRE(count(r.fetch(), transfer_status::failed) == 16);
    REQUIRE(server.connections() == 2);
    // The batch right after is within the backoff (100 ms) unless this
    // machine is slow: at most one more connect.
    REQUIRE(count(r.fetch(), transfer_status::failed) == 16);
    REQUIRE(server.connections() <= 3);
    healthy = true;
    std::this_thread::sleep_for(ms(500));  // past the backoff, doubled at most twice
    REQUIRE(count(r.fetch(), transfer_status::done) == 16);
}

TEST_CASE(
    "redis DNS: a host name is resolved off the batch's thread and kept, one that does not resolve is refused naming "
    "it",
    "[redis][errors][deadline]") {
    redis_server server;
    redis::store_config c = config_for(server.port());
    SECTION("'localhost' resolves, and a reconnect after the server restarts uses the kept addresses") {
        c.nodes[0].host = "localhost";
        rig r(c, 4);
        REQUIRE(count(r.write_back(), transfer_status::done) == 4);
        server.kill();
        REQUIRE(count(r.fetch(), transfer_status::failed) == 4);  // down: misses, nothing thrown
        server.start();
        std::this_thread::sleep_for(ms(150));  // past the node's first backoff (100 ms)
        const auto status = r.fetch();         // a fresh server: no values, but the node answers
        REQUIRE(count(status, transfer_status::failed) == 4);
        REQUIRE(count(r.write_back(), transfer_status::done) == 4);
        REQUIRE(count(r.fetch(), transfer_status::done) == 4);
    }
    SECTION("a name that does not resolve: a config_error naming the host and the fix, at construction") {
        c.nodes[0].host = "kvpolicy-no-such-host.invalid";  // RFC 6761: never resolves
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("kvpolicy-no-such-host.invalid") &&
                                                 Catch::Contains("resolve") &&
                                                 Catch::Contains("give a host name this machine resolves"));
    }
}

TEST_CASE("redis DNS: async_resolver answers off the caller's thread, once per lookup", "[redis][deadline]") {
    redis::async_resolver r;
    REQUIRE_FALSE(r.pending());
    REQUIRE_FALSE(r.take(std::chrono::steady_clock::now() + ms(10)).has_value());  // none started
    r.start("localhost", 6379);
    REQUIRE(r.pending());
    const auto answer = r.take(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    REQUIRE(answer.has_value());
    REQUIRE(answer->rc == 0);
    REQUIRE_FALSE(answer->addresses.empty());
    REQUIRE_FALSE(r.pending());  // taken
    const auto numeric = redis::async_resolver::lookup("127.0.0.1", "6379", AI_NUMERICHOST);
    REQUIRE(numeric.rc == 0);
    REQUIRE(numeric.addresses.size() == 1);
    REQUIRE(redis::async_resolver::lookup("localhost", "6379", AI_NUMERICHOST).rc !=
            0);  // a name is never looked up so
}

TEST_CASE(
    "redis DNS: a cluster node named by a host that does not resolve is down for the batch, its ops failed, nothing "
    "thrown",
    "[redis][deadline]") {
    fake_redis server;
    const std::string bad_host = "kvpolicy-no-such-host.invalid";
    // Slots 0-8000 on the server that answers, the rest on a node named by a host no resolver knows.
    server.set_cluster_slots("*2\r\n*3\r\n:0\r\n:8000\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(server.port()) +
                             "\r\n*3\r\n:8001\r\n:16383\r\n*2\r\n$" + std::to_string(bad_host.size()) + "\r\n" +
                             bad_host + "\r\n:" + std::to_string(server.port()) + "\r\n");
    redis::store_config c = config_for(server.port(), true);
    c.nodes.push_back({bad_host, server.port()});  // a seed by name, so the slot map may name it
    rig r(c, 32);
    std::size_t reachable = 0;
    for (const std::uint64_t k : r.keys) reachable += redis::hash_slot(c.ns.key(k)) <= 8000 ? 1 : 0;
    REQUIRE(reachable > 0);
    REQUIRE(reachable < r.keys.size());
    for (int batch = 0; batch < 3; ++batch) {  // the lookup is tried again after the backoff, never thrown
        const auto written = r.write_back();
        REQUIRE(count(written, transfer_status::done) == reachable);
        const auto fetched = r.fetch();
        REQUIRE(count(fetched, transfer_status::done) == reachable);
    }
    REQUIRE(r.store.node_count() == 2);
}
