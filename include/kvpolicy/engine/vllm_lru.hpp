// vllm_lru: the exact decisions of vLLM's own LRU cache policy (vLLM 0.30 to
// 0.33, docs/supported-versions.md; `vllm/v1/kv_offload/cpu/policies/lru.py`,
// `LRUCachePolicy`), in C++.
//
// A user who moves vLLM's CPU offloading tier onto kvpolicy first switches to
// this and sees no change at all, then tries a better policy. It is not
// kvpolicy's `lru` (which is a plain recency list under kvpolicy's hold
// rule): vLLM's LRU orders chunks by a *rank* `(r1, r2)`, compared as a pair,
// with ties between equal ranks broken by the keys' bytes:
//
// - a chunk inserted or touched outside a request, or touched at a request's
//   end, gets a fresh rank `(++counter, 0)`;
// - a chunk inserted or first seen by a request whose key has a token
//   position gets `(request_rank, -position)`: one rank per request
//   (`new_request_rank`), the tail of a prefix before its head, so a request's
//   tail is evicted first;
// - pinning (a load in flight, a store not yet complete) takes a chunk out of
//   the candidates without touching its rank: completing a load or store
//   does not move it (the manager semantics vLLM keeps).
//
// `evict(n, protected)` takes the n lowest-ranked evictable chunks that are
// not protected, lowest first, or nothing at all. vLLM keeps a lazily
// invalidated heap; this keeps an ordered set of the evictable chunks, which
// yields the same sequence (tested against vLLM's own class through vLLM's
// own manager, python/tests/test_vllm_policies.py).
//
// `order_request_keys` is vLLM's order of a request's keys (the groups'
// keys sorted by their end-token positions), which the ranks follow.
//
// Ids are dense slots 0 .. capacity-1 chosen by the caller (the Python
// adapter maps vLLM's OffloadKeys to them). Complexity: O(log n) per insert,
// rank change and pin; O(k log n) for an eviction that passes k chunks.
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/index_list.hpp"

namespace kvpolicy::engine {

/// A vLLM LRU rank: compared as the pair (major, minor).
struct vllm_rank {
    std::int64_t major = 0;
    std::int64_t minor = 0;

    // Written out, not defaulted: nvcc (13.0, host g++ 12) declares the
    // defaulted pair but never defines operator== for a device-side include.
    friend constexpr bool operator==(const vllm_rank& a, const vllm_rank& b) noexcept {
        return a.major == b.major && a.minor == b.minor;
    }
    friend constexpr std::strong_ordering operator<=>(const vllm_rank& a, const vllm_rank& b) noexcept {
        if (const auto c = a.major <=> b.major; c != 0) return c;
        return a.minor <=> b.minor;
    }
};

class vllm_lru {
public:
    static constexpr std::string_view name = "vllm_lru";

    /// Throws: config_error if `capacity` is 0 or does not fit 32-bit ids.
    explicit vllm_lru(std::size_t capacity)
            : rank_(checked(capacity)), key_(capacity), state_(capacity, slot_state::absent), order_(by_rank{this}) {}
    vllm_lru(const vllm_lru&) = delete;  // the order's comparator points at this object
    vllm_lru& operator=(const vllm_lru&) = delete;

