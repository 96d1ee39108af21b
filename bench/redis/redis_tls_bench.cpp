// redis_tls_bench: the remote tier's transfer engine over TLS against a raw
// OpenSSL client doing the same pipelined SET/GET, on one redis-server
// this program starts with a TLS port (certificates made by the openssl
// CLI in a temporary directory) and kills at exit.
//
// For each block size (64 KiB .. 2 MiB), `--mib` MiB of blocks are written
// (engine: header + checksum + SET) and read back (engine: GET + verify +
// bytes into a CPU slot) through redis::engine with store_config::tls, and
// the same bytes are SET and GET by the raw client: one TLS connection
// (OpenSSL, blocking socket), commands formatted into one buffer per batch
// and written with SSL_write, replies parsed in place, GET's bytes left in
// the read buffer (no header, no check, no copy). Batches of the same
// in-flight bytes (64 MiB), each side on an empty server, which side goes
// first alternating, best of `--runs`; the ratio is engine GB/s over raw
// GB/s, same run, same server. The engine over plain TCP to the same
// server is printed too, for what TLS costs it.
#include <kvpolicy/redis.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/redis_server.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct figures {
    double set_gbs = 0, get_gbs = 0;
};

void run_or_die(const std::string& cmd) {
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
}

// A raw TLS client: blocking socket, OpenSSL, RESP by hand.
class raw_tls_client {
public:
    raw_tls_client(int port, const std::string& ca, const std::string& cert, const std::string& key) {
        ctx_ = SSL_CTX_new(TLS_client_method());
        SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
        if (SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr) != 1 ||
            SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str()) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM) != 1)
            throw std::runtime_error("raw client: cannot load the certificates");
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw std::runtime_error("raw client: connect");
        const int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ssl_ = SSL_new(ctx_);
        SSL_set_fd(ssl_, fd_);
        SSL_set1_host(ssl_, "127.0.0.1");
        if (SSL_connect(ssl_) != 1) throw std::runtime_error("raw client: TLS handshake");
    }
    ~raw_tls_client() {
        SSL_free(ssl_);
        ::close(fd_);
        SSL_CTX_free(ctx_);
    }

    // Pipelined SETs of values[i] under keys[i]; false unless all answered +OK.
    bool set_batch(const std::vector<std::string>& keys, std::span<const std::byte> value) {
        out_.clear();
        for (const std::string& k : keys) {
            out_ += "*3\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n$" +
                    std::to_string(value.size()) + "\r\n";
            out_.append(reinterpret_cast<const char*>(value.data()), value.size());
            out_ += "\r\n";
        }
        write_all(out_);
        for (std::size_t i = 0; i < keys.size(); ++i)
            if (line() != "+OK") return false;
        return true;
    }
    // Pipelined GETs; the bytes of each value are read and left in the buffer. Returns the bytes read.
    std::size_t get_batch(const std::vector<std::string>& keys) {
        out_.clear();
        for (const std::string& k : keys)
            out_ += "*2\r\n$3\r\nGET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n";
        write_all(out_);
        std::size_t total = 0;
        for (std::size_t i = 0; i < keys.size(); ++i) {
            const std::string head = line();
            if (head.empty() || head[0] != '$') return 0;
            const long long n = std::atoll(head.c_str() + 1);
            if (n < 0) return 0;
            need(static_cast<std::size_t>(n) + 2);
            pos_ += static_cast<std::size_t>(n) + 2;
            total += static_cast<std::size_t>(n);
        }
        return total;
    }

private:
    void write_all(const std::string& s) {
        for (std::size_t at = 0; at < s.size();) {
            const int n =
                SSL_write(ssl_, s.data() + at, static_cast<int>(std::min<std::size_t>(s.size() - at, 1 << 30)));
            if (n <= 0) throw std::runtime_error("raw client: SSL_write");
            at += static_cast<std::size_t>(n);
        }
    }
    void need(std::size_t n) {  // at least n unread bytes in in_
        if (in_.size() - pos_ >= n) return;
        in_.erase(0, pos_);
        pos_ = 0;
        while (in_.size() < n) {
            char chunk[65536];
            const int r = SSL_read(ssl_, chunk, sizeof chunk);
            if (r <= 0) throw std::runtime_error("raw client: SSL_read");
            in_.append(chunk, static_cast<std::size_t>(r));
        }
    }
    std::string line() {
        for (;;) {
            const auto nl = in_.find("\r\n", pos_);
            if (nl != std::string::npos) {
                std::string l = in_.substr(pos_, nl - pos_);
                pos_ = nl + 2;
                return l;
            }
            need(in_.size() - pos_ + 1);
        }
    }

    SSL_CTX* ctx_ = nullptr;
    SSL* ssl_ = nullptr;
    int fd_ = -1;
    std::string out_, in_;
    std::size_t pos_ = 0;
};

figures raw_side(raw_tls_client& c, std::size_t bytes, std::size_t count, std::size_t per_batch) {
    std::vector<std::byte> value(bytes);
    for (std::size_t i = 0; i < bytes; ++i) value[i] = static_cast<std::byte>(i * 7);
    figures f;
    auto t0 = clock_type::now();
    for (std::size_t at = 0; at < count; at += per_batch) {
        std::vector<std::string> keys;
        for (std::size_t i = at; i < std::min(count, at + per_batch); ++i) keys.push_back("raw:" + std::to_string(i));
        if (!c.set_batch(keys, value)) throw std::runtime_error("raw SET failed");
    }
    f.set_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    t0 = clock_type::now();
    for (std::size_t at = 0; at < count; at += per_batch) {
        std::vector<std::string> keys;
        for (std::size_t i = at; i < std::min(count, at + per_batch); ++i) keys.push_back("raw:" + std::to_string(i));
        if (c.get_batch(keys) != keys.size() * bytes) throw std::runtime_error("raw GET failed");
    }
    f.get_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    return f;
}

