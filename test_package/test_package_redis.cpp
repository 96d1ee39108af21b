// Uses kvpolicy::redis the way a consumer would, without a server: Redis
// Cluster's hash slot of a key (CLUSTER KEYSLOT foo is 12182 in Redis's
// documentation), and a store pointed at a loopback port where nothing
// listens, which must refuse with an error naming the address and the fix.
// That call goes through hiredis, so a package whose hiredis does not link
// fails here. Exits non-zero on a wrong answer.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <kvpolicy/redis.hpp>

int main() {
    // A loopback port bound but not listening: a connection there is refused.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return 2;
    const int port = ntohs(a.sin_port);

    kvpolicy::redis::store_config config;
    config.nodes = {{"127.0.0.1", port}};
    std::string error;
    try {
        kvpolicy::redis::store store(config);
    } catch (const kvpolicy::config_error& e) {
        error = e.what();
    }
    ::close(fd);
    const bool refused = error.find("127.0.0.1:" + std::to_string(port)) != std::string::npos &&
                         error.find("start redis-server there") != std::string::npos;
    const unsigned slot = kvpolicy::redis::hash_slot("foo");
    std::printf("kvpolicy test_package (redis): hash slot of foo %u; unreachable store refused: %s\n", slot,
                refused ? "yes" : "no");
    return slot == 12182 && refused ? 0 : 1;
}
