// redis connection: the Redis protocol to one node over a transport
// (transport.hpp: TCP or TLS, every wait bounded by the batch's deadline),
// with authentication (a password, or a Redis 6 ACL user and password) and
// the configuration checks a remote tier needs.
//
// Deadlines. The store gives each batch one deadline (io_timeout from its
// start, see store::batch) and every connect, read and write of the batch
// waits until that deadline at most. A connect is bounded by
// connect_timeout as well. A connection that saw an I/O error, a timeout or
// a reply it cannot trust is closed (a late reply would be read as the
// answer to the next command); a node whose connect (or handshake, AUTH,
// PING) failed is down for the rest of the batch and is not tried again
// before a backoff (100 ms, doubling to 5 s; reset when a connect succeeds).
//
// Every reply is screened (scan_reply, reply.hpp) before hiredis's reader
// sees it: a reply no Redis server sends fails its command and closes the
// connection. hiredis parses the small replies only (redisReaderFeed, the
// public API: hiredis 0.14 and 1.x both fit); the connection, TLS and the
// bulk bytes of a transfer do not go through it. Commands are framed here
// and sent from where their bytes lie (a value straight from its slot); a
// reply that is a bulk string of the length the caller expects is read
// from the socket straight into the caller's buffers, its checksum
// computed piece by piece as it lands.
//
// Errors at construction name the node's address, the field and the fix:
// a host name that does not resolve, nothing listening there, a password
// or user the server refuses (or needs), a TLS certificate that does not
// verify (CA, server name), a `maxmemory` smaller than the remote tier asks
// for.
#pragma once

#include <hiredis/hiredis.h>
#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/reply.hpp"
#include "kvpolicy/redis/store_config.hpp"
#include "kvpolicy/redis/transport.hpp"

namespace kvpolicy::redis {

struct reply_deleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

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
    /// Connects, authenticates and checks the node (bounded by
    /// connect_timeout + io_timeout). Throws: config_error naming the
    /// address, the field and the fix when it cannot.
    connection(endpoint at, const store_config& config) : io_(std::move(at), config), config_(&config) {
        deadline_ = deadline_clock::now() + config.connect_timeout + config.io_timeout;
        std::string why;
        if (!open(why)) throw config_error(why);
        try {
            check_memory();
        } catch (...) {
            close();  // no destructor runs for a constructor that throws
            throw;
        }
    }
    /// Not opened here: the first ensure_open() of a batch opens it (a node
    /// a redirect or a slot map names, opened under the batch's deadline).
    struct deferred_t {};
    static constexpr deferred_t deferred{};
    connection(endpoint at, const store_config& config, deferred_t) : io_(std::move(at), config), config_(&config) {}

