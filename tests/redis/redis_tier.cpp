// The remote tier on real Redis servers (label `redis`), each started on a
// free loopback port by the test and killed at its end: bad configuration,
// the engine's batches, two processes sharing one server, and faults (the
// server killed mid-batch and restarted, paused past the timeout, evicting
// under maxmemory, a value corrupted behind the cache's back, a cluster node
// killed). After every step, every cached slot holds its own item's bytes,
// every failed fetch was recomputed, and the invariants hold.
#include <catch2/catch.hpp>

#include <kvpolicy/redis.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_config.hpp"
#include "support/redis_server.hpp"
#include "support/remote_instance.hpp"

using namespace kvpolicy;
using kvpolicy::testing::chain;
using kvpolicy::testing::config_for;
using kvpolicy::testing::has_pattern;
using kvpolicy::testing::item_bytes;
using kvpolicy::testing::redis_cluster;
using kvpolicy::testing::redis_server;
using kvpolicy::testing::write_pattern;

namespace {

cache_config remote_config(std::size_t gpu, std::size_t cpu) {
    return {.gpu_capacity = gpu, .cpu_capacity = cpu, .block_size = 16, .item_bytes = item_bytes, .remote = true};
}

struct instance : kvpolicy::testing::remote_instance<redis::engine, redis::store> {
    instance(const cache_config& c, redis::store& store) : remote_instance(c, item_bytes, store) {}
};

// Instance `a` computes `doc` and pushes it out of both its tiers with two
// other documents: every block of doc is written back.
void publish(instance& a, redis::store& store, const std::vector<block_hash>& doc, std::uint64_t other) {
    a.step(store, {{session_id{1}, doc}});
    for (std::uint64_t d : {other, other + 1}) {
        const auto r = a.step(store, {{session_id{d}, chain(d, doc.size())}});
        REQUIRE(r.report.clean());
    }
}

// Checks a reported plan: failed fetches recomputed by their requester,
// every cached slot with its own bytes, invariants.
void check_after(instance& b, const transfer_report& r) {
    for (const recompute_item& x : r.recompute) write_pattern(b.gpu.block(x.block), x.key);
    REQUIRE(b.check_bytes().empty());
    REQUIRE(b.cache.check_invariants().empty());
}

}  // namespace

TEST_CASE("redis: bad configuration is refused at construction, naming the address and the fix", "[redis][errors]") {
    SECTION("nothing listening") {
        const int port = kvpolicy::testing::free_loopback_port();
        REQUIRE_THROWS_WITH(redis::store(config_for(port)),
                            Catch::Contains("127.0.0.1:" + std::to_string(port)) && Catch::Contains("cannot connect") &&
                                Catch::Contains("start redis-server there or fix the address"));
    }
    SECTION("a wrong password, or none where one is needed") {
        redis_server server({"--requirepass", "right"});
        redis::store_config c = config_for(server.port());
        c.password = "wrong";
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("127.0.0.1:" + std::to_string(server.port())) &&
                                                 Catch::Contains("authentication failed") &&
                                                 Catch::Contains("store_config::password"));
        c.password.clear();
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("needs a password") && Catch::Contains("requirepass"));
        c.password = "right";
        REQUIRE_NOTHROW(redis::store(c));
    }
    SECTION("a server without enough memory for the tier") {
        redis_server server({"--maxmemory", "1mb"});
        redis::store_config c = config_for(server.port());
        c.required_memory_bytes = std::size_t{64} << 20;
        REQUIRE_THROWS_WITH(redis::store(c), Catch::Contains("127.0.0.1:" + std::to_string(server.port())) &&
                                                 Catch::Contains("maxmemory is 1048576 bytes") &&
                                                 Catch::Contains("CONFIG SET maxmemory 67108864"));
        c.required_memory_bytes = 512 << 10;
        REQUIRE_NOTHROW(redis::store(c));
    }
    SECTION("a namespace whose item size is not the arenas' block size") {
        redis_server server;
        redis::store_config c = config_for(server.port());
        c.ns.item_bytes = 100;
        redis::store store(c);
        block_arena gpu(2, item_bytes), cpu(2, item_bytes);
        REQUIRE_THROWS_WITH(redis::engine(gpu, cpu, store), Catch::Contains("make store_config::ns.item_bytes"));
    }
}

