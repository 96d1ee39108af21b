// The simulator's engines: flat mode against independent naive computations
// and libCacheSim's numbers on the real Mooncake traces; prefix and tiered
// modes on a hand-made trace whose hits are written out.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/registry.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/workload.hpp>

#include "support/hand_made_requests.hpp"

#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

using namespace kvpolicy;
using namespace kvpolicy::sim;

namespace {

const std::string traces = KVPOLICY_TRACES_DIR;

std::vector<std::uint64_t> read_keys(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    std::string line;
    std::getline(in, line);
    std::vector<std::uint64_t> keys;
    while (std::getline(in, line)) {
        const auto a = line.find(','), b = line.find(',', a + 1);
        keys.push_back(std::stoull(line.substr(a + 1, b - a - 1)));
    }
    return keys;
}

// Naive reference computations, each the textbook definition.
std::size_t naive_lru_misses(const std::vector<std::uint64_t>& keys, std::size_t capacity) {
    std::list<std::uint64_t> order;  // front = most recent
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> where;
    std::size_t misses = 0;
    for (std::uint64_t k : keys) {
        if (auto it = where.find(k); it != where.end()) {
            order.splice(order.begin(), order, it->second);
            continue;
        }
        ++misses;
        if (order.size() == capacity) {
            where.erase(order.back());
            order.pop_back();
        }
        order.push_front(k);
        where[k] = order.begin();
    }
    return misses;
}

std::size_t naive_fifo_misses(const std::vector<std::uint64_t>& keys, std::size_t capacity) {
    std::deque<std::uint64_t> queue;
    std::unordered_set<std::uint64_t> in;
    std::size_t misses = 0;
    for (std::uint64_t k : keys) {
        if (in.contains(k)) continue;
        ++misses;
        if (queue.size() == capacity) {
            in.erase(queue.front());
            queue.pop_front();
        }
        queue.push_back(k);
        in.insert(k);
    }
    return misses;
}

// MIN: on a miss with a full cache, evict the resident key used farthest in
// the future (never used again counts as infinitely far).
std::size_t naive_belady_misses(const std::vector<std::uint64_t>& keys, std::size_t capacity) {
    std::vector<std::size_t> next(keys.size());
    std::unordered_map<std::uint64_t, std::size_t> seen;
    for (std::size_t i = keys.size(); i-- > 0;) {
        auto it = seen.find(keys[i]);
        next[i] = it == seen.end() ? SIZE_MAX : it->second;
        seen[keys[i]] = i;
    }
    std::set<std::pair<std::size_t, std::uint64_t>> by_next;  // (next use, key)
    std::unordered_map<std::uint64_t, std::size_t> resident;  // key -> its next use
    std::size_t misses = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::uint64_t k = keys[i];
        if (auto it = resident.find(k); it != resident.end()) {
            by_next.erase({it->second, k});
        } else {
            ++misses;
            if (resident.size() == capacity) {
                const auto far = std::prev(by_next.end());
                resident.erase(far->second);
                by_next.erase(far);
            }
        }
        resident[k] = next[i];
        by_next.insert({next[i], k});
    }
    return misses;
}

replay_result flat_run(const std::string& policy, const std::string& csv, std::size_t capacity) {
    return visit_by_name<eviction_policies>(policy, [&]<class P>() {
        if constexpr (std::is_same_v<P, belady>) {
            oracle_accesses o;
            csv_reader src(csv, false);
            access_record a;
            while (src.next(a)) o.keys.push_back(a.obj_id);
            o.compute_next_use();
            oracle_source os(o);
            return replay_flat<P>(os, capacity, [&](std::size_t i) { return o.next_use[i]; });
        } else if constexpr (std::is_same_v<P, s3fifo>) {
            // libCacheSim 0.3.5's S3FIFO is the newer variant (M fills before
            // the first eviction); kvpolicy's default is the paper's rule.
            csv_reader src(csv, false);
            return replay_flat<P>(src, capacity, [](std::size_t) { return never; },
                                  {.fill_main_before_first_eviction = true});
        } else {
            csv_reader src(csv, false);
            return replay_flat<P>(src, capacity, [](std::size_t) { return never; });
        }
    });
}

}  // namespace

