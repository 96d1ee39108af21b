// Replay throughput of kvpolicy-sim's flat mode against the way such replays
// are usually hand-written (std::ifstream + std::getline, std::unordered_map +
// std::list LRU), on the same CSV in the same run, whole process against
// whole process: the user's command (`kvpolicy-sim --trace CSV --policy lru
// --capacity C --output json`, exec'd as it is installed) against this
// program re-exec'd to run the hand-written replay alone. Each figure is the
// process's CPU time (user + system, from wait4: start-up, reading, replay,
// output, exit), not wall time: on a shared machine a waiting process would
// otherwise look slow; the replay is single-threaded, so CPU time is the
// time it would take on an idle core. Below that, the library alone in a
// forked child: the same map + list fed by kvpolicy's CSV reader (which
// isolates the cache structure) and replay_flat<lru>; plus each one's peak
// RSS and, given a JSONL, the Mooncake JSONL parser against the CSV parser.
//
//   scripts/mooncake-to-csv.py ../shared/traces/agentic/agentic_mix.jsonl.gz build/agentic_blocks.csv
//   build/release/bench/sim_replay_bench build/agentic_blocks.csv 10000,100000 [TRACE.jsonl[.gz]] [REPEATS]
//
// kvpolicy-sim is the one built beside this bench (KVPOLICY_SIM_PATH), or
// the one named by the environment variable KVPOLICY_SIM.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

// A program run as its own process (argv[0] a path): its CPU time, peak
// RSS and standard output. Exits the bench if it cannot start or fails.
struct process_outcome {
    double cpu_seconds = 0;
    long peak_rss_kib = 0;
    std::string out;
};

process_outcome run_process(const std::vector<std::string>& args) {
    int fd[2];
    if (pipe(fd) != 0) std::abort();
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDOUT_FILENO);
        close(fd[1]);
        execv(argv[0], argv.data());
        std::fprintf(stderr, "sim_replay_bench: cannot run %s\n", argv[0]);
        _exit(127);
    }
    close(fd[1]);
    process_outcome o;
    char buf[4096];
    for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) o.out.append(buf, static_cast<std::size_t>(n));
    close(fd[0]);
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "sim_replay_bench: %s failed (status %d)\n", argv[0], status);
        std::exit(1);
    }
    o.peak_rss_kib = usage.ru_maxrss;
    o.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    return o;
}

