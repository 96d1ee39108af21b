// Naive models of the waiting queue's rule: queue_aware<lru> at the policy
// level (tests/eviction_queue_aware.cpp, tests/engine_request_lifecycle.cpp),
// and a prefix-mode cache with a waiting queue and LRU beyond it
// (tests/eviction_queue_aware.cpp, tests/sim_queue.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <kvpolicy/core/ids.hpp>

namespace kvpolicy::testing {

// Chains from a prefix tree: a shared system prompt of 2 blocks, then each
// conversation's own blocks; a request reads a conversation's first `len`.
inline std::vector<block_hash> chain(std::uint64_t conversation, std::size_t len) {
    std::vector<block_hash> h;
    for (std::size_t j = 0; j < len; ++j) h.push_back(j < 2 ? 1000 + j : (conversation + 1) * 100'000 + j);
    return h;
}

// The cache in prefix mode (one GPU tier, whole blocks) with LRU beyond the
// queue, by scanning: at each eviction every cached block's earliest
// queued read is recomputed from the queued requests. LRU's order is a
// stamp taken whenever a block becomes a candidate for LRU: inserted, or
// neither held nor queued any more (a release, or the queue letting go).
class naive_prefix_cache {
public:
    explicit naive_prefix_cache(std::size_t capacity) : capacity_(capacity) {}

    void enqueue(std::uint64_t id, std::vector<block_hash> hashes) {
        queue_.push_back({id, next_position_++, std::move(hashes)});
    }
    void dequeue(std::uint64_t id) {
        const auto it = std::find_if(queue_.begin(), queue_.end(), [&](const queued& q) { return q.id == id; });
        const queued q = *it;
        queue_.erase(it);
        // The blocks it read that no queued request reads any more, cached
        // and unheld, are released by the queue, last first: LRU stamps them.
        for (auto h = q.hashes.rbegin(); h != q.hashes.rend(); ++h) {
            auto b = blocks_.find(*h);
            if (b != blocks_.end() && b->second.refs == 0 && !earliest(*h)) b->second.stamp = ++clock_;
        }
    }
    /// The hit run; nullopt if it does not fit (nothing changes then).
    std::optional<std::size_t> admit(std::uint64_t session, const std::vector<block_hash>& hashes) {
        std::size_t run = 0;
        while (run < hashes.size() && blocks_.contains(hashes[run])) ++run;
        std::size_t missing = 0, own_evictable = 0, evictable = 0;
        for (block_hash h : hashes) {
            auto b = blocks_.find(h);
            if (b == blocks_.end())
                ++missing;
            else if (b->second.refs == 0)
                ++own_evictable;
        }
        for (const auto& [h, b] : blocks_) evictable += b.refs == 0 ? 1 : 0;
        const std::size_t free = capacity_ - blocks_.size();
        if (missing > free + evictable - own_evictable) return std::nullopt;
        std::vector<block_hash>& held = holds_[session];
        for (block_hash h : hashes)
            if (auto b = blocks_.find(h); b != blocks_.end()) hold(b->second);
        std::size_t victims = missing > free ? missing - free : 0;
        while (victims-- > 0) evict();
        for (std::size_t i = 0; i < hashes.size(); ++i) {
            if (!blocks_.contains(hashes[i])) blocks_[hashes[i]] = {1, ++clock_, static_cast<std::uint32_t>(i)};
            held.push_back(hashes[i]);
        }
        return run;
    }
    void release(std::uint64_t session) {
        const auto it = holds_.find(session);
        for (auto h = it->second.rbegin(); h != it->second.rend(); ++h) {
            block& b = blocks_.at(*h);
            if (--b.refs == 0 && !earliest(*h)) b.stamp = ++clock_;
        }
        holds_.erase(it);
    }
    [[nodiscard]] bool cached(block_hash h) const { return blocks_.contains(h); }

private:
    struct block {
        std::uint32_t refs = 0;
        std::uint64_t stamp = 0;
        std::uint32_t depth = 0;
    };
    struct queued {
        std::uint64_t id, position;
        std::vector<block_hash> hashes;
    };
    [[nodiscard]] std::optional<std::uint64_t> earliest(block_hash h) const {
        for (const queued& q : queue_)
            if (std::find(q.hashes.begin(), q.hashes.end(), h) != q.hashes.end()) return q.position;
        return std::nullopt;
    }
    void hold(block& b) { ++b.refs; }
    void evict() {
        std::optional<block_hash> best;
        for (const auto& [h, b] : blocks_)
            if (b.refs == 0 && !earliest(h) && (!best || b.stamp < blocks_.at(*best).stamp)) best = h;
        if (!best)
            for (const auto& [h, b] : blocks_) {
                if (b.refs != 0) continue;
                if (!best) {
                    best = h;
                    continue;
                }
                const block& x = blocks_.at(*best);
                if (std::pair(*earliest(h), b.depth) > std::pair(*earliest(*best), x.depth)) best = h;
            }
        blocks_.erase(*best);
    }

    std::size_t capacity_;
    std::map<block_hash, block> blocks_;
    std::map<std::uint64_t, std::vector<block_hash>> holds_;
    std::vector<queued> queue_;
    std::uint64_t next_position_ = 0;
    std::uint64_t clock_ = 0;
};

// LRU as stamps, plus the queue rule by scanning.
struct naive_queue_aware_lru {
    struct item {
        bool tracked = false;
        bool held = false;
        std::uint64_t stamp = 0;
        std::uint32_t depth = 0;
        std::optional<std::uint64_t> queued;
    };
    std::vector<item> items;
    std::uint64_t clock = 0;

    explicit naive_queue_aware_lru(std::size_t capacity) : items(capacity) {}
    void insert(std::uint32_t id, std::uint32_t depth) { items[id] = {true, false, ++clock, depth, std::nullopt}; }
    void access(std::uint32_t id) {
        if (!items[id].held && !items[id].queued) items[id].stamp = ++clock;
    }
    void hold(std::uint32_t id) { items[id].held = true; }
    void release(std::uint32_t id) {
        items[id].held = false;
        if (!items[id].queued) items[id].stamp = ++clock;
    }
    void erase(std::uint32_t id) { items[id] = {}; }
    void queued(std::uint32_t id, std::uint64_t position) { items[id].queued = position; }
    void unqueued(std::uint32_t id) {
        if (!items[id].queued) return;
        items[id].queued.reset();
        if (!items[id].held) items[id].stamp = ++clock;
    }
    std::optional<std::uint32_t> pop() {
        std::optional<std::uint32_t> best;
        for (std::uint32_t i = 0; i < items.size(); ++i) {
            const item& x = items[i];
            if (!x.tracked || x.held || x.queued) continue;
            if (!best || x.stamp < items[*best].stamp) best = i;
        }
        if (!best)
            for (std::uint32_t i = 0; i < items.size(); ++i) {
                const item& x = items[i];
                if (!x.tracked || x.held) continue;
                if (!best) {
                    best = i;
                    continue;
                }
                const item& b = items[*best];
                if (std::pair(*x.queued, x.depth) > std::pair(*b.queued, b.depth)) best = i;  // ties: lowest id
            }
        if (best) items[*best] = {};
        return best;
    }
    [[nodiscard]] std::size_t evictable() const {
        return static_cast<std::size_t>(
            std::count_if(items.begin(), items.end(), [](const item& x) { return x.tracked && !x.held; }));
    }
};

}  // namespace kvpolicy::testing
