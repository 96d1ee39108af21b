// The remote tier's block identity and scope on real Redis servers (label
// `redis`): blocks named by 32-byte digests (two blocks whose 64-bit
// handles collide stay two blocks, in the store and in one instance),
// namespaces that keep tenants, ranks and dtypes apart in one store, and
// the deployment MAC (a value planted by a writer without the secret is
// refused, however well-formed). SHA-256 and HMAC-SHA-256 against OpenSSL's
// one-shot API and RFC 4231.
#include <catch2/catch.hpp>

#include <kvpolicy/redis.hpp>

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/redis_config.hpp"
#include "support/redis_server.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using kvpolicy::testing::item_bytes;
using kvpolicy::testing::redis_server;
using kvpolicy::testing::remote_test_cache;

namespace {

// The bytes an item holds when correct, from its block's digest and layer:
// two blocks with one 64-bit handle still have different bytes.
std::uint64_t seed_of(const block_digest& d, std::uint32_t layer) {
    std::uint64_t s = layer + 1;
    for (std::size_t i = 0; i < d.size(); i += 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, d.data() + i, 8);
        s = mix64(s ^ w);
    }
    return s;
}

redis::store_config scoped_config(int port) {
    redis::store_config c;
    c.nodes = {{"127.0.0.1", port}};
    c.io_timeout = std::chrono::milliseconds(2000);
    c.ns.model = "test-model";
    c.ns.dtype = "bfloat16";
    c.ns.item_bytes = item_bytes;
    return c;
}

redis::store_config with_ids(redis::store_config c, std::shared_ptr<remote_identities> ids) {
    c.ns.identities = std::move(ids);
    return c;
}

// One serving instance whose blocks are named by digests: a cache and its
// redis::node (arenas, store, engine, identity table).
struct digest_instance {
    remote_test_cache cache;
    redis::node node;
    remote_identities* ids;  // the node's
    redis::store& store;
    const redis::engine& engine;
    block_arena& gpu;
    block_arena& cpu;
    std::uint64_t pattern_xor = 0;  // a writer that writes wrong bytes (an attacker) sets it

    digest_instance(const redis::store_config& sc, std::size_t gpu_cap = 4, std::size_t cpu_cap = 4)
            : cache(cache_config{.gpu_capacity = gpu_cap,
                                 .cpu_capacity = cpu_cap,
                                 .block_size = 16,
                                 .item_bytes = item_bytes,
                                 .remote = true}),
              node(with_ids(sc, std::make_shared<remote_identities>()), gpu_cap, cpu_cap),
              ids(node.identities()),
              store(node.remote()),
              engine(node.transfers()),
              gpu(node.gpu()),
              cpu(node.cpu()) {}

    std::uint64_t seed(std::uint64_t item) const {
        const auto id = ids->find(item);
        REQUIRE(id.has_value());
        return seed_of(id->digest, id->layer) ^ pattern_xor;
    }

    // Every cached slot holds its own block's bytes (by digest).
    std::string check_bytes() const {
        std::string bad;
        for (std::uint32_t i = 0; i < cache.gpu().capacity(); ++i)
            if (cache.gpu().state(block_id{i}) == block_pool<lru>::slot_state::cached &&
                !kvpolicy::testing::has_pattern(gpu.block(block_id{i}), seed(cache.gpu().key(block_id{i}))))
                bad += "gpu slot " + std::to_string(i) + " holds another block's bytes; ";
        for (std::uint32_t i = 0; i < cache.cpu().capacity(); ++i)
            if (cache.cpu().state(block_id{i}) == block_pool<lru>::slot_state::cached &&
                !kvpolicy::testing::has_pattern(cpu.block(block_id{i}), seed(cache.cpu().key(block_id{i}))))
                bad += "cpu slot " + std::to_string(i) + " holds another block's bytes; ";
        return bad;
    }

    struct result {
        std::size_t remote_blocks = 0;
        std::size_t local_run = 0;
        transfer_report report;
        std::vector<std::uint64_t> written_keys, fetched_keys;
    };

