// The requests an engine has queued and not yet started: which cached items
// each will read, and how soon.
//
// A serving engine knows part of its cache's future: the requests in its
// waiting queue (vLLM hashes a request's blocks on arrival; SGLang's HiCache
// prefetches from its queue). This index answers, for an item key, the
// position of the earliest queued request that reads it, which is what a
// policy needs to keep those items and to order them by how soon they are
// read (queue_aware).
//
// Positions are arrival sequence numbers: the n-th request enqueued has
// position n, so "sooner" is "queued earlier", the order a FIFO scheduler
// starts them in. Each key keeps the positions of the queued requests that
// read it, ascending (positions only grow, so an enqueue appends). A request
// that leaves the queue (started or dropped) is unmarked, and each of its
// keys drops dead positions from its front: every position is appended and
// removed once, so enqueue and dequeue cost O(1) amortised per block, and a
// dead position behind a live one waits, harmlessly, until it reaches the
// front.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"

namespace kvpolicy {

class waiting_queue {
public:
    /// Records that request `request` (the engine's id, unique among queued
    /// requests) of `session` is queued and will read `keys`. Calls
    /// `now_read(key, position)` for every key that no queued request read
    /// before (its earliest read is now this one). Throws: usage_error,
    /// changing nothing, if `request` is already queued.
    template <class NowRead>
    void enqueue(std::uint64_t request, session_id session, std::span<const std::uint64_t> keys, NowRead&& now_read) {
        if (requests_.contains(request))
            throw usage_error("enqueue: request " + std::to_string(request) +
                              " is already queued; dequeue it (started or dropped) before queueing it again");
        const std::uint64_t position = next_position_++;
        requests_.emplace(request, queued_request{position, session, {keys.begin(), keys.end()}});
        live_.insert(position);
        blocks_ += keys.size();
        for (std::uint64_t key : keys) {
            reads& r = reads_[key];
            const bool first = r.live_front() == nullptr;
            r.positions.push_back(position);
            if (first) now_read(key, position);
        }
    }

    /// Records that request `request` left the queue: it started, or it was
    /// dropped. Calls `changed(key, next)`, last key first (as a finished
    /// request releases its blocks, so a dropped request's tail goes before
    /// its prefix), for every key whose earliest read was this request: `next` is the position of the next queued request
    /// that reads it, or empty if none does. Returns the request's session.
    /// Throws: usage_error, changing nothing, for a request that is not
    /// queued (never enqueued, or dequeued already).
    template <class Changed>
    session_id dequeue(std::uint64_t request, Changed&& changed) {
        const auto it = requests_.find(request);
        if (it == requests_.end())
            throw usage_error("dequeue: request " + std::to_string(request) +
                              " is not queued (dequeued twice, or never enqueued); dequeue each queued request once");
        const queued_request q = std::move(it->second);
        requests_.erase(it);
        live_.erase(q.position);
        blocks_ -= q.keys.size();
        for (auto k = q.keys.rbegin(); k != q.keys.rend(); ++k) {
            const std::uint64_t key = *k;
            const auto r = reads_.find(key);
            if (r == reads_.end()) continue;  // a key twice in the request: done at its first
            if (r->second.front() != q.position) continue;  // an earlier request still reads it first
            r->second.drop_dead_front(live_);
            if (r->second.empty()) {
                reads_.erase(r);
                changed(key, std::optional<std::uint64_t>{});
            } else {
                changed(key, std::optional<std::uint64_t>{r->second.front()});
            }
        }
        return q.session;
    }

    /// The position of the earliest queued request that reads `key`, or
    /// empty if none does. O(1) expected.
    [[nodiscard]] std::optional<std::uint64_t> next_read(std::uint64_t key) const noexcept {
        const auto r = reads_.find(key);
        if (r == reads_.end()) return std::nullopt;
        return r->second.front();
    }

    [[nodiscard]] bool contains(std::uint64_t request) const noexcept { return requests_.contains(request); }
    /// Queued requests.
    [[nodiscard]] std::size_t size() const noexcept { return requests_.size(); }
    [[nodiscard]] bool empty() const noexcept { return requests_.empty(); }
    /// Keys the queued requests read, counted once per request.
    [[nodiscard]] std::size_t queued_reads() const noexcept { return blocks_; }
    /// Distinct keys some queued request reads.
    [[nodiscard]] std::size_t queued_keys() const noexcept { return reads_.size(); }

private:
    struct queued_request {
        std::uint64_t position;
        session_id session;
        std::vector<std::uint64_t> keys;
    };
    // Positions of the requests that read one key, ascending, from `head`.
    // Invariant between calls: the front one (if any) is live.
    struct reads {
        std::vector<std::uint64_t> positions;
        std::uint32_t head = 0;

        [[nodiscard]] bool empty() const noexcept { return head == positions.size(); }
        [[nodiscard]] std::uint64_t front() const noexcept { return positions[head]; }
        [[nodiscard]] const std::uint64_t* live_front() const noexcept { return empty() ? nullptr : &positions[head]; }
        void drop_dead_front(const std::unordered_set<std::uint64_t>& live) {
            while (!empty() && !live.contains(positions[head])) ++head;
            if (head > 0 && head * 2 >= positions.size()) {  // keep the vector from growing without bound
                positions.erase(positions.begin(), positions.begin() + head);
                head = 0;
            }
        }
    };

    std::unordered_map<std::uint64_t, queued_request> requests_;
    std::unordered_map<std::uint64_t, reads> reads_;  // only keys some queued request reads
    std::unordered_set<std::uint64_t> live_;          // positions of queued requests
    std::uint64_t next_position_ = 0;
    std::size_t blocks_ = 0;
};

}  // namespace kvpolicy