figures engine_side(const redis::store_config& base, std::size_t bytes, std::size_t count) {
    redis::store_config c = base;
    c.ns.item_bytes = static_cast<std::uint32_t>(bytes);
    redis::store store(c);
    const std::uint32_t n = static_cast<std::uint32_t>(count);
    block_arena gpu(n, bytes), cpu(n, bytes);
    redis::engine engine(gpu, cpu, store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> sets, gets;
    for (std::uint32_t i = 0; i < n; ++i) {
        keys.push_back(1000 + i);
        kvpolicy::testing::write_pattern(gpu.block(block_id{i}), keys.back());
        sets.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
        gets.push_back({tier::remote, block_id{i}, tier::cpu, block_id{i}});
    }
    std::vector<transfer_status> status(n);
    figures f;
    auto t0 = clock_type::now();
    if (engine.execute(sets, keys, status) != n) throw std::runtime_error("engine SET failed");
    f.set_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    t0 = clock_type::now();
    if (engine.execute(gets, keys, status) != n) throw std::runtime_error("engine GET failed");
    f.get_gbs = static_cast<double>(bytes * count) / seconds_since(t0) / 1e9;
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t mib = 128;
    int runs = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--mib") == 0)
            mib = std::strtoul(argv[i + 1], nullptr, 10);
        else if (std::strcmp(argv[i], "--runs") == 0)
            runs = std::atoi(argv[i + 1]);
    }
    char tmpl[] = "/tmp/kvpolicy-tls-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    const std::string dir = tmpl;
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string in = "cd " + dir + " && ";
    run_or_die(in + "openssl req -x509" + ec + " -keyout ca.key -out ca.crt -days 2 -subj /CN=bench-ca 2>/dev/null");
    run_or_die(in + "printf 'subjectAltName=IP:127.0.0.1\\n' > s.ext");
    for (const char* who : {"server", "client"}) {
        run_or_die(in + "openssl req" + ec + " -keyout " + who + ".key -out " + who + ".csr -subj /CN=" + who +
                   " 2>/dev/null");
        run_or_die(in + "openssl x509 -req -in " + who + ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -out " + who +
                   ".crt -days 2" + (std::string(who) == "server" ? " -extfile s.ext" : "") + " 2>/dev/null");
    }
    const int tls_port = kvpolicy::testing::free_loopback_port();
    kvpolicy::testing::redis_server server({"--tls-port", std::to_string(tls_port), "--tls-cert-file",
                                            dir + "/server.crt", "--tls-key-file", dir + "/server.key",
                                            "--tls-ca-cert-file", dir + "/ca.crt", "--tls-auth-clients", "yes"});
    redis::store_config tls;
    tls.nodes = {{"127.0.0.1", tls_port}};
    tls.io_timeout = std::chrono::milliseconds(30000);
    tls.ns = {.model = "bench", .item_bytes = 0};
    tls.tls.enabled = true;
    tls.tls.ca_file = dir + "/ca.crt";
    tls.tls.cert_file = dir + "/client.crt";
    tls.tls.key_file = dir + "/client.key";
    redis::store_config plain = tls;
    plain.nodes = {{"127.0.0.1", server.port()}};
    plain.tls = {};

    std::printf(
        "redis_tls_bench: %zu MiB per size, best of %d; GB/s of values; ratio = engine over TLS / raw OpenSSL client\n",
        mib, runs);
    std::printf("%9s | %9s %9s %7s | %9s %9s %7s | %12s %12s\n", "block", "raw SET", "eng SET", "ratio", "raw GET",
                "eng GET", "ratio", "eng SET tcp", "eng GET tcp");
    for (const std::size_t bytes :
         {std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{2} << 20}) {
        const std::size_t count = (mib << 20) / bytes;
        const std::size_t per_batch = std::max<std::size_t>(1, (std::size_t{64} << 20) / bytes);
        figures raw, eng, tcp;
        for (int r = 0; r < runs; ++r) {
            auto one_raw = [&] {
                server.call({"FLUSHALL"});
                raw_tls_client c(tls_port, dir + "/ca.crt", dir + "/client.crt", dir + "/client.key");
                const figures f = raw_side(c, bytes, count, per_batch);
                raw.set_gbs = std::max(raw.set_gbs, f.set_gbs);
                raw.get_gbs = std::max(raw.get_gbs, f.get_gbs);
            };
            auto one_engine = [&] {
                server.call({"FLUSHALL"});
                const figures f = engine_side(tls, bytes, count);
                eng.set_gbs = std::max(eng.set_gbs, f.set_gbs);
                eng.get_gbs = std::max(eng.get_gbs, f.get_gbs);
            };
            if (r % 2 == 0)
                one_raw(), one_engine();
            else
                one_engine(), one_raw();
            server.call({"FLUSHALL"});
            const figures f = engine_side(plain, bytes, count);
            tcp.set_gbs = std::max(tcp.set_gbs, f.set_gbs);
            tcp.get_gbs = std::max(tcp.get_gbs, f.get_gbs);
        }
        std::printf("%6zu KiB | %9.3f %9.3f %6.2fx | %9.3f %9.3f %6.2fx | %12.3f %12.3f\n", bytes >> 10, raw.set_gbs,
                    eng.set_gbs, eng.set_gbs / raw.set_gbs, raw.get_gbs, eng.get_gbs, eng.get_gbs / raw.get_gbs,
                    tcp.set_gbs, tcp.get_gbs);
        std::fflush(stdout);
    }
    std::error_code e;
    std::filesystem::remove_all(dir, e);
    return 0;
}
