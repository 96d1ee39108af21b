// redis connection: one hiredis connection to one Redis node, with bounded
// waits, authentication and the configuration checks a remote tier needs.
//
// Every wait is bounded: connecting by `connect_timeout`, every read and
// write by `io_timeout`, so a node that died or was paused (SIGSTOP) costs a
// batch at most that long, and its ops fail. A connection that saw an I/O
// error or a timeout is closed (a late reply would be read as the answer to
// the next command) and opened again, once, at the next batch.
//
// A write to a server that died raises SIGPIPE, whose default action ends
// the process. A library must not change the process's signal dispositions,
// and hiredis 0.14 (Debian 12) writes with write(2), so MSG_NOSIGNAL is out
// of reach: every write is made with SIGPIPE blocked in the calling thread
// only (`sigpipe_blocked`), and a SIGPIPE that write raised is taken back
// from the thread's pending set before the mask is restored. hiredis then
// sees EPIPE and the batch fails; the program's own handling of SIGPIPE, in
// this thread and all others, is as it was.
//
// Errors at construction name the node's address and the fix: nothing
// listening there, a password the server refuses (or needs), a `maxmemory`
// smaller than the remote tier asks for.
#pragma once

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy::redis {

struct endpoint {
    std::string host = "127.0.0.1";
    int port = 6379;

    [[nodiscard]] std::string str() const { return host + ":" + std::to_string(port); }
    friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// How the remote tier reaches its store.
struct store_config {
    std::vector<endpoint> nodes = {endpoint{}};  ///< a single server, or a cluster's seed nodes
    bool cluster = false;                        ///< shard over a Redis Cluster (hash slots, MOVED/ASK)
    std::string password;                        ///< AUTH, when the server has requirepass
    std::chrono::milliseconds connect_timeout{500};
    std::chrono::milliseconds io_timeout{1000};
    std::size_t max_in_flight_bytes = std::size_t{64} << 20;  ///< a batch is sent when its values reach this
    std::size_t required_memory_bytes = 0;  ///< refuse a node whose maxmemory is set and below this
    remote_namespace ns;                    ///< model, layout, block size, item bytes: the keys' prefix
};

struct reply_deleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

[[nodiscard]] inline timeval to_timeval(std::chrono::milliseconds ms) noexcept {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
    return tv;
}

[[nodiscard]] inline bool is_error(const redisReply* r, std::string_view prefix = {}) noexcept {
    return r != nullptr && r->type == REDIS_REPLY_ERROR &&
           std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

class connection {
public:
    /// Connects, authenticates and checks the node. Throws: config_error
    /// naming the address and the fix when it cannot.
    connection(endpoint at, const store_config& config) : at_(std::move(at)), config_(&config) {
        std::string why;
        if (!open(why)) throw config_error(why);
        check_memory();
    }

    [[nodiscard]] const endpoint& address() const noexcept { return at_; }
    [[nodiscard]] bool ok() const noexcept { return ctx_ != nullptr; }

    /// Opens the connection again if an error closed it: one try, bounded
    /// by connect_timeout. Returns whether it is open.
    bool ensure_open() {
        if (ctx_) return true;
        std::string why;
        return open(why);
    }

    /// Queues one command (binary-safe arguments). Precondition: ok().
    void append(std::span<const char* const> argv, std::span<const std::size_t> lens) {
        if (!ctx_) return;
        if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), const_cast<const char**>(argv.data()),
                                   lens.data()) != REDIS_OK)
            close();
    }

    /// Sends everything queued. Returns false (and closes) on an I/O error.
    bool flush() {
        if (!ctx_) return false;
        const sigpipe_blocked no_sigpipe;
        int done = 0;
        while (!done)
            if (redisBufferWrite(ctx_.get(), &done) != REDIS_OK) {
                close();
                return false;
            }
        return true;
    }

    /// The next reply, or null after an I/O error or a timeout (the
    /// connection is then closed, and later replies are lost too).
    reply_ptr next_reply() {
        if (!ctx_) return nullptr;
        void* r = nullptr;
        const sigpipe_blocked no_sigpipe;  // redisGetReply writes what is still queued first
        if (redisGetReply(ctx_.get(), &r) != REDIS_OK || r == nullptr) {
            close();
            return nullptr;
        }
        return reply_ptr(static_cast<redisReply*>(r));
    }

    /// One command, its reply (null on I/O error).
    reply_ptr command(std::initializer_list<std::string_view> args) {
        if (!ctx_) return nullptr;
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (std::string_view a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        append(argv, lens);
        if (!flush()) return nullptr;
        return next_reply();
    }

    void close() noexcept { ctx_.reset(); }

private:
    /// SIGPIPE blocked in this thread for the guard's lifetime; one that a
    /// write raised meanwhile is consumed, one that was pending before is
    /// left pending (it was not ours).
    class sigpipe_blocked {
    public:
        sigpipe_blocked() noexcept {
            sigset_t pipe_only;
            sigemptyset(&pipe_only);
            sigaddset(&pipe_only, SIGPIPE);
            sigset_t pending;
            sigemptyset(&pending);
            was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
            (void)pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask_);
        }
        sigpipe_blocked(const sigpipe_blocked&) = delete;
        sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;
        ~sigpipe_blocked() {
            sigset_t pending;
            sigemptyset(&pending);
            if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
                sigset_t pipe_only;
                sigemptyset(&pipe_only);
                sigaddset(&pipe_only, SIGPIPE);
                const timespec now{0, 0};
                while (sigtimedwait(&pipe_only, nullptr, &now) == -1 && errno == EINTR) {
                }
            }
            (void)pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
        }

    private:
        sigset_t old_mask_{};
        bool was_pending_ = false;
    };

    struct ctx_deleter {
        void operator()(redisContext* c) const noexcept { redisFree(c); }
    };

    bool open(std::string& why) {
        ctx_.reset(redisConnectWithTimeout(at_.host.c_str(), at_.port, to_timeval(config_->connect_timeout)));
        if (!ctx_ || ctx_->err) {
            why = "redis at " + at_.str() + ": cannot connect (" + (ctx_ ? std::string(ctx_->errstr) : "out of memory") +
                  "); start redis-server there or fix the address (store_config::nodes)";
            ctx_.reset();
            return false;
        }
        if (redisSetTimeout(ctx_.get(), to_timeval(config_->io_timeout)) != REDIS_OK) {
            why = "redis at " + at_.str() + ": cannot set the I/O timeout";
            ctx_.reset();
            return false;
        }
        if (!config_->password.empty()) {
            reply_ptr r = command({"AUTH", config_->password});
            if (!r) return fail_io(why, "AUTH");
            if (r->type == REDIS_REPLY_ERROR) {
                why = "redis at " + at_.str() + ": authentication failed (" + std::string(r->str, r->len) +
                      "); set store_config::password to the server's requirepass";
                ctx_.reset();
                return false;
            }
        }
        reply_ptr r = command({"PING"});
        if (!r) return fail_io(why, "PING");
        if (is_error(r.get(), "NOAUTH")) {
            why = "redis at " + at_.str() + ": the server needs a password (" + std::string(r->str, r->len) +
                  "); set store_config::password to its requirepass";
            ctx_.reset();
            return false;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            why = "redis at " + at_.str() + ": PING answered " + std::string(r->str, r->len);
            ctx_.reset();
            return false;
        }
        return true;
    }

    bool fail_io(std::string& why, const char* what) {
        why = "redis at " + at_.str() + ": no answer to " + what + " within " +
              std::to_string(config_->io_timeout.count()) +
              " ms; check that the server there is running and not paused, or raise store_config::io_timeout";
        ctx_.reset();
        return false;
    }

    // A node whose maxmemory is below what the tier needs would evict (or
    // refuse) values as fast as they are written.
    void check_memory() {
        if (config_->required_memory_bytes == 0) return;
        reply_ptr r = command({"INFO", "memory"});
        if (!r || r->type != REDIS_REPLY_STRING)
            throw config_error("redis at " + at_.str() + ": INFO memory failed; cannot check maxmemory against "
                               "store_config::required_memory_bytes (set it to 0 to skip the check)");
        const std::string_view info(r->str, r->len);
        const auto pos = info.find("\nmaxmemory:");
        if (pos == std::string_view::npos) return;
        const std::uint64_t maxmemory = std::stoull(std::string(info.substr(pos + 11, 24)));
        if (maxmemory != 0 && maxmemory < config_->required_memory_bytes)
            throw config_error("redis at " + at_.str() + ": maxmemory is " + std::to_string(maxmemory) +
                               " bytes but the remote tier needs " + std::to_string(config_->required_memory_bytes) +
                               " (its capacity in values x value bytes); raise it (CONFIG SET maxmemory " +
                               std::to_string(config_->required_memory_bytes) + ") or lower the remote capacity");
    }

    endpoint at_;
    const store_config* config_;
    std::unique_ptr<redisContext, ctx_deleter> ctx_;
};

}  // namespace kvpolicy::redis
