// redis connection: one connection to one Redis node, plain TCP or TLS
// (OpenSSL), with a deadline on every wait, authentication (a password, or
// a Redis 6 ACL user and password) and the configuration checks a remote
// tier needs.
//
// Deadlines. The store gives each batch one deadline (io_timeout from its
// start, see store::batch) and every connect, read and write of the batch
// waits (poll on a non-blocking socket) until that deadline at most, so a
// server that is paused (SIGSTOP), trickles bytes, or is gone costs a batch
// one io_timeout whatever it does, never one per command or per byte. A
// connect is bounded by connect_timeout as well. A connection that saw an
// I/O error, a timeout or a reply it cannot trust is closed (a late reply
// would be read as the answer to the next command); a node whose connect
// (or handshake, AUTH, PING) failed is down for the rest of the batch and
// is not tried again before a backoff (100 ms, doubling to 5 s; reset when
// a connect succeeds).
//
// A write to a server that died raises SIGPIPE, whose default action ends
// the process, and a library must not change the process's signal
// dispositions: every plain write is a sendmsg with MSG_NOSIGNAL, and under
// TLS OpenSSL writes through a BIO on the same socket, so a dead server is
// an EPIPE that fails the batch.
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
// Host names. A node given by name is resolved off the calling thread
// (async_resolver: getaddrinfo on a thread of its own), and a connect waits
// for the answer until its own deadline at most: at construction, a name
// that does not resolve is a config_error naming the host; in a batch, a
// resolver that has not answered by the deadline marks the node down for
// the batch like a failed connect, and its answer is used when it comes.
// Addresses are kept once resolved: a reconnect uses them at once, and a
// connect that fails on all of them starts a fresh lookup in the background
// for the next one (a server that moved), never waited on past a deadline.
// An IP address is never looked up (AI_NUMERICHOST).
//
// Errors at construction name the node's address, the field and the fix:
// nothing listening there, a password or user the server refuses (or
// needs), a TLS certificate that does not verify (CA, server name), a
// `maxmemory` smaller than the remote tier asks for.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/reply.hpp"

namespace kvpolicy::redis {

using deadline_clock = std::chrono::steady_clock;

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

/// Whether `host` is a numeric IPv4 or IPv6 address.
[[nodiscard]] inline bool is_ip_address(const std::string& host) noexcept {
    in6_addr a6{};
    in_addr a4{};
    return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

/// getaddrinfo on a thread of its own, waited for until a deadline at most.
/// The lookup's state is shared with its thread, so a resolver (or its
/// connection) can go while a lookup is still running.
class async_resolver {
public:
    struct address {
        sockaddr_storage addr{};
        socklen_t len = 0;
        int family = 0, socktype = 0, protocol = 0;
    };
    struct result {
        int rc = 0;  ///< getaddrinfo's: 0, or an EAI_ code (gai_strerror)
        std::vector<address> addresses;
    };

    /// Starts a lookup of host:port unless one is running.
    void start(const std::string& host, int port) {
        if (running_ && !running_->done.load(std::memory_order_acquire)) return;
        auto st = std::make_shared<state>();
        running_ = st;
        std::thread([st, host, service = std::to_string(port)] {
            result r = lookup(host, service, 0);
            {
                std::scoped_lock lock(st->mutex);
                st->answer = std::move(r);
            }
            st->done.store(true, std::memory_order_release);
            st->cv.notify_all();
        }).detach();
    }
    /// Whether a lookup was started and has not been taken.
    [[nodiscard]] bool pending() const noexcept { return running_ != nullptr; }
    /// The running lookup's answer once it is in, waiting until `until` at
    /// most; nothing (still running, or none started) otherwise.
    std::optional<result> take(std::chrono::steady_clock::time_point until) {
        if (!running_) return std::nullopt;
        std::unique_lock lock(running_->mutex);
        if (!running_->cv.wait_until(lock, until, [&] { return running_->done.load(std::memory_order_acquire); }))
            return std::nullopt;
        result r = std::move(running_->answer);
        lock.unlock();
        running_.reset();
        return r;
    }

    /// getaddrinfo of host:service now, on this thread (`flags`: AI_NUMERICHOST
    /// for an IP address, which needs no DNS).
    static result lookup(const std::string& host, const std::string& service, int flags) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = flags;
        addrinfo* found = nullptr;
        result r;
        r.rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
        if (r.rc != 0) return r;
        for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
            if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
            address x;
            std::memcpy(&x.addr, a->ai_addr, a->ai_addrlen);
            x.len = a->ai_addrlen;
            x.family = a->ai_family;
            x.socktype = a->ai_socktype;
            x.protocol = a->ai_protocol;
            r.addresses.push_back(x);
        }
        ::freeaddrinfo(found);
        return r;
    }

private:
    struct state {
        std::mutex mutex;
        std::condition_variable cv;
        std::atomic<bool> done{false};
        result answer;
    };
    std::shared_ptr<state> running_;
};

