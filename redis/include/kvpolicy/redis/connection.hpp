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
// the process, and a library must not change the process's signal
// dispositions: every write here is a sendmsg with MSG_NOSIGNAL (hiredis
// 0.14 writes with write(2), so it is never asked to write), and a dead
// server is an EPIPE that fails the batch.
//
// hiredis connects, authenticates and parses the small replies; the bulk
// bytes of a transfer do not go through it. Commands are framed here and
// sent with sendmsg, a value's bytes straight from where they lie (hiredis
// would copy each into a formatted command, then into its output buffer,
// and move the unsent rest down after every partial write); a reply that is
// a bulk string of the length the caller expects is read from the socket
// straight into the caller's buffers (hiredis would copy it from its 16 KiB
// reads into a growing buffer, then into a fresh reply object), its
// checksum computed piece by piece as it lands. Anything else (nil, errors,
// MOVED, a value of another length) is handed to hiredis's reader
// (redisReaderFeed, the public API; nothing of hiredis's sds is used, so
// hiredis 0.14 and 1.x both fit).
//
// Errors at construction name the node's address and the fix: nothing
// listening there, a password the server refuses (or needs), a `maxmemory`
// smaller than the remote tier asks for.
#pragma once

#include <hiredis/hiredis.h>
#include <limits.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
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

