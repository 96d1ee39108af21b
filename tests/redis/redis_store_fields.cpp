// redis::store_config_from (kvpolicy/redis/store_fields.hpp): named fields
// into a store_config. Defaults when no field is given; each field read with
// its type; nodes as "host:port" and (host, port); and each bad field refused
// naming it and the fix. No server is needed.
#include <catch2/catch.hpp>

#include <kvpolicy/redis/store_fields.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace kvpolicy;
using namespace kvpolicy::redis;

namespace {

using kind = field_value::kind;

field_value text(std::string s) { return {.type = kind::text, .text = std::move(s), .type_name = "str"}; }
field_value integer(long long v) {
    return {.type = kind::integer, .integer = v, .text = std::to_string(v), .type_name = "int"};
}
field_value flag(bool b) { return {.type = kind::boolean, .boolean = b, .type_name = "bool"}; }

store_config from(const store_fields& f, bool& digests) { return store_config_from(f, 16, 64, digests, "remote"); }

}  // namespace

TEST_CASE("store_config_from: no field gives the documented defaults", "[redis]") {
    bool digests = false;
    const store_config c = from({}, digests);
    REQUIRE(c.nodes == std::vector<endpoint>{{"127.0.0.1", 6379}});
    REQUIRE(!c.cluster);
    REQUIRE(!c.tls.enabled);
    REQUIRE(c.connect_timeout.count() == 500);
    REQUIRE(c.io_timeout.count() == 1000);
    REQUIRE(c.max_in_flight_bytes == std::size_t{64} << 20);
    REQUIRE(c.ns.model == "model");
    REQUIRE(c.ns.block_size == 16);
    REQUIRE(c.ns.item_bytes == 64);
    REQUIRE(digests);
    REQUIRE(c.ns.identities != nullptr);
    REQUIRE(c.ns.mac == nullptr);
}

TEST_CASE("store_config_from reads each field by its type", "[redis]") {
    bool digests = true;
    field_value pair{
        .type = kind::sequence, .items = {text("10.0.0.7"), integer(7001)}, .tuple = true, .type_name = "tuple"};
    field_value nodes{.type = kind::sequence, .items = {text("[::1]:7000"), pair}, .type_name = "list"};
    const store_config c =
        from({{"nodes", nodes},
              {"cluster", flag(true)},
              {"io_timeout_ms", integer(250)},
              {"model", text("m1")},
              {"tp_size", integer(2)},
              {"identity", text("hash64")},
              {"mac_secret", {.type = kind::bytes, .text = std::string(32, 's'), .type_name = "bytes"}},
              {"host", {.type_name = "NoneType"}}},  // none: not given
             digests);
    REQUIRE(c.nodes == std::vector<endpoint>{{"::1", 7000}, {"10.0.0.7", 7001}});
    REQUIRE(c.cluster);
    REQUIRE(c.io_timeout.count() == 250);
    REQUIRE(c.ns.model == "m1");
    REQUIRE(c.ns.tp_size == 2);
    REQUIRE(!digests);
    REQUIRE(c.ns.identities == nullptr);
    REQUIRE(c.ns.mac != nullptr);
}

TEST_CASE("store_config_from refuses a bad field, naming it and the fix", "[redis][errors]") {
    const field_value big{.type = kind::integer, .text = "1180591620717411303424", .type_name = "int"};
    const field_value list_pair{.type = kind::sequence, .items = {text("h"), integer(1)}, .type_name = "list"};
    const std::vector<std::pair<store_fields, std::string>> bad = {
        {{{"colour", text("red")}}, "remote: unknown field 'colour'; the fields are: host, port"},
        {{{"port", text("6379")}}, "remote['port']: expected an int, got str"},
        {{{"port", big}}, "remote['port'] is 1180591620717411303424; give"},
        {{{"cluster", text("yes")}}, "remote['cluster']: expected True or False, got str"},
        {{{"host", integer(1)}}, "remote['host']: expected a str, got int"},
        {{{"nodes", {.type = kind::sequence, .items = {text("127.0.0.1")}, .type_name = "list"}}},
         "remote['nodes'][0] is \"127.0.0.1\"; give \"host:port\""},
        {{{"nodes", {.type = kind::sequence, .items = {list_pair}, .type_name = "list"}}},
         "remote['nodes'][0]: expected \"host:port\" or a (host, port) tuple, got list"},
        {{{"nodes", text("h:1")}}, "remote['nodes']: expected a list of"},
        {{{"nodes", {.type = kind::sequence, .type_name = "list"}}, {"host", text("h")}},
         "remote: 'nodes' and 'host'/'port' both given"},
        {{{"tls_ca_file", text("/tmp/ca.pem")}}, "remote['tls_ca_file'] is set but 'tls' is not True"},
        {{{"mac", text("md5")}, {"mac_secret", text(std::string(32, 's'))}}, "remote['mac'] is 'md5'; give 'poly1305'"},
        {{{"mac", text("poly1305")}}, "remote['mac'] is set but remote['mac_secret'] is not"},
        {{{"mac_secret", integer(3)}}, "remote['mac_secret']: expected bytes (or a str), got int"},
        {{{"identity", text("sha1")}}, "remote['identity'] is 'sha1'; give 'digest'"},
        {{{"connect_timeout_ms", integer(100'000'000'000)}}, "remote['connect_timeout_ms'] is 100000000000; give"},
    };
    for (const auto& [fields, message] : bad) {
        INFO(message);
        bool digests = false;
        REQUIRE_THROWS_AS(from(fields, digests), config_error);
        REQUIRE_THROWS_WITH(from(fields, digests), Catch::StartsWith(message));
    }
}
