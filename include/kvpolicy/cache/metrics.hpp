// What the cache counts, and its Prometheus text exposition.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <sstream>
#include <string>

namespace kvpolicy {

/// Latencies in power-of-two nanosecond buckets: bucket i counts samples in
/// [2^(i-1), 2^i) ns (bucket 0: under 1 ns), the last one everything above.
struct latency_histogram {
    static constexpr std::size_t buckets = 40;
    std::array<std::uint64_t, buckets> counts{};
    std::uint64_t total_ns = 0;
    std::uint64_t samples = 0;

    void record(std::uint64_t ns) noexcept {
        const std::size_t i = std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(ns)), buckets - 1);
        ++counts[i];
        total_ns += ns;
        ++samples;
    }
    /// Upper bound of bucket i, in seconds.
    [[nodiscard]] static double upper_seconds(std::size_t i) noexcept {
        return static_cast<double>(std::uint64_t{1} << i) * 1e-9;
    }
};

struct tier_metrics {
    std::uint64_t hit_blocks = 0;  ///< blocks of admitted prefixes found here
    std::uint64_t hit_tokens = 0;
    std::uint64_t evictions = 0;  ///< items this tier's policy chose as victims
    std::size_t capacity = 0;     ///< items
    std::size_t used = 0;         ///< items not free
};

struct cache_metrics {
    tier_metrics gpu;
    tier_metrics cpu;
    std::uint64_t requests = 0;       ///< admissions
    std::uint64_t lookup_blocks = 0;  ///< blocks asked for
    std::uint64_t miss_blocks = 0;    ///< blocks to compute
    std::uint64_t miss_tokens = 0;
    std::uint64_t swap_in_items = 0;
    std::uint64_t swap_in_bytes = 0;
    std::uint64_t swap_out_items = 0;
    std::uint64_t swap_out_bytes = 0;
    std::uint64_t dropped_items = 0;      ///< by eviction from a full CPU tier or by a failed copy
    std::uint64_t failed_transfers = 0;   ///< copies reported failed (or reading a failed copy's output)
    std::uint64_t recompute_items = 0;    ///< held items a failed swap-in left without data
    std::uint64_t dropped_tokens = 0;     ///< from the recovery plans
    std::uint64_t recomputed_blocks = 0;  ///< misses on blocks the cache had dropped
    std::uint64_t recomputed_tokens = 0;
    std::uint64_t remote_staged_blocks = 0;  ///< blocks the remote store held, staged into the CPU tier
                                             ///< (admit then counts them as CPU hits too)
    std::uint64_t remote_write_backs = 0;    ///< items planned to be written back to the remote store
    double re_prefill_rate = 0;              ///< sessions that came back after losing KV / sessions that lost KV
    double fairness = 1;                     ///< Jain's index over sessions' hit rates (1 = all equal)
    latency_histogram eviction_latency;      ///< per admission that had to evict

