// Offload replay (kvpolicy/sim/replay.hpp's offload mode): a CPU offloading
// tier arranged as vLLM arranges it (0.33: KVCacheManager's prefix cache in
// front of the OffloadingConnector and its CPUOffloadingManager), with the
// policy under test deciding the CPU tier's victims. Requests are served one
// at a time, in arrival order, with the waiting queue of served_requests.
//
// - GPU: vLLM's prefix cache of `capacity` blocks, not a policy under test
//   (freed_block_lru). A request's GPU hit is its longest cached prefix.
// - CPU: the policy through engine::cache_policy_core, called as kvpolicy's
//   vLLM adapter calls it (python/src/vllm_policy.cpp):
//   1. lookup from the GPU hit's end, stopping at the first chunk not held;
//      the chunks found are loaded (pinned, then unpinned);
//   2. the request's full blocks are offered for storing, from its start,
//      or past what it loaded if it loaded any (vLLM's chunk-level store
//      index), one engine step's blocks at a time (`prefill_chunk` tokens
//      a step; the first step's offer starts at the request's start); a
//      held chunk offered counts as reused, the others are inserted after
//      the policy frees room, no chunk of the offer a victim, and none of
//      the offer stored if there is not room enough (with store_admission,
//      those the policy admits: cache_policy_core::admissible);
//   3. at its end each chunk it loaded, stored or reused is released, tail
//      to head, a reused or loaded one as a hit.
//   The policy hears the queue (enqueue / dequeue) where it can, as
//   kvpolicy's connector tells it: arrival with the request's block keys,
//   and leaving the queue after its lookup, when the scheduler has admitted
//   it. With queue_past_gpu, arrival tells only the keys past the GPU hit
//   engine::front_cache_forecast expects when the request starts.
// - What vLLM hashes: full blocks only. A prompt's last partial block is
//   computed and never cached; a hit stops before the prompt's last token
//   (vLLM always computes it).
//
// With policy `belady` the CPU tier is Belady's MIN over the CPU tier's
// reads (offload_min_hits): an upper bound on any policy's CPU hits here,
// looser than reachable since MIN counts a chunk whose prefix is gone.
//
// What vLLM does and this does not: requests run concurrently (vLLM's batch
// holds GPU blocks that here are free for the prefix cache, and a request
// may start before the one whose blocks it reads has stored them), decode
// tokens fill blocks that are stored too, and stores complete a step after
// they are issued. docs/getting-started/vllm.md compares the two on the
// same traces and loads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/engine/cache_policy_core.hpp"
#include "kvpolicy/sim/offload_min.hpp"
#include "kvpolicy/engine/front_cache_forecast.hpp"
#include "kvpolicy/eviction/belady.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/served_requests.hpp"

namespace kvpolicy::sim {

/// vLLM's GPU prefix cache as a one-request-at-a-time replay sees it
/// (KVCacheManager with prefix caching): `capacity` blocks; a free block
/// keeps its hash until it is allocated again, least recently freed first;
/// a request frees its blocks tail first, so its prefix outlives its tail.
class freed_block_lru {
public:
    explicit freed_block_lru(std::size_t capacity) : capacity_(capacity) {}

    /// The longest prefix of `keys` (at most `max` blocks) cached.
    [[nodiscard]] std::size_t hit(std::span<const std::uint64_t> keys, std::size_t max) const {
        std::size_t n = 0;
        while (n < std::min(max, keys.size()) && where_.contains(keys[n])) ++n;
        return n;
    }

    /// A request of `blocks` blocks (at most the capacity) ran, its first
    /// `hit` of them cached ones; its first `full` keys are cached after it.
    void serve(std::span<const std::uint64_t> keys, std::size_t hit, std::size_t blocks, std::size_t full) {
        for (std::size_t i = 0; i < hit; ++i) take(keys[i]);
        // Its new blocks come off the free list's front.
        while (free_.size() > capacity_ - blocks) {
            where_.erase(free_.front());
            free_.pop_front();
        }
        for (std::size_t i = full; i-- > 0;) {
            take(keys[i]);
            free_.push_back(keys[i]);
            where_[keys[i]] = std::prev(free_.end());
        }
    }