TEST_CASE("redis test servers: a port another process took after its probe is chosen again, or named", "[redis]") {
    // A listener on a port, as another test process's server would hold it.
    const int held = kvpolicy::testing::free_loopback_port();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(held));
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    SECTION("its own port: it starts on another") {
        redis_server server({}, false, held);
        REQUIRE(server.port() != held);
        REQUIRE(server.call({"PING"}) == "PONG");
    }
    SECTION("a port the caller gave it: port_taken names that port") {
        bool thrown = false;
        try {
            redis_server server({"--port", std::to_string(held)});
        } catch (const kvpolicy::testing::port_taken& e) {
            thrown = true;
            REQUIRE(e.port == held);
            REQUIRE_THAT(e.what(), Catch::Contains("Address already in use"));
        }
        REQUIRE(thrown);
    }
    ::close(fd);
}

TEST_CASE("redis engine: pipelined batches, binary-safe values, per-op status, bounded in-flight bytes", "[redis]") {
    redis_server server;
    redis::store_config c = config_for(server.port());
    const std::size_t n = 8;
    c.max_in_flight_bytes = GENERATE(std::size_t{64} << 20, 3 * item_bytes);
    redis::store store(c);
    block_arena gpu(n, item_bytes), cpu(n, item_bytes);
    redis::engine engine(gpu, cpu, store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> ops;
    for (std::uint32_t i = 0; i < n; ++i) {
        keys.push_back(1000 + i);
        write_pattern(gpu.block(block_id{i}), keys.back());
        if (i == 3) std::fill(gpu.block(block_id{i}).begin(), gpu.block(block_id{i}).end(), std::byte{0});  // NULs
        ops.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
    }
    std::vector<transfer_status> status(n);
    REQUIRE(engine.execute(ops, keys, status) == n);
    const std::size_t write_trips = engine.round_trips();
    REQUIRE(write_trips == (c.max_in_flight_bytes > n * item_bytes ? 1 : (n + 2) / 3));

    // Fetch them back into the CPU tier, plus one key nobody wrote.
    keys.push_back(999);
    ops.clear();
    for (std::uint32_t i = 0; i <= n; ++i)
        ops.push_back({tier::remote, block_id{i}, tier::cpu, block_id{static_cast<std::uint32_t>(i % n)}});
    ops.back().dst = block_id{0};  // a second fetch into slot 0 waits for the first: plan order
    status.assign(n + 1, transfer_status::done);
    REQUIRE(engine.execute(ops, keys, status) == n);
    REQUIRE(status.back() == transfer_status::failed);
    for (std::uint32_t i = 1; i < n; ++i) {
        REQUIRE(status[i] == transfer_status::done);
        if (i != 3)
            REQUIRE(has_pattern(cpu.block(block_id{i}), keys[i]));
        else
            REQUIRE(std::all_of(cpu.block(block_id{i}).begin(), cpu.block(block_id{i}).end(),
                                [](std::byte b) { return b == std::byte{0}; }));
    }
    REQUIRE(engine.bytes_sent() == n * (item_bytes + remote_value_header::size));
    // The value under each key is the header then the payload.
    REQUIRE(server.call({"STRLEN", c.ns.key(1000)}) == std::to_string(item_bytes + remote_value_header::size));
}

TEST_CASE("redis engine: a write-back's slot overwritten later in its batch sends the bytes it had when queued",
          "[redis]") {
    redis_server server;
    redis::store store(config_for(server.port()));
    block_arena gpu(2, item_bytes), cpu(2, item_bytes);
    redis::engine engine(gpu, cpu, store);
    const std::vector<std::uint64_t> keys = {500, 501, 502, 503};
    write_pattern(gpu.block(block_id{0}), keys[0]);
    write_pattern(gpu.block(block_id{1}), keys[3]);
    write_pattern(cpu.block(block_id{0}), 7777);  // moves to GPU slot 0 once gpu 0 is queued for the store
    write_pattern(cpu.block(block_id{1}), keys[1]);
    std::vector<transfer_status> status(3);
    // keys[3] in the store first, for the fetch below.
    REQUIRE(engine.execute(std::vector<block_transfer>{{tier::gpu, block_id{1}, tier::remote, block_id{3}}}, keys,
                           std::span(status).first(1)) == 1);
    const std::vector<block_transfer> plan = {
        {tier::gpu, block_id{0}, tier::remote, block_id{0}},  // write back GPU 0 as keys[0]
        {tier::cpu, block_id{0}, tier::gpu, block_id{0}},     // then GPU 0 is overwritten by a local copy
        {tier::cpu, block_id{1}, tier::remote, block_id{1}},  // write back CPU 1 as keys[1]
        {tier::remote, block_id{3}, tier::cpu, block_id{1}},  // then CPU 1 is filled by a fetch
    };
    status.assign(plan.size(), transfer_status::failed);
    REQUIRE(engine.execute(plan, keys, status) == plan.size());
    REQUIRE(engine.round_trips() == 2);  // one for keys[3], one for the whole plan
    REQUIRE(engine.spilled_values() == 2);
    REQUIRE(has_pattern(gpu.block(block_id{0}), 7777));
    REQUIRE(has_pattern(cpu.block(block_id{1}), keys[3]));
    // The store holds what the slots had when the write-backs were queued.
    const std::vector<block_transfer> back = {{tier::remote, block_id{0}, tier::cpu, block_id{0}},
                                              {tier::remote, block_id{1}, tier::cpu, block_id{1}}};
    status.assign(back.size(), transfer_status::failed);
    REQUIRE(engine.execute(back, keys, status) == back.size());
    REQUIRE(has_pattern(cpu.block(block_id{0}), keys[0]));
    REQUIRE(has_pattern(cpu.block(block_id{1}), keys[1]));
}

TEST_CASE("redis engine: values read in place in many pieces, amid missing and wrong-length values in one batch",
          "[redis]") {
    redis_server server;
    // An item size past many socket reads and not a multiple of the checksum's 32-byte stripe.
    const std::size_t big = (std::size_t{3} << 20) + 20;
    redis::store_config c = config_for(server.port());
    c.ns.item_bytes = static_cast<std::uint32_t>(big);
    c.io_timeout = std::chrono::milliseconds(5000);
    redis::store store(c);
    const std::uint32_t n = 4;
    block_arena gpu(n, big), cpu(2 * n, big);
    redis::engine engine(gpu, cpu, store);
    std::vector<std::uint64_t> keys;
    std::vector<block_transfer> ops;
    for (std::uint32_t i = 0; i < n; ++i) {
        keys.push_back(2000 + i);
        write_pattern(gpu.block(block_id{i}), keys.back());
        ops.push_back({tier::gpu, block_id{i}, tier::remote, block_id{i}});
    }
    std::vector<transfer_status> status(n);
    REQUIRE(engine.execute(ops, keys, status) == n);
    // Behind the engine: key 2001 holds a short value, key 2002 a value one byte too long.
    server.call({"SET", c.ns.key(2001), "short"});
    server.call({"APPEND", c.ns.key(2002), "x"});
    keys.push_back(2999);  // never written: nil
    // Fetch: 2000 (ok), 2001 (refused), 2999 (missing), 2002 (refused), 2003 (ok), 2000 again (ok).
    const std::vector<std::uint32_t> order = {0, 1, 4, 2, 3, 0};
    ops.clear();
    for (std::uint32_t j = 0; j < order.size(); ++j)
        ops.push_back({tier::remote, block_id{order[j]}, tier::cpu, block_id{j}});
    status.assign(ops.size(), transfer_status::done);
    const std::size_t rejected_before = engine.rejected_values();
    REQUIRE(engine.execute(ops, keys, status) == 3);
    REQUIRE(engine.rejected_values() - rejected_before == 2);
    const std::vector<transfer_status> expect = {transfer_status::done,   transfer_status::failed,
                                                 transfer_status::failed, transfer_status::failed,
                                                 transfer_status::done,   transfer_status::done};
    REQUIRE(status == expect);
    for (std::uint32_t j = 0; j < order.size(); ++j) {
        const auto slot = cpu.block(block_id{j});
        if (status[j] == transfer_status::done)
            REQUIRE(has_pattern(slot, keys[order[j]]));
        else
            REQUIRE(std::all_of(slot.begin(), slot.end(), [](std::byte b) { return b == std::byte{0xee}; }));
    }
}

TEST_CASE("redis: two processes share one server: a prefix one computed is a remote hit for the other", "[redis]") {
    redis_server server;
    const std::vector<block_hash> doc = chain(1, 4);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // instance A, in its own process
        int code = 1;
        try {
            redis::store store(config_for(server.port()));
            instance a(remote_config(4, 2), store);
            a.step(store, {{session_id{1}, doc}});
            bool clean = true;
            for (std::uint64_t d : {2, 3})
                clean = clean && a.step(store, {{session_id{d}, chain(d, 4)}}).report.clean();
            code = clean && a.check_bytes().empty() ? 0 : 2;
        } catch (...) {
            code = 3;
        }
        ::_exit(code);
    }
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::waitpid(child, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(child, SIGKILL);
        ::waitpid(child, &st, 0);
        FAIL("instance A did not finish within 60 s");
    }
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);

    redis::store store(config_for(server.port()));
    instance b(remote_config(4, 4), store);
    b.cache.begin_step();
    const remote_admission ra = admit_through(b.cache, store, session_id{9}, doc);
    REQUIRE(ra.remote_blocks == 4);
    REQUIRE(ra.local.computed_blocks == 0);
    const swap_plan& plan = b.cache.end_step();
    std::vector<transfer_status> status;
    REQUIRE(execute_plan(plan, b.engine, status) == 0);
    REQUIRE(b.engine.round_trips() == 1);
    const transfer_report r = b.cache.complete_transfers(plan, status);
    REQUIRE(r.clean());
    for (block_hash h : doc) REQUIRE(has_pattern(b.gpu.block(*b.cache.gpu().cached_block(h)), h));
    check_after(b, r);
}