TEST_CASE("flat mode equals naive LRU, FIFO and Belady on synthetic_blocks.csv", "[sim][flat]") {
    const std::string csv = traces + "/mooncake/synthetic_blocks.csv";
    const auto keys = read_keys(csv);
    REQUIRE(keys.size() == 121877);
    for (const std::size_t capacity : {1000u, 10000u}) {
        INFO("capacity " << capacity);
        const auto lru_r = flat_run("lru", csv, capacity);
        REQUIRE(lru_r.accesses == keys.size());
        REQUIRE(lru_r.hits + lru_r.misses == lru_r.accesses);
        REQUIRE(lru_r.misses == naive_lru_misses(keys, capacity));
        REQUIRE(flat_run("fifo", csv, capacity).misses == naive_fifo_misses(keys, capacity));
        REQUIRE(flat_run("belady", csv, capacity).misses == naive_belady_misses(keys, capacity));
    }
}

TEST_CASE("flat mode reads a Mooncake JSONL as the block CSV made from it, in batches or one by one", "[sim][flat]") {
    for (const char* name : {"synthetic", "conversation"}) {
        INFO(name);
        const std::string csv = traces + "/mooncake/" + name + "_blocks.csv";
        const std::string jsonl = traces + "/mooncake/" + name + "_trace.jsonl";
        const auto keys = read_keys(csv);
        {
            mooncake_reader requests(jsonl, false);
            flattened_requests<mooncake_reader> flat(requests);
            std::vector<std::uint64_t> batched;
            std::vector<access_record> batch(97);
            for (std::size_t n; (n = flat.next_batch(batch)) > 0;)
                for (std::size_t i = 0; i < n; ++i) batched.push_back(batch[i].obj_id);
            REQUIRE(batched == keys);
        }
        mooncake_reader requests(jsonl, false);
        flattened_requests<mooncake_reader> flat(requests);
        std::vector<std::uint64_t> one_by_one;
        for (access_record a; flat.next(a);) one_by_one.push_back(a.obj_id);
        REQUIRE(one_by_one == keys);
    }
}

TEST_CASE("flat mode reproduces libCacheSim's miss counts on the Mooncake traces", "[sim][flat][libcachesim]") {
    // tests/data/libcachesim_miss_counts.csv: written by
    // scripts/reference-miss-ratios.py with libCacheSim 0.3.5 (PyPI).
    std::ifstream in(std::string(KVPOLICY_SOURCE_DIR) + "/tests/data/libcachesim_miss_counts.csv");
    REQUIRE(in.good());
    std::string line;
    std::getline(in, line);
    int rows = 0;
    while (std::getline(in, line)) {
        std::stringstream ss(line);
        std::string trace, policy, capacity, accesses, misses;
        std::getline(ss, trace, ',');
        std::getline(ss, policy, ',');
        std::getline(ss, capacity, ',');
        std::getline(ss, accesses, ',');
        std::getline(ss, misses, ',');
        INFO(trace << " " << policy << (policy == "s3fifo" ? " (fill-main variant, as libCacheSim's S3FIFO)" : "")
                   << " " << capacity);
        const replay_result r = flat_run(policy, traces + "/mooncake/" + trace, std::stoull(capacity));
        REQUIRE(r.accesses == std::stoull(accesses));
        REQUIRE(r.misses == std::stoull(misses));  // exact: the miss ratio agrees to every decimal
        ++rows;
    }
    REQUIRE(rows >= 14);
}

using kvpolicy::testing::add_request;

TEST_CASE("prefix mode on a hand-made trace", "[sim][prefix]") {
    // Capacity 4 blocks, LRU; each request is held while served and then
    // released tail first, so its tail becomes the least recent.
    //  r1 [1 2 3]  nothing cached: 0 hits.            LRU order after: 3 2 1 (+1 free)
    //  r2 [1 2 4]  1 2 hit, 4 takes the free slot: 2.  after: 3 4 2 1
    //  r3 [5 6]    victims 3, 4: 0 hits.               after: 2 1 6 5
    //  r4 [1 2 3]  1 2 hit (held), 3 needs a slot: victim 6: 2 hits.
    std::vector<request_record> reqs;
    auto add = [&](std::uint64_t ts, std::vector<std::uint64_t> ids) { add_request(reqs, ts, std::move(ids)); };
    add(0, {1, 2, 3});
    add(1, {1, 2, 4});
    add(2, {5, 6});
    add(3, {1, 2, 3});
    vector_request_source src(reqs);
    request_replay_config cfg{.capacity = 4, .block_size = 16, .trace_name = "hand-made"};
    const replay_result r = replay_requests<lru, lru>(src, cfg, replay_mode::prefix);
    REQUIRE(r.requests == 4);
    REQUIRE(r.accesses == 11);
    REQUIRE(r.hits == 4);
    REQUIRE(r.misses == 7);
    REQUIRE(r.evictions == 3);  // 3, 4, 6
    REQUIRE(r.token_hit_ratio() == Approx(4.0 / 11.0));

    // A request longer than the tier cannot be held at once: served uncached.
    add(5, {10, 11, 12, 13, 14});
    vector_request_source src2(reqs);
    const replay_result r2 = replay_requests<lru, lru>(src2, cfg, replay_mode::prefix);
    REQUIRE(r2.bypassed_requests == 1);
    REQUIRE(r2.hits == 4);
    REQUIRE(r2.misses == 7 + 5);
}