    // One step of one request: admit through the store by digests, run the
    // plan, report it, compute the miss tail and the recomputes, release.
    result step(const std::vector<block_digest>& doc, session_id s = session_id{1}) {
        result out;
        cache.begin_step();
        const remote_admission a = node.admit(cache, s, std::span<const block_digest>(doc));
        out.remote_blocks = a.remote_blocks;
        out.local_run = a.local.match.run;
        redis::plan_run run = node.run_plan(cache, cache.end_step());
        out.report = std::move(run.report);
        out.written_keys = std::move(run.written_keys);
        out.fetched_keys = std::move(run.fetched_keys);
        for (std::size_t i = a.local.match.run; i < doc.size(); ++i) {
            const std::uint64_t key = cache.item_key(digest_handle(doc[i]), 0);
            kvpolicy::testing::write_pattern(gpu.block(*cache.gpu().cached_block(key)), seed(key));
        }
        for (const recompute_item& r : out.report.recompute)
            kvpolicy::testing::write_pattern(gpu.block(r.block), seed(r.key));
        cache.free_session(s);
        forget_identities(cache, *ids);  // the session's blocks may have left with it
        return out;
    }

    // One step of several requests, asked of the store in one batch (admit_all_through).
    std::vector<remote_admission> step_all(const std::vector<std::vector<block_digest>>& docs) {
        cache.begin_step();
        std::vector<step_digest_request> requests;
        for (std::size_t r = 0; r < docs.size(); ++r)
            requests.push_back({session_id{100 + r}, std::span<const block_digest>(docs[r]), {}});
        const auto out = admit_all_through(cache, store, *ids, std::span<const step_digest_request>(requests));
        const transfer_report report = node.run_plan(cache, cache.end_step()).report;
        for (std::size_t r = 0; r < docs.size(); ++r)
            for (std::size_t i = out[r].local.match.run; i < docs[r].size(); ++i) {
                const std::uint64_t key = cache.item_key(digest_handle(docs[r][i]), 0);
                kvpolicy::testing::write_pattern(gpu.block(*cache.gpu().cached_block(key)), seed(key));
            }
        for (const recompute_item& x : report.recompute)
            kvpolicy::testing::write_pattern(gpu.block(x.block), seed(x.key));
        for (std::size_t r = 0; r < docs.size(); ++r) cache.free_session(session_id{100 + r});
        forget_identities(cache, *ids);
        return out;
    }

    // Computes `doc`, then pushes it out of both tiers with other documents,
    // so that every block of it is written back to the store.
    void publish(const std::vector<block_digest>& doc, std::mt19937_64& rng) {
        step(doc);
        for (int d = 0; d < 3; ++d) {
            const auto r = step(random_doc(rng, doc.size()), session_id{static_cast<std::uint64_t>(d) + 2});
            REQUIRE(r.report.clean());
        }
        REQUIRE(cache.lookup(handles(doc)).run == 0);
    }

    static std::vector<block_hash> handles(const std::vector<block_digest>& doc) {
        std::vector<block_hash> h;
        for (const auto& d : doc) h.push_back(digest_handle(d));
        return h;
    }

    static std::vector<block_digest> random_doc(std::mt19937_64& rng, std::size_t n) {
        std::vector<block_digest> doc(n);
        for (auto& d : doc)
            for (auto& b : d) b = static_cast<std::uint8_t>(rng());
        return doc;
    }
};

// `doc` with every digest changed past its first 8 bytes: the same 64-bit
// handles, other blocks.
std::vector<block_digest> same_handles(std::vector<block_digest> doc) {
    for (auto& d : doc) d[31] ^= 0x5a;
    return doc;
}