TEST_CASE("redis: a step's lookups in one batch (present_prefixes) answer as one present_prefix per request",
          "[redis]") {
    redis_server server;
    redis::store store(config_for(server.port()));
    std::mt19937_64 rng(5);
    std::vector<std::vector<std::uint64_t>> lists(40);
    for (auto& keys : lists) {
        keys.resize(rng() % 30);  // empty lists too
        for (auto& k : keys) k = rng() % 200;
    }
    for (std::uint64_t k = 0; k < 200; ++k)
        if (rng() % 4 != 0) server.call({"SET", store.config().ns.key(k), "v"});
    std::vector<std::span<const std::uint64_t>> spans(lists.begin(), lists.end());
    std::vector<std::size_t> together(lists.size(), 999);
    int batches = 0;
    store.after_send = [&] { ++batches; };
    store.present_prefixes(spans, together);
    REQUIRE(batches == 1);  // one round trip for all of them
    for (std::size_t i = 0; i < lists.size(); ++i) {
        CAPTURE(i);
        REQUIRE(together[i] == store.present_prefix(lists[i]));
    }
    const auto asked = 1 + std::count_if(lists.begin(), lists.end(), [](const auto& k) { return !k.empty(); });
    REQUIRE(batches == asked);  // one per non-empty list, one by one (an empty one sends nothing)
    std::vector<std::size_t> too_short(lists.size() - 1);
    REQUIRE_THROWS_WITH(store.present_prefixes(spans, too_short), Catch::Contains("give one per list"));
    REQUIRE(batches == asked);  // nothing sent

    // Through a cache: a step of two requests, one of a published document, asked together.
    redis::store store_a(config_for(server.port()));
    instance a(remote_config(4, 2), store_a);
    const std::vector<block_hash> doc = chain(1, 4);
    publish(a, store_a, doc, 2);
    instance b(remote_config(8, 8), store);
    const std::vector<block_hash> other = chain(77, 3);
    const std::vector<step_request> step = {{session_id{9}, doc}, {session_id{10}, other}};
    b.cache.begin_step();
    batches = 0;
    const std::vector<remote_admission> r = admit_all_through(b.cache, store, step);
    REQUIRE(batches == 1);
    REQUIRE(r[0].remote_blocks == 4);
    REQUIRE(r[1].remote_blocks == 0);
    REQUIRE(r[1].local.computed_blocks == 3);
    const swap_plan& plan = b.cache.end_step();
    std::vector<transfer_status> status;
    REQUIRE(execute_plan(plan, b.engine, status) == 0);
    const transfer_report report = b.cache.complete_transfers(plan, status);
    REQUIRE(report.clean());
    for (block_hash h : doc) REQUIRE(has_pattern(b.gpu.block(*b.cache.gpu().cached_block(h)), h));
    store.after_send = nullptr;
}

