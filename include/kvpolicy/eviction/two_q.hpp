// 2Q (full version): a FIFO for first-time items, a ghost list of keys they
// leave behind, and an LRU for items proven to be reused.
//
// A new item enters A1in, a FIFO; hits there change nothing (correlated
// re-references right after the first use do not prove popularity). When
// A1in holds more than Kin items, victims come from its oldest end and their
// keys go to A1out, a bounded FIFO of keys with no data. An item inserted
// while its key is in A1out was evicted too soon: it goes straight into Am,
// an LRU, and hits there move it to the most-recent end. Otherwise victims
// come from Am's least recent end, with no ghost. Use it where one-time
// traffic (scans, unique prompts) would flush LRU: it keeps LRU's O(1) and
// needs one tuning knob less than ARC.
//
// Paper: T. Johnson, D. Shasha, "2Q: A Low Overhead High Performance Buffer
// Management Replacement Algorithm", VLDB 1994, the full version with the
// tuning the paper recommends: Kin = 25% and Kout = 50% of the capacity.
// Departures: |A1in| counts A1in's items held by requests too (they occupy
// the cache), but only evictable ones can be victims, so a victim comes from
// A1in when it has an evictable item and either |A1in| > Kin or Am has none
// evictable; otherwise from Am. A held item keeps its queue. Its release is
// not a new reference (the zoo-wide rule of concepts.hpp): an A1in item goes
// back to its place in the FIFO (re-entering at the back would make A1in an
// LRU list under a serving engine's hold-use-release pattern); Am is
// recency-ordered and, as every LRU-family list here, takes a released item
// at its most-recent end. A1out is keyed by `ctx.key`, so it survives the
// slot's reuse. A1in and Am are place queues (core/place_queue.hpp) threaded
// through one array: A1in keeps its held items at their places, Am unlinks
// them and takes them back at its most-recent end. Every operation is O(1)
// (a pop from A1in also walks past held items at its front).
#pragma once

#include <cmath>
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
#include "kvpolicy/core/ghost_list.hpp"
#include "kvpolicy/core/place_queue.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

struct two_q_config {
    /// Kin: A1in's share of the capacity, 0..1.
    double kin = 0.25;
    /// Kout: how many keys A1out remembers, as a share of the capacity, >= 0.
    double kout = 0.5;
};

class two_q : public tracked_policy<two_q, eviction_order::static_between_accesses> {
public:
    using config_type = two_q_config;
    static constexpr auto options = std::tuple{
        option{"kin", &config_type::kin, {0.0, 1.0}, "A1in's share of the capacity"},
        option{"kout", &config_type::kout, non_negative, "keys A1out remembers, as a share of the capacity"}};

    static constexpr std::string_view name = "two_q";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids, if
    /// `kin` is outside 0..1 or if `kout` is negative or not finite.
    explicit two_q(std::size_t capacity, const config_type& config = {})
            : tracked_policy(capacity),
              links_(capacity),
              in_am_(capacity, 0),
              key_(capacity, 0),
              kin_(checked_kin(capacity, config.kin)),
              a1out_(checked_kout(capacity, config.kout)) {}

    void on_insert(item_id id, const access_context& ctx) noexcept {
        tracking_.mark_inserted(id);
        key_[id.value] = ctx.key;
        if (a1out_.erase(ctx.key)) {
            ++tracking_.counters().ghost_hits;
            in_am_[id.value] = 1;
            links_.push_back(am_, id.value);
        } else {
            in_am_[id.value] = 0;
            links_.push_back(a1in_, id.value);
        }
    }
    void on_access(item_id id, const access_context&) noexcept {
        tracking_.mark_accessed(id);
        if (in_am_[id.value] != 0 && tracking_.is_evictable(id)) links_.move_to_back(am_, am_, id.value);
    }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        if (in_am_[id.value] != 0)
            links_.remove(am_, id.value);
        else
            links_.hold(a1in_, id.value);  // keeps its place
    }
    /// Not a new reference: A1in, back to its place; Am, its most-recent end.
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        if (in_am_[id.value] != 0)
            links_.push_back(am_, id.value);
        else
            links_.release(a1in_, id.value);
    }
    void on_erase(item_id id) noexcept {
        const bool evictable = tracking_.mark_erased(id);
        if (in_am_[id.value] == 0)
            links_.remove(a1in_, id.value);  // held or not, A1in keeps it
        else if (evictable)
            links_.remove(am_, id.value);
    }

    /// Complexity: O(1) (from A1in, plus the walk past held items at its front).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        if (!a1in_.empty() && (a1in_.size() > kin_ || am_.empty())) {
            const item_id v{links_.pop_front(a1in_)};
            if (a1out_.capacity() > 0) {
                a1out_.erase(key_[v.value]);  // only if two live items shared a key
                a1out_.push_back(key_[v.value]);
            }
            tracking_.mark_evicted(v);
            return v;
        }
        if (am_.empty()) return std::nullopt;
        const item_id v{links_.pop_front(am_)};
        tracking_.mark_evicted(v);
        return v;
    }

    /// Whether the item is in Am (else A1in). Precondition: contains(id).
    [[nodiscard]] bool in_am(item_id id) const noexcept {
        KVPOLICY_ASSERT(contains(id));
        return in_am_[id.value] != 0;
    }
    [[nodiscard]] bool remembers(std::uint64_t key) const noexcept { return a1out_.contains(key); }
    [[nodiscard]] std::size_t kin() const noexcept { return kin_; }
    [[nodiscard]] std::size_t kout() const noexcept { return a1out_.capacity(); }

private:
    static std::size_t checked_kin(std::size_t capacity, double kin) {
        if (!(kin >= 0.0 && kin <= 1.0))
            throw config_error("two_q: kin = " + std::to_string(kin) +
                               " is not a share of the capacity; give 0..1 (0.25 is the paper's)");
        return static_cast<std::size_t>(static_cast<double>(capacity) * kin);
    }
    static std::size_t checked_kout(std::size_t capacity, double kout) {
        if (!(kout >= 0.0 && std::isfinite(kout)))
            throw config_error("two_q: kout = " + std::to_string(kout) +
                               " must be a finite share >= 0 (0.5 is the paper's)");
        return static_cast<std::size_t>(static_cast<double>(capacity) * kout);
    }

    place_links links_;                // [capacity] A1in's and Am's links and places
    place_queue a1in_;                 // A1in's items, held ones too, by arrival, oldest first
    place_queue am_;                   // evictable Am items, least recent first (held: unlinked)
    std::vector<std::uint8_t> in_am_;  // [capacity] 1: Am, 0: A1in
    std::vector<std::uint64_t> key_;   // [capacity] what A1out remembers of an item
    std::size_t kin_;
    ghost_list a1out_;  // [Kout] keys evicted from A1in, oldest first
};

static_assert(eviction_policy<two_q>);

}  // namespace kvpolicy
