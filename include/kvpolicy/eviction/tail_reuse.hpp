// tail_reuse_learner: learns online whether the last block of each request
// is reused, for the prefix-aware policies (tail_aware_lru, session_aware_lru).
//
// Each newly inserted item is classed by its position in its request: a
// *tail* (the request's last block, `ctx.chunk + 1 >= ctx.session_total_chunks`)
// or an *inner* block. The learner measures each class's first-reuse rate:
// an item is reused if it is hit while cached or inserted again while its key
// is in the class's ghost list (the keys of the last `capacity` evicted,
// never-reused items of that class, as ARC's and 2Q's ghosts correct for what
// eviction cut short). `demoting()` says whether tails are reused at under
// `demote_ratio` times the inner rate, after `min_samples` insertions of each
// class; counts halve every `window` insertions of a class, so the answer
// follows the workload. Contexts that leave `chunk` and
// `session_total_chunks` at their defaults make every item a tail, so the
// inner class never reaches `min_samples` and nothing is ever demoted.
// O(1) per call; about 110 bytes per item with the ghosts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ghost_list.hpp"

namespace kvpolicy {

class tail_reuse_learner {
public:
    struct config_type {
        /// Demote tails while their reuse rate is below this multiple of the
        /// inner blocks' rate; 0 never demotes.
        double demote_ratio = 0.5;
        /// Insertions of each class needed before the rates are compared.
        std::uint32_t min_samples = 64;
        /// A class's counts halve when its insertions reach this many.
        std::uint32_t window = 4096;
    };

    tail_reuse_learner() = default;

    /// Throws: config_error naming `policy` if `demote_ratio` is negative or
    /// not finite, or `window` is below 2 x `min_samples` or 2.
    tail_reuse_learner(std::size_t capacity, const config_type& config, const char* policy)
            : config_(validated(config, policy)),
              key_(capacity, 0),
              fresh_(capacity, none),
              ghosts_{ghost_list(capacity), ghost_list(capacity)} {}

    /// A new item `x`: its class is recorded until its first reuse.
    void inserted(std::uint32_t x, const access_context& ctx) {
        const std::uint8_t c = std::uint64_t{ctx.chunk.value} + 1 >= ctx.session_total_chunks ? tail : inner;
        // A key a ghost remembers was evicted unused and is wanted again:
        // a reuse of its class, which the eviction had cut short.
        for (std::uint8_t g = 0; g < 2; ++g)
            if (ghosts_[g].erase(ctx.key)) ++reused_[g];
        if (++inserted_[c] >= config_.window) {
            inserted_[c] /= 2;
            reused_[c] /= 2;
        }
        key_[x] = ctx.key;
        fresh_[x] = c;
    }
    /// A hit on `x`: its first one counts as a reuse of its class.
    void hit(std::uint32_t x) noexcept {
        if (fresh_[x] != none) {
            ++reused_[fresh_[x]];
            fresh_[x] = none;
        }
    }
    /// `x` was evicted: a never-reused item's key goes to its class's ghost.
    void evicted(std::uint32_t x) {
        if (fresh_[x] == none) return;
        ghost_list& g = ghosts_[fresh_[x]];
        g.erase(key_[x]);  // a key inserted twice (generic callers) is remembered once
        g.push_back(key_[x]);
        fresh_[x] = none;
    }
    /// `x` was erased (not evicted): forgotten, no ghost.
    void erased(std::uint32_t x) noexcept { fresh_[x] = none; }

    /// Takes `from`'s reuse counts per class (what demoting() reads), not
    /// its items or ghosts.
    void adopt_rates(const tail_reuse_learner& from) noexcept {
        for (int c = 0; c < 2; ++c) {
            inserted_[c] = from.inserted_[c];
            reused_[c] = from.reused_[c];
        }
    }
    /// Whether `x` is a tail not yet reused.
    [[nodiscard]] bool fresh_tail(std::uint32_t x) const noexcept { return fresh_[x] == tail; }
    /// Whether unreused tails should be evicted first now.
    [[nodiscard]] bool demoting() const noexcept {
        if (inserted_[tail] < config_.min_samples || inserted_[inner] < config_.min_samples) return false;
        // reused_t / inserted_t < ratio x reused_i / inserted_i, without division.
        return static_cast<double>(reused_[tail]) * static_cast<double>(inserted_[inner]) <
               config_.demote_ratio * static_cast<double>(reused_[inner]) * static_cast<double>(inserted_[tail]);
    }

private:
    static constexpr std::uint8_t inner = 0, tail = 1, none = 2;

    static config_type validated(const config_type& c, const char* policy) {
        if (!(c.demote_ratio >= 0.0) || c.demote_ratio > 1e9)
            throw config_error(std::string(policy) + ": demote_ratio " + std::to_string(c.demote_ratio) +
                               " must be finite and >= 0 (0.5 demotes tails reused at under half the inner rate)");
        if (c.window < 2 || c.window < 2ULL * c.min_samples)
            throw config_error(std::string(policy) + ": window " + std::to_string(c.window) +
                               " must be at least 2 and 2 x min_samples (" + std::to_string(c.min_samples) + ")");
        return c;
    }

    config_type config_;
    std::vector<std::uint64_t> key_;   // [capacity]
    std::vector<std::uint8_t> fresh_;  // [capacity] class while not yet reused, else none
    ghost_list ghosts_[2];             // per class: keys evicted before any reuse
    std::uint64_t inserted_[2] = {0, 0};
    std::uint64_t reused_[2] = {0, 0};
};

}  // namespace kvpolicy
