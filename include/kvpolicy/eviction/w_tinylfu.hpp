// W-TinyLFU: a window LRU in front of a segmented LRU, with admission by a
// TinyLFU frequency sketch (Einziger, Friedman & Manes, "TinyLFU: A Highly
// Efficient Cache Admission Policy", ACM TOS 2017).
//
// New items enter a small LRU window (1% of the capacity). When the window
// is full, its LRU item is the candidate for the main cache, a segmented LRU
// (probation, then protected: 80% of main); the main cache's victim is the
// LRU of probation (of protected if probation is empty). The candidate is
// admitted, and the main victim evicted, only if the sketch estimates the
// candidate strictly more frequent; otherwise the candidate is evicted. A
// probation hit moves to protected, whose overflow drops back to probation.
// The sketch is a count-min sketch (4 rows of 4-bit counters, one row word
// per 16 counters) behind a doorkeeper Bloom filter that absorbs the first
// sighting of a key; after W = 10 x capacity recorded uses every counter is
// halved and the doorkeeper cleared (the paper's reset), so frequencies age.
// Use it where popularity is skewed and stable (shared system prompts, hot
// prefixes): it keeps frequently used blocks against bursts of new ones,
// while the window still catches short bursts of reuse.
//
// Mapping to the protocol: on_insert and on_access record one use in the
// sketch; pop_victim runs the window/main duel. Caffeine and libCacheSim
// record the missed key before the duel; here the key arrives with on_insert,
// after the pop, so a reset that key triggers comes one duel later.
//
// Holds and releases: a held item leaves its segment's list, keeping its
// segment; a hit while held records a use and promotes probation to
// protected as any hit. The segments are recency-ordered (the LRU family of
// concepts.hpp's hold/release rule): a release re-enters at the MRU end of its segment
// but records no use: the request that held the block was counted by
// on_insert / on_access. If the window is below its share the victim comes
// from main without a duel; if main has no evictable item, from the window.
//
// Departures from the paper: counters are bumped in every row (no
// conservative update); the doorkeeper has 8 bits per item and 2 hash
// functions; the sketch has bit_ceil(capacity) counters per row. O(1) per
// operation; about 23 bytes per item, sketch and doorkeeper included.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

/// TinyLFU's approximate frequency histogram: a 4-row count-min sketch of
/// 4-bit counters behind a doorkeeper Bloom filter, reset by halving.
class tinylfu_sketch {
public:
    static constexpr std::size_t rows = 4;
    static constexpr std::uint32_t max_count = 15;  // 4 bits

    tinylfu_sketch() = default;

    /// `capacity` sizes the rows (bit_ceil(capacity) counters, at least 16)
    /// and the doorkeeper (8 bits per item); `sample_size` is W, the recorded
    /// uses between resets.
    tinylfu_sketch(std::size_t capacity, std::uint64_t sample_size)
            : width_(std::bit_ceil(std::max<std::size_t>(capacity, 16))),
              door_bits_(std::bit_ceil(std::max<std::size_t>(8 * capacity, 64))),
              sample_size_(std::max<std::uint64_t>(sample_size, 1)),
              counters_(rows * width_ / 16, 0),
              door_(door_bits_ / 64, 0) {}

    [[nodiscard]] std::size_t width() const noexcept { return width_; }
    [[nodiscard]] std::size_t doorkeeper_bits() const noexcept { return door_bits_; }
    [[nodiscard]] std::uint64_t additions() const noexcept { return additions_; }

    /// Counter of `row` that `key` maps to, in [0, width). Double hashing of
    /// one 64-bit mix; public so tests can model the sketch independently.
    [[nodiscard]] static std::size_t counter_index(std::uint64_t key, std::size_t row, std::size_t width) noexcept {
        const std::uint64_t h = mix64(key);
        const std::uint64_t h1 = h & 0xffffffffULL;
        const std::uint64_t h2 = (h >> 32) | 1;
        return static_cast<std::size_t>((h1 + row * h2) & (width - 1));
    }
    /// The doorkeeper bits (`which` = 0 or 1) of `key`, in [0, bits).
    [[nodiscard]] static std::size_t doorkeeper_index(std::uint64_t key, std::size_t which, std::size_t bits) noexcept {
        const std::uint64_t g = mix64(mix64(key) ^ 0x5bd1e9955bd1e995ULL);
        return static_cast<std::size_t>((which == 0 ? g : g >> 32) & (bits - 1));
    }