    ~connection() { close(); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    [[nodiscard]] const endpoint& address() const noexcept { return io_.address(); }
    [[nodiscard]] bool ok() const noexcept { return io_.ok(); }
    /// Why the last open failed, or why the connection was last closed.
    [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }

    /// Starts batch `id`: every wait until the next begin_batch ends at `deadline`.
    void begin_batch(deadline_clock::time_point deadline, std::uint64_t id) noexcept {
        deadline_ = deadline;
        batch_ = id;
    }

    /// Opens the connection again if it was closed: one try, bounded by
    /// connect_timeout and the batch's deadline, unless the node is down
    /// (a failed open in this batch, or within its backoff). Returns
    /// whether it is open.
    bool ensure_open() {
        if (ok()) return true;
        const auto now = deadline_clock::now();
        if (down_batch_ == batch_ || now < down_until_ || now >= deadline_) return false;
        std::string why;
        return open(why);
    }

    /// Queues one command (binary-safe arguments, copied).
    void append(std::span<const char* const> argv, std::span<const std::size_t> lens) {
        if (!ok()) return;
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
        if (!ok()) return;
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

    /// Sends everything queued. Returns false (and closes) on an I/O error
    /// or at the deadline.
    bool flush() {
        if (!ok()) return false;
        std::size_t seg = 0, at = 0;  // the first unsent byte: segment, offset in it
        std::vector<iovec>& iov = iov_;
        while (seg < out_.size()) {
            iov.clear();
            for (std::size_t k = seg; k < out_.size() && iov.size() < IOV_MAX; ++k) {
                const char* base = out_[k].external ? out_[k].external : out_text_.data() + out_[k].offset;
                const std::size_t skip = k == seg ? at : 0;
                iov.push_back({const_cast<char*>(base + skip), out_[k].len - skip});
            }
            const std::size_t n = io_.write_some(iov, deadline_);
            if (n == 0) {
                close("a write failed or did not finish by the batch's deadline");
                return false;
            }
            for (std::size_t left = n; left > 0;) {
                const std::size_t step = std::min(left, out_[seg].len - at);
                left -= step;
                at += step;
                if (at == out_[seg].len) ++seg, at = 0;
            }
        }
        clear_out();
        return true;
    }

    /// The next reply, or null after an I/O error, at the deadline, or for
    /// a reply no server sends (the connection is then closed, and later
    /// replies are lost too).
    reply_ptr next_reply() {
        if (!ok()) return nullptr;
        for (;;) {
            const std::string_view avail(in_.data() + in_pos_, in_.size() - in_pos_);
            const resp_scan s = scan_reply(avail);
            if (s.status == resp_scan::result::malformed) {
                close(std::string("a malformed reply (") + s.why + ")");
                return nullptr;
            }
            if (s.status == resp_scan::result::complete) {
                void* r = nullptr;
                if (redisReaderFeed(reader_, avail.data(), s.length) != REDIS_OK ||
                    redisReaderGetReply(reader_, &r) != REDIS_OK || r == nullptr) {
                    if (r != nullptr) freeReplyObject(r);
                    close("a reply hiredis's reader refused");
                    return nullptr;
                }
                in_pos_ += s.length;
                return reply_ptr(static_cast<redisReply*>(r));
            }
            if (!read_more()) return nullptr;
        }
    }

    enum class bulk_read : std::uint8_t { filled, other, failed };

    /// The next reply: if it is a bulk string of exactly the sink's length,
    /// read into the sink (`filled`, and sink.filled set); any other reply
    /// parsed into `other` (`other`); `failed` after an I/O error, at the
    /// deadline, or for a reply no server sends (the connection is then
    /// closed).
    bulk_read next_reply_into(bulk_sink& sink, reply_ptr& other) {
        other.reset();
        if (!ok()) return bulk_read::failed;
        const std::size_t expected = sink.head.size() + sink.body.size();
        // The reply's first line: "$<expected>\r\n"? (Replies are handed to
        // the reader whole, so the next one starts at in_pos_.)
        bool ours = true;
        std::size_t line_end = 0;
        while (ours) {
            const char* start = in_.data() + in_pos_;
            const std::size_t avail = in_.size() - in_pos_;
            if (const void* nl = avail > 0 ? std::memchr(start, '\n', avail) : nullptr) {
                line_end = in_pos_ + static_cast<std::size_t>(static_cast<const char*>(nl) - start) + 1;
                break;
            }
            if (avail > 0 && start[0] != '$')
                ours = false;  // not a bulk string: the reader's
            else if (avail > 24)
                ours = false;  // longer than any "$<length>\r\n"
            else if (!read_more())
                return bulk_read::failed;
        }
        if (ours) {
            const char* line = in_.data() + in_pos_;
            std::size_t length = 0;
            ours = line_end - in_pos_ >= 4 && line[0] == '$' && in_[line_end - 2] == '\r';
            if (ours) {
                const char* cr = in_.data() + line_end - 2;
                const auto parsed = std::from_chars(line + 1, cr, length);
                ours = parsed.ec == std::errc{} && parsed.ptr == cr && length == expected &&
                       (line[1] != '0' || cr == line + 2);
            }
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
        // The rest straight from the socket: one read fills what is left of
        // the regions and reads ahead into in_ (the next reply's first line,
        // usually), so a value costs few system calls.
        while (placed < total) {
            iovec iov[4];
            int count = 0;
            for (std::size_t at = placed; at < total; ++count) {
                const std::span<std::byte> to = region(at);
                iov[count] = {to.data(), to.size()};
                at += to.size();
            }
            iov[count++] = {ahead_.data(), ahead_.size()};
            std::size_t got = io_.read_some(std::span<iovec>(iov, static_cast<std::size_t>(count)), deadline_);
            if (got == 0) {
                close("a read failed, the server closed, or the batch's deadline passed");
                return bulk_read::failed;
            }
            while (got > 0 && placed < total) {
                const std::size_t step = std::min(got, region(placed).size());
                landed(placed, step);
                placed += step;
                got -= step;
            }
            in_.assign(ahead_.data(), ahead_.data() + got);  // read ahead: the next replies' first bytes
            in_pos_ = 0;
        }
        if (crlf[0] != '\r' || crlf[1] != '\n') {  // out of step with the protocol: nothing after is trustworthy
            close("a bulk string not closed by \\r\\n");
            return bulk_read::failed;
        }
        sink.filled = true;
        sink.body_checksum = sum.value();
        return bulk_read::filled;
    }

    /// One command, its reply (null on I/O error).
    reply_ptr command(std::initializer_list<std::string_view> args) {
        if (!ok()) return nullptr;
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
        io_.close();
        if (reader_ != nullptr) redisReaderFree(reader_);
        reader_ = nullptr;
        clear_out();
        in_.clear();
        in_pos_ = 0;
    }
    /// Gives the connection up (`why`: what went wrong), aborted
    /// (transport::abort): its bytes are out of step anyway.
    void close(std::string why) noexcept {
        last_error_ = std::move(why);
        if (const std::string tls = io_.take_tls_error(); !tls.empty()) last_error_ += " (TLS: " + tls + ")";
        io_.abort();
        close();
    }

private:
    // One piece of the output: `len` bytes at `external`, or at `offset` in
    // out_text_ (which may move while commands are queued).
    struct out_segment {
        const char* external;
        std::size_t offset;
        std::size_t len;
    };

    // Reads what the socket has into in_: at least 4 KiB, and at least as
    // much as a reply under way already holds (so a long reply is scanned
    // O(log n) times). False (closed) on EOF, an error, or the deadline.
    bool read_more() {
        if (in_pos_ > 0) {
            in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(in_pos_));
            in_pos_ = 0;
        }
        const std::size_t chunk = std::max<std::size_t>(4096, in_.size());
        const std::size_t old = in_.size();
        in_.resize(old + chunk);
        iovec iov{in_.data() + old, chunk};
        const std::size_t n = io_.read_some(std::span<iovec>(&iov, 1), deadline_);
        if (n == 0) {
            close("a read failed, the server closed, or the batch's deadline passed");
            return false;
        }
        in_.resize(old + n);
        return true;
    }

    void copy_out(std::string_view text) {
        if (text.empty()) return;
        if (!out_.empty() && out_.back().external == nullptr)
            out_.back().len += text.size();
        else
            out_.push_back({nullptr, out_text_.size(), text.size()});
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

    bool open(std::string& why) {
        close();
        const auto now = deadline_clock::now();
        const auto connect_until = std::min(deadline_, now + config_->connect_timeout);
        std::string detail;
        if (!io_.resolve(connect_until, detail))
            return failed_open(why, "redis at " + io_.address().str() + ": " + detail +
                                        "; give a host name this machine resolves, or the server's IP address "
                                        "(store_config::nodes)");
        if (!io_.connect_tcp(connect_until, detail)) {
            return failed_open(why, "redis at " + io_.address().str() + ": cannot connect (" + detail +
                                        "); start redis-server there or fix the address (store_config::nodes)");
        }
        if (config_->tls.enabled && !io_.start_tls(connect_until, detail))
            return failed_open(why, "redis at " + io_.address().str() + ": " + detail);
        reader_ = redisReaderCreate();
        if (reader_ == nullptr) return failed_open(why, "redis at " + io_.address().str() + ": out of memory");
        if (!config_->password.empty()) {
            reply_ptr r = config_->user.empty() ? command({"AUTH", config_->password})
                                                : command({"AUTH", config_->user, config_->password});
            if (!r) return fail_io(why, "AUTH");
            if (r->type == REDIS_REPLY_ERROR) {
                return failed_open(
                    why, "redis at " + io_.address().str() + ": authentication failed (" + std::string(r->str, r->len) +
                             (config_->user.empty() ? "); set store_config::password to the server's requirepass, or "
                                                      "store_config::user and password to an ACL user's"
                                                    : "); set store_config::user and store_config::password to an ACL "
                                                      "user the server has (ACL SETUSER ... on >password)"));
            }
        }
        reply_ptr r = command({"PING"});
        if (!r) return fail_io(why, "PING");
        if (is_error(r.get(), "NOAUTH")) {
            return failed_open(why, "redis at " + io_.address().str() + ": the server needs a password (" +
                                        std::string(r->str, r->len) +
                                        "); set store_config::password to its requirepass (and store_config::user "
                                        "for an ACL user)");
        }
        if (r->type != REDIS_REPLY_STATUS) {
            return failed_open(
                why, "redis at " + io_.address().str() + ": PING answered " +
                         (r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string("not PONG")));
        }
        backoff_ = first_backoff;
        down_until_ = {};
        return true;
    }

    bool failed_open(std::string& why, std::string what) {
        why = std::move(what);
        close(why);
        down_batch_ = batch_;
        down_until_ = deadline_clock::now() + backoff_;
        backoff_ = std::min(backoff_ * 2, last_backoff);
        return false;
    }

    bool fail_io(std::string& why, const char* what) {
        return failed_open(why,
                           "redis at " + io_.address().str() + ": no answer to " + what + " (" + last_error_ +
                               "); check that the server there is running and not paused (a batch waits "
                               "store_config::io_timeout, " +
                               std::to_string(config_->io_timeout.count()) + " ms, at most)" +
                               (config_->tls.enabled ? "; over TLS, a server with tls-auth-clients needs the "
                                                       "client's certificate: store_config::tls.cert_file and key_file"
                                                     : ""));
    }

    // A node whose maxmemory is below what the tier needs would evict (or
    // refuse) values as fast as they are written.
    void check_memory() {
        if (config_->required_memory_bytes == 0) return;
        reply_ptr r = command({"INFO", "memory"});
        if (!r || r->type != REDIS_REPLY_STRING)
            throw config_error("redis at " + io_.address().str() +
                               ": INFO memory failed; cannot check maxmemory against "
                               "store_config::required_memory_bytes (set it to 0 to skip the check)");
        const info_field f = parse_info_field(std::string_view(r->str, r->len), "maxmemory");
        if (!f.present) return;
        if (!f.valid)
            throw config_error("redis at " + io_.address().str() +
                               ": INFO memory's maxmemory is not a number; cannot check it "
                               "against store_config::required_memory_bytes (set it to 0 to skip the check)");
        const std::uint64_t maxmemory = f.value;
        if (maxmemory != 0 && maxmemory < config_->required_memory_bytes)
            throw config_error("redis at " + io_.address().str() + ": maxmemory is " + std::to_string(maxmemory) +
                               " bytes but the remote tier needs " + std::to_string(config_->required_memory_bytes) +
                               " (its capacity in values x value bytes); raise it (CONFIG SET maxmemory " +
                               std::to_string(config_->required_memory_bytes) + ") or lower the remote capacity");
    }

    static constexpr std::chrono::milliseconds first_backoff{100};
    static constexpr std::chrono::milliseconds last_backoff{5000};

    transport io_;
    const store_config* config_;
    redisReader* reader_ = nullptr;
    deadline_clock::time_point deadline_{};
    std::uint64_t batch_ = 0;
    std::uint64_t down_batch_ = ~std::uint64_t{0};
    deadline_clock::time_point down_until_{};
    std::chrono::milliseconds backoff_ = first_backoff;
    std::string last_error_;
    std::vector<out_segment> out_;  // queued output, in order
    std::string out_text_;          // its copied part
    std::vector<iovec> iov_;        // scratch for the transport's gathered write
    std::vector<char> in_;          // read here, not yet used: [in_pos_, size)
    std::size_t in_pos_ = 0;
    std::array<char, 4096> ahead_;  // a value's last read reads ahead into it
};

}  // namespace kvpolicy::redis