// SET key value, binary-safe, through a connection of its own (a writer
// outside the tier).
void raw_set(int port, const std::string& key, std::span<const std::byte> value) {
    redisContext* c = redisConnect("127.0.0.1", port);
    REQUIRE(c != nullptr);
    REQUIRE(c->err == 0);
    auto* r =
        static_cast<redisReply*>(redisCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    REQUIRE(r != nullptr);
    REQUIRE(r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
}

std::string secret_a() { return "deployment-secret-a-0123456789abcdef"; }

}  // namespace

TEST_CASE("identity: SHA-256 block digests equal OpenSSL's one-shot digest of the same bytes, chained",
          "[redis][identity]") {
    std::mt19937_64 rng(33);
    redis::sha256_block_hasher hasher;
    for (int round = 0; round < 200; ++round) {
        const std::uint32_t block_size = 1 + static_cast<std::uint32_t>(rng() % 32);
        std::vector<std::int32_t> tokens(rng() % 300);
        for (auto& t : tokens) t = static_cast<std::int32_t>(rng());
        std::vector<std::byte> extra(rng() % 3 == 0 ? 0 : rng() % 40);
        for (auto& b : extra) b = std::byte(rng() & 0xff);
        std::vector<block_digest> out(tokens.size() / block_size + 1);
        const std::size_t n = hasher.hash_blocks(tokens, block_size, out, extra);
        REQUIRE(n == tokens.size() / block_size);
        // The reference: the message built by hand, one EVP_Digest call each.
        block_digest parent = redis::root_block_digest;
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<unsigned char> msg(parent.begin(), parent.end());
            auto put64 = [&](std::uint64_t v) {
                for (int b = 0; b < 8; ++b) msg.push_back(static_cast<unsigned char>(v >> (8 * b)));
            };
            put64(extra.size());
            for (std::byte b : extra) msg.push_back(std::to_integer<unsigned char>(b));
            put64(block_size);
            for (std::uint32_t j = 0; j < block_size; ++j) {
                const auto t = static_cast<std::uint32_t>(tokens[i * block_size + j]);
                for (int b = 0; b < 4; ++b) msg.push_back(static_cast<unsigned char>(t >> (8 * b)));
            }
            block_digest want{};
            unsigned int len = 0;
            REQUIRE(EVP_Digest(msg.data(), msg.size(), want.data(), &len, EVP_sha256(), nullptr) == 1);
            REQUIRE(out[i] == want);
            parent = want;
        }
        // The handle is the digest's first 8 bytes, little-endian.
        if (n > 0) {
            std::uint64_t h = 0;
            std::memcpy(&h, out[0].data(), 8);
            REQUIRE(digest_handle(out[0]) == h);
        }
    }
    // SHA-256("abc") through the same EVP path: FIPS 180-2's example.
    block_digest abc{};
    unsigned int len = 0;
    REQUIRE(EVP_Digest("abc", 3, abc.data(), &len, EVP_sha256(), nullptr) == 1);
    REQUIRE(abc[0] == 0xba);
    REQUIRE(abc[31] == 0xad);
}

TEST_CASE("identity: HMAC-SHA-256 gives RFC 4231's answers, over header and payload as one message",
          "[redis][identity]") {
    const std::vector<std::byte> key(20, std::byte{0x0b});  // RFC 4231, test case 1
    const redis::hmac_sha256 mac(key);
    const std::string data = "Hi There";
    std::array<std::byte, 32> out{};
    const auto bytes = std::as_bytes(std::span<const char>(data.data(), data.size()));
    mac.sign(bytes, {}, out);
    const std::string want = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
    std::string got;
    for (std::byte b : out) {
        static constexpr char digits[] = "0123456789abcdef";
        got += digits[std::to_integer<unsigned>(b) >> 4];
        got += digits[std::to_integer<unsigned>(b) & 15];
    }
    REQUIRE(got == want);
    std::array<std::byte, 32> split{};
    mac.sign(bytes.first(3), bytes.subspan(3), split);
    REQUIRE(split == out);
    REQUIRE_THROWS_WITH(redis::hmac_sha256(std::string_view("short")),
                        Catch::Contains("the secret has 5 bytes") && Catch::Contains("at least 16"));
}