TEST_CASE("prefix mode: blocks cached after the first miss are recomputed but not duplicated", "[sim][prefix]") {
    // Capacity 4, FIFO (which, unlike LRU, can evict a parent before its child).
    //  r1 [1 2 3]  0 hits
    //  r2 [4 5]    one free slot, one victim: 1 (inserted first)
    //  r3 [1 2 3]  1 is gone, so the run is 0 and 1 2 3 are all misses; 2 and 3
    //              are still cached: touched and held, not stored twice; only
    //              1 needs a slot: one victim (4; 2 and 3 are held)
    std::vector<request_record> reqs;
    for (const auto& ids : std::vector<std::vector<std::uint64_t>>{{1, 2, 3}, {4, 5}, {1, 2, 3}}) {
        request_record r;
        r.timestamp_ms = reqs.size();
        r.input_length = ids.size() * 16;
        r.hash_ids = ids;
        reqs.push_back(r);
    }
    vector_request_source src(reqs);
    const replay_result r = replay_requests<fifo, lru>(src, {.capacity = 4, .block_size = 16}, replay_mode::prefix);
    REQUIRE(r.hits == 0);
    REQUIRE(r.misses == 8);
    REQUIRE(r.evictions == 2);  // 1, then 4: a duplicate of 2 or 3 would have needed more
}

TEST_CASE("tiered mode on a hand-made trace", "[sim][tiered]") {
    // support/hand_made_requests.hpp writes out each request's tier traffic.
    const std::vector<request_record> reqs = testing::hand_made_tiered_trace();
    vector_request_source src(reqs);
    request_replay_config cfg{.capacity = 2, .cpu_capacity = 2, .block_size = 16, .trace_name = "hand-made"};
    const replay_result r = replay_requests<lru, lru>(src, cfg, replay_mode::tiered);
    REQUIRE(r.gpu_hits == 0);
    REQUIRE(r.cpu_hits == 3);  // r3: 1 and 2, r5: 3
    REQUIRE(r.hits == 3);
    REQUIRE(r.misses == 9 - 3);
    REQUIRE(r.prefill_seconds_saved > 0);
}

TEST_CASE("remote tier: instances sharing a store hit each other's prefixes, isolated ones do not", "[sim][remote]") {
    // GPU 4, CPU 4 per instance, LRU, exclusive; sessions 0 and 2 go to instance 0, session 1
    // to instance 1.
    //  s0 [A1..A4] on instance 0: computed.
    //  s2 [B1..B4]: A's 4 blocks leave the GPU, sheltered on the CPU.
    //  s2 [C1..C4] (a new request): B's blocks push A's out of the CPU: A is written back.
    //  s1 [A1..A4] on instance 1: 4 remote hits with a shared store, 0 with its own.
    std::vector<request_record> reqs;
    auto add = [&](std::uint64_t session, std::uint64_t doc) {
        request_record r;
        r.timestamp_ms = reqs.size();
        r.session = session;
        r.has_session = true;
        r.input_length = 64;
        for (std::uint64_t b = 1; b <= 4; ++b) r.hash_ids.push_back(doc * 100 + b);
        reqs.push_back(r);
    };
    add(0, 1);
    add(2, 2);
    add(2, 3);
    add(1, 1);
    request_replay_config cfg{.capacity = 4, .cpu_capacity = 4, .block_size = 16, .trace_name = "hand-made"};
    vector_request_source shared_src(reqs);
    const replay_result shared = replay_instances<lru, lru>(shared_src, cfg, 2, 16, true);
    REQUIRE(shared.hits == 4);
    REQUIRE(shared.remote_hits == 4);
    REQUIRE(shared.remote_failed_fetches == 0);
    REQUIRE(shared.misses == 12);
    // Seconds saved, by hand: s1's 4 blocks at positions 0..3 not recomputed,
    // each staged from the store (a network copy) and swapped in from the CPU (a PCIe copy).
    const double pcie_s = cfg.kv_bytes_per_token * 16 / cfg.bandwidth_bytes_per_s;
    const double network_s = cfg.kv_bytes_per_token * 16 / cfg.remote_bandwidth_bytes_per_s;
    double expect = 0;
    for (std::size_t i = 0; i < 4; ++i) expect += cfg.cost.cost(i * 16) - pcie_s - network_s;
    REQUIRE(shared.prefill_seconds_saved == Approx(expect).epsilon(1e-12));
    REQUIRE(shared.prefill_seconds_saved > 0);
    vector_request_source isolated_src(reqs);
    const replay_result isolated = replay_instances<lru, lru>(isolated_src, cfg, 2, 16, false);
    REQUIRE(isolated.hits == 0);
    REQUIRE(isolated.remote_hits == 0);
    REQUIRE(isolated.prefill_seconds_saved == 0);
}

