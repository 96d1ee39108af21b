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
// read it, ascending (positions only grow, so an enqueue appends), as a list
// of nodes from one pool. A request that leaves the queue (started or
// dropped) is marked dead in a dense array indexed by position, and each of
// its keys drops dead positions from its front: every position is appended
// and removed once, so enqueue and dequeue cost O(1) amortised per block with
// no allocation once the pool has grown, and a dead position behind a live
// one waits, harmlessly, until it reaches the front. Keys find their lists
// through a key_index (open addressing, no allocation per key), rebuilt at
// twice the size when full, before anything of the call changes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/key_index.hpp"

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
        reserve_keys(keys.size());
        const std::uint64_t position = next_position_++;
        requests_.emplace(request, queued_request{position, session, {keys.begin(), keys.end()}});
        alive_.push_back(1);
        blocks_ += keys.size();
        for (std::uint64_t key : keys) {
            std::uint32_t slot = key_slots_.find(key);
            if (slot == no_index) slot = new_reads(key);
            reads& r = reads_[slot];
            const bool first = r.head == no_node;
            const std::uint32_t n = new_node(position);
            if (first)
                r.head = n;
            else
                nodes_[r.tail].next = n;
            r.tail = n;
            if (first) now_read(key, position);
        }
    }

    /// Records that request `request` left the queue: it started, or it was
    /// dropped. Calls `changed(key, next)`, last key first (as a finished
    /// request releases its blocks, so a dropped request's tail goes before
    /// its prefix), for every key whose earliest read was this request:
    /// `next` is the position of the next queued request that reads it, or
    /// empty if none does. Returns the request's session.
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
        alive_[q.position - alive_base_] = 0;
        blocks_ -= q.keys.size();
        for (auto k = q.keys.rbegin(); k != q.keys.rend(); ++k) {
            const std::uint64_t key = *k;
            const std::uint32_t slot = key_slots_.find(key);
            if (slot == no_index) continue;  // a key twice in the request: done at its first
            std::uint32_t& head = reads_[slot].head;
            if (nodes_[head].position != q.position) continue;  // an earlier request still reads it first
            while (head != no_node && !alive(nodes_[head].position)) {
                const std::uint32_t dead = head;
                head = nodes_[dead].next;
                free_node(dead);
            }
            if (head == no_node) {
                key_slots_.erase(key);
                reads_[slot] = {};
                free_reads_.push_back(slot);
                changed(key, std::optional<std::uint64_t>{});
            } else {
                changed(key, std::optional<std::uint64_t>{nodes_[head].position});
            }
        }
        trim_alive();
        return q.session;
    }

    /// The position of the earliest queued request that reads `key`, or
    /// empty if none does. O(1) expected.
    [[nodiscard]] std::optional<std::uint64_t> next_read(std::uint64_t key) const noexcept {
        const std::uint32_t slot = key_slots_.find(key);
        if (slot == no_index) return std::nullopt;
        return nodes_[reads_[slot].head].position;
    }

    [[nodiscard]] bool contains(std::uint64_t request) const noexcept { return requests_.contains(request); }
    /// Queued requests.
    [[nodiscard]] std::size_t size() const noexcept { return requests_.size(); }
    [[nodiscard]] bool empty() const noexcept { return requests_.empty(); }
    /// Keys the queued requests read, counted once per request.
    [[nodiscard]] std::size_t queued_reads() const noexcept { return blocks_; }
    /// Distinct keys some queued request reads.
    [[nodiscard]] std::size_t queued_keys() const noexcept { return key_slots_.size(); }

