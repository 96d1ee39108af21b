// front_cache_forecast: which leading blocks of a queued request the
// engine's GPU prefix cache will serve when the request starts, so that a
// CPU tier behind it hears only the part of the request it will be asked
// for.
//
// Why. A queue-aware policy keeps what queued requests read. Behind a GPU
// prefix cache the CPU tier is looked up only past the GPU's hit, so where
// a session's next request shares its whole context (agentic sessions),
// much of what the queue protects is served by the GPU, and the tier gives
// up blocks that would have been read from it (docs/which-policy.md, "Why
// the queue costs on the agentic trace").
//
// The rule. Requests start in arrival order, and vLLM's prefix cache frees
// a finished request's blocks to the back of a least-recently-freed list, so
// when a request starts the GPU holds, above all, the blocks of the requests
// that ran just before it: those waiting ahead of it and those running now.
// A request joins on arrival and leaves when it ends (or is dropped); its
// blocks then sit in the GPU's free list, where `held_now` sees them. A
// caller with no view of the GPU (a connector: vLLM shows it no block
// pool) calls `end` instead of `leave` for a request that ran: it stays in
// the walk at its place, its blocks standing for the free list's, until
// newer requests fill the GPU ahead of it (then it is dropped). The
// forecast walks the requests ahead of the new one from the newest, each
// from its first block (the last it frees: its prefix outlives its tail),
// gathering distinct blocks until they fill the GPU (`gpu_blocks`); while
// they do not, what the GPU holds now (`held_now(key)`) counts too. The
// request's forecast hit is its longest prefix of such blocks. It is a
// forecast: the order in which running requests end, and what they compute
// past their prompts, move the truth by a few blocks.
//
// Cost: O(blocks of the requests ahead, up to about gpu_blocks) hash
// inserts per join, plus the ended requests it drops; O(1) per leave and
// end. Memory: the keys of each request in the walk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::engine {

class front_cache_forecast {
public:
    /// Throws: config_error if `gpu_blocks` is 0.
    explicit front_cache_forecast(std::size_t gpu_blocks) : gpu_blocks_(gpu_blocks) {
        if (gpu_blocks == 0)
            throw config_error("front_cache_forecast: gpu_blocks is 0; give the GPU prefix cache's size in blocks");
    }

    /// Request `request` arrives, behind every request waiting or running,
    /// and will read `keys` (its blocks, first to last). Returns: how many of
    /// its leading keys the GPU is forecast to serve when it starts.
    /// `held_now(key)`: whether the GPU holds `key` now. An id already here
    /// arrives again at the back (its old place forgotten: a preemption).
    template <class HeldNow>
    std::size_t join(std::uint64_t request, std::span<const std::uint64_t> keys, HeldNow&& held_now) {
        (void)leave(request);
        window_.clear();
        auto it = requests_.rbegin();
        for (; it != requests_.rend() && window_.size() < gpu_blocks_; ++it)
            for (auto k = it->keys.begin(); k != it->keys.end() && window_.size() < gpu_blocks_; ++k)
                window_.insert(*k);
        // Ended requests the walk no longer reaches never will again (only
        // newer requests join): dropped, oldest first.
        while (requests_.begin() != it.base() && requests_.front().ended) {
            place_.erase(requests_.front().request);
            requests_.pop_front();
        }
        const bool room = window_.size() < gpu_blocks_;
        std::size_t hit = 0;
        while (hit < keys.size() && (window_.contains(keys[hit]) || (room && held_now(keys[hit])))) ++hit;
        requests_.push_back({request, std::vector<std::uint64_t>(keys.begin(), keys.end()), false});
        place_[request] = std::prev(requests_.end());
        return hit;
    }

    /// Request `request` ended, or was dropped: its blocks are the GPU's
    /// free list's now (seen by `held_now`), or never were. Returns: false,
    /// changing nothing, for a request not here.
    bool leave(std::uint64_t request) {
        const auto it = place_.find(request);
        if (it == place_.end()) return false;
        requests_.erase(it->second);
        place_.erase(it);
        return true;
    }

    /// Request `request` ran and ended, for a caller with no `held_now`: it
    /// stays in the walk at its place, as the GPU's free list holds its
    /// blocks, until the walk no longer reaches it. Returns: false, changing
    /// nothing, for a request not here.
    bool end(std::uint64_t request) {
        const auto it = place_.find(request);
        if (it == place_.end()) return false;
        it->second->ended = true;
        return true;
    }

    /// Requests in the walk: joined and not yet left (ended ones included
    /// until it drops them).
    [[nodiscard]] std::size_t requests() const noexcept { return requests_.size(); }
    [[nodiscard]] std::size_t gpu_blocks() const noexcept { return gpu_blocks_; }

private:
    struct entry {
        std::uint64_t request;
        std::vector<std::uint64_t> keys;
        bool ended;  // ran and ended (`end`): stays while the walk reaches it
    };

    std::size_t gpu_blocks_;
    std::list<entry> requests_;  // in the walk, oldest arrival first
    std::unordered_map<std::uint64_t, std::list<entry>::iterator> place_;
    std::unordered_set<std::uint64_t> window_;  // join's scratch, kept to reuse its buckets
};

}  // namespace kvpolicy::engine