TEST_CASE("redis faults: every affected op fails, every affected block is recomputed, no wrong bytes",
          "[redis][faults]") {
    redis_server server({"--maxmemory-policy", "allkeys-lru"});
    redis::store store_a(config_for(server.port()));
    instance a(remote_config(4, 2), store_a);
    const std::vector<block_hash> doc = chain(1, 4);
    publish(a, store_a, doc, 2);
    redis::store store(config_for(server.port()));
    instance b(remote_config(4, 4), store);

    // B stages doc from the store; `fault` strikes between the lookup and
    // the plan's run; returns the report.
    auto staged_step = [&](auto fault) {
        b.cache.begin_step();
        const remote_admission ra = admit_through(b.cache, store, session_id{9}, doc);
        REQUIRE(ra.remote_blocks == 4);
        const swap_plan& plan = b.cache.end_step();
        fault();
        std::vector<transfer_status> status;
        execute_plan(plan, b.engine, status);
        for (std::size_t i = 0; i < plan.transfers.size(); ++i)
            if (plan.transfers[i].from == tier::remote && status[i] == transfer_status::done)
                REQUIRE(
                    has_pattern(b.cpu.block(plan.transfers[i].dst), plan.remote_keys[plan.transfers[i].src.index()]));
        transfer_report r = b.cache.complete_transfers(plan, status);
        check_after(b, r);
        b.cache.free_session(session_id{9}, /*forget_blocks=*/true);
        return r;
    };
    auto recomputed = [](const transfer_report& r) {
        std::set<std::uint64_t> s;
        for (const recompute_item& x : r.recompute) s.insert(x.key);
        return s;
    };

    SECTION("a value corrupted behind the cache's back") {
        const transfer_report r = staged_step([&] {
            server.call({"SETRANGE", store.config().ns.key(doc[2]), "100", "X"});
        });
        REQUIRE(b.engine.rejected_values() == 1);
        REQUIRE(recomputed(r) == std::set<std::uint64_t>{doc[2]});
        REQUIRE(r.drops.empty());
    }
    SECTION("a value the store evicted (maxmemory) after the lookup") {
        const transfer_report r = staged_step([&] {
            server.call({"CONFIG", "SET", "maxmemory", "2mb"});
            const std::string junk(64 << 10, 'j');
            for (int i = 0; i < 200; ++i) server.call({"SET", "junk:" + std::to_string(i), junk});
        });
        // Some of doc's values were evicted by the store's own policy; those
        // fetches failed and were recomputed, the rest arrived intact.
        REQUIRE(!r.recompute.empty());
        REQUIRE(r.failed == 2 * r.recompute.size());  // each failed fetch and the swap-in that read it
    }
    SECTION("the server killed in the middle of the batch, then restarted empty") {
        // Paused before the batch is sent, killed once it is: the server
        // never answers any of it (killed unpaused, it might have answered
        // a small batch already).
        const transfer_report r = staged_step([&] {
            server.pause();
            store.after_send = [&] { server.kill(); };
        });
        store.after_send = nullptr;
        REQUIRE(recomputed(r) == std::set<std::uint64_t>(doc.begin(), doc.end()));
        server.start();
        // The restarted store is empty: a lookup finds nothing, the blocks
        // are computed, and write-backs work again through a new connection.
        b.cache.begin_step();
        const remote_admission ra = admit_through(b.cache, store, session_id{10}, doc);
        REQUIRE(ra.remote_blocks == 0);
        REQUIRE(ra.local.computed_blocks == 4);
        (void)b.cache.end_step();
        b.cache.free_session(session_id{10});
        std::set<std::uint64_t> written;
        for (std::uint64_t d : {20, 21}) {
            const auto s = b.step(store, {{session_id{d}, chain(d, 4)}}, &written);
            REQUIRE(s.report.clean());
        }
        REQUIRE(!written.empty());
        REQUIRE(store.present_prefix(std::vector<std::uint64_t>(written.begin(), std::next(written.begin()))) == 1);
    }
    SECTION("the server paused (SIGSTOP) past the I/O timeout, then resumed") {
        const transfer_report r = staged_step([&] { server.pause(); });
        server.resume();
        REQUIRE(recomputed(r) == std::set<std::uint64_t>(doc.begin(), doc.end()));
        // Resumed: the next batch reconnects (the old connection's late
        // replies are never read) and finds doc.
        staged_step([] {});
        REQUIRE(b.cache.check_invariants().empty());
    }
}