    /// Prometheus text format (version 0.0.4), conventional names.
    [[nodiscard]] std::string to_prometheus(const std::string& prefix = "kvpolicy") const {
        std::ostringstream o;
        auto family = [&](const char* name, const char* type, const char* help) {
            o << "# HELP " << prefix << '_' << name << ' ' << help << '\n'
              << "# TYPE " << prefix << '_' << name << ' ' << type << '\n';
        };
        auto sample = [&](const char* name, const std::string& labels, auto value) {
            o << prefix << '_' << name << (labels.empty() ? "" : "{" + labels + "}") << ' ' << value << '\n';
        };
        family("hit_blocks_total", "counter", "Blocks of admitted prefixes found in a tier.");
        sample("hit_blocks_total", "tier=\"gpu\"", gpu.hit_blocks);
        sample("hit_blocks_total", "tier=\"cpu\"", cpu.hit_blocks);
        family("hit_tokens_total", "counter", "Tokens of admitted prefixes found in a tier.");
        sample("hit_tokens_total", "tier=\"gpu\"", gpu.hit_tokens);
        sample("hit_tokens_total", "tier=\"cpu\"", cpu.hit_tokens);
        family("miss_blocks_total", "counter", "Blocks that had to be computed.");
        sample("miss_blocks_total", "", miss_blocks);
        family("miss_tokens_total", "counter", "Tokens that had to be computed.");
        sample("miss_tokens_total", "", miss_tokens);
        family("requests_total", "counter", "Requests admitted.");
        sample("requests_total", "", requests);
        family("evictions_total", "counter", "Items chosen as victims by a tier's policy.");
        sample("evictions_total", "tier=\"gpu\"", gpu.evictions);
        sample("evictions_total", "tier=\"cpu\"", cpu.evictions);
        family("swap_items_total", "counter", "Items copied between tiers.");
        sample("swap_items_total", "direction=\"in\"", swap_in_items);
        sample("swap_items_total", "direction=\"out\"", swap_out_items);
        family("swap_bytes_total", "counter", "Bytes copied between tiers.");
        sample("swap_bytes_total", "direction=\"in\"", swap_in_bytes);
        sample("swap_bytes_total", "direction=\"out\"", swap_out_bytes);
        family("dropped_items_total", "counter", "Items whose KV was dropped.");
        sample("dropped_items_total", "", dropped_items);
        family("failed_transfers_total", "counter", "Copies that failed or read a failed copy's output.");
        sample("failed_transfers_total", "", failed_transfers);
        family("recompute_items_total", "counter", "Held items a failed swap-in left to be recomputed.");
        sample("recompute_items_total", "", recompute_items);
        family("dropped_tokens_total", "counter", "Tokens whose KV was dropped.");
        sample("dropped_tokens_total", "", dropped_tokens);
        family("recomputed_tokens_total", "counter", "Tokens recomputed because the cache had dropped them.");
        sample("recomputed_tokens_total", "", recomputed_tokens);
        family("remote_staged_blocks_total", "counter",
               "Blocks found in the remote store and staged into the CPU tier.");
        sample("remote_staged_blocks_total", "", remote_staged_blocks);
        family("remote_write_backs_total", "counter", "Items planned to be written back to the remote store.");
        sample("remote_write_backs_total", "", remote_write_backs);
        family("occupancy_ratio", "gauge", "Fraction of a tier's items in use.");
        auto ratio = [](const tier_metrics& t) {
            return t.capacity == 0 ? 0.0 : static_cast<double>(t.used) / static_cast<double>(t.capacity);
        };
        sample("occupancy_ratio", "tier=\"gpu\"", ratio(gpu));
        sample("occupancy_ratio", "tier=\"cpu\"", ratio(cpu));
        family("re_prefill_ratio", "gauge", "Sessions that returned after losing KV, over sessions that lost KV.");
        sample("re_prefill_ratio", "", re_prefill_rate);
        family("hit_rate_fairness", "gauge", "Jain's fairness index over sessions' hit rates.");
        sample("hit_rate_fairness", "", fairness);
        family("eviction_latency_seconds", "histogram", "Time to make room for one admission.");
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < latency_histogram::buckets; ++i) {
            cumulative += eviction_latency.counts[i];
            if (eviction_latency.counts[i] == 0 && i + 1 < latency_histogram::buckets) continue;
            std::ostringstream le;
            le << "le=\"" << latency_histogram::upper_seconds(i) << '"';
            sample("eviction_latency_seconds_bucket", le.str(), cumulative);
        }
        sample("eviction_latency_seconds_bucket", "le=\"+Inf\"", eviction_latency.samples);
        sample("eviction_latency_seconds_sum", "", static_cast<double>(eviction_latency.total_ns) * 1e-9);
        sample("eviction_latency_seconds_count", "", eviction_latency.samples);
        return o.str();
    }
};

/// f(name, value) for each counter of `t`, named as its field.
template <class F>
constexpr void for_each_field(const tier_metrics& t, F&& f) {
    f("hit_blocks", t.hit_blocks);
    f("hit_tokens", t.hit_tokens);
    f("evictions", t.evictions);
    f("capacity", t.capacity);
    f("used", t.used);
}

/// f(name, value) for each figure of `m`, named as its field: the tiers as
/// their tier_metrics, the eviction latency as its samples and total
/// (eviction_latency_samples, eviction_latency_total_ns). Python's
/// TieredCache.metrics() is this list, so a field listed here reaches it.
template <class F>
constexpr void for_each_field(const cache_metrics& m, F&& f) {
    f("gpu", m.gpu);
    f("cpu", m.cpu);
    f("requests", m.requests);
    f("lookup_blocks", m.lookup_blocks);
    f("miss_blocks", m.miss_blocks);
    f("miss_tokens", m.miss_tokens);
    f("swap_in_items", m.swap_in_items);
    f("swap_in_bytes", m.swap_in_bytes);
    f("swap_out_items", m.swap_out_items);
    f("swap_out_bytes", m.swap_out_bytes);
    f("dropped_items", m.dropped_items);
    f("failed_transfers", m.failed_transfers);
    f("recompute_items", m.recompute_items);
    f("dropped_tokens", m.dropped_tokens);
    f("recomputed_blocks", m.recomputed_blocks);
    f("recomputed_tokens", m.recomputed_tokens);
    f("remote_staged_blocks", m.remote_staged_blocks);
    f("remote_write_backs", m.remote_write_backs);
    f("re_prefill_rate", m.re_prefill_rate);
    f("fairness", m.fairness);
    f("eviction_latency_samples", m.eviction_latency.samples);
    f("eviction_latency_total_ns", m.eviction_latency.total_ns);
}

}  // namespace kvpolicy