    /// One use of `key`: the doorkeeper takes a key's first use in a sample
    /// period, the counters the later ones. Every W uses, counters halve.
    void record(std::uint64_t key) noexcept {
        if (door_contains(key)) {
            for (std::size_t r = 0; r < rows; ++r) {
                const std::size_t n = r * width_ + counter_index(key, r, width_);
                std::uint64_t& word = counters_[n >> 4];
                const unsigned shift = static_cast<unsigned>(n & 15) * 4;
                if (((word >> shift) & 0xf) < max_count) word += std::uint64_t{1} << shift;
            }
        } else {
            for (std::size_t k = 0; k < 2; ++k) {
                const std::size_t b = doorkeeper_index(key, k, door_bits_);
                door_[b >> 6] |= std::uint64_t{1} << (b & 63);
            }
        }
        if (++additions_ >= sample_size_) reset();
    }

    /// Estimated uses of `key` in the current sample period (with aging).
    [[nodiscard]] std::uint32_t estimate(std::uint64_t key) const noexcept {
        std::uint32_t m = max_count;
        for (std::size_t r = 0; r < rows; ++r) {
            const std::size_t n = r * width_ + counter_index(key, r, width_);
            m = std::min(m, static_cast<std::uint32_t>((counters_[n >> 4] >> ((n & 15) * 4)) & 0xf));
        }
        return m + (door_contains(key) ? 1u : 0u);
    }

private:
    [[nodiscard]] bool door_contains(std::uint64_t key) const noexcept {
        for (std::size_t k = 0; k < 2; ++k) {
            const std::size_t b = doorkeeper_index(key, k, door_bits_);
            if (((door_[b >> 6] >> (b & 63)) & 1) == 0) return false;
        }
        return true;
    }

    // The paper's reset: halve every counter and the sample count, clear the doorkeeper.
    void reset() noexcept {
        for (auto& w : counters_) w = (w >> 1) & 0x7777777777777777ULL;
        std::fill(door_.begin(), door_.end(), 0);
        additions_ /= 2;
    }

    std::size_t width_ = 16;
    std::size_t door_bits_ = 64;
    std::uint64_t sample_size_ = 1;
    std::uint64_t additions_ = 0;
    std::vector<std::uint64_t> counters_;  // [rows * width / 16] 16 counters of 4 bits per word, row-major
    std::vector<std::uint64_t> door_;      // [door_bits / 64]
};

class w_tinylfu : public tracked_policy<w_tinylfu, eviction_order::static_between_accesses> {
public:
    struct config_type {
        /// Share of the capacity for the window LRU (paper: 1%, at least one item).
        double window_fraction = 0.01;
        /// Share of the main cache for the protected segment (paper: 80%).
        double protected_fraction = 0.80;
        /// W = sample_factor x capacity recorded uses between resets (paper: 10).
        std::uint32_t sample_factor = 10;
    };
    static constexpr auto options = std::tuple{
        option{
            "window_fraction", &config_type::window_fraction, {0.0, 1.0}, "share of the capacity for the window LRU"},
        option{"protected_fraction",
               &config_type::protected_fraction,
               {0.0, 1.0},
               "share of the main cache for the protected segment"},
        option{"sample_factor", &config_type::sample_factor, at_least(1),
               "recorded uses between sketch resets, in capacities"}};

    static constexpr std::string_view name = "w_tinylfu";

    explicit w_tinylfu(std::size_t capacity) : w_tinylfu(capacity, config_type{}) {}