private:
    static constexpr std::uint32_t no_node = ~std::uint32_t{0};
    struct queued_request {
        std::uint64_t position;
        session_id session;
        std::vector<std::uint64_t> keys;
    };
    struct node {
        std::uint64_t position;
        std::uint32_t next;
    };
    // The positions of the queued requests that read one key, ascending, as
    // a list of pool nodes. Invariant between calls: the head is live.
    struct reads {
        std::uint32_t head = no_node;
        std::uint32_t tail = no_node;
    };

    // Room in key_slots_ for `more` new keys: a table twice the size, the
    // keys moved over, when they would not fit. Throws: usage_error past
    // 2^29 keys, before anything changes.
    void reserve_keys(std::size_t more) {
        if (key_slots_.size() + more <= key_slots_.capacity()) return;
        std::size_t capacity = std::max<std::size_t>(key_slots_.capacity(), 1024);
        while (capacity < key_slots_.size() + more) capacity *= 2;
        if (capacity >= (std::size_t{1} << 30))
            throw usage_error("enqueue: " + std::to_string(key_slots_.size() + more) +
                              " distinct queued keys would be more than 2^29; dequeue requests that started");
        key_index bigger(capacity);
        for (std::uint32_t slot = 0; slot < reads_.size(); ++slot)
            if (reads_[slot].head != no_node) bigger.insert(read_keys_[slot], slot);
        key_slots_ = std::move(bigger);
    }
    // A slot for a new key's list, its entry in key_slots_ made (reserve_keys came first).
    std::uint32_t new_reads(std::uint64_t key) {
        std::uint32_t slot;
        if (!free_reads_.empty()) {
            slot = free_reads_.back();
            free_reads_.pop_back();
            read_keys_[slot] = key;
        } else {
            slot = static_cast<std::uint32_t>(reads_.size());
            reads_.emplace_back();
            read_keys_.push_back(key);
        }
        key_slots_.insert(key, slot);
        return slot;
    }
    std::uint32_t new_node(std::uint64_t position) {
        if (free_nodes_ != no_node) {
            const std::uint32_t n = free_nodes_;
            free_nodes_ = nodes_[n].next;
            nodes_[n] = {position, no_node};
            return n;
        }
        if (nodes_.size() >= no_node)
            throw usage_error("enqueue: more than 2^32 - 1 queued block reads; dequeue requests that started");
        nodes_.push_back({position, no_node});
        return static_cast<std::uint32_t>(nodes_.size() - 1);
    }
    void free_node(std::uint32_t n) noexcept {
        nodes_[n].next = free_nodes_;
        free_nodes_ = n;
    }
    [[nodiscard]] bool alive(std::uint64_t position) const noexcept {
        return position >= alive_base_ && alive_[position - alive_base_] != 0;
    }
    // Moves alive_head_ past the dead positions at the front of alive_ (each
    // once), and drops them in batches, so that alive_ spans only from the
    // oldest queued request on.
    void trim_alive() {
        while (alive_head_ < alive_.size() && alive_[alive_head_] == 0) ++alive_head_;
        if (alive_head_ == alive_.size() || alive_head_ >= 4096) {
            alive_.erase(alive_.begin(), alive_.begin() + static_cast<std::ptrdiff_t>(alive_head_));
            alive_base_ += alive_head_;
            alive_head_ = 0;
        }
    }

    std::unordered_map<std::uint64_t, queued_request> requests_;
    key_index key_slots_;                   // each key some queued request reads -> its slot in reads_
    std::vector<reads> reads_;              // [slot] a key's list; head no_node for a free slot
    std::vector<std::uint64_t> read_keys_;  // [slot] its key
    std::vector<std::uint32_t> free_reads_;
    std::vector<node> nodes_;  // every list's nodes; the free ones linked from free_nodes_
    std::uint32_t free_nodes_ = no_node;
    std::vector<std::uint8_t> alive_;  // [position - alive_base_]: 1 while queued
    std::uint64_t alive_base_ = 0;     // the position of alive_[0]
    std::size_t alive_head_ = 0;       // alive_[0, alive_head_) are all 0
    std::uint64_t next_position_ = 0;
    std::size_t blocks_ = 0;
};

}  // namespace kvpolicy