TEST_CASE("remote tier: one instance with an empty store replays exactly as the two-tier cache", "[sim][remote]") {
    // With nothing in the store, every write-back fails (and is the drop it
    // replaced) and every lookup stops at the CPU tier: the same hits.
    const std::vector<request_record> reqs = generate_chat_workload({.sessions = 60});
    for (const std::size_t cpu : {std::size_t{8}, std::size_t{64}}) {
        request_replay_config cfg{.capacity = 512, .cpu_capacity = cpu, .block_size = 16, .trace_name = "built-in"};
        vector_request_source a(reqs), b(reqs);
        const replay_result tiered = replay_requests<lru, lru>(a, cfg, replay_mode::tiered);
        const replay_result remote = replay_instances<lru, lru>(b, cfg, 1, 0, true);
        REQUIRE(remote.hits == tiered.hits);
        REQUIRE(remote.misses == tiered.misses);
        REQUIRE(remote.gpu_hits == tiered.gpu_hits);
        REQUIRE(remote.cpu_hits == tiered.cpu_hits);
        REQUIRE(remote.bypassed_requests == tiered.bypassed_requests);
        REQUIRE(remote.remote_hits == 0);
        REQUIRE(remote.prefill_seconds_saved == Approx(tiered.prefill_seconds_saved).epsilon(1e-9));
        REQUIRE(remote.prefill_seconds_saved > 0);
        REQUIRE(tiered.cpu_hits > 0);  // the swap-ins' cost is in both figures
    }
}

namespace {

// LRU that writes down what each release says (the cache constructs its
// policy itself, so the record is a global the test reads back).
struct release_log_entry {
    std::uint64_t session;
    timestamp now;
    timestamp expected_return;
};
std::vector<release_log_entry> release_log;

class release_logging_lru : public lru {
public:
    static constexpr std::string_view name = "release_logging_lru";
    using lru::lru;
    void on_release(item_id id, const access_context& ctx) {
        release_log.push_back({ctx.session.value, ctx.now, ctx.expected_return});
        lru::on_release(id, ctx);
    }
};

}  // namespace

TEST_CASE("return hints: each session's next request time, checked against a forward scan", "[sim][return_hint]") {
    std::vector<request_record> reqs = generate_chat_workload({.sessions = 80, .block_size = 16, .seed = 5});
    REQUIRE(reqs.size() > 200);
    const std::vector<timestamp> back = compute_expected_returns(reqs, 16);
    REQUIRE(back.size() == reqs.size());
    // The naive model: the replay's clock, then for each request the first
    // later request of the same session.
    std::vector<timestamp> now(reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i)
        now[i] = std::max<timestamp>(i == 0 ? 1 : now[i - 1] + 1, reqs[i].timestamp_ms * 1000);
    std::size_t returning = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        REQUIRE(reqs[i].has_session);
        timestamp want = never;
        for (std::size_t j = i + 1; j < reqs.size(); ++j)
            if (reqs[j].session == reqs[i].session) {
                want = now[j];
                break;
            }
        REQUIRE(back[i] == want);
        returning += want != never;
    }
    REQUIRE(returning > reqs.size() / 2);

    // Off by e^(sigma z): the log ratios to the truth have mean ~0 and sd ~sigma;
    // the same seed gives the same hints, another seed others.
    const std::vector<timestamp> off = compute_expected_returns(reqs, 16, 0.8, 3);
    REQUIRE(off == compute_expected_returns(reqs, 16, 0.8, 3));
    REQUIRE(off != compute_expected_returns(reqs, 16, 0.8, 4));
    double sum = 0, sum2 = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        if (back[i] == never) {
            REQUIRE(off[i] == never);
            continue;
        }
        REQUIRE(off[i] > now[i]);
        const double r = std::log(static_cast<double>(off[i] - now[i]) / static_cast<double>(back[i] - now[i]));
        sum += r;
        sum2 += r * r;
        ++n;
    }
    const double count = static_cast<double>(n);
    const double mean = sum / count, sd = std::sqrt(sum2 / count - mean * mean);
    REQUIRE(std::abs(mean) < 4 * 0.8 / std::sqrt(static_cast<double>(n)));
    REQUIRE(sd == Approx(0.8).epsilon(0.12));

    REQUIRE_THROWS_WITH(compute_expected_returns(reqs, 16, -1.0), Catch::Contains("must be finite and >= 0"));
    REQUIRE_THROWS_AS(compute_expected_returns(reqs, 16, std::nan("")), config_error);
}

