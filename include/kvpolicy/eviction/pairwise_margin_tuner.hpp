// pairwise_margin_tuner: learns online how far ahead a prediction must put
// an item's next use before evicting it instead of LRU's victim pays, by
// watching which of the two the trace asks for first.
//
// A prediction-driven policy (session_aware_lru) overrides LRU when the
// predicted wait of some item `f` exceeds `margin` x the idle time of LRU's
// victim `v`. Belady's rule says that choice is right exactly when `v` is
// used again before `f`. That order is observable whatever the cache does:
// both keys are requested again (or not) by the workload, hit or miss. So at
// sampled evictions the tuner records the pair (f, v) with its ratio
// wait / idle, in log2 bins from 1/16 to 2^12, and scores the pair when one
// of its keys comes back: a *win* for evicting `f` if `v` came first, a loss
// if `f` did. A pair neither of whose keys returns within `pending` later
// samples says nothing and is dropped. Every decision is scored, taken or not,
// so the tuner also learns about margins it does not apply.
//
// The margin is the lower edge of the lowest bin such that no bin at or above
// it, among those with `min_samples` scored pairs, loses more often than it
// wins (predictions are assumed more reliable the farther they look; the
// first losing bin from the top stops the scan). Counts halve every `window`
// scored pairs, so the margin follows the workload. Before any bin has
// enough pairs the initial margin holds.
//
// Why not ghost hits: comparing how often each rule's victims come back
// (ARC's signal) misjudged the Mooncake synthetic trace in prototype replays
// (it lowered the margin to 1 and lost 2 points to LRU at 5% of the blocks),
// since it compares two different populations; the pairwise order compares
// the two candidates of the same decision.
//
// Cost: O(1) per call; a fixed table of `pending` pairs and a key index of
// twice that, nothing allocated after construction.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/key_index.hpp"

namespace kvpolicy {

class pairwise_margin_tuner {
public:
    static constexpr int bins = 16;
    static constexpr int bin_offset = 4;  // bin i holds ratios in [2^(i-4), 2^(i-3))

    struct config_type {
        /// Learn the margin; false keeps the initial one.
        bool enabled = true;
        /// Record one pair every this many decisions.
        std::uint32_t sample_every = 4;
        /// Pairs waiting for an outcome; the oldest is dropped unscored.
        std::uint32_t pending = 1024;
        /// Scored pairs a bin needs before it counts.
        double min_samples = 16.0;
        /// Counts halve when this many pairs have been scored.
        double window = 4096.0;
    };

    pairwise_margin_tuner() = default;

    /// Throws: config_error naming `policy` if `initial_margin` is negative or
    /// not finite, `sample_every` or `pending` is 0, `min_samples` is not
    /// positive, or `window` is below 2 x `min_samples`.
    pairwise_margin_tuner(double initial_margin, const config_type& config, const char* policy)
            : config_(validated(initial_margin, config, policy)),
              margin_(initial_margin),
              pairs_(config.pending),
              index_(2 * std::size_t{config.pending}) {}

    [[nodiscard]] double margin() const noexcept { return margin_; }
    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    /// Scored pairs per bin (decayed): wins for evicting the predicted item, losses.
    [[nodiscard]] const std::array<double, bins>& wins() const noexcept { return wins_; }
    [[nodiscard]] const std::array<double, bins>& losses() const noexcept { return losses_; }

    /// The bin of a ratio wait / idle (an infinite ratio: the top bin).
    [[nodiscard]] static int bin_of(double ratio) noexcept {
        if (!(ratio > 0.0)) return 0;
        if (std::isinf(ratio)) return bins - 1;
        return std::clamp(static_cast<int>(std::floor(std::log2(ratio))) + bin_offset, 0, bins - 1);
    }
    /// The lower edge of bin `b`.
    [[nodiscard]] static double bin_floor(int b) noexcept { return std::ldexp(1.0, b - bin_offset); }

    /// A decision between `far_key` (predicted back `ratio` x later than
    /// LRU's victim has been idle) and `lru_key`, LRU's victim.
    void decision(std::uint64_t far_key, std::uint64_t lru_key, double ratio) {
        if (!config_.enabled || far_key == lru_key) return;
        if (++since_sample_ < config_.sample_every) return;
        if (index_.find(far_key) != no_index || index_.find(lru_key) != no_index) return;  // one pair per key
        since_sample_ = 0;
        pair& p = pairs_[next_];
        if (p.live) forget(p);  // neither came back in time: no outcome
        p = {far_key, lru_key, static_cast<std::uint8_t>(bin_of(ratio)), true};
        index_.insert(far_key, 2 * next_);
        index_.insert(lru_key, 2 * next_ + 1);
        next_ = (next_ + 1) % static_cast<std::uint32_t>(pairs_.size());
    }

    /// `key` is requested again (a hit or an insert): scores its pair.
    void requested(std::uint64_t key) noexcept {
        if (!config_.enabled) return;
        const std::uint32_t at = index_.find(key);
        if (at == no_index) return;
        pair& p = pairs_[at / 2];
        // The LRU victim back first: evicting the predicted item was right.
        (at % 2 == 1 ? wins_ : losses_)[p.bin] += 1.0;
        forget(p);
        if (++scored_ >= config_.window) {
            for (int b = 0; b < bins; ++b) {
                wins_[b] /= 2;
                losses_[b] /= 2;
            }
            scored_ /= 2;
        }
        retune();
    }

private:
    struct pair {
        std::uint64_t far_key = 0;
        std::uint64_t lru_key = 0;
        std::uint8_t bin = 0;
        bool live = false;
    };

    static config_type validated(double margin, const config_type& c, const char* policy) {
        const std::string who = std::string(policy) + ": ";
        if (!(margin >= 0.0) || !std::isfinite(margin))
            throw config_error(who + "margin " + std::to_string(margin) + " must be finite and >= 0");
        if (c.sample_every == 0 || c.pending == 0)
            throw config_error(who + "tuner sample_every and pending must be >= 1 (4 and 1024 by default)");
        if (!(c.min_samples > 0.0) || !(c.window >= 2 * c.min_samples) || !std::isfinite(c.window))
            throw config_error(who + "tuner window " + std::to_string(c.window) +
                               " must be finite and at least 2 x min_samples " + std::to_string(c.min_samples) +
                               " (> 0)");
        return c;
    }

    void forget(pair& p) noexcept {
        index_.erase(p.far_key);
        index_.erase(p.lru_key);
        p.live = false;
    }

    // The lowest bin from which up no bin with enough pairs loses more often
    // than it wins.
    void retune() noexcept {
        int lowest = bins;
        bool judged = false;
        for (int b = bins - 1; b >= 0; --b) {
            const double n = wins_[b] + losses_[b];
            if (n < config_.min_samples) continue;
            judged = true;
            if (wins_[b] < losses_[b]) break;
            lowest = b;
        }
        if (judged) margin_ = lowest == bins ? std::numeric_limits<double>::infinity() : bin_floor(lowest);
    }

    config_type config_{};
    double margin_ = 0.0;
    std::vector<pair> pairs_;
    key_index index_;  // key -> 2 x pair + (0: far key, 1: LRU's victim)
    std::uint32_t next_ = 0;
    std::uint32_t since_sample_ = 0;
    double scored_ = 0.0;
    std::array<double, bins> wins_{};
    std::array<double, bins> losses_{};
};

}  // namespace kvpolicy
