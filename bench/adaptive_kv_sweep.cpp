// adaptive_kv's accuracy against its cost settings on a trace, in prefix mode
// as kvpolicy-sim replays it (README "Which policy"): for each capacity and
// each setting (sample rate, shadow_items, leader_only), the hit ratio and
// the replay's seconds, and each expert's shadow hit ratio (hits / sampled
// block references, never halved): with --reference, the same figures from
// a run whose shadows see every key at full size, and each shadow's error
// against its full-size run (issue 36: SHARDS sampling of the shadows).
//
//   adaptive_kv_sweep --trace FILE --block-size N --capacity C1,C2,...
//                     [--setting RATE:SHADOW_ITEMS:LEADER_ONLY[:SIGMAS[:GAIN[:GHOSTS]]]]... [--reference]
//
// A setting's fields: the most keys sampled (sample_rate, in (0, 1]), the
// shadow size cap (shadow_items, at every capacity: a setting ignores
// adaptive_kv's smaller shadows above 32,768 items), leader_only 0 or 1, and optionally
// switch_sigmas, switch_gain and the LRFU experts' ghost_factor. Default:
// adaptive_kv's own configuration.
#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/sim/replay.hpp>
#include <kvpolicy/sim/trace.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace kvpolicy;

namespace {

// The setting the next policy is built with, and what its shadows measured.
adaptive_kv::config_type g_config;
std::array<std::uint64_t, adaptive_kv::expert_count> g_shadow_hits{};
std::uint64_t g_shadow_references = 0;
std::uint64_t g_switches = 0;
double g_sample_rate = 0;
std::size_t g_shadow_capacity = 0;

class swept_adaptive_kv : public adaptive_kv {
public:
    static constexpr std::string_view name = "adaptive_kv";
    explicit swept_adaptive_kv(std::size_t capacity) : adaptive_kv(capacity, g_config) {}
    // The cache builds its policy with a default configuration: the swept one instead.
    swept_adaptive_kv(std::size_t capacity, const config_type&) : adaptive_kv(capacity, g_config) {}
    swept_adaptive_kv(swept_adaptive_kv&& o) noexcept : adaptive_kv(std::move(o)) { o.live_ = false; }
    swept_adaptive_kv& operator=(swept_adaptive_kv&& o) noexcept {
        adaptive_kv::operator=(std::move(o));
        live_ = o.live_;
        o.live_ = false;
        return *this;
    }
    swept_adaptive_kv(const swept_adaptive_kv&) = delete;
    swept_adaptive_kv& operator=(const swept_adaptive_kv&) = delete;
    ~swept_adaptive_kv() {
        if (!live_) return;  // moved from
        g_shadow_hits = shadow_total_hits();
        g_shadow_references = shadow_references();
        g_switches = switches();
        g_sample_rate = sample_rate();
        g_shadow_capacity = shadow_capacity();
    }

private:
    bool live_ = true;
};

struct run_figures {
    double hit_ratio = 0;
    double seconds = 0;
    double sampled_share = 0;  // sampled block references / block references
    std::array<double, adaptive_kv::expert_count> shadow{};
    std::uint64_t switches = 0;
    double sample_rate = 0;  // what the policy ran with
    std::size_t shadow_capacity = 0;
};

run_figures run(const std::string& trace, std::uint32_t block_size, std::size_t capacity,
                const adaptive_kv::config_type& c) {
    g_config = c;
    sim::request_replay_config cfg;
    cfg.capacity = capacity;
    cfg.block_size = block_size;
    cfg.trace_name = trace;
    sim::mooncake_reader reader(trace, false);
    const sim::replay_result r =
        sim::replay_requests<swept_adaptive_kv, lru>(reader, cfg, sim::replay_mode::prefix, nullptr);
    run_figures f;
    f.hit_ratio = r.hit_ratio();
    f.seconds = r.seconds;
    f.sampled_share = static_cast<double>(g_shadow_references) / static_cast<double>(r.accesses);
    for (std::size_t i = 0; i < f.shadow.size(); ++i)
        f.shadow[i] = g_shadow_references
                          ? static_cast<double>(g_shadow_hits[i]) / static_cast<double>(g_shadow_references)
                          : 0.0;
    f.switches = g_switches;
    f.sample_rate = g_sample_rate;
    f.shadow_capacity = g_shadow_capacity;
    return f;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string part; std::getline(in, part, sep);) out.push_back(part);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string trace;
    std::uint32_t block_size = 16;
    std::vector<std::size_t> capacities;
    std::vector<adaptive_kv::config_type> settings;
    bool reference = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "adaptive_kv_sweep: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--trace") {
            trace = value();
        } else if (a == "--block-size") {
            block_size = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (a == "--capacity") {
            for (const auto& c : split(value(), ',')) capacities.push_back(std::stoul(c));
        } else if (a == "--setting") {
            const auto f = split(value(), ':');
            if (f.size() < 3 || f.size() > 6) {
                std::fprintf(stderr,
                             "adaptive_kv_sweep: --setting RATE:SHADOW_ITEMS:LEADER_ONLY[:SIGMAS[:GAIN[:GHOSTS]]], "
                             "e.g. 0.05:4096:1\n");
                return 2;
            }
            adaptive_kv::config_type c;
            c.sample_rate = std::stod(f[0]);
            c.shadow_items = std::stoul(f[1]);
            c.large_capacity = std::numeric_limits<std::size_t>::max();  // SHADOW_ITEMS at every capacity
            c.leader_only = f[2] == "1";
            if (f.size() >= 4) c.switch_sigmas = std::stod(f[3]);
            if (f.size() >= 5) c.switch_gain = std::stod(f[4]);
            if (f.size() == 6) {
                std::get<1>(c.experts).ghost_factor = std::stod(f[5]);
                std::get<2>(c.experts).ghost_factor = std::stod(f[5]);
                std::get<3>(c.experts).ghost_factor = std::stod(f[5]);
            }
            settings.push_back(c);
        } else if (a == "--reference") {
            reference = true;
        } else {
            std::fprintf(stderr,
                         "adaptive_kv_sweep: unknown argument '%s'; accepted: --trace FILE, --block-size N, "
                         "--capacity C1,C2, --setting RATE:SHADOW_ITEMS:LEADER_ONLY, --reference\n",
                         a.c_str());
            return 2;
        }
    }
    if (trace.empty() || capacities.empty()) {
        std::fprintf(stderr, "adaptive_kv_sweep: give --trace FILE and --capacity C1,C2,...\n");
        return 2;
    }
    if (settings.empty()) settings.emplace_back();
    std::printf("%-10s %-8s %-8s %-6s %-9s %-8s %-8s %-7s %s\n", "capacity", "rate", "shadow", "leader", "hit_ratio",
                "seconds", "switches", "share",
                "shadow hit ratios (lru lrfu2 lrfu8 lrfu32 superseded session) [error vs full]");
    for (const std::size_t capacity : capacities) {
        std::optional<run_figures> full;
        if (reference) {
            adaptive_kv::config_type c;
            c.sample_rate = 1.0;
            c.shadow_items = capacity;
            c.large_capacity = std::numeric_limits<std::size_t>::max();
            c.leader_only = false;
            full = run(trace, block_size, capacity, c);
            std::printf("%-10zu %-8s %-8zu %-6s %-9.4f %-8.1f %-8llu %-7.4f", capacity, "full", capacity, "0",
                        full->hit_ratio, full->seconds, static_cast<unsigned long long>(full->switches),
                        full->sampled_share);
            for (double h : full->shadow) std::printf(" %.4f", h);
            std::printf("\n");
        }
        for (const auto& c : settings) {
            const run_figures f = run(trace, block_size, capacity, c);
            std::printf("%-10zu %-8.4f %-8zu %-3d%-3g/%-6g %-9.4f %-8.1f %-8llu %-7.4f", capacity, f.sample_rate,
                        f.shadow_capacity, c.leader_only ? 1 : 0, c.switch_sigmas, c.switch_gain, f.hit_ratio,
                        f.seconds, static_cast<unsigned long long>(f.switches), f.sampled_share);
            for (std::size_t i = 0; i < f.shadow.size(); ++i) {
                std::printf(" %.4f", f.shadow[i]);
                if (full) std::printf(" [%+.4f]", f.shadow[i] - full->shadow[i]);
            }
            std::printf("\n");
            std::fflush(stdout);
        }
    }
}