TEST_CASE("return hints: sessions derived from prefixes, and the replay's releases carry them", "[sim][return_hint]") {
    // No session ids: r2 extends r1's prefix (r1's session), r3 is another
    // conversation, r4 extends r2.
    std::vector<request_record> reqs;
    auto add = [&](std::uint64_t ts, std::vector<std::uint64_t> ids) { add_request(reqs, ts, std::move(ids)); };
    add(1, {1, 2});
    add(5, {1, 2, 3});
    add(6, {7, 8});
    add(9, {1, 2, 3, 4});
    const std::vector<timestamp> back = compute_expected_returns(reqs, 16);
    REQUIRE(back == std::vector<timestamp>{5000, 9000, never, never});
    REQUIRE(compute_session_ends(reqs, 16) == std::vector<timestamp>{0, 0, never, never});

    release_log.clear();
    vector_request_source src(reqs);
    request_replay_config cfg{.capacity = 16, .block_size = 16, .trace_name = "hand-made", .expected_returns = &back};
    (void)replay_requests<release_logging_lru, lru>(src, cfg, replay_mode::prefix);
    // Every block of a request is released with its request's hint.
    REQUIRE(release_log.size() == 2 + 3 + 2 + 4);
    for (const release_log_entry& e : release_log) {
        const std::size_t i = e.now == 1000 ? 0 : e.now == 5000 ? 1 : e.now == 6000 ? 2 : 3;
        REQUIRE(e.expected_return == back[i]);
    }
    REQUIRE(release_log[0].session == release_log[2].session);  // r1 and r2: one session
    REQUIRE(release_log[5].session != release_log[0].session);  // r3: another

    release_log.clear();
    vector_request_source plain(reqs);
    cfg.expected_returns = nullptr;
    (void)replay_requests<release_logging_lru, lru>(plain, cfg, replay_mode::prefix);
    for (const release_log_entry& e : release_log) REQUIRE(e.expected_return == 0);
}

TEST_CASE("return hints from a file: milliseconds to the next request, never, or none", "[sim][return_hint]") {
    std::vector<request_record> reqs;
    for (std::uint64_t ts : {1, 5, 6, 9}) {
        request_record r;
        r.timestamp_ms = ts;
        r.input_length = 16;
        r.hash_ids = {ts};
        reqs.push_back(r);
    }
    std::istringstream good("4\n\nnever\n 0.5 \r\n");
    REQUIRE(parse_expected_returns(good, "hints.txt", reqs) == std::vector<timestamp>{5000, 0, never, 9500});
    std::istringstream zero("0\n0\n0\n0.0001\n");  // the least hint is one tick ahead
    REQUIRE(parse_expected_returns(zero, "hints.txt", reqs) == std::vector<timestamp>{0, 0, 0, 9001});
    for (const char* bad : {"4\nabc\n\n\n", "4\n-1\n\n\n", "4\n3ms\n\n\n", "4\nnan\n\n\n"}) {
        std::istringstream in(bad);
        REQUIRE_THROWS_WITH(parse_expected_returns(in, "hints.txt", reqs),
                            Catch::StartsWith("hints.txt:2: '") && Catch::Contains("is not a hint"));
    }
    std::istringstream short_file("4\n\n\n");
    REQUIRE_THROWS_WITH(parse_expected_returns(short_file, "hints.txt", reqs),
                        Catch::Contains("3 lines for the trace's 4 requests"));
    std::istringstream long_file("4\n\n\n\n7\n");
    REQUIRE_THROWS_WITH(parse_expected_returns(long_file, "hints.txt", reqs),
                        Catch::Contains("more lines than the trace's 4 requests"));
}