/// Where a reply that is a bulk string of exactly head.size() + body.size()
/// bytes goes: its first bytes into `head`, the rest into `body`, read from
/// the socket straight there. `filled` says it happened; `body_checksum` is
/// then remote_checksum(body), computed as the bytes arrived.
struct bulk_sink {
    std::span<std::byte> head;
    std::span<std::byte> body;
    bool filled = false;
    std::uint64_t body_checksum = 0;
};

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

    /// Queues one command (binary-safe arguments, copied).
    void append(std::span<const char* const> argv, std::span<const std::size_t> lens) {
        if (!ctx_) return;
        frame_count(argv.size());
        for (std::size_t i = 0; i < argv.size(); ++i) {
            frame_length(lens[i]);
            copy_out(std::string_view(argv[i], lens[i]));
            copy_out("\r\n");
        }
    }

    /// Queues `args` (copied) followed by one more argument made of `head`
    /// then `body` back to back, which are not copied: both must stay alive
    /// and unchanged until flush() returns.
    void append_with_value(std::span<const std::string_view> args, std::span<const std::byte> head,
                           std::span<const std::byte> body) {
        if (!ctx_) return;
        frame_count(args.size() + 1);
        for (const std::string_view a : args) {
            frame_length(a.size());
            copy_out(a);
            copy_out("\r\n");
        }
        frame_length(head.size() + body.size());
        refer_out(head);
        refer_out(body);
        copy_out("\r\n");
    }

    /// Sends everything queued (sendmsg with MSG_NOSIGNAL: a dead server is
    /// an EPIPE, never a signal). Returns false (and closes) on an I/O error
    /// or when the socket takes nothing for io_timeout.
    bool flush() {
        if (!ctx_) return false;
        std::size_t seg = 0, at = 0;  // the first unsent byte: segment, offset in it
        std::vector<iovec>& iov = iov_;
        while (seg < out_.size()) {
            iov.clear();
            for (std::size_t k = seg; k < out_.size() && iov.size() < IOV_MAX; ++k) {
                const char* base = out_[k].external ? out_[k].external : out_text_.data() + out_[k].offset;
                const std::size_t skip = k == seg ? at : 0;
                iov.push_back({const_cast<char*>(base + skip), out_[k].len - skip});
            }
            msghdr msg{};
            msg.msg_iov = iov.data();
            msg.msg_iovlen = iov.size();
            const ssize_t n = ::sendmsg(ctx_->fd, &msg, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {  // an error, or EAGAIN: nothing taken for io_timeout
                close();
                return false;
            }
            for (std::size_t left = static_cast<std::size_t>(n); left > 0;) {
                const std::size_t step = std::min(left, out_[seg].len - at);
                left -= step;
                at += step;
                if (at == out_[seg].len) ++seg, at = 0;
            }
        }
        clear_out();
        return true;
    }

    /// The next reply, or null after an I/O error or a timeout (the
    /// connection is then closed, and later replies are lost too).
    reply_ptr next_reply() {
        if (!ctx_) return nullptr;
        if (in_pos_ < in_.size()) {  // bytes read here but not ours: the reader's
            if (redisReaderFeed(ctx_->reader, in_.data() + in_pos_, in_.size() - in_pos_) != REDIS_OK) {
                close();
                return nullptr;
            }
        }
        in_.clear();
        in_pos_ = 0;
        void* r = nullptr;
        if (redisGetReply(ctx_.get(), &r) != REDIS_OK || r == nullptr) {
            close();
            return nullptr;
        }
        return reply_ptr(static_cast<redisReply*>(r));
    }

    enum class bulk_read : std::uint8_t { filled, other, failed };

    /// The next reply: if it is a bulk string of exactly the sink's length,
    /// read into the sink (`filled`, and sink.filled set); any other reply
    /// parsed by hiredis into `other` (`other`); `failed` after an I/O error
    /// or a timeout (the connection is then closed).
    bulk_read next_reply_into(bulk_sink& sink, reply_ptr& other) {
        other.reset();
        if (!ctx_) return bulk_read::failed;
        redisReader* rd = ctx_->reader;
        if (rd->err != 0 || rd->ridx != -1) {  // a reply under way in the reader: its to finish
            other = next_reply();
            return other ? bulk_read::other : bulk_read::failed;
        }
        // Bytes the reader read past its last reply come back here (the
        // reader's buffer then counts them consumed).
        if (rd->pos < rd->len) {
            in_.insert(in_.end(), rd->buf + rd->pos, rd->buf + rd->len);
            rd->pos = rd->len;
        }
        const std::size_t expected = sink.head.size() + sink.body.size();
        // The reply's first line: "$<expected>\r\n"?
        bool ours = true;
        std::size_t line_end = 0;
        while (ours) {
            const char* start = in_.data() + in_pos_;
            const std::size_t avail = in_.size() - in_pos_;
            if (const void* nl = avail > 0 ? std::memchr(start, '\n', avail) : nullptr) {
                line_end = in_pos_ + static_cast<std::size_t>(static_cast<const char*>(nl) - start) + 1;
                break;
            }
            if (avail > 0 && start[0] != '$') ours = false;  // not a bulk string: hiredis's
            else if (avail > 24) ours = false;               // longer than any "$<length>\r\n"
            else if (!read_more()) return bulk_read::failed;
        }
        if (ours) {
            const char* line = in_.data() + in_pos_;
            const char* cr = in_.data() + line_end - 2;
            std::size_t length = 0;
            const auto parsed = std::from_chars(line + 1, cr, length);
            ours = line_end - in_pos_ >= 4 && line[0] == '$' && *cr == '\r' && parsed.ec == std::errc{} &&
                   parsed.ptr == cr && length == expected;
        }
        if (!ours) {
            other = next_reply();
            return other ? bulk_read::other : bulk_read::failed;
        }
        // Ours: the bytes already here, then the socket, in place. Regions:
        // head, body, the closing "\r\n".
        in_pos_ = line_end;
        char crlf[2] = {};
        remote_checksum_stream sum;
        std::size_t placed = 0;
        const std::size_t total = expected + 2;
        auto region = [&](std::size_t at) -> std::span<std::byte> {
            if (at < sink.head.size()) return sink.head.subspan(at);
            if (at < expected) return sink.body.subspan(at - sink.head.size());
            return std::as_writable_bytes(std::span<char>(crlf)).subspan(at - expected);
        };
        auto landed = [&](std::size_t at, std::size_t n) {  // bytes [at, at + n) of one region arrived
            if (at >= sink.head.size() && at < expected) sum.update(sink.body.subspan(at - sink.head.size(), n));
        };
        while (placed < total && in_pos_ < in_.size()) {
            const std::span<std::byte> to = region(placed);
            const std::size_t n = std::min(to.size(), in_.size() - in_pos_);
            std::memcpy(to.data(), in_.data() + in_pos_, n);
            landed(placed, n);
            in_pos_ += n;
            placed += n;
        }
        if (in_pos_ == in_.size()) {
            in_.clear();
            in_pos_ = 0;
        }
        // The rest straight from the socket: one readv fills what is left
        // of the regions and reads ahead into in_ (the next reply's first
        // line, usually), so a value costs few system calls.
        while (placed < total) {
            iovec iov[4];
            int count = 0;
            for (std::size_t at = placed; at < total; ++count) {
                const std::span<std::byte> to = region(at);
                iov[count] = {to.data(), to.size()};
                at += to.size();
            }
            iov[count++] = {ahead_.data(), ahead_.size()};
            const ssize_t n = ::readv(ctx_->fd, iov, count);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {  // closed by the server, an error, or EAGAIN: nothing for io_timeout
                close();
                return bulk_read::failed;
            }
            std::size_t got = static_cast<std::size_t>(n);
            while (got > 0 && placed < total) {
                const std::size_t step = std::min(got, region(placed).size());
                landed(placed, step);
                placed += step;
                got -= step;
            }
            in_.assign(ahead_.data(), ahead_.data() + got);  // read ahead: the next replies' first bytes
        }
        if (crlf[0] != '\r' || crlf[1] != '\n') {  // out of step with the protocol: nothing after is trustworthy
            close();
            return bulk_read::failed;
        }
        sink.filled = true;
        sink.body_checksum = sum.value();
        return bulk_read::filled;
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

    void close() noexcept {
        ctx_.reset();
        clear_out();
        in_.clear();
        in_pos_ = 0;
    }

private:
    // One piece of the output: `len` bytes at `external`, or at `offset` in
    // out_text_ (which may move while commands are queued).
    struct out_segment {
        const char* external;
        std::size_t offset;
        std::size_t len;
    };

    // Reads what the socket has (a small read: the rest of a value is read
    // straight into its place) into in_. False (closed) on EOF, an error, or
    // nothing for io_timeout.
    bool read_more() {
        if (in_pos_ > 0) {
            in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(in_pos_));
            in_pos_ = 0;
        }
        constexpr std::size_t chunk = 4096;
        const std::size_t old = in_.size();
        in_.resize(old + chunk);
        for (;;) {
            const ssize_t n = ::read(ctx_->fd, in_.data() + old, chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close();
                return false;
            }
            in_.resize(old + static_cast<std::size_t>(n));
            return true;
        }
    }

    void copy_out(std::string_view text) {
        if (text.empty()) return;
        if (!out_.empty() && out_.back().external == nullptr) out_.back().len += text.size();
        else out_.push_back({nullptr, out_text_.size(), text.size()});
        out_text_.append(text);
    }
    void refer_out(std::span<const std::byte> bytes) {
        if (!bytes.empty()) out_.push_back({reinterpret_cast<const char*>(bytes.data()), 0, bytes.size()});
    }
    void frame_count(std::size_t n) { frame('*', n); }
    void frame_length(std::size_t n) { frame('$', n); }
    void frame(char kind, std::size_t n) {
        char text[24];
        text[0] = kind;
        char* end = std::to_chars(text + 1, text + sizeof text - 2, n).ptr;
        *end++ = '\r';
        *end++ = '\n';
        copy_out(std::string_view(text, static_cast<std::size_t>(end - text)));
    }
    void clear_out() noexcept {
        out_.clear();
        out_text_.clear();
    }

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
    std::vector<out_segment> out_;  // queued output, in order
    std::string out_text_;          // its copied part
    std::vector<iovec> iov_;        // scratch for sendmsg
    std::vector<char> in_;          // read here, not yet used: [in_pos_, size)
    std::size_t in_pos_ = 0;
    std::array<char, 4096> ahead_;  // a value's last read reads ahead into it
};

}  // namespace kvpolicy::redis