TEST_CASE("identity: poly1305_mac is Poly1305 under HMAC-SHA-256(secret, label, nonce), and refuses any change",
          "[redis][identity]") {
    const std::string secret = "poly-deployment-secret-0123456789";
    const redis::poly1305_mac mac(secret);
    std::mt19937_64 rng(3304);
    for (int round = 0; round < 50; ++round) {
        std::vector<std::byte> head(80), payload(rng() % 5000);
        for (auto& b : head) b = std::byte(rng() & 0xff);
        for (auto& b : payload) b = std::byte(rng() & 0xff);
        std::array<std::byte, 32> out{};
        mac.sign(head, payload, out);
        REQUIRE(mac.verify(head, payload, out));
        // The reference: OpenSSL's one-shot EVP_Q_mac, key then tag.
        std::vector<unsigned char> kin(redis::poly1305_mac::key_label.begin(), redis::poly1305_mac::key_label.end());
        for (std::size_t i = 16; i < 32; ++i) kin.push_back(std::to_integer<unsigned char>(out[i]));
        unsigned char key[32], tag[16];
        std::size_t n = 0;
        char sha[] = "SHA256";
        REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, sha, nullptr, secret.data(), secret.size(), kin.data(), kin.size(),
                          key, sizeof key, &n) != nullptr);
        std::vector<unsigned char> msg;
        for (std::byte b : head) msg.push_back(std::to_integer<unsigned char>(b));
        for (std::byte b : payload) msg.push_back(std::to_integer<unsigned char>(b));
        REQUIRE(EVP_Q_mac(nullptr, "POLY1305", nullptr, nullptr, nullptr, key, sizeof key, msg.data(), msg.size(), tag,
                          sizeof tag, &n) != nullptr);
        REQUIRE(std::memcmp(tag, out.data(), 16) == 0);
        // Any one bit of the tag, the nonce, the head or the payload changed: refused.
        const std::size_t where = rng() % (32 + head.size() + payload.size());
        const auto bit = std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
        if (where < 32)
            out[where] ^= bit;
        else if (where < 32 + head.size())
            head[where - 32] ^= bit;
        else
            payload[where - 32 - head.size()] ^= bit;
        REQUIRE_FALSE(mac.verify(head, payload, out));
    }
    // Fresh nonces: two MACs of one message differ, both verify; another secret's do not.
    std::array<std::byte, 32> a{}, b{};
    const std::vector<std::byte> m(100, std::byte{1});
    mac.sign(m, m, a);
    mac.sign(m, m, b);
    REQUIRE(a != b);
    REQUIRE((mac.verify(m, m, a) && mac.verify(m, m, b)));
    REQUIRE_FALSE(redis::poly1305_mac(std::string_view("another-secret-0123456789")).verify(m, m, a));
    REQUIRE_THROWS_WITH(redis::poly1305_mac(std::string_view("short")), Catch::Contains("at least 16"));
}