    /// Throws: config_error if `capacity` is 0, a fraction is outside [0, 1]
    /// or NaN, or `sample_factor` is 0.
    w_tinylfu(std::size_t capacity, const config_type& config)
            : tracked_policy(capacity),
              window_target_(window_target_for(capacity, validated(config).window_fraction)),
              protected_target_(
                  static_cast<std::size_t>(static_cast<double>(capacity - window_target_) * config.protected_fraction)),
              links_(capacity),
              segment_(capacity, segment::window),
              keys_(capacity, 0),
              sketch_(capacity, std::uint64_t{config.sample_factor} * capacity) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        keys_[id.index()] = ctx.key;
        sketch_.record(ctx.key);
        link_new(id.value, segment::window);
        // The cache had room, so main has room for the window's overflow.
        if (counts_[window_index] > window_target_ && !window().empty()) move(window().front, segment::probation);
    }

    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        const std::uint32_t x = id.value;
        sketch_.record(keys_[x]);
        if (segment_[x] == segment::probation) {
            move(x, segment::protected_);
            if (counts_[protected_index] > protected_target_ && !protected_list().empty())
                move(protected_list().front, segment::probation);
        } else if (tracking_.is_evictable(id)) {
            links_.move_to_back(list(segment_[x]), list(segment_[x]), x);
        }
    }

    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        links_.remove(list(segment_[id.index()]), id.value);
    }

    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        links_.push_back(list(segment_[id.index()]), id.value);
    }

    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) links_.remove(list(segment_[id.index()]), id.value);
        --counts_[index_of(segment_[id.index()])];
    }

    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (tracking_.evictable_size() == 0) return std::nullopt;
        const std::uint32_t candidate =
            counts_[window_index] >= window_target_ && !window().empty() ? window().front : no_index;
        const std::uint32_t main_victim = !probation().empty()        ? probation().front
                                          : !protected_list().empty() ? protected_list().front
                                                                      : no_index;
        std::uint32_t v;
        if (candidate != no_index && main_victim != no_index) {
            if (sketch_.estimate(keys_[candidate]) > sketch_.estimate(keys_[main_victim])) {
                v = main_victim;
                unlink(v);
                move(candidate, segment::probation);
            } else {
                v = candidate;
                unlink(v);
            }
        } else {
            v = candidate != no_index ? candidate : main_victim != no_index ? main_victim : window().front;
            unlink(v);
        }
        const item_id victim{v};
        tracking_.mark_evicted(victim);
        return victim;
    }

    /// Resident items (held ones included) per segment.
    [[nodiscard]] std::size_t window_size() const noexcept { return counts_[window_index]; }
    [[nodiscard]] std::size_t probation_size() const noexcept { return counts_[probation_index]; }
    [[nodiscard]] std::size_t protected_size() const noexcept { return counts_[protected_index]; }
    [[nodiscard]] const tinylfu_sketch& sketch() const noexcept { return sketch_; }

private:
    enum class segment : std::uint8_t { window, probation, protected_ };
    static constexpr std::size_t window_index = 0, probation_index = 1, protected_index = 2;

    static const config_type& validated(const config_type& c) {
        auto fraction_ok = [](double f) { return f >= 0.0 && f <= 1.0; };  // false for NaN
        if (!fraction_ok(c.window_fraction) || !fraction_ok(c.protected_fraction))
            throw config_error("w_tinylfu: window_fraction " + std::to_string(c.window_fraction) +
                               " and protected_fraction " + std::to_string(c.protected_fraction) +
                               " must lie in [0, 1]; the paper uses 0.01 and 0.8");
        if (c.sample_factor == 0)
            throw config_error("w_tinylfu: sample_factor 0 would reset the sketch on every use; the paper uses 10");
        return c;
    }
    static std::size_t window_target_for(std::size_t capacity, double fraction) noexcept {
        const auto share = static_cast<std::size_t>(static_cast<double>(capacity) * fraction);
        return std::clamp<std::size_t>(share, 1, std::max<std::size_t>(capacity, 1));
    }

    static constexpr std::size_t index_of(segment s) noexcept { return static_cast<std::size_t>(s); }
    [[nodiscard]] index_list& list(segment s) noexcept { return lists_[index_of(s)]; }
    [[nodiscard]] index_list& window() noexcept { return lists_[window_index]; }
    [[nodiscard]] index_list& probation() noexcept { return lists_[probation_index]; }
    [[nodiscard]] index_list& protected_list() noexcept { return lists_[protected_index]; }

    void link_new(std::uint32_t x, segment s) noexcept {
        segment_[x] = s;
        ++counts_[index_of(s)];
        links_.push_back(list(s), x);
    }
    // Changes an item's segment; an evictable item goes to the MRU end of the new one.
    void move(std::uint32_t x, segment to) noexcept {
        const segment from = segment_[x];
        --counts_[index_of(from)];
        ++counts_[index_of(to)];
        segment_[x] = to;
        if (tracking_.is_evictable(item_id{x})) links_.move_to_back(list(from), list(to), x);
    }
    void unlink(std::uint32_t x) noexcept {
        links_.remove(list(segment_[x]), x);
        --counts_[index_of(segment_[x])];
    }

    std::size_t window_target_;
    std::size_t protected_target_;
    index_links links_;                // [capacity] links of evictable items in their segment
    index_list lists_[3];              // window, probation, protected: evictable items, LRU first
    std::size_t counts_[3] = {};       // resident per segment, held included
    std::vector<segment> segment_;     // [capacity] (kept while held)
    std::vector<std::uint64_t> keys_;  // [capacity] ctx.key at insert: what the sketch is asked about
    tinylfu_sketch sketch_;
};

static_assert(eviction_policy<w_tinylfu>);

}  // namespace kvpolicy
