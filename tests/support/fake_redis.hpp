// fake_redis: a scripted Redis server on a loopback port, for the Redis
// tier's hostile-reply tests and fuzz harness. It keeps a small key-value
// map and answers PING, AUTH, SET, GET, EXISTS, ASKING, CLUSTER SLOTS (one
// range, 0-16383, itself) and INFO as Redis does; `script` may answer any
// command instead with bytes of its choosing (a malformed reply, a wrong
// type, a redirect, half a value, a trickle), or close the connection.
// Each accepted connection runs in its own thread; the destructor shuts
// every socket down and joins them.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace kvpolicy::testing {

/// What a script does with one command.
struct fake_reply {
    enum class kind : std::uint8_t { normal, bytes, close } what = kind::normal;
    std::string bytes;                     ///< kind::bytes: sent as they are
    std::chrono::milliseconds trickle{0};  ///< kind::bytes: a pause before each byte, when not 0
    bool last = false;  ///< kind::bytes: then shut the write side (the client reads EOF) and ignore later commands
    static fake_reply normal() { return {}; }
    static fake_reply send(std::string b, std::chrono::milliseconds trickle = {}) {
        return {kind::bytes, std::move(b), trickle, false};
    }
    static fake_reply send_last(std::string b) { return {kind::bytes, std::move(b), {}, true}; }
    static fake_reply hang_up() { return {kind::close, {}, {}, false}; }
};

class fake_redis {
public:
    /// `script(args, connection, command)`: connection counts accepted
    /// connections from 0, command the commands read on it from 0.
    using script_fn = std::function<fake_reply(const std::vector<std::string>&, int, int)>;

    explicit fake_redis(script_fn script = {}) : script_(std::move(script)) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        // A fuzzer makes one server per input, hundreds a second: without
        // these, closed connections keep their ports in TIME_WAIT and, after
        // about a minute, no port is left to listen on.
        const int reuse = 1;
        if (listen_fd_ >= 0) (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t len = sizeof a;
        if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listen_fd_, 16) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            throw std::runtime_error("fake_redis: cannot listen on 127.0.0.1");
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~fake_redis() {
        stopping_ = true;
        ::shutdown(listen_fd_, SHUT_RDWR);
        acceptor_.join();
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            for (const int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
        }
        for (auto& t : handlers_) t.join();
        const linger abort_on_close{1, 0};  // RST, not FIN: no TIME_WAIT left behind (see the constructor)
        for (const int fd : client_fds_) {
            (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
            ::close(fd);
        }
        ::close(listen_fd_);
    }
    fake_redis(const fake_redis&) = delete;
    fake_redis& operator=(const fake_redis&) = delete;

    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] int connections() const noexcept { return accepted_.load(); }
    /// The CLUSTER SLOTS reply (default: all slots on this server).
    void set_cluster_slots(std::string reply) {
        const std::lock_guard<std::mutex> lock(mutex_);
        cluster_slots_ = std::move(reply);
    }
    /// The INFO reply's text.
    void set_info(std::string text) {
        const std::lock_guard<std::mutex> lock(mutex_);
        info_ = std::move(text);
    }

    static std::string bulk(std::string_view s) {
        return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
    }

private:
    void accept_loop() {
        for (;;) {
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                if (stopping_) return;
                if (errno == EINTR || errno == ECONNABORTED) continue;
                return;
            }
            const int one = 1;
            (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            const std::lock_guard<std::mutex> lock(mutex_);
            if (stopping_) {
                ::close(fd);
                return;
            }
            client_fds_.push_back(fd);
            const int id = accepted_++;
            handlers_.emplace_back([this, fd, id] { serve(fd, id); });
        }
    }