TEST_CASE("identity: a forged value with a recomputed checksum but no valid MAC is refused", "[redis][identity]") {
    remote_namespace ns{.model = "m", .item_bytes = 64};
    ns.identities = std::make_shared<remote_identities>();
    block_digest d{};
    d[0] = 7;
    d[20] = 9;
    REQUIRE(ns.identities->bind(digest_handle(d), d, 0));
    const std::uint64_t key = digest_handle(d);
    std::vector<std::byte> payload(64, std::byte{3});
    std::vector<std::byte> value(remote_value_header::size + 64);
    // Written by a writer without the secret: a valid header, digest and checksum.
    encode_remote_value(value, ns, ns.hash(), key, payload);
    REQUIRE(verify_remote_value(value, ns, ns.hash(), key, 64) == remote_value_check::ok);  // no MAC asked: used
    remote_namespace guarded = ns;
    guarded.mac = std::make_shared<redis::hmac_sha256>(secret_a());
    REQUIRE(verify_remote_value(value, guarded, guarded.hash(), key, 64) == remote_value_check::bad_mac);
    // The flag set and a MAC made up: still refused; with the right secret: used.
    remote_value_header h;
    std::memcpy(&h, value.data(), sizeof h);
    h.flags |= remote_value_header::has_mac;
    h.mac.fill(std::byte{0x42});
    std::memcpy(value.data(), &h, sizeof h);
    REQUIRE(verify_remote_value(value, guarded, guarded.hash(), key, 64) == remote_value_check::bad_mac);
    std::vector<std::byte> out(64);
    REQUIRE(verify_and_copy_remote_value(value, guarded, guarded.hash(), key, out) == remote_value_check::bad_mac);
    encode_remote_value(value, guarded, guarded.hash(), key, payload);
    REQUIRE(verify_and_copy_remote_value(value, guarded, guarded.hash(), key, out) == remote_value_check::ok);
    REQUIRE(out == payload);
    // Another secret's MAC, and a payload byte changed with the checksum recomputed: refused.
    remote_namespace other = ns;
    other.mac = std::make_shared<redis::hmac_sha256>(std::string_view("another-secret-0123456789"));
    REQUIRE(verify_remote_value(value, other, other.hash(), key, 64) == remote_value_check::bad_mac);
    std::memcpy(&h, value.data(), sizeof h);
    value[remote_value_header::size + 5] ^= std::byte{1};
    h.checksum = remote_checksum(std::span<const std::byte>(value).subspan(remote_value_header::size));
    std::memcpy(value.data(), &h, sizeof h);
    REQUIRE(verify_remote_value(value, guarded, guarded.hash(), key, 64) == remote_value_check::bad_mac);
    // Another block's digest behind the same handle: refused before the MAC.
    block_digest e = d;
    e[31] ^= 1;
    remote_namespace second = guarded;
    second.identities = std::make_shared<remote_identities>();
    REQUIRE(second.identities->bind(key, e, 0));
    encode_remote_value(value, guarded, guarded.hash(), key, payload);
    REQUIRE(verify_remote_value(value, second, second.hash(), key, 64) == remote_value_check::wrong_identity);
}

TEST_CASE("identity: a namespace that cannot be right is refused, naming the field and the fix",
          "[redis][identity][errors]") {
    redis_server server;
    redis::store_config c = scoped_config(server.port());
    c.ns.tp_size = 2;
    c.ns.tp_rank = 2;
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("tp_rank 2 is not below tp_size 2"));
    c.ns.tp_rank = 1;
    c.ns.pp_size = 0;
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("pp_rank 0 is not below pp_size 0"));
    c.ns.pp_size = 1;
    c.ns.dtype.clear();
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("dtype is empty"));
    c.ns.dtype = "fp8_e4m3";
    c.ns.model.clear();
    REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("model is empty"));
    c.ns.model = "m";
    REQUIRE_NOTHROW(redis::store(c));
}

