// The store configuration the Redis tier's tests share: one loopback node (or
// a cluster's seed), a 300 ms deadline per batch so that a stopped server
// fails its operations quickly, and values of item_bytes.
#pragma once

#include <kvpolicy/redis.hpp>

#include <chrono>
#include <cstddef>

namespace kvpolicy::testing {

inline constexpr std::size_t item_bytes = 4096;

inline redis::store_config config_for(int port, bool cluster = false) {
    redis::store_config c;
    c.nodes = {{"127.0.0.1", port}};
    c.cluster = cluster;
    c.io_timeout = std::chrono::milliseconds(300);
    c.ns = {.model = "test-model", .item_bytes = item_bytes};
    return c;
}

}  // namespace kvpolicy::testing
