// redis_server: a redis-server process on a free loopback port, for the
// Redis tier's tests. Started in the constructor (waits, bounded, until it
// answers), killed in the destructor whatever happened, its temporary
// directory removed. No persistence (--save '' --appendonly no): a restart
// comes back empty, as a store that lost its memory does.
// redis_cluster: three such servers with --cluster-enabled yes, joined by
// `redis-cli --cluster create`, waited for until every node says
// cluster_state:ok.
//
// Ports: a port is probed free, then bound by redis-server a moment later,
// and ctest runs test programs two at a time, each picking ports at random:
// another process can take one in between (a clean-clone run once failed
// on it: "bind: Address already in use"). So no port is handed out twice by one process,
// and a server whose own port was taken starts again on a new one
// (port_taken names the port, for a caller that chose extra ones).
#pragma once

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kvpolicy::testing {

// A port p on 127.0.0.1 that binds now (and p + 10000, a cluster bus port,
// if asked, kept below Linux's ephemeral ports, 32768 up, which outgoing
// connections take), never one this process handed out before.
inline int free_loopback_port(bool with_bus = false) {
    static std::mutex m;
    static std::mt19937 rng(static_cast<unsigned>(::getpid()) * 2654435761u);
    static std::set<int> handed_out;
    const std::scoped_lock lock(m);
    auto bindable = [](int p) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(p));
        const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        ::close(fd);
        return ok;
    };
    for (int tries = 0; tries < 1000; ++tries) {
        const int p = 20000 + static_cast<int>(rng() % (with_bus ? 2768 : 10000));
        if (!handed_out.contains(p) && bindable(p) && (!with_bus || bindable(p + 10000))) {
            handed_out.insert(p);
            return p;
        }
    }
    throw std::runtime_error("no free loopback port in 20000-29999 (with a bus port: 20000-22767)");
}

// redis-server could not listen on `port`: another process holds it.
struct port_taken : std::runtime_error {
    port_taken(const std::string& what, int p) : std::runtime_error(what), port(p) {}
    int port;
};

class redis_server {
public:
    /// `first_port`: the port to try first (tests of the retry); 0: a free one.
    explicit redis_server(std::vector<std::string> extra = {}, bool cluster_bus = false, int first_port = 0)
            : extra_(std::move(extra)), port_(first_port != 0 ? first_port : free_loopback_port(cluster_bus)) {
        char tmpl[] = "/tmp/kvpolicy-redis-XXXXXX";
        if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
        for (int tries = 1;; ++tries) {
            try {
                start();
                return;
            } catch (const port_taken& e) {
                const bool ours = e.port == port_ || (cluster_bus && e.port == port_ + 10000);
                if (!ours || tries == 5) throw;  // an extra port of the caller's, or no luck
                port_ = free_loopback_port(cluster_bus);
            }
        }
    }
    ~redis_server() {
        kill();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] const std::string& dir() const noexcept { return dir_; }

    /// Starts it (again, on the same port, empty); waits at most 10 s for it to answer.
    void start() {
        std::vector<std::string> args = {KVPOLICY_REDIS_SERVER,
                                         "--port",
                                         std::to_string(port_),
                                         "--bind",
                                         "127.0.0.1",
                                         "--save",
                                         "",
                                         "--appendonly",
                                         "no",
                                         "--dir",
                                         dir_,
                                         "--daemonize",
                                         "no",
                                         "--logfile",
                                         dir_ + "/redis.log"};
        args.insert(args.end(), extra_.begin(), extra_.end());
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                const std::string text = log();
                const std::string what = "redis-server on port " + std::to_string(port_) + " exited at start: " + text;
                if (const int taken = port_in_use(text); taken != 0) throw port_taken(what, taken);
                throw std::runtime_error(what);
            }
            if (answers()) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        kill();
        throw std::runtime_error("redis-server on port " + std::to_string(port_) + " did not answer within 10 s");
    }
    /// SIGKILL and reap (a paused server dies too, without running again).
    void kill() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }
    void pause() { ::kill(pid_, SIGSTOP); }
    void resume() { ::kill(pid_, SIGCONT); }

    /// One command on a fresh connection (PING, CONFIG SET, SETRANGE ...): its reply as text.
    std::string call(const std::vector<std::string>& args) const {
        std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnectWithTimeout("127.0.0.1", port_, {1, 0}),
                                                                 redisFree);
        if (!c || c->err) return "(no connection)";
        redisSetTimeout(c.get(), {2, 0});
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        auto* r = static_cast<redisReply*>(
            redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
        if (r == nullptr) return "(no reply)";
        std::string out;
        if (r->type == REDIS_REPLY_INTEGER)
            out = std::to_string(r->integer);
        else if (r->str != nullptr)
            out.assign(r->str, r->len);
        freeReplyObject(r);
        return out;
    }

private:
    // The port redis-server's log says it could not bind because it is in
    // use ("listening socket 127.0.0.1:P: bind: Address already in use"), or
    // 0. The last such line: the log keeps the starts before this one.
    static int port_in_use(const std::string& text) {
        const std::string socket = "listening socket 127.0.0.1:";
        const std::size_t at = text.rfind(socket);
        if (at == std::string::npos || text.find("Address already in use", at) == std::string::npos) return 0;
        return std::atoi(text.c_str() + at + socket.size());
    }
    bool answers() const {
        const std::string r = call({"PING"});
        return r == "PONG" || r.rfind("NOAUTH", 0) == 0 || r.rfind("LOADING", 0) == 0;
    }
    std::string log() const {
        std::ifstream f(dir_ + "/redis.log");
        std::stringstream s;
        s << f.rdbuf();
        return s.str();
    }

    std::vector<std::string> extra_;
    int port_;
    std::string dir_;
    pid_t pid_ = -1;
};

class redis_cluster {
public:
    redis_cluster() {
        for (int i = 0; i < 3; ++i)
            nodes_.push_back(std::make_unique<redis_server>(
                std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"},
                true));
        std::string cmd = std::string(KVPOLICY_REDIS_CLI) + " --cluster create";
        for (auto& n : nodes_) cmd += " 127.0.0.1:" + std::to_string(n->port());
        cmd += " --cluster-replicas 0 --cluster-yes > " + nodes_[0]->dir() + "/create.log 2>&1";
        if (std::system(cmd.c_str()) != 0) throw std::runtime_error("redis-cli --cluster create failed: " + cmd);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (std::chrono::steady_clock::now() < deadline) {
            bool ok = true;
            for (auto& n : nodes_)
                ok = ok && n->call({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
            if (ok) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        throw std::runtime_error("the redis cluster did not reach cluster_state:ok within 20 s");
    }
    [[nodiscard]] redis_server& node(std::size_t i) { return *nodes_[i]; }

private:
    std::vector<std::unique_ptr<redis_server>> nodes_;
};

}  // namespace kvpolicy::testing
