// Replay throughput of kvpolicy-sim's flat mode against the way such replays
// are usually hand-written (std::ifstream + std::getline, std::unordered_map +
// std::list LRU), and against the same LRU fed by kvpolicy's own CSV reader
// (which isolates the cache structure), on the same CSV in the same run;
// plus each one's peak RSS (each
// replay runs in a child process so the figures are its own), and the
// Mooncake JSONL parser against the CSV parser. Times are the child's CPU
// time (user + system, from wait4), not wall time: on a shared machine a
// waiting process would otherwise look slow; the replay is single-threaded,
// so CPU time is the time it would take on an idle core.
//
//   scripts/mooncake-to-csv.py ../shared/traces/agentic/agentic_mix.jsonl.gz build/agentic_blocks.csv
//   build/release/bench/sim_replay_bench build/agentic_blocks.csv 100000 ../shared/traces/agentic/agentic_mix.jsonl.gz
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/sim/replay.hpp>

using namespace kvpolicy;

namespace {

struct outcome {
    std::uint64_t accesses = 0;
    std::uint64_t misses = 0;
    double seconds = 0;
    long peak_rss_kib = 0;
    double cpu_seconds = 0;
};

// The LRU such replays usually write: a hash map into a linked list.
class map_list_lru {
public:
    explicit map_list_lru(std::size_t capacity) : capacity_(capacity) { where_.reserve(capacity * 2); }

    void access(std::uint64_t key, outcome& o) {
        ++o.accesses;
        if (auto it = where_.find(key); it != where_.end()) {
            order_.splice(order_.begin(), order_, it->second);
            return;
        }
        ++o.misses;
        if (order_.size() == capacity_) {
            where_.erase(order_.back());
            order_.pop_back();
        }
        order_.push_front(key);
        where_.emplace(key, order_.begin());
    }

private:
    std::size_t capacity_;
    std::list<std::uint64_t> order_;  // front = most recent
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> where_;
};

// The usual hand-written replay: getline, then that LRU.
outcome handwritten_lru(const std::string& csv, std::size_t capacity) {
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);  // header
    map_list_lru lru(capacity);
    outcome o;
    while (std::getline(in, line)) {
        const auto a = line.find(',');
        const auto b = line.find(',', a + 1);
        std::uint64_t key = 0;
        std::from_chars(line.data() + a + 1, line.data() + b, key);
        lru.access(key, o);
    }
    return o;
}

// The same LRU fed by kvpolicy's CSV reader: the difference to kvpolicy-sim
// is then the cache structure alone.
outcome baseline_lru(const std::string& csv, std::size_t capacity) {
    sim::csv_reader src(csv, false);
    map_list_lru lru(capacity);
    outcome o;
    const auto t0 = std::chrono::steady_clock::now();
    for (sim::access_record a; src.next(a);) lru.access(a.obj_id, o);
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
}

outcome kvpolicy_lru(const std::string& csv, std::size_t capacity) {
    sim::csv_reader src(csv, false);
    const sim::replay_result r = sim::replay_flat<lru>(src, capacity, [](std::size_t) { return never; });
    return {r.accesses, r.misses, r.seconds, 0};
}

// The same flat replay from the Mooncake JSONL (each request's hash ids in turn).
outcome kvpolicy_lru_jsonl(const std::string& jsonl, std::size_t capacity) {
    sim::mooncake_reader requests(jsonl, false);
    sim::flattened_requests<sim::mooncake_reader> src(requests);
    const sim::replay_result r = sim::replay_flat<lru>(src, capacity, [](std::size_t) { return never; });
    return {r.accesses, r.misses, r.seconds, 0};
}

// Parsing alone, the way the replay engines read: block ids per second out of each format.
outcome parse_only(const std::string& path, bool jsonl) {
    outcome o;
    const auto t0 = std::chrono::steady_clock::now();
    if (jsonl) {
        sim::mooncake_reader src(path, false);
        sim::request_record r;
        while (src.next(r)) o.accesses += r.hash_ids.size();
    } else {
        sim::csv_reader src(path, false);
        std::vector<sim::access_record> batch(4096);
        for (std::size_t n; (n = src.next_batch(batch)) > 0;) o.accesses += n;
    }
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
}