TEST_CASE("redis cluster: keys sharded over 3 masters, MOVED followed, a killed node's ops fail and are recomputed",
          "[redis][cluster]") {
    redis_cluster cluster;
    redis::store_config c = config_for(cluster.node(0).port());
    c.cluster = true;
    redis::store store_a(c);
    REQUIRE(store_a.node_count() == 3);
    instance a(remote_config(8, 2), store_a);
    const std::vector<block_hash> doc = chain(1, 8);
    publish(a, store_a, doc, 2);
    std::size_t nodes_with_keys = 0;
    for (std::size_t i = 0; i < 3; ++i) nodes_with_keys += cluster.node(i).call({"DBSIZE"}) != "0" ? 1 : 0;
    REQUIRE(nodes_with_keys >= 2);

    redis::store store(c);
    instance b(remote_config(8, 8), store);
    SECTION("a stale slot map: every command sent to node 0, MOVED redirects followed") {
        store.point_all_slots_at_first_node_for_testing();
        b.cache.begin_step();
        REQUIRE(admit_through(b.cache, store, session_id{9}, doc).remote_blocks == 8);
        REQUIRE(store.redirects() > 0);
        const swap_plan& plan = b.cache.end_step();
        std::vector<transfer_status> status;
        REQUIRE(execute_plan(plan, b.engine, status) == 0);
        const transfer_report r = b.cache.complete_transfers(plan, status);
        REQUIRE(r.clean());
        check_after(b, r);
    }
    SECTION("a node killed after the lookup") {
        b.cache.begin_step();
        REQUIRE(admit_through(b.cache, store, session_id{9}, doc).remote_blocks == 8);
        const swap_plan& plan = b.cache.end_step();
        // Kill the master of doc's first block; exactly the fetches of the
        // keys it serves fail (a node answers EXISTS for its own keys only,
        // MOVED for the others).
        std::size_t victim = 0;
        while (victim < 3 && cluster.node(victim).call({"EXISTS", c.ns.key(doc[0])}) != "1") ++victim;
        REQUIRE(victim < 3);
        std::size_t on_victim = 0;
        for (block_hash h : doc) on_victim += cluster.node(victim).call({"EXISTS", c.ns.key(h)}) == "1" ? 1 : 0;
        cluster.node(victim).kill();
        std::vector<transfer_status> status;
        const std::size_t failed = execute_plan(plan, b.engine, status);
        REQUIRE(failed == on_victim);
        const transfer_report r = b.cache.complete_transfers(plan, status);
        REQUIRE(r.recompute.size() == failed);
        check_after(b, r);
    }
}