TEST_CASE("node: run_plan names the keys it wrote and fetched, and admit takes only the store's identity",
          "[redis][identity]") {
    redis_server server;
    std::mt19937_64 rng(4409);
    const redis::store_config sc = scoped_config(server.port());
    digest_instance a(sc);
    const std::vector<block_digest> doc = digest_instance::random_doc(rng, 4);
    std::vector<std::uint64_t> doc_keys;
    for (const block_digest& d : doc) doc_keys.push_back(a.cache.item_key(digest_handle(d), 0));

    // doc computed, then pushed out of both tiers by three other documents:
    // each write-back done is named once, and the store holds exactly those.
    std::set<std::uint64_t> written;
    for (int d = 0; d < 4; ++d) {
        const auto r = d == 0 ? a.step(doc) : a.step(digest_instance::random_doc(rng, doc.size()), session_id{9});
        REQUIRE(r.report.clean());
        REQUIRE(r.fetched_keys.empty());
        for (std::uint64_t k : r.written_keys) REQUIRE(written.insert(k).second);
    }
    for (std::uint64_t k : doc_keys) REQUIRE(written.contains(k));
    REQUIRE(server.call({"DBSIZE"}) == std::to_string(written.size()));

    // Another instance over the same store fetches doc: every fetch named.
    digest_instance b(sc);
    const auto r = b.step(doc);
    REQUIRE(r.remote_blocks == doc.size());
    REQUIRE(r.written_keys.empty());
    std::vector<std::uint64_t> fetched = r.fetched_keys;
    std::ranges::sort(fetched);
    std::ranges::sort(doc_keys);
    REQUIRE(fetched == doc_keys);
    REQUIRE(b.check_bytes().empty());

    // A step still open is not run: nothing is sent.
    const std::size_t trips = b.engine.round_trips();
    b.cache.begin_step();
    REQUIRE_THROWS_WITH(b.node.run_plan(b.cache, swap_plan{}), Catch::Contains("run_plan: a step is open"));
    REQUIRE(b.engine.round_trips() == trips);
    // This store names blocks by digests: 64-bit hashes are refused, nothing admitted.
    const std::vector<block_hash> hashes = digest_instance::handles(doc);
    REQUIRE_THROWS_WITH(b.node.admit(b.cache, session_id{5}, std::span<const block_hash>(hashes)),
                        Catch::Contains("identity 'digest'"));
    REQUIRE(b.cache.held_by(session_id{5}).empty());
    (void)b.cache.end_step();

    // And a store of 64-bit hashes refuses digests.
    redis::node hashed(sc, 2, 2);
    REQUIRE(hashed.identities() == nullptr);
    remote_test_cache c(
        cache_config{.gpu_capacity = 2, .cpu_capacity = 2, .block_size = 16, .item_bytes = item_bytes, .remote = true});
    c.begin_step();
    REQUIRE_THROWS_WITH(hashed.admit(c, session_id{1}, std::span<const block_digest>(doc)),
                        Catch::Contains("identity 'hash64'"));
    REQUIRE(c.held_by(session_id{1}).empty());
}

TEST_CASE("identity: two blocks forced to the same 64-bit key are still two blocks", "[redis][identity]") {
    redis_server server;
    std::mt19937_64 rng(3301);
    const redis::store_config sc = scoped_config(server.port());
    const std::vector<block_digest> doc = digest_instance::random_doc(rng, 4);
    const std::vector<block_digest> twin = same_handles(doc);
    REQUIRE(digest_instance::handles(doc) == digest_instance::handles(twin));

    digest_instance a(sc);
    a.publish(doc, rng);
    for (const auto& d : doc) {
        REQUIRE(a.ids->bind(digest_handle(d), d, 0));
        REQUIRE(server.call({"EXISTS", a.store.config().ns.key(digest_handle(d))}) == "1");
    }
    REQUIRE(forget_identities(a.cache, *a.ids) == doc.size());

    SECTION("another instance asking for the twin blocks finds none of a's values, and computes its own") {
        digest_instance b(sc);
        const auto r = b.step(twin);
        REQUIRE(r.remote_blocks == 0);
        REQUIRE(b.engine.rejected_values() == 0);
        REQUIRE(b.check_bytes().empty());
        // While the twins are held, their own values are named by their own digests.
        const auto again = a.step(doc);  // a fetches its doc back: its own values, verified
        REQUIRE(again.remote_blocks == doc.size());
        REQUIRE(again.report.clean());
        REQUIRE(a.check_bytes().empty());
    }
    SECTION("a's values copied under the twins' keys are refused on fetch (the header's digest), and recomputed") {
        digest_instance b(sc);
        for (const auto& [d, t] : {std::pair{doc[0], twin[0]}, std::pair{doc[1], twin[1]}}) {
            REQUIRE(a.ids->bind(digest_handle(d), d, 0));
            REQUIRE(b.ids->bind(digest_handle(t), t, 0));
            REQUIRE(server.call({"COPY", a.store.config().ns.key(digest_handle(d)),
                                 b.store.config().ns.key(digest_handle(t))}) == "1");
        }
        forget_identities(a.cache, *a.ids);
        forget_identities(b.cache, *b.ids);
        const auto r = b.step(twin);
        REQUIRE(r.remote_blocks == 2);             // the store holds a value under each key...
        REQUIRE(b.engine.rejected_values() == 2);  // ...that is not this block's
        REQUIRE(r.report.recompute.size() == 2);
        REQUIRE(b.check_bytes().empty());
        REQUIRE(b.cache.check_invariants().empty());
    }
    SECTION("in one instance, a block whose handle another held block has is refused, changing nothing") {
        a.step(doc);  // held again (fetched back)
        const auto before = a.cache.lookup(digest_instance::handles(doc));
        REQUIRE(before.run == doc.size());
        const std::size_t bound = a.ids->size();
        a.cache.begin_step();
        REQUIRE_THROWS_WITH(admit_through(a.cache, a.store, *a.ids, session_id{9}, std::span<const block_digest>(twin)),
                            Catch::Contains("block 0's 64-bit handle") && Catch::Contains("is another block's"));
        REQUIRE(a.ids->size() == bound);
        REQUIRE(a.ids->collisions() == 1);
        a.cache.end_step();
        REQUIRE(a.cache.lookup(digest_instance::handles(doc)).run == doc.size());
        REQUIRE(a.check_bytes().empty());
    }
}