    [[nodiscard]] bool holds(std::uint64_t key) const { return where_.contains(key); }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
    void take(std::uint64_t key) {
        if (const auto it = where_.find(key); it != where_.end()) {
            free_.erase(it->second);
            where_.erase(it);
        }
    }

    std::size_t capacity_;
    std::list<std::uint64_t> free_;  // least recently freed first
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> where_;
};

/// The CPU tier of vLLM's offloading connector with policy `P` deciding
/// its victims, driven as kvpolicy's vLLM adapter drives it.
template <eviction_policy P>
class offload_tier {
public:
    offload_tier(std::size_t capacity, const typename P::config_type& config, bool admission = false)
            : core_(capacity, config), key_of_(capacity, 0), admission_(admission) {
        free_.reserve(capacity);
        for (std::size_t i = capacity; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    }

    void enqueue(std::uint64_t request, session_id session, std::span<const std::uint64_t> keys) {
        core_.enqueue(request, session, keys);
    }
    void dequeue(std::uint64_t request, const access_context& ctx) { core_.dequeue(request, ctx); }

    /// How many of keys[from, max) the tier holds, consecutively from `from`.
    [[nodiscard]] std::size_t lookup(std::span<const std::uint64_t> keys, std::size_t from, std::size_t max) const {
        std::size_t n = 0;
        while (from + n < max && slot_.contains(keys[from + n])) ++n;
        return n;
    }

    /// Loads keys[from, from + n) (all held): each pinned while it is read.
    void load(std::span<const std::uint64_t> keys, std::size_t from, std::size_t n, const access_context& ctx) {
        for (std::size_t i = from; i < from + n; ++i) {
            const std::uint32_t id = slot_.at(keys[i]);
            core_.mark_non_evictable(id);
            core_.mark_evictable(id, unnamed(ctx));
            touched_.emplace_back(keys[i], true);
        }
    }

    /// Offers `offered` for storing; returns how many were stored (0 if the
    /// policy could not free room for all that are new). With admission,
    /// the new ones past the free room only as far as the policy admits.
    std::size_t store(std::span<const std::uint64_t> offered, const access_context& ctx) {
        std::vector<std::uint64_t> fresh;
        std::vector<std::uint32_t> kept;
        for (std::uint64_t key : offered) {
            if (const auto it = slot_.find(key); it != slot_.end()) {
                kept.push_back(it->second);
                touched_.emplace_back(key, true);
            } else if (std::find(fresh.begin(), fresh.end(), key) == fresh.end()) {
                fresh.push_back(key);
            }
        }
        if (admission_) {
            const std::size_t offered_fresh = fresh.size();
            fresh.resize(core_.admissible(fresh, free_.size(), kept.size(), ctx));
            declined_ += offered_fresh - fresh.size();
        }
        if (fresh.empty()) return 0;
        if (fresh.size() > free_.size()) {
            const auto victims = core_.evict(fresh.size() - free_.size(), kept, ctx);
            if (!victims) return 0;
            for (std::uint32_t id : *victims) {
                slot_.erase(key_of_[id]);
                free_.push_back(id);
            }
            evictions_ += victims->size();
        }
        for (std::uint64_t key : fresh) {
            const std::uint32_t id = free_.back();
            free_.pop_back();
            access_context c = ctx;
            c.key = key;
            core_.insert(id, c, /*evictable=*/false);  // storing
            core_.mark_evictable(id, unnamed(c));      // the store completed
            slot_.emplace(key, id);
            key_of_[id] = key;
            touched_.emplace_back(key, false);
        }
        return fresh.size();
    }

    /// The request ended: what it touched is released tail to head.
    void finish(const access_context& ctx) {
        for (auto it = touched_.rbegin(); it != touched_.rend(); ++it)
            if (const auto s = slot_.find(it->first); s != slot_.end()) core_.finish(s->second, it->second, ctx);
        touched_.clear();
        core_.end_request(ctx.session, ctx);
        if (ctx.expected_return == never && ctx.session.value != 0) core_.end_session(ctx.session, ctx);
    }

    [[nodiscard]] std::uint64_t evictions() const noexcept { return evictions_; }
    /// Chunks offered and not stored: the policy ranked each as the next victim.
    [[nodiscard]] std::uint64_t declined() const noexcept { return declined_; }

private:
    // vLLM's manager completes a load or a store knowing no request: the
    // adapter's mark_evictable names no session.
    static access_context unnamed(const access_context& ctx) noexcept {
        access_context c;
        c.now = ctx.now;
        c.key = ctx.key;
        return c;
    }

    engine::cache_policy_core<P> core_;
    std::unordered_map<std::uint64_t, std::uint32_t> slot_;  // held key -> slot
    std::vector<std::uint64_t> key_of_;                      // [capacity] slot -> key (of a held slot)
    std::vector<std::uint32_t> free_;                        // slots free, next at the back
    std::vector<std::pair<std::uint64_t, bool>> touched_;    // this request's chunks, head first; true: reused
    std::uint64_t evictions_ = 0;
    std::uint64_t declined_ = 0;
    bool admission_;  // store only what core_.admissible admits
};

/// Offload replay of policy `P` over `source` (see the file's comment):
/// `cfg.capacity` GPU blocks, `cfg.cpu_capacity` CPU chunks. `hits` counts
/// the blocks a request did not compute (GPU and CPU hits), `accesses` its
/// full blocks; a request longer than the GPU is refused (vLLM's
/// max_model_len) and counted in `bypassed_requests`.
template <eviction_policy P, class RequestSource>
replay_result replay_offload(RequestSource& source, const request_replay_config& cfg,
                             const typename P::config_type& config = {}) {
    if (cfg.capacity == 0 || cfg.cpu_capacity == 0)
        throw config_error("offload mode: GPU capacity " + std::to_string(cfg.capacity) + " and CPU capacity " +
                           std::to_string(cfg.cpu_capacity) + " blocks; give both > 0 (--capacity, --cpu-capacity)");
    constexpr bool bound = std::is_same_v<P, belady>;
    replay_result r;
    r.policy = std::string(P::name);
    r.capacity = cfg.capacity;
    r.cpu_capacity = cfg.cpu_capacity;
    r.mode = replay_mode::offload;
    freed_block_lru gpu(cfg.capacity);
    std::optional<offload_tier<P>> cpu;
    if constexpr (!bound) cpu.emplace(cfg.cpu_capacity, config, cfg.store_admission);
    std::vector<offload_access> reads;           // belady: the CPU tier's references
    std::unordered_set<std::uint64_t> computed;  // every block some request computed (re-prefill)
    served_requests<RequestSource> served(source, cfg, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    pending_request p;
    // The session a client names (kvpolicy.session): the trace's, or the
    // derived one where hints (naming the session they end) are replayed.
    auto named = [&](const pending_request& q) {
        return q.req.has_session || cfg.expected_returns ? q.session : session_id{};
    };
    // queue_past_gpu: each queued request told past its forecast GPU hit.
    // The forecast hears every request in service order: one starts, then
    // those that arrived meanwhile join behind it (`arrived`), and each
    // leaves when it has run.
    std::optional<engine::front_cache_forecast> forecast;
    if (cfg.queue_past_gpu) forecast.emplace(cfg.capacity);
    std::vector<pending_request*> arrived;
    // A request longer than the GPU never reaches the scheduler, nor its queue.
    auto tell_queue = [&](pending_request& q) {
        if constexpr (!bound) {
            if (q.req.hash_ids.size() > cfg.capacity) return;
            const std::span<const std::uint64_t> keys(q.req.hash_ids);
            const std::size_t g =
                forecast ? forecast->join(q.index, keys, [&](std::uint64_t k) { return gpu.holds(k); }) : 0;
            cpu->enqueue(q.index, named(q), keys.subspan(g));
        }
    };
    auto enqueue = [&](pending_request& q) {
        if (forecast)
            arrived.push_back(&q);
        else
            tell_queue(q);
    };
    while (served.next(p, enqueue)) {
        if (forecast) {
            if (!p.queued && p.req.hash_ids.size() <= cfg.capacity)
                (void)forecast->join(p.index, p.req.hash_ids, [](std::uint64_t) { return false; });
            for (pending_request* q : arrived) tell_queue(*q);
            arrived.clear();
        }
        const request_record& req = p.req;
        const std::span<const std::uint64_t> keys(req.hash_ids);
        const std::size_t n = keys.size();
        const std::uint64_t tokens = std::max<std::uint64_t>(req.input_length, n * cfg.block_size);
        const std::size_t full = std::min<std::size_t>(n, req.input_length / cfg.block_size);
        const std::size_t max_hit = req.input_length == 0 ? 0 : std::min(full, (req.input_length - 1) / cfg.block_size);
        ++r.requests;
        access_context ctx;
        ctx.now = p.now;
        ctx.session = named(p);
        if (n > cfg.capacity) {  // longer than the GPU's KV cache: refused, never scheduled
            ++r.bypassed_requests;
            served.served(0);
            continue;
        }
        r.accesses += n;
        r.tokens += tokens;
        const std::size_t g = gpu.hit(keys, max_hit);
        std::size_t c = 0;
        if constexpr (bound) {
            for (std::size_t i = g; i < max_hit; ++i) reads.push_back({true, keys[i]});
            for (std::size_t i = 0; i < full; ++i) reads.push_back({false, keys[i]});
        } else {
            c = cpu->lookup(keys, g, max_hit);
            cpu->load(keys, g, c, ctx);
            if (p.queued) cpu->dequeue(p.index, ctx);
            // Each step stores what it computed, the first also what came
            // before from the GPU unless the request loaded from the CPU.
            const std::size_t step =
                cfg.prefill_chunk == 0 ? full : std::max<std::size_t>(1, cfg.prefill_chunk / cfg.block_size);
            for (std::size_t from = c > 0 ? g + c : 0, to = g + c; from < full; from = to) {
                to = std::min(full, to + step);
                (void)cpu->store(keys.subspan(from, to - from), ctx);
            }
            if (cfg.expected_returns && p.index < cfg.expected_returns->size())
                ctx.expected_return = (*cfg.expected_returns)[p.index];
            ctx.output_tokens = req.output_length;
            cpu->finish(ctx);
        }
        gpu.serve(keys, g, n, full);
        for (std::size_t i = 0; i < n; ++i)
            if (!computed.insert(keys[i]).second && i >= g + c) ++r.reprefill_blocks;
        r.gpu_hits += g;
        r.cpu_hits += c;
        r.hits += g + c;
        r.misses += n - g - c;
        const std::uint64_t hit_tokens = std::min<std::uint64_t>((g + c) * cfg.block_size, tokens);
        r.hit_tokens += hit_tokens;
        served.served(tokens - hit_tokens);
        if (forecast) (void)forecast->leave(p.index);  // its blocks are the GPU's free list's now
    }
    if constexpr (bound) {
        r.cpu_hits = offload_min_hits(reads, cfg.cpu_capacity);
        r.hits += r.cpu_hits;
        r.misses -= r.cpu_hits;
        r.hit_tokens += r.cpu_hits * cfg.block_size;  // every read is of a full block
    } else {
        r.evictions = cpu->evictions();
        r.declined_stores = cpu->declined();
    }
    served.report(r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace kvpolicy::sim