namespace detail {
// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a dead
// server; this one sends with MSG_NOSIGNAL (and never blocks).
inline BIO_METHOD* nosigpipe_socket_bio() {
    static BIO_METHOD* const method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kvpolicy socket");
        BIO_meth_set_write(m, [](BIO* b, const char* data, int n) -> int {
            BIO_clear_retry_flags(b);
            const ssize_t r = ::send(static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b))), data,
                                     static_cast<std::size_t>(n), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
            return static_cast<int>(r);
        });
        BIO_meth_set_read(m, [](BIO* b, char* data, int n) -> int {
            BIO_clear_retry_flags(b);
            const ssize_t r = ::recv(static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b))), data,
                                     static_cast<std::size_t>(n), MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
            return static_cast<int>(r);
        });
        BIO_meth_set_ctrl(m, [](BIO*, int cmd, long, void*) -> long { return cmd == BIO_CTRL_FLUSH ? 1 : 0; });
        BIO_meth_set_create(m, [](BIO* b) -> int {
            BIO_set_init(b, 1);
            return 1;
        });
        return m;
    }();
    return method;
}
}  // namespace detail

class connection {
public:
    /// Connects, authenticates and checks the node (bounded by
    /// connect_timeout + io_timeout). Throws: config_error naming the
    /// address, the field and the fix when it cannot.
    connection(endpoint at, const store_config& config) : at_(std::move(at)), config_(&config) {
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
    connection(endpoint at, const store_config& config, deferred_t) : at_(std::move(at)), config_(&config) {}

    ~connection() { close(); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    [[nodiscard]] const endpoint& address() const noexcept { return at_; }
    [[nodiscard]] bool ok() const noexcept { return fd_ >= 0; }
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
            const std::size_t n = write_some(iov);
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
            std::size_t got = read_some(std::span<iovec>(iov, static_cast<std::size_t>(count)));
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
        if (ssl_ != nullptr) {
            SSL_free(ssl_);  // no close_notify: the peer may be paused or gone
            ssl_ = nullptr;
        }
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        if (reader_ != nullptr) redisReaderFree(reader_);
        reader_ = nullptr;
        clear_out();
        in_.clear();
        in_pos_ = 0;
    }
    /// Gives the connection up (`why`: what went wrong). Aborted, not closed:
    /// its bytes are out of step anyway, and a reset leaves no TIME_WAIT, so a
    /// server that keeps breaking connections cannot use up the client's ports.
    void close(std::string why) noexcept {
        last_error_ = std::move(why);
        if (!tls_error_.empty()) last_error_ += " (TLS: " + tls_error_ + ")";
        tls_error_.clear();
        if (fd_ >= 0) {
            const linger abort_on_close{1, 0};
            (void)::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
        }
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

    // Waits until the socket is ready for `events`, at most until `until`.
    [[nodiscard]] bool wait_for(short events, deadline_clock::time_point until) const noexcept {
        for (;;) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - deadline_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{fd_, events, 0};
            const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), INT_MAX)));
            if (r < 0 && errno != EINTR) return false;
            if (r > 0) return true;
        }
    }

    // Some bytes of `iov` written: how many (0: an error, or the deadline).
    std::size_t write_some(std::span<iovec> iov) {
        if (ssl_ != nullptr) {
            // Small pieces (command text, a value's header) go in one TLS
            // record; a large one is written from where it lies.
            const iovec* from = &iov[0];
            std::size_t len = iov[0].iov_len;
            if (len < tls_record && iov.size() > 1) {
                stage_.clear();
                for (const iovec& v : iov) {
                    const std::size_t take = std::min(v.iov_len, tls_record - stage_.size());
                    stage_.insert(stage_.end(), static_cast<const char*>(v.iov_base),
                                  static_cast<const char*>(v.iov_base) + take);
                    if (stage_.size() == tls_record || take < v.iov_len) break;
                }
                staged_.iov_base = stage_.data();
                staged_.iov_len = stage_.size();
                from = &staged_;
                len = stage_.size();
            }
            for (;;) {
                const int n = SSL_write(ssl_, from->iov_base, static_cast<int>(std::min<std::size_t>(len, INT_MAX)));
                if (n > 0) return static_cast<std::size_t>(n);
                if (!ssl_wait(n)) return 0;
            }
        }
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = iov.size();
        for (;;) {
            const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) return static_cast<std::size_t>(n);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT, deadline_)) continue;
            return 0;
        }
    }

    // Some bytes read into `iov`: how many (0: EOF, an error, or the deadline).
    std::size_t read_some(std::span<iovec> iov) {
        if (ssl_ != nullptr) {
            std::size_t k = 0;
            while (k + 1 < iov.size() && iov[k].iov_len == 0) ++k;
            for (;;) {
                const int n =
                    SSL_read(ssl_, iov[k].iov_base, static_cast<int>(std::min<std::size_t>(iov[k].iov_len, INT_MAX)));
                if (n > 0) return static_cast<std::size_t>(n);
                if (!ssl_wait(n)) return 0;
            }
        }
        for (;;) {
            const ssize_t n = ::readv(fd_, iov.data(), static_cast<int>(iov.size()));
            if (n > 0) return static_cast<std::size_t>(n);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLIN, deadline_)) continue;
            return 0;
        }
    }

    // After an SSL call returned `ret`: waits for what it wants (true), or
    // false for an error, EOF or the deadline.
    bool ssl_wait(int ret, deadline_clock::time_point until) {
        const int e = SSL_get_error(ssl_, ret);
        if (e == SSL_ERROR_WANT_READ) return wait_for(POLLIN, until);
        if (e == SSL_ERROR_WANT_WRITE) return wait_for(POLLOUT, until);
        if (const unsigned long err = ERR_peek_error(); err != 0) {  // kept for the error message
            char text[256];
            ERR_error_string_n(err, text, sizeof text);
            tls_error_ = text;
        }
        ERR_clear_error();
        return false;
    }
    bool ssl_wait(int ret) { return ssl_wait(ret, deadline_); }

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
        const std::size_t n = read_some(std::span<iovec>(&iov, 1));
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

    // The node's addresses: an IP address at once; a name from the last
    // lookup, or, with none yet, from a lookup waited for until `until` at
    // most (resolver_, see the header comment). False with `why` when there
    // are none.
    bool addresses(deadline_clock::time_point until, std::string& why) {
        if (addresses_.empty() && is_ip_address(at_.host)) {
            const async_resolver::result r = async_resolver::lookup(at_.host, std::to_string(at_.port), AI_NUMERICHOST);
            addresses_ = r.addresses;
        }
        if (addresses_.empty() && !resolver_.pending()) resolver_.start(at_.host, at_.port);
        if (resolver_.pending()) {  // an answer waited for only when there are no addresses yet
            const auto r = resolver_.take(addresses_.empty() ? until : deadline_clock::time_point{});
            if (r && r->rc == 0 && !r->addresses.empty()) addresses_ = r->addresses;
            if (r && r->rc != 0 && addresses_.empty()) {
                why = "cannot resolve the host name \"" + at_.host + "\" (" + ::gai_strerror(r->rc) + ")";
                return false;
            }
        }
        if (addresses_.empty()) {
            why = "the host name \"" + at_.host +
                  "\" did not resolve by the deadline (DNS slow or unreachable; the "
                  "lookup goes on in the background)";
            return false;
        }
        return true;
    }

    // A non-blocking TCP connection to at_, by `until`. Empty `why`: done.
    bool connect_tcp(deadline_clock::time_point until, std::string& why) {
        if (!addresses(until, why)) return false;
        why = "nothing answered";
        for (const async_resolver::address& a : addresses_) {
            fd_ = ::socket(a.family, a.socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.protocol);
            if (fd_ < 0) continue;
            int rc = ::connect(fd_, reinterpret_cast<const sockaddr*>(&a.addr), a.len);
            if (rc != 0 && errno == EINPROGRESS) {
                if (!wait_for(POLLOUT, until)) {
                    why = "connect timed out";
                    rc = -1;
                } else {
                    int err = 0;
                    socklen_t len = sizeof err;
                    rc = ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
                    if (rc != 0) why = std::strerror(err != 0 ? err : errno);
                }
            } else if (rc != 0) {
                why = std::strerror(errno);
            }
            if (rc == 0) {
                const int one = 1;
                (void)::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                why.clear();
                return true;
            }
            ::close(fd_);
            fd_ = -1;
        }
        // None answered: a name is looked up again in the background, for
        // the next connect (the server may have moved).
        if (!is_ip_address(at_.host)) resolver_.start(at_.host, at_.port);
        return false;
    }

    struct ssl_ctx_deleter {
        void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
    };

    // The TLS context, made once: CA, client certificate. Throws
    // config_error naming the file and the fix.
    SSL_CTX* tls_context() {
        if (ssl_ctx_) return ssl_ctx_.get();
        const tls_config& t = config_->tls;
        std::unique_ptr<SSL_CTX, ssl_ctx_deleter> ctx(SSL_CTX_new(TLS_client_method()));
        auto openssl_error = [] {
            const unsigned long e = ERR_get_error();
            char text[256] = "unknown";
            if (e != 0) ERR_error_string_n(e, text, sizeof text);
            ERR_clear_error();
            return std::string(text);
        };
        if (!ctx) throw config_error("redis at " + at_.str() + ": cannot make a TLS context (" + openssl_error() + ")");
        SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
        SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
        SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        const bool cas = t.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx.get()) == 1
                                           : SSL_CTX_load_verify_locations(ctx.get(), t.ca_file.c_str(), nullptr) == 1;
        if (!cas)
            throw config_error("redis at " + at_.str() +
                               ": cannot load the CA certificates from store_config::tls.ca_file \"" + t.ca_file +
                               "\" (" + openssl_error() + "); give a readable PEM file");
        if (!t.cert_file.empty()) {
            if (SSL_CTX_use_certificate_chain_file(ctx.get(), t.cert_file.c_str()) != 1)
                throw config_error("redis at " + at_.str() + ": cannot load store_config::tls.cert_file \"" +
                                   t.cert_file + "\" (" + openssl_error() + "); give the client's certificate as PEM");
            if (SSL_CTX_use_PrivateKey_file(ctx.get(), t.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
                SSL_CTX_check_private_key(ctx.get()) != 1)
                throw config_error("redis at " + at_.str() + ": cannot load store_config::tls.key_file \"" +
                                   t.key_file + "\" (" + openssl_error() +
                                   "); give the PEM private key of tls.cert_file");
        }
        ssl_ctx_ = std::move(ctx);
        return ssl_ctx_.get();
    }

    // The TLS handshake on fd_, checking the certificate's chain and name.
    bool start_tls(deadline_clock::time_point until, std::string& why) {
        ssl_ = SSL_new(tls_context());
        const std::string& name = config_->tls.server_name.empty() ? at_.host : config_->tls.server_name;
        BIO* bio = ssl_ != nullptr ? BIO_new(detail::nosigpipe_socket_bio()) : nullptr;
        if (bio != nullptr) {
            BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd_)));
            SSL_set_bio(ssl_, bio, bio);
        }
        bool named = bio != nullptr;
        if (named && is_ip_address(name)) {
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str()) == 1;
        } else if (named) {
            named = SSL_set_tlsext_host_name(ssl_, name.c_str()) == 1 && SSL_set1_host(ssl_, name.c_str()) == 1;
        }
        if (!named) {
            why = "cannot set up TLS for the name \"" + name + "\"";
            ERR_clear_error();
            return false;
        }
        for (;;) {
            const int r = SSL_connect(ssl_);
            if (r == 1) return true;
            const int e = SSL_get_error(ssl_, r);
            if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && ssl_wait(r, until)) continue;
            const long verify = SSL_get_verify_result(ssl_);
            if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
                why =
                    "the server's TLS certificate is not for \"" + name +
                    "\"; set store_config::tls.server_name to a name the certificate carries, or connect by that name";
            } else if (verify != X509_V_OK) {
                why = std::string("the server's TLS certificate does not verify (") +
                      X509_verify_cert_error_string(verify) +
                      "); give the CA that signed it in store_config::tls.ca_file";
            } else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                why = "no TLS handshake by the deadline; is the port a TLS port (--tls-port) and the server running?";
            } else {
                const unsigned long err = ERR_peek_error();
                char text[256] = "the server closed the connection";
                if (err != 0) ERR_error_string_n(err, text, sizeof text);
                why = std::string("the TLS handshake failed (") + text +
                      "); check that the port is the server's --tls-port and, if it asks for a client certificate, "
                      "set store_config::tls.cert_file and key_file";
            }
            ERR_clear_error();
            return false;
        }
    }

    bool open(std::string& why) {
        close();
        const auto now = deadline_clock::now();
        const auto connect_until = std::min(deadline_, now + config_->connect_timeout);
        std::string detail;
        if (!addresses(connect_until, detail))
            return failed_open(why, "redis at " + at_.str() + ": " + detail +
                                        "; give a host name this machine resolves, or the server's IP address "
                                        "(store_config::nodes)");
        if (!connect_tcp(connect_until, detail)) {
            return failed_open(why, "redis at " + at_.str() + ": cannot connect (" + detail +
                                        "); start redis-server there or fix the address (store_config::nodes)");
        }
        if (config_->tls.enabled && !start_tls(connect_until, detail))
            return failed_open(why, "redis at " + at_.str() + ": " + detail);
        reader_ = redisReaderCreate();
        if (reader_ == nullptr) return failed_open(why, "redis at " + at_.str() + ": out of memory");
        if (!config_->password.empty()) {
            reply_ptr r = config_->user.empty() ? command({"AUTH", config_->password})
                                                : command({"AUTH", config_->user, config_->password});
            if (!r) return fail_io(why, "AUTH");
            if (r->type == REDIS_REPLY_ERROR) {
                return failed_open(
                    why, "redis at " + at_.str() + ": authentication failed (" + std::string(r->str, r->len) +
                             (config_->user.empty() ? "); set store_config::password to the server's requirepass, or "
                                                      "store_config::user and password to an ACL user's"
                                                    : "); set store_config::user and store_config::password to an ACL "
                                                      "user the server has (ACL SETUSER ... on >password)"));
            }
        }
        reply_ptr r = command({"PING"});
        if (!r) return fail_io(why, "PING");
        if (is_error(r.get(), "NOAUTH")) {
            return failed_open(why, "redis at " + at_.str() + ": the server needs a password (" +
                                        std::string(r->str, r->len) +
                                        "); set store_config::password to its requirepass (and store_config::user "
                                        "for an ACL user)");
        }
        if (r->type != REDIS_REPLY_STATUS) {
            return failed_open(
                why, "redis at " + at_.str() + ": PING answered " +
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
                           "redis at " + at_.str() + ": no answer to " + what + " (" + last_error_ +
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
            throw config_error("redis at " + at_.str() +
                               ": INFO memory failed; cannot check maxmemory against "
                               "store_config::required_memory_bytes (set it to 0 to skip the check)");
        const info_field f = parse_info_field(std::string_view(r->str, r->len), "maxmemory");
        if (!f.present) return;
        if (!f.valid)
            throw config_error("redis at " + at_.str() +
                               ": INFO memory's maxmemory is not a number; cannot check it "
                               "against store_config::required_memory_bytes (set it to 0 to skip the check)");
        const std::uint64_t maxmemory = f.value;
        if (maxmemory != 0 && maxmemory < config_->required_memory_bytes)
            throw config_error("redis at " + at_.str() + ": maxmemory is " + std::to_string(maxmemory) +
                               " bytes but the remote tier needs " + std::to_string(config_->required_memory_bytes) +
                               " (its capacity in values x value bytes); raise it (CONFIG SET maxmemory " +
                               std::to_string(config_->required_memory_bytes) + ") or lower the remote capacity");
    }

    static constexpr std::size_t tls_record = 16384;
    static constexpr std::chrono::milliseconds first_backoff{100};
    static constexpr std::chrono::milliseconds last_backoff{5000};

    endpoint at_;
    const store_config* config_;
    std::vector<async_resolver::address> addresses_;  // the node's, once resolved
    async_resolver resolver_;
    int fd_ = -1;
    SSL* ssl_ = nullptr;
    std::unique_ptr<SSL_CTX, ssl_ctx_deleter> ssl_ctx_;
    redisReader* reader_ = nullptr;
    deadline_clock::time_point deadline_{};
    std::uint64_t batch_ = 0;
    std::uint64_t down_batch_ = ~std::uint64_t{0};
    deadline_clock::time_point down_until_{};
    std::chrono::milliseconds backoff_ = first_backoff;
    std::string last_error_;
    std::string tls_error_;         // OpenSSL's last error, for the next close's message
    std::vector<out_segment> out_;  // queued output, in order
    std::string out_text_;          // its copied part
    std::vector<iovec> iov_;        // scratch for sendmsg
    std::vector<char> stage_;       // TLS: small pieces gathered into one record
    iovec staged_{};
    std::vector<char> in_;  // read here, not yet used: [in_pos_, size)
    std::size_t in_pos_ = 0;
    std::array<char, 4096> ahead_;  // a value's last read reads ahead into it
};

}  // namespace kvpolicy::redis
