// store_config from named fields: the remote tier's configuration as a
// config file, a command line or Python's TieredCache(remote={...}) gives
// it, each field by name with a value of the source's own type.
//
// The fields, their types and defaults (store_field_names lists them):
// host ("127.0.0.1"), port (6379) or nodes (a list of "host:port" or
// (host, port)), cluster, user, password, tls and tls_ca_file,
// tls_cert_file, tls_key_file, tls_server_name (only with tls),
// connect_timeout_ms (500), io_timeout_ms (1000), max_in_flight_bytes
// (64 MiB), required_memory_bytes (0), the namespace's model ("model"),
// dtype ("default"), layout_version (1), tp_rank, tp_size, pp_rank, pp_size
// (0, 1, 0, 1), tenant, identity ('digest': blocks named by 32-byte digests;
// or 'hash64'), mac ('poly1305' or 'hmac-sha256') and mac_secret (bytes).
// A field whose value is none is not given. Every error is a config_error
// naming the field (`what['field']`) and the fix; the checks of the config
// itself (validate, remote_namespace::validate) run when the store is built.
#pragma once

#include <algorithm>
#include <chrono>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/reply.hpp"
#include "kvpolicy/redis/store_config.hpp"
#include "kvpolicy/redis/identity.hpp"

namespace kvpolicy::redis {

/// One field's value, as its source gave it.
struct field_value {
    enum class kind : std::uint8_t { none, boolean, integer, text, bytes, sequence, other };
    kind type = kind::none;
    bool boolean = false;
    std::optional<long long> integer{};  ///< kind::integer: its value; none past long long (`text` spells it)
    std::string text{};                  ///< text and bytes; an integer's digits
    std::vector<field_value> items{};    ///< kind::sequence: its items
    bool tuple = false;                  ///< kind::sequence: a fixed pair, as (host, port), rather than a list
    std::string type_name{};             ///< the source's name of the value's type, for messages ("str", "float")
};

/// The fields, by name, in the order their source gave them.
using store_fields = std::vector<std::pair<std::string, field_value>>;

inline constexpr const char* store_field_names[] = {"host",
                                                    "port",
                                                    "nodes",
                                                    "cluster",
                                                    "user",
                                                    "password",
                                                    "tls",
                                                    "tls_ca_file",
                                                    "tls_cert_file",
                                                    "tls_key_file",
                                                    "tls_server_name",
                                                    "connect_timeout_ms",
                                                    "io_timeout_ms",
                                                    "max_in_flight_bytes",
                                                    "required_memory_bytes",
                                                    "model",
                                                    "dtype",
                                                    "layout_version",
                                                    "tp_rank",
                                                    "tp_size",
                                                    "pp_rank",
                                                    "pp_size",
                                                    "tenant",
                                                    "mac_secret",
                                                    "mac",
                                                    "identity"};

namespace detail {

// The fields, each read by type; `what` names their source in messages.
class field_reader {
public:
    field_reader(const store_fields& fields, std::string what) : fields_(fields), what_(std::move(what)) {
        for (const auto& field : fields) {
            // A named reference, not a structured binding: clang before 16
            // cannot capture a binding in a lambda.
            const std::string& name = field.first;
            if (std::find_if(std::begin(store_field_names), std::end(store_field_names),
                             [&](const char* f) { return name == f; }) == std::end(store_field_names)) {
                std::string all;
                for (const char* f : store_field_names) all += std::string(all.empty() ? "" : ", ") + f;
                throw config_error(what_ + ": unknown field '" + name + "'; the fields are: " + all);
            }
        }
    }
    [[nodiscard]] const field_value* get(const char* f) const {
        for (const auto& [name, value] : fields_)
            if (name == f && value.type != field_value::kind::none) return &value;
        return nullptr;
    }
    [[nodiscard]] bool has(const char* f) const { return get(f) != nullptr; }
    [[nodiscard]] std::string field(const char* f) const { return what_ + "['" + f + "']"; }
    [[nodiscard]] std::string str(const char* f, std::string fallback) const {
        const field_value* v = get(f);
        if (v == nullptr) return fallback;
        if (v->type != field_value::kind::text) throw config_error(field(f) + ": expected a str, got " + v->type_name);
        return v->text;
    }
    [[nodiscard]] bool flag(const char* f, bool fallback) const {
        const field_value* v = get(f);
        if (v == nullptr) return fallback;
        if (v->type != field_value::kind::boolean)
            throw config_error(field(f) + ": expected True or False, got " + v->type_name);
        return v->boolean;
    }
    // An integer in [lo, hi]: validate says what is wrong with one in range.
    [[nodiscard]] long long integer(const char* f, long long fallback, long long lo, long long hi) const {
        const field_value* v = get(f);
        return v == nullptr ? fallback : integer_of(*v, field(f), lo, hi);
    }
    static long long integer_of(const field_value& v, const std::string& what, long long lo, long long hi) {
        if (v.type != field_value::kind::integer) throw config_error(what + ": expected an int, got " + v.type_name);
        if (!v.integer || *v.integer < lo || *v.integer > hi)
            throw config_error(what + " is " + v.text + "; give " + std::to_string(lo) + " to " + std::to_string(hi));
        return *v.integer;
    }
    [[nodiscard]] std::string bytes(const char* f) const {
        const field_value* v = get(f);
        if (v == nullptr) return {};
        if (v->type != field_value::kind::bytes && v->type != field_value::kind::text)
            throw config_error(field(f) + ": expected bytes (or a str), got " + v->type_name);
        return v->text;
    }

private:
    const store_fields& fields_;
    std::string what_;
};

// "host:port", or (host, port): node `i` of what['nodes'].
inline endpoint endpoint_of(const field_value& v, const std::string& nodes, std::size_t i) {
    const std::string what = nodes + "[" + std::to_string(i) + "]";
    if (v.type == field_value::kind::text) {
        const std::string& text = v.text;
        const auto colon = text.rfind(':');
        if (colon == std::string::npos)
            throw config_error(what + " is \"" + text +
                               "\"; give \"host:port\" (e.g. \"10.0.0.5:6379\") or (host, port)");
        std::string host = text.substr(0, colon);
        if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
            host = host.substr(1, host.size() - 2);  // [::1]:6379
        int port = 0;
        const char* end = text.data() + text.size();
        const auto r = std::from_chars(text.data() + colon + 1, end, port);
        if (r.ec != std::errc() || r.ptr != end || colon + 1 == text.size())
            throw config_error(what + " is \"" + text + "\": the port is not a number; give \"host:port\"");
        return {host, port};
    }
    if (v.type == field_value::kind::sequence && v.tuple && v.items.size() == 2 &&
        v.items[0].type == field_value::kind::text)
        return {v.items[0].text,
                static_cast<int>(field_reader::integer_of(v.items[1], what + "'s port", INT_MIN, INT_MAX))};
    throw config_error(what + ": expected \"host:port\" or a (host, port) tuple, got " + v.type_name);
}

}  // namespace detail

/// The store_config of `fields` for a cache of `block_size` tokens per block
/// and `item_bytes` (> 0) per item; `what` names the fields' source in messages
/// ("TieredCache remote"). `digests`: whether blocks are named by digests
/// (identity 'digest', the default; then ns.identities is set). Throws:
/// config_error naming the field and the fix.
inline store_config store_config_from(const store_fields& fields, std::uint32_t block_size, std::uint32_t item_bytes,
                                      bool& digests, const std::string& what = "remote") {
    const detail::field_reader f(fields, what);
    store_config c;
    if (f.has("nodes")) {
        if (f.has("host") || f.has("port"))
            throw config_error(what +
                               ": 'nodes' and 'host'/'port' both given; give one server as host and "
                               "port, or a cluster's seeds (or one server) as nodes");
        const field_value& list = *f.get("nodes");
        if (list.type != field_value::kind::sequence)
            throw config_error(f.field("nodes") + ": expected a list of \"host:port\" or (host, port), got " +
                               list.type_name);
        c.nodes.clear();
        for (std::size_t i = 0; i < list.items.size(); ++i)
            c.nodes.push_back(detail::endpoint_of(list.items[i], f.field("nodes"), i));
    } else {
        c.nodes = {{f.str("host", "127.0.0.1"), static_cast<int>(f.integer("port", 6379, INT_MIN, INT_MAX))}};
    }
    c.cluster = f.flag("cluster", false);
    c.user = f.str("user", "");
    c.password = f.str("password", "");
    c.tls.enabled = f.flag("tls", false);
    c.tls.ca_file = f.str("tls_ca_file", "");
    c.tls.cert_file = f.str("tls_cert_file", "");
    c.tls.key_file = f.str("tls_key_file", "");
    c.tls.server_name = f.str("tls_server_name", "");
    if (!c.tls.enabled)
        for (const char* t : {"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name"})
            if (f.has(t))
                throw config_error(f.field(t) + " is set but 'tls' is not True; set 'tls': True to connect over TLS");
    constexpr long long max_ms = 24LL * 3600 * 1000;
    c.connect_timeout = std::chrono::milliseconds(f.integer("connect_timeout_ms", 500, LLONG_MIN, max_ms));
    c.io_timeout = std::chrono::milliseconds(f.integer("io_timeout_ms", 1000, LLONG_MIN, max_ms));
    c.max_in_flight_bytes = static_cast<std::size_t>(f.integer("max_in_flight_bytes", 64LL << 20, 1, LLONG_MAX));
    c.required_memory_bytes = static_cast<std::size_t>(f.integer("required_memory_bytes", 0, 0, LLONG_MAX));
    c.ns.model = f.str("model", "model");
    c.ns.dtype = f.str("dtype", "default");
    c.ns.layout_version = static_cast<std::uint32_t>(f.integer("layout_version", 1, 0, UINT32_MAX));
    c.ns.tp_rank = static_cast<std::uint32_t>(f.integer("tp_rank", 0, 0, UINT32_MAX));
    c.ns.tp_size = static_cast<std::uint32_t>(f.integer("tp_size", 1, 0, UINT32_MAX));
    c.ns.pp_rank = static_cast<std::uint32_t>(f.integer("pp_rank", 0, 0, UINT32_MAX));
    c.ns.pp_size = static_cast<std::uint32_t>(f.integer("pp_size", 1, 0, UINT32_MAX));
    c.ns.tenant = f.str("tenant", "");
    c.ns.block_size = block_size;
    c.ns.item_bytes = item_bytes;
    const std::string identity = f.str("identity", "digest");
    if (identity != "digest" && identity != "hash64")
        throw config_error(f.field("identity") + " is '" + identity +
                           "'; give 'digest' (blocks named by 32-byte digests, collision resistant: the default) or "
                           "'hash64' (the cache's 64-bit chain hashes)");
    digests = identity == "digest";
    if (digests) c.ns.identities = std::make_shared<remote_identities>();
    const std::string secret = f.bytes("mac_secret");
    const std::string mac = f.str("mac", "poly1305");
    if (mac != "poly1305" && mac != "hmac-sha256")
        throw config_error(f.field("mac") + " is '" + mac + "'; give 'poly1305' (the fast one) or 'hmac-sha256'");
    if (f.has("mac") && !f.has("mac_secret"))
        throw config_error(f.field("mac") +
                           " is set but remote['mac_secret'] is not; give the deployment's "
                           "secret (at least 16 random bytes, the same on every instance that shares the store)");
    if (f.has("mac_secret")) {
        if (mac == "poly1305")
            c.ns.mac = std::make_shared<poly1305_mac>(std::string_view(secret));
        else
            c.ns.mac = std::make_shared<hmac_sha256>(std::string_view(secret));
    }
    return c;
}

}  // namespace kvpolicy::redis
