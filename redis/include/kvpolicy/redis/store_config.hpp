// redis store_config: how the remote tier reaches its store (one server or a
// cluster's seeds, an ACL user and password, TLS, the timeouts, the memory
// it needs, the keys' namespace), and validate(), which refuses one that
// cannot work before anything connects. store_fields.hpp reads one from
// named fields (a config file, Python's TieredCache(remote={...})).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/reply.hpp"

namespace kvpolicy::redis {

/// TLS to the store (Redis's --tls-port), through OpenSSL.
struct tls_config {
    bool enabled = false;
    std::string ca_file;      ///< PEM CA certificate(s) the server's must chain to; empty: the system's CAs
    std::string cert_file;    ///< the client's certificate (PEM), for a server with tls-auth-clients
    std::string key_file;     ///< its private key (PEM)
    std::string server_name;  ///< the name (or IP) the server's certificate must carry; empty: the node's host
};

/// How the remote tier reaches its store.
struct store_config {
    std::vector<endpoint> nodes = {endpoint{}};      ///< a single server, or a cluster's seed nodes
    bool cluster = false;                            ///< shard over a Redis Cluster (hash slots, MOVED/ASK)
    std::string user;                                ///< a Redis 6 ACL user (AUTH user password); empty: AUTH password
    std::string password;                            ///< AUTH, when the server has requirepass or an ACL user
    tls_config tls;                                  ///< TLS, when the server listens with --tls-port
    std::chrono::milliseconds connect_timeout{500};  ///< one connect (and its TLS handshake) at most
    std::chrono::milliseconds io_timeout{1000};      ///< a batch's deadline: all its I/O, from its start
    std::size_t max_in_flight_bytes = std::size_t{64} << 20;  ///< a batch is sent when its values reach this
    std::size_t required_memory_bytes = 0;                    ///< refuse a node whose maxmemory is set and below this
    remote_namespace ns;  ///< model, layout, block size, item bytes: the keys' prefix
};

/// Throws config_error naming the first bad field of `c` and the fix: no
/// node, an empty host, a port outside 1-65535, a connect_timeout or
/// io_timeout that is not positive, a user without a password, a client
/// certificate without its key (or the other way), a key prefix with '{'
/// or '}' (Redis Cluster would hash every key by the text between them and
/// put them all on one master).
inline void validate(const store_config& c) {
    if (c.nodes.empty()) throw config_error("redis store: no node given; list at least one in store_config::nodes");
    for (std::size_t i = 0; i < c.nodes.size(); ++i) {
        const endpoint& e = c.nodes[i];
        const std::string field = "store_config::nodes[" + std::to_string(i) + "]";
        if (e.host.empty())
            throw config_error("redis store: " + field + ".host is empty; give the server's address (e.g. 127.0.0.1)");
        if (e.port < 1 || e.port > 65535)
            throw config_error("redis store: " + field + ".port is " + std::to_string(e.port) +
                               "; a TCP port is 1-65535 (Redis listens on 6379 by default)");
    }
    if (c.connect_timeout.count() <= 0)
        throw config_error("redis store: store_config::connect_timeout is " +
                           std::to_string(c.connect_timeout.count()) + " ms; give a positive time (default 500 ms)");
    if (c.io_timeout.count() <= 0)
        throw config_error(
            "redis store: store_config::io_timeout is " + std::to_string(c.io_timeout.count()) +
            " ms; give a positive time, each batch's deadline (default 1000 ms; 0 does not switch it off)");
    if (!c.user.empty() && c.password.empty())
        throw config_error("redis store: store_config::user is \"" + c.user +
                           "\" but store_config::password is empty; give the ACL user's password");
    if (c.tls.cert_file.empty() != c.tls.key_file.empty())
        throw config_error(
            "redis store: store_config::tls.cert_file and tls.key_file go together (the client's "
            "certificate and its private key); give both or neither");
    const std::string prefix = c.ns.prefix();
    if (prefix.find_first_of("{}") != std::string::npos)
        throw config_error(
            "redis store: the key prefix \"" + prefix +
            "\" has '{' or '}' (from store_config::ns, e.g. a model name like llama{70b}): Redis Cluster "
            "would hash every key by the text between them and put all of them on one master; "
            "use a name without braces (llama-70b)");
}

}  // namespace kvpolicy::redis
