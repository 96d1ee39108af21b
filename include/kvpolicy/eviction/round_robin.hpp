// Round robin: a hand sweeps the slot ids; the victim is the next evictable
// slot at or after the hand, and the hand moves past it.
//
// The first CPU-tier policy of vLLM's KV offloading RFC (seed 003: "on the
// CPU eviction policy, we will use round-robin for simplicity first, LRU will
// be added next"). It keeps no recency at all: inserts, accesses and releases
// change nothing but evictability, so every operation is a bit flip. It is
// position-based in concepts.hpp's hold/release rule: slot order is fixed,
// so a released slot is back where it was by construction. Use it
// where the tier is a plain overflow buffer or where tracking uses is too
// costly; prefer LRU or SIEVE when reuse matters.
//
// There is no paper; the rule is the RFC's, made exact here: slots are
// visited in id order (capacity-1 wraps to 0), held and free slots are
// skipped, and after a pop the hand rests just past the victim. Evictable
// slots are a two-level bitset (one summary bit per 64-slot word), so a pop
// costs O(1) word operations plus a scan of capacity/4096 summary words in
// the worst case — constant for any tier below a few hundred thousand slots.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/eviction/tracked_policy.hpp"

namespace kvpolicy {

class round_robin : public tracked_policy<round_robin, eviction_order::static_between_accesses> {
public:
    struct config_type {};

    static constexpr std::string_view name = "round_robin";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit round_robin(std::size_t capacity, const config_type& = {})
            : tracked_policy(capacity), words_((capacity + 63) / 64, 0), summary_((words_.size() + 63) / 64, 0) {}

    void on_insert(item_id id, const access_context&) noexcept {
        tracking_.mark_inserted(id);
        set(id.value);
    }
    void on_access(item_id id, const access_context&) noexcept { tracking_.mark_accessed(id); }
    void on_hold(item_id id) noexcept {
        tracking_.mark_held(id);
        clear(id.value);
    }
    void on_release(item_id id, const access_context&) noexcept {
        tracking_.mark_released(id);
        set(id.value);
    }
    void on_erase(item_id id) noexcept {
        if (tracking_.mark_erased(id)) clear(id.value);
    }

    /// Complexity: O(1 + capacity / 4096).
    std::optional<item_id> pop_victim(timestamp) noexcept {
        std::uint32_t v = find_from(hand_);
        if (v == no_slot_ && hand_ != 0) v = find_from(0);
        if (v == no_slot_) return std::nullopt;
        clear(v);
        hand_ = (v + 1 == capacity()) ? 0 : v + 1;
        tracking_.mark_evicted(item_id{v});
        return item_id{v};
    }

    /// The slot the next search starts at.
    [[nodiscard]] std::uint32_t hand() const noexcept { return hand_; }

private:
    static constexpr std::uint32_t no_slot_ = 0xffffffffU;

    void set(std::uint32_t s) noexcept {
        words_[s >> 6] |= std::uint64_t{1} << (s & 63);
        summary_[s >> 12] |= std::uint64_t{1} << ((s >> 6) & 63);
    }
    void clear(std::uint32_t s) noexcept {
        std::uint64_t& w = words_[s >> 6];
        w &= ~(std::uint64_t{1} << (s & 63));
        if (w == 0) summary_[s >> 12] &= ~(std::uint64_t{1} << ((s >> 6) & 63));
    }

    // The lowest evictable slot >= from, or no_slot_.
    [[nodiscard]] std::uint32_t find_from(std::uint32_t from) const noexcept {
        const std::size_t w = from >> 6;
        if (w >= words_.size()) return no_slot_;
        if (const std::uint64_t bits = words_[w] & (~std::uint64_t{0} << (from & 63)); bits != 0)
            return static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(bits)));
        // The next non-empty word after w, through the summary.
        const std::size_t first = w + 1;
        for (std::size_t sw = first >> 6; sw < summary_.size(); ++sw) {
            std::uint64_t sbits = summary_[sw];
            if (sw == (first >> 6)) sbits &= ~std::uint64_t{0} << (first & 63);
            if (sbits == 0) continue;
            const std::size_t word = sw * 64 + static_cast<std::size_t>(std::countr_zero(sbits));
            return static_cast<std::uint32_t>(word * 64 + static_cast<std::size_t>(std::countr_zero(words_[word])));
        }
        return no_slot_;
    }

    std::vector<std::uint64_t> words_;    // [ceil(capacity/64)] bit s: slot s is evictable
    std::vector<std::uint64_t> summary_;  // [ceil(words/64)] bit w: words_[w] != 0
    std::uint32_t hand_ = 0;
};

static_assert(eviction_policy<round_robin>);

}  // namespace kvpolicy
