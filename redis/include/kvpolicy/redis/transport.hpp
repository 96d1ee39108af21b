// redis transport: one byte stream to one Redis node, plain TCP or TLS
// (OpenSSL), every wait bounded by a deadline the caller gives. The Redis
// protocol over it is connection.hpp's.
//
// Deadlines. Every connect, read and write waits (poll on a non-blocking
// socket) until the caller's deadline at most (the store gives each batch
// one, see store::batch), so a server that is paused (SIGSTOP), trickles
// bytes, or is gone costs a batch one deadline whatever it does, never one
// per call or per byte.
//
// A write to a server that died raises SIGPIPE, whose default action ends
// the process, and a library must not change the process's signal
// dispositions: every plain write is a sendmsg with MSG_NOSIGNAL, and under
// TLS OpenSSL writes through a BIO on the same socket, so a dead server is
// an EPIPE that fails the write.
//
// Host names. A node given by name is resolved off the calling thread
// (async_resolver: getaddrinfo on a thread of its own), and a connect waits
// for the answer until its own deadline at most: a resolver that has not
// answered by then fails the connect, and its answer is used when it comes.
// Addresses are kept once resolved: a reconnect uses them at once, and a
// connect that fails on all of them starts a fresh lookup in the background
// for the next one (a server that moved), never waited on past a deadline.
// An IP address is never looked up (AI_NUMERICHOST).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
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
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/reply.hpp"
#include "kvpolicy/redis/store_config.hpp"

namespace kvpolicy::redis {

using deadline_clock = std::chrono::steady_clock;

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

class transport {
public:
    transport(endpoint at, const store_config& config) : at_(std::move(at)), config_(&config) {}
    ~transport() { close(); }
    transport(const transport&) = delete;
    transport& operator=(const transport&) = delete;

    [[nodiscard]] const endpoint& address() const noexcept { return at_; }
    [[nodiscard]] bool ok() const noexcept { return fd_ >= 0; }

    /// The node's addresses: an IP address at once; a name from the last
    /// lookup, or, with none yet, from a lookup waited for until `until` at
    /// most (see the header comment). False with `why` when there are none.
    bool resolve(deadline_clock::time_point until, std::string& why) {
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

    /// A non-blocking TCP connection to the node, by `until`. Empty `why`: done.
    bool connect_tcp(deadline_clock::time_point until, std::string& why) {
        if (!resolve(until, why)) return false;
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

    /// The TLS handshake on the connection, checking the certificate's chain and name.
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

    /// Some bytes of `iov` written: how many (0: an error, or `until` passed).
    std::size_t write_some(std::span<iovec> iov, deadline_clock::time_point until) {
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
                if (!ssl_wait(n, until)) return 0;
            }
        }
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = iov.size();
        for (;;) {
            const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) return static_cast<std::size_t>(n);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLOUT, until)) continue;
            return 0;
        }
    }

    /// Some bytes read into `iov`: how many (0: EOF, an error, or `until` passed).
    std::size_t read_some(std::span<iovec> iov, deadline_clock::time_point until) {
        if (ssl_ != nullptr) {
            std::size_t k = 0;
            while (k + 1 < iov.size() && iov[k].iov_len == 0) ++k;
            for (;;) {
                const int n =
                    SSL_read(ssl_, iov[k].iov_base, static_cast<int>(std::min<std::size_t>(iov[k].iov_len, INT_MAX)));
                if (n > 0) return static_cast<std::size_t>(n);
                if (!ssl_wait(n, until)) return 0;
            }
        }
        for (;;) {
            const ssize_t n = ::readv(fd_, iov.data(), static_cast<int>(iov.size()));
            if (n > 0) return static_cast<std::size_t>(n);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(POLLIN, until)) continue;
            return 0;
        }
    }

    /// OpenSSL's error behind the last failed TLS call, once (empty: none).
    std::string take_tls_error() { return std::exchange(tls_error_, {}); }

    void close() noexcept {
        if (ssl_ != nullptr) {
            SSL_free(ssl_);  // no close_notify: the peer may be paused or gone
            ssl_ = nullptr;
        }
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    /// Closes with a reset, not a FIN: the stream is out of step anyway, and
    /// a reset leaves no TIME_WAIT, so a server that keeps breaking
    /// connections cannot use up the client's ports.
    void abort() noexcept {
        if (fd_ >= 0) {
            const linger abort_on_close{1, 0};
            (void)::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
        }
        close();
    }

private:
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

    static constexpr std::size_t tls_record = 16384;

    endpoint at_;
    const store_config* config_;
    std::vector<async_resolver::address> addresses_;  // the node's, once resolved
    async_resolver resolver_;
    int fd_ = -1;
    SSL* ssl_ = nullptr;
    std::unique_ptr<SSL_CTX, ssl_ctx_deleter> ssl_ctx_;
    std::string tls_error_;    // OpenSSL's last error, for the caller's message
    std::vector<char> stage_;  // TLS: small pieces gathered into one record
    iovec staged_{};
};

}  // namespace kvpolicy::redis