// The number after `"key": ` in a JSON line, or ~0 if there is none.
std::uint64_t json_field(const std::string& line, const std::string& key) {
    const auto at = line.find("\"" + key + "\": ");
    std::uint64_t v = ~std::uint64_t{0};
    if (at != std::string::npos) {
        const char* p = line.data() + at + key.size() + 4;
        std::from_chars(p, line.data() + line.size(), v);
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::string(argv[1]) == "--handwritten") {  // this program re-exec'd: the baseline alone
        const outcome o = handwritten_lru(argv[2], std::strtoull(argv[3], nullptr, 10));
        std::printf("{\"accesses\": %llu, \"misses\": %llu}\n", static_cast<unsigned long long>(o.accesses),
                    static_cast<unsigned long long>(o.misses));
        return 0;
    }
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s BLOCKS.csv CAPACITY[,CAPACITY...] [TRACE.jsonl[.gz]] [REPEATS]\n", argv[0]);
        return 2;
    }
    const std::string csv = argv[1];
    std::vector<std::size_t> capacities;
    for (const char* p = argv[2]; *p != '\0';) {
        char* end = nullptr;
        capacities.push_back(std::strtoull(p, &end, 10));
        if (end == p || capacities.back() == 0) {
            std::fprintf(stderr, "sim_replay_bench: capacities '%s': give block counts, comma-separated\n", argv[2]);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
    }
    const std::string jsonl = argc > 3 ? argv[3] : "";
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
    const char* sim_env = std::getenv("KVPOLICY_SIM");
#ifdef KVPOLICY_SIM_PATH
    const std::string sim = sim_env != nullptr ? sim_env : KVPOLICY_SIM_PATH;
#else
    if (sim_env == nullptr) {
        std::fprintf(stderr, "sim_replay_bench: set KVPOLICY_SIM to the kvpolicy-sim binary\n");
        return 2;
    }
    const std::string sim = sim_env;
#endif
    char self[4096];
    const ssize_t self_len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (self_len <= 0) {
        std::fprintf(stderr, "sim_replay_bench: cannot find its own binary in /proc/self/exe\n");
        return 2;
    }
    self[self_len] = '\0';
    try {
        outcome best_ours;
        for (const std::size_t capacity : capacities) {
            const std::string cap = std::to_string(capacity);
            process_outcome best_hand, best_sim;
            outcome best_base;
            best_ours = {};
            std::uint64_t accesses = 0, misses = 0;
            for (int i = 0; i < repeats; ++i) {  // best of N: the machine is shared
                const process_outcome h = run_process({self, "--handwritten", csv, cap});
                const process_outcome k =
                    run_process({sim, "--trace", csv, "--policy", "lru", "--capacity", cap, "--output", "json"});
                const outcome b = in_child([&] { return baseline_lru(csv, capacity); });
                const outcome l = in_child([&] { return kvpolicy_lru(csv, capacity); });
                const std::uint64_t hm = json_field(h.out, "misses"), km = json_field(k.out, "misses");
                const bool one_row = std::count(k.out.begin(), k.out.end(), '\n') == 1;
                if (!one_row || hm != km || b.misses != km || l.misses != km) {
                    std::fprintf(stderr,
                                 "disagreement at capacity %zu: hand-written %llu misses, kvpolicy-sim %llu (%s), "
                                 "reader + map %llu, replay_flat %llu\n",
                                 capacity, static_cast<unsigned long long>(hm), static_cast<unsigned long long>(km),
                                 one_row ? "one row" : "not one JSON row", static_cast<unsigned long long>(b.misses),
                                 static_cast<unsigned long long>(l.misses));
                    return 1;
                }
                accesses = json_field(h.out, "accesses");
                misses = km;
                if (i == 0 || h.cpu_seconds < best_hand.cpu_seconds) best_hand = h;
                if (i == 0 || k.cpu_seconds < best_sim.cpu_seconds) best_sim = k;
                if (i == 0 || b.cpu_seconds < best_base.cpu_seconds) best_base = b;
                if (i == 0 || l.cpu_seconds < best_ours.cpu_seconds) best_ours = l;
            }
            const auto rate = [&](double seconds) { return static_cast<double>(accesses) / seconds; };
            std::printf("flat LRU replay of %s, capacity %zu, %llu accesses, %llu misses (best of %d, CPU time)\n",
                        csv.c_str(), capacity, static_cast<unsigned long long>(accesses),
                        static_cast<unsigned long long>(misses), repeats);
            std::printf("  %-48s %10s %14s %10s\n", "replay", "CPU s", "accesses/s", "peak RSS");
            std::printf("  %-48s %10.3f %14.3e %7ld MiB\n", "process: hand-written, getline, map + list",
                        best_hand.cpu_seconds, rate(best_hand.cpu_seconds), best_hand.peak_rss_kib / 1024);
            std::printf("  %-48s %10.3f %14.3e %7ld MiB\n", "process: kvpolicy-sim --policy lru --output json",
                        best_sim.cpu_seconds, rate(best_sim.cpu_seconds), best_sim.peak_rss_kib / 1024);
            std::printf("  %-48s %10.3f %14.3e %7ld MiB\n", "library: kvpolicy's reader, map + list",
                        best_base.cpu_seconds, rate(best_base.cpu_seconds), best_base.peak_rss_kib / 1024);
            std::printf("  %-48s %10.3f %14.3e %7ld MiB\n", "library: kvpolicy's reader, replay_flat<lru>",
                        best_ours.cpu_seconds, rate(best_ours.cpu_seconds), best_ours.peak_rss_kib / 1024);
            std::printf(
                "  kvpolicy-sim process vs hand-written process: %.2fx; replay_flat<lru> vs the same reader "
                "with map + list: %.2fx\n",
                best_hand.cpu_seconds / best_sim.cpu_seconds, best_base.cpu_seconds / best_ours.cpu_seconds);
        }
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
            const std::size_t capacity = capacities.back();
            const outcome kj = in_child([&] { return kvpolicy_lru_jsonl(jsonl, capacity); });
            if (kj.misses != best_ours.misses) {
                std::fprintf(stderr, "disagreement: JSONL replay %llu misses, CSV replay %llu\n",
                             static_cast<unsigned long long>(kj.misses),
                             static_cast<unsigned long long>(best_ours.misses));
                return 1;
            }
            const double ours_rate = static_cast<double>(best_ours.accesses) / best_ours.cpu_seconds;
            std::printf("  %-38s %14.3e  (%.2fx the CSV replay at capacity %zu)\n", "replay_flat<lru> from the JSONL",
                        static_cast<double>(kj.accesses) / kj.cpu_seconds,
                        static_cast<double>(kj.accesses) / kj.cpu_seconds / ours_rate, capacity);
        }
    } catch (const kvpolicy::error& e) {
        std::fprintf(stderr, "sim_replay_bench: %s\n", e.what());
        return 2;
    }
    return 0;
}