    [[nodiscard]] std::size_t capacity() const noexcept { return rank_.size(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::size_t evictable_size() const noexcept { return order_.size(); }
    [[nodiscard]] bool contains(std::uint32_t id) const noexcept {
        return id < capacity() && state_[id] != slot_state::absent;
    }
    [[nodiscard]] bool is_evictable(std::uint32_t id) const noexcept {
        return id < capacity() && state_[id] == slot_state::evictable;
    }
    [[nodiscard]] vllm_rank rank(std::uint32_t id) const noexcept { return rank_[id]; }

    /// A fresh rank for one request (vLLM's per-request state asks once).
    std::int64_t new_request_rank() noexcept { return ++counter_; }

    /// A new chunk. `position`: its key's end-token position in the inserting
    /// request (rank `(request_rank, -position)`), or none (a fresh rank).
    /// `key`: its bytes, the tie-break between equal ranks.
    /// Pre: `id` < capacity() and not present.
    void insert(std::uint32_t id, std::string_view key, std::optional<std::int64_t> position, std::int64_t request_rank,
                bool evictable) {
        KVPOLICY_ASSERT(id < capacity() && !contains(id));
        key_[id].assign(key);
        rank_[id] = position ? vllm_rank{request_rank, -*position} : vllm_rank{++counter_, 0};
        state_[id] = slot_state::pinned;
        ++size_;
        if (evictable) mark_evictable(id);
    }

    /// Forgets a chunk (a failed store). Pre: present.
    void remove(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        if (state_[id] == slot_state::evictable) order_.erase(id);
        state_[id] = slot_state::absent;
        --size_;
    }

    /// A fresh rank for each present id, in the order given (vLLM's touch
    /// passes them reversed: the first key ends most recent). Absent ids
    /// (no_index) are skipped without taking a rank.
    void refresh(std::span<const std::uint32_t> ids) {
        for (std::uint32_t id : ids)
            if (id != no_index && contains(id)) set_rank(id, vllm_rank{++counter_, 0});
    }

    /// A request's first access to `id` at `position`: its rank rises to
    /// `(request_rank, -position)` unless it already ranks at least that.
    void raise(std::uint32_t id, std::int64_t request_rank, std::int64_t position) {
        if (!contains(id)) return;
        const vllm_rank r{request_rank, -position};
        if (rank_[id] >= r) return;
        set_rank(id, r);
    }

    /// The chunk's ref count reached 0 (its store or last load completed).
    void mark_evictable(std::uint32_t id) {
        KVPOLICY_ASSERT(contains(id));
        if (state_[id] == slot_state::evictable) return;  // vLLM's set add: idempotent
        state_[id] = slot_state::evictable;
        order_.insert(id);
    }
    /// The chunk's ref count left 0 (a load started).
    void mark_non_evictable(std::uint32_t id) noexcept {
        KVPOLICY_ASSERT(contains(id));
        if (state_[id] != slot_state::evictable) return;
        order_.erase(id);
        state_[id] = slot_state::pinned;
    }

    /// The `n` lowest-ranked evictable ids not in `is_protected`, lowest
    /// first, removed; or nothing, changing nothing, if fewer exist.
    /// `is_protected(id)` -> bool.
    template <class Protected>
    std::optional<std::vector<std::uint32_t>> evict(std::size_t n, Protected&& is_protected) {
        std::vector<std::uint32_t> out;
        if (n == 0) return out;
        if (n > order_.size()) return std::nullopt;
        out.reserve(n);
        for (auto it = order_.begin(); it != order_.end() && out.size() < n; ++it)
            if (!is_protected(*it)) out.push_back(*it);
        if (out.size() < n) return std::nullopt;
        for (std::uint32_t id : out) {
            order_.erase(id);
            state_[id] = slot_state::absent;
            --size_;
        }
        return out;
    }

    /// Forgets every chunk; the rank counter starts again at 0, as vLLM's.
    void clear() noexcept {
        order_.clear();
        std::fill(state_.begin(), state_.end(), slot_state::absent);
        size_ = 0;
        counter_ = 0;
    }

private:
    enum class slot_state : std::uint8_t { absent, pinned, evictable };

    struct by_rank {
        const vllm_lru* self;
        bool operator()(std::uint32_t a, std::uint32_t b) const noexcept {
            const vllm_rank ra = self->rank_[a], rb = self->rank_[b];
            if (ra != rb) return ra < rb;
            if (const int c = self->key_[a].compare(self->key_[b]); c != 0) return c < 0;  // Python's bytes order
            return a < b;  // one key in two slots (the caller's mistake): both kept, in slot order
        }
    };

    static std::size_t checked(std::size_t capacity) {
        if (capacity == 0) throw config_error("vllm_lru: cache_capacity 0 cannot hold a chunk; give at least 1");
        if (capacity >= no_index) throw config_error("vllm_lru: cache_capacity must be below 2^32-1 chunks");
        return capacity;
    }
    void set_rank(std::uint32_t id, vllm_rank r) {
        if (state_[id] == slot_state::evictable) {
            order_.erase(id);
            rank_[id] = r;
            order_.insert(id);
        } else {
            rank_[id] = r;
        }
    }

    std::vector<vllm_rank> rank_;    // [capacity]
    std::vector<std::string> key_;   // [capacity] the chunk's key bytes
    std::vector<slot_state> state_;  // [capacity]
    std::size_t size_ = 0;
    std::int64_t counter_ = 0;                // vLLM's _next_rank
    std::set<std::uint32_t, by_rank> order_;  // the evictable ids, lowest rank first
};

/// vLLM's order_request_keys (policies/base.py) over a request's keys (its
/// groups' keys flattened) whose end-token positions are `positions`: the
/// order to list them in, the keys sorted by position (stably), or nothing
/// (the groups' order) when a key is listed twice (`same(i, j)`: keys i and
/// j are one key). vLLM sorts only when the position dict it builds is as
/// long as the keys; equal keys share a position, so a repeat lies within
/// one run of equal positions. What `same` throws passes through.
template <class Same>
[[nodiscard]] std::optional<std::vector<std::uint32_t>> order_request_keys(std::span<const std::int64_t> positions,
                                                                           Same&& same) {
    std::vector<std::uint32_t> at(positions.size());
    std::iota(at.begin(), at.end(), std::uint32_t{0});
    std::stable_sort(at.begin(), at.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return positions[a] < positions[b]; });
    for (std::size_t b = 0, e = 0; b < at.size(); b = e)
        for (e = b + 1; e < at.size() && positions[at[e]] == positions[at[b]]; ++e)
            for (std::size_t i = b; i < e; ++i)
                if (same(at[i], at[e])) return std::nullopt;
    return at;
}

}  // namespace kvpolicy::engine