TEST_CASE("identity: wrong-tenant, wrong-rank and wrong-dtype instances sharing one store read nothing of each other's",
          "[redis][identity]") {
    redis_server server;
    std::mt19937_64 rng(3302);
    redis::store_config writer = scoped_config(server.port());
    writer.ns.tenant = "tenant-a";
    writer.ns.tp_size = 2;
    writer.ns.pp_size = 2;
    const std::vector<block_digest> doc = digest_instance::random_doc(rng, 4);
    digest_instance w(writer);
    w.publish(doc, rng);

    std::vector<std::pair<std::string, redis::store_config>> readers;
    auto add = [&](std::string what, auto change) {
        redis::store_config c = writer;
        change(c.ns);
        readers.emplace_back(std::move(what), c);
    };
    add("another tenant", [](remote_namespace& n) { n.tenant = "tenant-b"; });
    add("no tenant", [](remote_namespace& n) { n.tenant.clear(); });
    add("another TP rank", [](remote_namespace& n) { n.tp_rank = 1; });
    add("another TP size", [](remote_namespace& n) { n.tp_size = 4; });
    add("another PP rank", [](remote_namespace& n) { n.pp_rank = 1; });
    add("another dtype", [](remote_namespace& n) { n.dtype = "fp8_e4m3"; });
    add("another block size", [](remote_namespace& n) { n.block_size = 32; });
    for (const auto& [what, c] : readers) {
        INFO(what);
        digest_instance r(c);
        const auto res = r.step(doc);
        REQUIRE(res.remote_blocks == 0);
        REQUIRE(r.engine.rejected_values() == 0);
        REQUIRE(r.check_bytes().empty());
    }
    // The same scope reads them (the check above can fail).
    digest_instance same(writer);
    const auto res = same.step(doc);
    REQUIRE(res.remote_blocks == doc.size());
    REQUIRE(res.report.clean());
    REQUIRE(same.check_bytes().empty());
}