// Runs `f` in a child; returns its outcome with the child's peak RSS.
template <class F>
outcome in_child(F f) {
    int fd[2];
    if (pipe(fd) != 0) std::abort();
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        const outcome o = f();
        if (write(fd[1], &o, sizeof o) != static_cast<ssize_t>(sizeof o)) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    outcome o;
    if (read(fd[0], &o, sizeof o) != static_cast<ssize_t>(sizeof o)) std::abort();
    close(fd[0]);
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    o.peak_rss_kib = usage.ru_maxrss;
    o.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s BLOCKS.csv CAPACITY [TRACE.jsonl[.gz]] [REPEATS]\n", argv[0]);
        return 2;
    }
    const std::string csv = argv[1];
    const std::size_t capacity = std::strtoull(argv[2], nullptr, 10);
    const std::string jsonl = argc > 3 ? argv[3] : "";
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
    try {
        outcome best_hand, best_base, best_ours;
        for (int i = 0; i < repeats; ++i) {  // best of N: the machine is shared
            const outcome h = in_child([&] { return handwritten_lru(csv, capacity); });
            const outcome b = in_child([&] { return baseline_lru(csv, capacity); });
            const outcome k = in_child([&] { return kvpolicy_lru(csv, capacity); });
            if (b.misses != k.misses || h.misses != k.misses) {
                std::fprintf(stderr, "disagreement: baseline %llu misses, kvpolicy %llu\n",
                             static_cast<unsigned long long>(b.misses), static_cast<unsigned long long>(k.misses));
                return 1;
            }
            if (i == 0 || h.cpu_seconds < best_hand.cpu_seconds) best_hand = h;
            if (i == 0 || b.cpu_seconds < best_base.cpu_seconds) best_base = b;
            if (i == 0 || k.cpu_seconds < best_ours.cpu_seconds) best_ours = k;
        }
        const double hand_rate = static_cast<double>(best_hand.accesses) / best_hand.cpu_seconds;
        const double base_rate = static_cast<double>(best_base.accesses) / best_base.cpu_seconds;
        const double ours_rate = static_cast<double>(best_ours.accesses) / best_ours.cpu_seconds;
        std::printf("flat LRU replay of %s, capacity %zu, %llu accesses, %llu misses (best of %d)\n", csv.c_str(),
                    capacity, static_cast<unsigned long long>(best_ours.accesses),
                    static_cast<unsigned long long>(best_ours.misses), repeats);
        std::printf("  %-38s %10s %14s %10s\n", "replay", "CPU s", "accesses/s", "peak RSS");
        std::printf("  %-38s %10.3f %14.3e %7ld MiB\n", "hand-written: getline, map + list", best_hand.cpu_seconds,
                    hand_rate, best_hand.peak_rss_kib / 1024);
        std::printf("  %-38s %10.3f %14.3e %7ld MiB\n", "kvpolicy reader, map + list", best_base.cpu_seconds,
                    base_rate, best_base.peak_rss_kib / 1024);
        std::printf("  %-38s %10.3f %14.3e %7ld MiB\n", "kvpolicy-sim flat lru", best_ours.cpu_seconds, ours_rate,
                    best_ours.peak_rss_kib / 1024);
        std::printf("  kvpolicy-sim vs hand-written: %.2fx; vs the same reader with map + list: %.2fx\n",
                    ours_rate / hand_rate, ours_rate / base_rate);
        if (!jsonl.empty()) {
            // Best of N as well: a first read after another program may find
            // the file out of the page cache.
            outcome pc, pj;
            for (int i = 0; i < repeats; ++i) {
                const outcome c = in_child([&] { return parse_only(csv, false); });
                const outcome j = in_child([&] { return parse_only(jsonl, true); });
                if (i == 0 || c.cpu_seconds < pc.cpu_seconds) pc = c;
                if (i == 0 || j.cpu_seconds < pj.cpu_seconds) pj = j;
            }
            std::printf("parsing alone (block ids per second):\n");
            const double csv_rate = static_cast<double>(pc.accesses) / pc.cpu_seconds;
            const double jsonl_rate = static_cast<double>(pj.accesses) / pj.cpu_seconds;
            std::printf("  %-38s %14.3e\n", "CSV rows", csv_rate);
            const bool gz = jsonl.size() > 3 && jsonl.substr(jsonl.size() - 3) == ".gz";
            std::printf("  %-38s %14.3e  (%.2fx the CSV)\n",
                        gz ? "Mooncake JSONL hash ids (gzip)" : "Mooncake JSONL hash ids (plain)", jsonl_rate,
                        jsonl_rate / csv_rate);
            const outcome kj = in_child([&] { return kvpolicy_lru_jsonl(jsonl, capacity); });
            if (kj.misses != best_ours.misses) {
                std::fprintf(stderr, "disagreement: JSONL replay %llu misses, CSV replay %llu\n",
                             static_cast<unsigned long long>(kj.misses), static_cast<unsigned long long>(best_ours.misses));
                return 1;
            }
            std::printf("  %-38s %14.3e  (%.2fx the CSV replay)\n", "kvpolicy-sim flat lru from the JSONL",
                        static_cast<double>(kj.accesses) / kj.cpu_seconds,
                        static_cast<double>(kj.accesses) / kj.cpu_seconds / ours_rate);
        }
    } catch (const kvpolicy::error& e) {
        std::fprintf(stderr, "sim_replay_bench: %s\n", e.what());
        return 2;
    }
    return 0;
}
