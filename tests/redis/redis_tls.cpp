// The Redis tier's transport and login on a real redis-server (label
// `redis`): Redis 6 ACL users (AUTH user password), and TLS (--tls-port)
// with certificates made at test time by the openssl CLI: a CA, a server
// certificate for 127.0.0.1 and localhost, a client certificate, and a
// second CA that signed nothing the server has. Values round-trip over TLS
// with the CA, the server's name and the client's certificate checked; a
// wrong CA, a wrong name, a missing client certificate are refused with
// the field to fix; a paused TLS server costs a batch one deadline.
#include <catch2/catch.hpp>

#include <kvpolicy/redis.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/redis_config.hpp"
#include "support/redis_server.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using kvpolicy::testing::has_pattern;
using kvpolicy::testing::item_bytes;
using kvpolicy::testing::redis_server;
using kvpolicy::testing::write_pattern;

namespace {

using ms = std::chrono::milliseconds;

// Certificates in a fresh temporary directory, removed at the end.
struct test_certs {
    std::string dir;
    test_certs() {
        char tmpl[] = "/tmp/kvpolicy-tls-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        const std::vector<std::string> steps = {
            "openssl req -x509" + ec + " -keyout ca.key -out ca.crt -days 2 -subj /CN=kvpolicy-test-ca",
            "openssl req -x509" + ec + " -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=kvpolicy-other-ca",
            "openssl req" + ec + " -keyout server.key -out server.csr -subj /CN=kvpolicy-test-server",
            "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 "
            "-extfile server.ext",
            "openssl req" + ec + " -keyout client.key -out client.csr -subj /CN=kvpolicy-test-client",
            "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2",
        };
        std::ofstream(dir + "/server.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
        for (const std::string& s : steps) {
            const std::string cmd = "cd " + dir + " && " + s + " >> openssl.log 2>&1";
            INFO(cmd);
            REQUIRE(std::system(cmd.c_str()) == 0);
        }
    }
    ~test_certs() {
        std::error_code e;
        std::filesystem::remove_all(dir, e);
    }
    [[nodiscard]] std::string file(const char* name) const { return dir + "/" + name; }
};

// A redis-server with a TLS port that asks for client certificates, and
// `extra` arguments; its plain port stays open for the helper's checks. A
// TLS port another process took in between is chosen again (redis_server.hpp).
struct tls_server {
    int tls_port = 0;
    std::optional<redis_server> server;
    tls_server(const test_certs& certs, std::vector<std::string> extra = {}) {
        for (int tries = 1; !server; ++tries) {
            tls_port = kvpolicy::testing::free_loopback_port();
            std::vector<std::string> a = {"--tls-port",         std::to_string(tls_port),
                                          "--tls-cert-file",    certs.file("server.crt"),
                                          "--tls-key-file",     certs.file("server.key"),
                                          "--tls-ca-cert-file", certs.file("ca.crt"),
                                          "--tls-auth-clients", "yes"};
            a.insert(a.end(), extra.begin(), extra.end());
            try {
                server.emplace(std::move(a));
            } catch (const kvpolicy::testing::port_taken& e) {
                if (e.port != tls_port || tries == 5) throw;
            }
        }
    }
};

redis::store_config tls_config_for(const test_certs& certs, int port) {
    redis::store_config c;
    c.nodes = {{"127.0.0.1", port}};
    c.io_timeout = ms(1000);
    c.ns = {.model = "tls-model", .item_bytes = item_bytes};
    c.tls.enabled = true;
    c.tls.ca_file = certs.file("ca.crt");
    c.tls.cert_file = certs.file("client.crt");
    c.tls.key_file = certs.file("client.key");
    return c;
}

// Writes n blocks back through `c`'s store and fetches them again: every op done, every byte right.
void round_trip(const redis::store_config& c, std::uint32_t n = 16) {
    redis::store store(c);
    block_arena gpu(n, item_bytes), cpu(n, item_bytes);
    redis::engine engine(gpu, cpu, store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> sets, gets;
    for (std::uint32_t i = 0; i < n; ++i) {
        keys.push_back(500 + i);
        write_pattern(gpu.block(block_id{i}), keys.back());
        sets.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
        gets.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
    }
    std::vector<transfer_status> status(n);
    REQUIRE(engine.execute(sets, keys, status) == n);
    REQUIRE(engine.execute(gets, keys, status) == n);
    for (std::uint32_t i = 0; i < n; ++i) REQUIRE(has_pattern(cpu.block(block_id{i}), keys[i]));
    REQUIRE(store.present_prefix(keys) == n);
}

}  // namespace

TEST_CASE("redis ACL: a Redis 6 user logs in with AUTH user password, wrong ones are refused naming the fields",
          "[redis][acl]") {
    redis_server server({"--user", "default", "off", "--user", "alice", "on", ">s3cret", "~*", "+@all"});
    redis::store_config c;
    c.nodes = {{"127.0.0.1", server.port()}};
    c.ns = {.model = "acl-model", .item_bytes = item_bytes};
    c.user = "alice";
    c.password = "s3cret";
    round_trip(c);
    c.password = "wrong";
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("authentication failed") && Catch::Contains("WRONGPASS") &&
                                             Catch::Contains("store_config::user and store_config::password"));
    c.user.clear();
    c.password = "s3cret";  // the default user's password: that user is off
    REQUIRE_THROWS_WITH(redis::store(c),
                        Catch::Contains("authentication failed") && Catch::Contains("store_config::user"));
    c.password.clear();
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("needs a password") && Catch::Contains("store_config::user"));
}