TEST_CASE(
    "identity: with a deployment MAC, values planted by a writer without the secret are refused (a miss, reported)",
    "[redis][identity]") {
    redis_server server;
    std::mt19937_64 rng(3303);
    redis::store_config guarded = scoped_config(server.port());
    const bool poly = GENERATE(false, true);
    INFO("the deployment's MAC: " << (poly ? "poly1305_mac" : "hmac_sha256"));
    if (poly)
        guarded.ns.mac = std::make_shared<redis::poly1305_mac>(secret_a());
    else
        guarded.ns.mac = std::make_shared<redis::hmac_sha256>(secret_a());
    const std::vector<block_digest> doc = digest_instance::random_doc(rng, 4);

    SECTION("a writer with the secret: its values are used") {
        digest_instance w(guarded);
        w.publish(doc, rng);
        digest_instance v(guarded);
        const auto r = v.step(doc);
        REQUIRE(r.remote_blocks == doc.size());
        REQUIRE(r.report.clean());
        REQUIRE(v.engine.rejected_values() == 0);
        REQUIRE(v.check_bytes().empty());
    }
    SECTION("a writer with another secret, or none, writing other bytes under the same keys: refused, recomputed") {
        for (const bool other_secret : {false, true}) {
            INFO("the writer has " << (other_secret ? "another secret" : "no secret"));
            redis::store_config attacker = guarded;
            attacker.ns.mac = nullptr;
            if (other_secret)
                attacker.ns.mac =
                    std::make_shared<redis::hmac_sha256>(std::string_view("attacker-guess-0123456789abcdef"));
            digest_instance w(attacker);
            w.pattern_xor = 0xbad;  // the bytes it plants are not the block's
            w.publish(doc, rng);
            digest_instance v(guarded);
            const auto r = v.step(doc);
            REQUIRE(r.remote_blocks == doc.size());             // the keys are there...
            REQUIRE(v.engine.rejected_values() == doc.size());  // ...and every value is refused
            REQUIRE(r.report.recompute.size() == doc.size());
            REQUIRE(v.check_bytes().empty());
            REQUIRE(v.cache.check_invariants().empty());
        }
    }
    SECTION("a value forged with a valid header, the right digest and a recomputed checksum, but no MAC: refused") {
        digest_instance v(guarded);
        remote_namespace unsigned_ns = guarded.ns;
        unsigned_ns.mac = nullptr;
        unsigned_ns.identities = std::make_shared<remote_identities>();
        for (const auto& d : doc) {
            REQUIRE(unsigned_ns.identities->bind(digest_handle(d), d, 0));
            std::vector<std::byte> payload(item_bytes), value(remote_value_header::size + item_bytes);
            kvpolicy::testing::write_pattern(payload, 0xbad);
            encode_remote_value(value, unsigned_ns, guarded.ns.hash(), digest_handle(d), payload);
            // Claim a MAC it cannot make.
            remote_value_header h;
            std::memcpy(&h, value.data(), sizeof h);
            h.flags |= remote_value_header::has_mac;
            std::memcpy(value.data(), &h, sizeof h);
            raw_set(server.port(), unsigned_ns.key(digest_handle(d)), value);
        }
        const auto r = v.step(doc);
        REQUIRE(r.remote_blocks == doc.size());
        REQUIRE(v.engine.rejected_values() == doc.size());
        REQUIRE(r.report.recompute.size() == doc.size());
        REQUIRE(v.check_bytes().empty());
    }
}

TEST_CASE(
    "identity: a step's requests by digests in one store batch, and a handle clash in any of them changes nothing",
    "[redis][identity]") {
    redis_server server;
    std::mt19937_64 rng(3305);
    const redis::store_config sc = scoped_config(server.port());
    const std::vector<block_digest> doc = digest_instance::random_doc(rng, 3);
    digest_instance w(sc);
    w.publish(doc, rng);
    digest_instance r(sc, 8, 8);
    const std::vector<block_digest> fresh = digest_instance::random_doc(rng, 2);
    const auto out = r.step_all({doc, fresh});
    REQUIRE(out.size() == 2);
    REQUIRE(out[0].remote_blocks == doc.size());
    REQUIRE(out[1].remote_blocks == 0);
    REQUIRE(r.engine.rejected_values() == 0);
    REQUIRE(r.check_bytes().empty());
    // r holds doc now: a step with a new request and doc's twin is refused whole.
    r.step(doc);
    const std::size_t bound = r.ids->size();
    const std::vector<block_digest> other = digest_instance::random_doc(rng, 2);
    const std::vector<block_digest> twin = same_handles(doc);
    r.cache.begin_step();
    const std::vector<step_digest_request> requests = {{session_id{7}, other, {}}, {session_id{8}, twin, {}}};
    REQUIRE_THROWS_WITH(admit_all_through(r.cache, r.store, *r.ids, std::span<const step_digest_request>(requests)),
                        Catch::Contains("is another block's"));
    REQUIRE(r.ids->size() == bound);  // other's bindings undone too
    REQUIRE(r.cache.held_by(session_id{7}).empty());
    REQUIRE(r.cache.lookup(digest_instance::handles(other)).run == 0);
    r.cache.end_step();
    REQUIRE(r.check_bytes().empty());
}
