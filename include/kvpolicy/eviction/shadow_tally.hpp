// shadow_tally<K>: which of K experts' shadows hits most lately, and whether
// its lead over the expert followed now is worth a switch; best_of_shadows'
// choice.
//
// What it does. For each sampled reference it is told which shadows hit. It
// keeps each shadow's hits and, for every two shadows x and y, the
// references x hit and y missed; all counts halve every `window` x shadow
// capacity references, so they measure the workload seen lately. Every
// 1/16 of that (at least 16 references) it names the expert to follow: the
// one whose shadow hits most, once its lead over the followed one's is
// significant: more than `switch_sigmas` standard deviations of the
// difference, whose variance, were the two equally good, is the number of
// references exactly one of them hit (McNemar's test for paired outcomes).
// So noise does not make it switch back and forth, and no margin has to suit
// every hit ratio. With several rivals the best of them passes that test by
// chance now and then, so a switch also needs a lead of at least
// `switch_gain` of the window's references (a hit-ratio difference).
//
// Cost: O(K^2) per reference; 8 (K^2 + K) bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace kvpolicy {

template <std::size_t K>
class shadow_tally {
public:
    /// Counts halve every max(16, window x shadow_capacity) references, and
    /// the expert to follow is chosen every 1/16 of that (at least 16).
    shadow_tally(double window, std::size_t shadow_capacity, double switch_sigmas, double switch_gain) noexcept
            : halve_every_(std::max<std::uint64_t>(
                  16, static_cast<std::uint64_t>(window * static_cast<double>(shadow_capacity)))),
              choose_every_(std::max<std::uint64_t>(16, halve_every_ / 16)),
              switch_sigmas_(switch_sigmas),
              switch_gain_(switch_gain) {}

    /// One sampled reference: hit[x], whether shadow x hit it. Returns, when
    /// this reference is one the choice is made at and an expert leads
    /// `followed` by enough, that expert; then halves the counts when due.
    std::optional<std::size_t> record(const std::array<bool, K>& hit, std::size_t followed) noexcept {
        for (std::size_t x = 0; x < K; ++x) {
            if (!hit[x]) continue;
            hits_[x] += 1.0;
            for (std::size_t y = 0; y < K; ++y)
                if (!hit[y]) only_[x][y] += 1.0;
        }
        window_references_ += 1.0;
        std::optional<std::size_t> lead;
        if (++references_ % choose_every_ == 0) lead = challenger(followed);
        if (references_ % halve_every_ == 0) {
            window_references_ *= 0.5;
            for (double& h : hits_) h *= 0.5;
            for (auto& row : only_)
                for (double& n : row) n *= 0.5;
        }
        return lead;
    }

    /// Each shadow's decayed hit count.
    [[nodiscard]] const std::array<double, K>& hits() const noexcept { return hits_; }
    /// Sampled references so far, not halved.
    [[nodiscard]] std::uint64_t references() const noexcept { return references_; }

private:
    // The shadow hitting most (the followed one on a tie), if it is not the
    // followed one and leads it significantly and by switch_gain.
    [[nodiscard]] std::optional<std::size_t> challenger(std::size_t followed) const noexcept {
        std::size_t best = followed;
        for (std::size_t i = 0; i < K; ++i)
            if (hits_[i] > hits_[best]) best = i;
        const double lead = only_[best][followed] - only_[followed][best];
        const double discordant = only_[best][followed] + only_[followed][best];
        if (best != followed && lead > switch_sigmas_ * std::sqrt(discordant) &&
            lead >= switch_gain_ * window_references_)
            return best;
        return std::nullopt;
    }

    std::uint64_t halve_every_;   // sampled references between halvings
    std::uint64_t choose_every_;  // sampled references between choices
    double switch_sigmas_;
    double switch_gain_;
    std::uint64_t references_ = 0;    // sampled references so far
    double window_references_ = 0.0;  // sampled references, halved with the hits
    std::array<double, K> hits_{};    // [x] references shadow x hit, halved
    // [x][y] references shadow x hit and shadow y missed, halved with the hits
    std::array<std::array<double, K>, K> only_{};
};

}  // namespace kvpolicy