TEST_CASE("redis TLS: values round-trip, and the CA, the server's name and the client's certificate are checked",
          "[redis][tls]") {
    const test_certs certs;
    tls_server s(certs);
    redis::store_config c = tls_config_for(certs, s.tls_port);
    SECTION("the right CA, by IP address and by DNS name") {
        round_trip(c);
        c.tls.server_name = "localhost";
        round_trip(c);
        c.nodes[0].host = "localhost";
        c.tls.server_name.clear();
        round_trip(c);
    }
    SECTION("large values in many TLS records") {
        c.ns.item_bytes = 1 << 20;
        redis::store store(c);
        block_arena gpu(4, 1 << 20), cpu(4, 1 << 20);
        redis::engine engine(gpu, cpu, store);
        const std::vector<std::uint64_t> keys = {1, 2, 3, 4};
        std::vector<block_transfer> sets, gets;
        for (std::uint32_t i = 0; i < 4; ++i) {
            write_pattern(gpu.block(block_id{i}), keys[i]);
            sets.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
            gets.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
        }
        std::vector<transfer_status> status(4);
        REQUIRE(engine.execute(sets, keys, status) == 4);
        REQUIRE(engine.execute(gets, keys, status) == 4);
        for (std::uint32_t i = 0; i < 4; ++i) REQUIRE(has_pattern(cpu.block(block_id{i}), keys[i]));
    }
    SECTION("a CA that did not sign the server's certificate") {
        c.tls.ca_file = certs.file("other-ca.crt");
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("127.0.0.1:" + std::to_string(s.tls_port)) &&
                                                 Catch::Contains("does not verify") && Catch::Contains("tls.ca_file"));
    }
    SECTION("a name the certificate does not carry") {
        c.tls.server_name = "redis.example.com";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("not for \"redis.example.com\"") &&
                                                 Catch::Contains("store_config::tls.server_name"));
        c.tls.server_name = "127.0.0.2";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("not for \"127.0.0.2\""));
    }
    SECTION("no client certificate where the server asks for one") {
        c.tls.cert_file.clear();
        c.tls.key_file.clear();
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("tls.cert_file"));
    }
    SECTION("files that cannot be read") {
        c.tls.ca_file = certs.file("missing.crt");
        REQUIRE_THROWS_WITH(redis::store(c),
                            Catch::Contains("cannot load the CA certificates from store_config::tls.ca_file"));
        c.tls.ca_file = certs.file("ca.crt");
        c.tls.key_file = certs.file("server.key");  // not the client certificate's key
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("store_config::tls.key_file"));
    }
    SECTION("TLS to the plain port, plain to the TLS port") {
        c.nodes[0].port = s.server->port();
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("TLS"));
        c.nodes[0].port = s.tls_port;
        c.tls.enabled = false;
        REQUIRE_THROWS(redis::store(c));
    }
}

TEST_CASE("redis TLS with an ACL user, and a paused TLS server costs a batch one deadline", "[redis][tls][deadline]") {
    const test_certs certs;
    tls_server s(certs, {"--user", "default", "off", "--user", "bob", "on", ">pw", "~*", "+@all"});
    redis::store_config c = tls_config_for(certs, s.tls_port);
    c.user = "bob";
    c.password = "pw";
    c.io_timeout = ms(400);
    round_trip(c, 32);

    redis::store store(c);
    block_arena gpu(32, item_bytes), cpu(32, item_bytes);
    redis::engine engine(gpu, cpu, store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> gets;
    for (std::uint32_t i = 0; i < 32; ++i) {
        keys.push_back(500 + i);
        gets.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
    }
    std::vector<transfer_status> status(32);
    REQUIRE(engine.execute(gets, keys, status) == 32);
    s.server->pause();
    for (int batch = 0; batch < 2; ++batch) {  // the open connection, then a new one's handshake
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(engine.execute(gets, keys, status) == 0);
        CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <= 0.4 + 1.0);
    }
    s.server->resume();
}