    // One command (an array of bulk strings) from `fd`, buffered in `buf`; nothing at EOF or on garbage.
    static std::optional<std::vector<std::string>> read_command(int fd, std::string& buf) {
        auto fill = [&]() {
            char chunk[65536];
            const ssize_t n = ::read(fd, chunk, sizeof chunk);
            if (n <= 0) return false;
            buf.append(chunk, static_cast<std::size_t>(n));
            return true;
        };
        auto line = [&](std::size_t& pos, long long& value, char type) {
            for (;;) {
                const auto nl = buf.find("\r\n", pos);
                if (nl != std::string::npos) {
                    if (buf[pos] != type) return false;
                    const auto r = std::from_chars(buf.data() + pos + 1, buf.data() + nl, value);
                    if (r.ec != std::errc{}) return false;
                    pos = nl + 2;
                    return true;
                }
                if (!fill()) return false;
            }
        };
        std::size_t pos = 0;
        long long count = 0;
        if (!line(pos, count, '*') || count < 1) return std::nullopt;
        std::vector<std::string> args;
        for (long long i = 0; i < count; ++i) {
            long long len = 0;
            if (!line(pos, len, '$') || len < 0) return std::nullopt;
            while (buf.size() < pos + static_cast<std::size_t>(len) + 2)
                if (!fill()) return std::nullopt;
            args.emplace_back(buf, pos, static_cast<std::size_t>(len));
            pos += static_cast<std::size_t>(len) + 2;
        }
        buf.erase(0, pos);
        return args;
    }

    static bool send_all(int fd, std::string_view bytes) {
        while (!bytes.empty()) {
            const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n <= 0) return false;
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }

    std::string answer(const std::vector<std::string>& args) {
        const std::lock_guard<std::mutex> lock(mutex_);
        const std::string& cmd = args[0];
        if (cmd == "PING") return "+PONG\r\n";
        if (cmd == "AUTH" || cmd == "ASKING") return "+OK\r\n";
        if (cmd == "SET" && args.size() == 3) {
            values_[args[1]] = args[2];
            return "+OK\r\n";
        }
        if (cmd == "GET" && args.size() == 2) {
            const auto it = values_.find(args[1]);
            return it == values_.end() ? "$-1\r\n" : bulk(it->second);
        }
        if (cmd == "EXISTS" && args.size() == 2) return values_.count(args[1]) != 0 ? ":1\r\n" : ":0\r\n";
        if (cmd == "CLUSTER" && args.size() == 2 && args[1] == "SLOTS") {
            if (!cluster_slots_.empty()) return cluster_slots_;
            return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n" + bulk("127.0.0.1") + ":" + std::to_string(port_) + "\r\n";
        }
        if (cmd == "INFO") return bulk(info_);
        return "-ERR unknown command\r\n";
    }

    void serve(int fd, int connection) {
        std::string buf;
        bool finished = false;
        for (int command = 0;; ++command) {
            const auto args = read_command(fd, buf);
            if (!args) break;
            if (finished) continue;
            const fake_reply r = script_ ? script_(*args, connection, command) : fake_reply::normal();
            if (r.last) {
                finished = true;
                (void)send_all(fd, r.bytes);
                ::shutdown(fd, SHUT_WR);
                continue;
            }
            if (r.what == fake_reply::kind::close) break;
            if (r.what == fake_reply::kind::normal) {
                if (!send_all(fd, answer(*args))) break;
                continue;
            }
            if (r.trickle.count() == 0) {
                if (!send_all(fd, r.bytes)) break;
                continue;
            }
            bool sent = true;
            for (std::size_t i = 0; i < r.bytes.size() && sent && !stopping_; ++i) {
                std::this_thread::sleep_for(r.trickle);
                sent = send_all(fd, std::string_view(r.bytes).substr(i, 1));
            }
            if (!sent || stopping_) break;
        }
        ::shutdown(fd, SHUT_RDWR);
    }

    script_fn script_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false};
    std::atomic<int> accepted_{0};
    std::thread acceptor_;
    std::mutex mutex_;
    std::vector<int> client_fds_;
    std::vector<std::thread> handlers_;
    std::map<std::string, std::string> values_;
    std::string cluster_slots_;
    std::string info_ = "# Memory\r\nused_memory:1000\r\nmaxmemory:0\r\n";
};

}  // namespace kvpolicy::testing
