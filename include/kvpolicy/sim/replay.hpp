// Replay engines: drive a policy, or the real cache type, with a trace.
//
// - flat: every block access is independent, as in generic cache
//   simulators: a hit touches the item; a miss is announced (on_miss),
//   evicts one victim when full and inserts. Logical time is the access index.
// - prefix: request level, one tier, through `tiered_cache`: a request hits
//   the longest cached prefix of its hash ids; every block after the first
//   miss is recomputed (a recomputed block still cached is touched, not
//   duplicated); the request's blocks are held while it is served, so they
//   cannot evict each other. Requests are served one at a time in trace
//   order and finish before the next (the trace gives arrivals, not
//   completions). A request longer than the whole tier cannot be held at
//   once: it is served uncached (every block a miss, nothing inserted) and
//   counted in `bypassed_requests`.
// - tiered: the same with a CPU tier below the GPU tier; CPU hits are
//   swapped in, GPU victims sheltered, CPU victims dropped. With
//   `num_layers` > 1 each block is that many layer-chunk items (seed 000).
// Belady needs the future: its engines take the whole trace in memory and
// pass every access's next use; every other policy streams.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <concepts>
#include <functional>
#include <istream>
#include <list>
#include <memory>
#include <limits>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvpolicy/cache/remote_tier.hpp"
#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/cost/pensieve_linear.hpp"
#include "kvpolicy/eviction/runtime_choice.hpp"
#include "kvpolicy/sim/critical_path.hpp"
#include "kvpolicy/sim/trace.hpp"

namespace kvpolicy::sim {

enum class replay_mode : std::uint8_t { flat, prefix, tiered };

[[nodiscard]] inline std::string_view to_string(replay_mode m) noexcept {
    switch (m) {
        case replay_mode::flat: return "flat";
        case replay_mode::prefix: return "prefix";
        case replay_mode::tiered: return "tiered";
    }
    return "?";
}

struct replay_result {
    std::string policy;
    std::string built_for;     ///< the policy's built_for<P>() (empty: any setting); tables note it
    std::size_t capacity = 0;  ///< blocks (the GPU tier's, in tiered mode)
    replay_mode mode = replay_mode::flat;
    std::uint64_t requests = 0;
    std::uint64_t accesses = 0;  ///< block accesses
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t evictions = 0;
    double seconds = 0;  ///< replay wall time
    // prefix and tiered
    std::uint64_t tokens = 0;
    std::uint64_t hit_tokens = 0;
    std::uint64_t bypassed_requests = 0;
    // tiered
    std::size_t cpu_capacity = 0;
    std::uint64_t gpu_hits = 0;
    std::uint64_t cpu_hits = 0;
    std::uint64_t recomputed_blocks = 0;  ///< misses on blocks the cache had held and dropped
    std::uint64_t swap_out_blocks = 0;
    double prefill_seconds_saved = 0;
    // tiered (replay_requests): seconds until each request's KV is ready,
    // with seed 000's layer-wise pipeline (kvpolicy/sim/critical_path.hpp)
    double ready_s_total = 0;
    double ready_s_mean = 0;
    double ready_s_p99 = 0;
    // remote tier (replay_instances)
    std::size_t instances = 1;
    std::size_t remote_capacity = 0;          ///< blocks of the remote store (shared, or split evenly)
    std::uint64_t remote_hits = 0;            ///< blocks staged from the store that arrived
    std::uint64_t remote_failed_fetches = 0;  ///< staged blocks the store had dropped by fetch time
    double isolated_hit_ratio = -1;           ///< the same instances, each with its own share of the store
    // the waiting queue (request_replay_config::lookahead, serve_rate)
    bool queue_modelled = false;
    double queue_depth_mean = 0;  ///< requests queued when each request started
    std::size_t queue_depth_p50 = 0;
    std::size_t queue_depth_p99 = 0;
    // prefix and tiered: seed 002's figures
    std::uint64_t sessions = 0;        ///< sessions with a lookup (named by the trace, else derived)
    double fairness = std::numeric_limits<double>::quiet_NaN();  ///< Jain's index over sessions' hit ratios
    std::uint64_t reprefill_blocks = 0;  ///< missed blocks an earlier request had computed (KV computed again)
    // filled by the simulator from the other runs at the same capacity
    double gap_closed = std::numeric_limits<double>::quiet_NaN();  ///< of the LRU -> Belady gap
    double ready_gap_closed = std::numeric_limits<double>::quiet_NaN();  ///< of LRU's -> Belady's total ready time
    std::size_t lru_match_capacity = 0;  ///< least capacity reaching LRU's hit ratio here; 0 = not computed
    bool lru_match_unreachable = false;  ///< computed, and not reached below the distinct blocks
    bad_line_report bad_lines;

    [[nodiscard]] double hit_ratio() const noexcept {
        return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
    }
    [[nodiscard]] double miss_ratio() const noexcept { return accesses == 0 ? 0.0 : 1.0 - hit_ratio(); }
    [[nodiscard]] double token_hit_ratio() const noexcept {
        return tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(tokens);
    }
    /// Share of the prefill (block accesses, so tokens up to each request's
    /// partial last block) that computes KV an earlier request had computed:
    /// every miss that is not the block's first appearance in the trace.
    [[nodiscard]] double re_prefill_share() const noexcept {
        return accesses == 0 ? 0.0 : static_cast<double>(reprefill_blocks) / static_cast<double>(accesses);
    }
    [[nodiscard]] double accesses_per_second() const noexcept {
        return seconds > 0 ? static_cast<double>(accesses) / seconds : 0.0;
    }
};

/// An access stream in memory, with each access's next use (for Belady).
struct oracle_accesses {
    std::vector<std::uint64_t> keys;
    std::vector<std::uint32_t> sizes;
    std::vector<timestamp> next_use;  ///< index of the key's next access, or `never`

    /// Fills `next_use` with one backward pass.
    void compute_next_use() {
        next_use.assign(keys.size(), never);
        std::unordered_map<std::uint64_t, timestamp> seen;
        seen.reserve(keys.size() / 4 + 16);
        for (std::size_t i = keys.size(); i-- > 0;) {
            auto [it, fresh] = seen.try_emplace(keys[i], static_cast<timestamp>(i + 1));
            if (!fresh) {
                next_use[i] = it->second;
                it->second = static_cast<timestamp>(i + 1);
            }
        }
    }
};

/// Where each resident key lives, for flat replay. Trace ids are dense
/// (0 .. distinct-1) and requests read consecutive ones, so a direct array
/// indexed by id, grown to the largest id seen, keeps neighbouring lookups
/// in neighbouring memory: 3x the throughput of hashing every key on the
/// agentic trace. Ids that would make the array sparse (beyond 16 slots per
/// cached key and above 2^20) switch the map to a `key_index` for good.
class flat_slot_map {
public:
    explicit flat_slot_map(std::size_t capacity) : capacity_(capacity) {}

    [[nodiscard]] std::uint32_t find(std::uint64_t key) const noexcept {
        if (hashed_) return index_.find(key);
        return key < direct_.size() ? direct_[key] : no_index;
    }
    void insert(std::uint64_t key, std::uint32_t slot) {
        if (!hashed_ && key >= direct_.size()) {
            const std::uint64_t limit = std::max<std::uint64_t>(std::uint64_t{1} << 20, 16 * std::uint64_t{capacity_});
            if (key < limit) direct_.resize(std::min<std::uint64_t>(limit, std::max<std::uint64_t>(key + 1, 2 * direct_.size())), no_index);
            else switch_to_hashing();
        }
        if (hashed_) index_.insert(key, slot);
        else direct_[key] = slot;
    }
    void erase(std::uint64_t key) noexcept {
        if (hashed_) index_.erase(key);
        else direct_[key] = no_index;
    }

private:
    void switch_to_hashing() {
        index_ = key_index(capacity_);
        for (std::uint64_t k = 0; k < direct_.size(); ++k)
            if (direct_[k] != no_index) index_.insert(k, direct_[k]);
        direct_ = {};
        hashed_ = true;
    }

    std::size_t capacity_;
    bool hashed_ = false;
    std::vector<std::uint32_t> direct_;  // [largest id + 1] slot or no_index
    key_index index_;
};

/// A source that can hand over many records at once (csv_reader): replay
/// loops then run over a local array instead of a call per record.
template <class Source>
concept batch_source = requires(Source& s, std::span<access_record> out) {
    { s.next_batch(out) } -> std::convertible_to<std::size_t>;
};

/// Flat replay: records from `source` (`next_batch` if it has one, else
/// `next(access_record&)`); `next_use(i)` gives the i-th access's next use
/// (`never` for online policies).
template <eviction_policy Policy, class Source, class NextUse>
replay_result replay_flat(Source& source, std::size_t capacity, NextUse next_use,
                          const typename Policy::config_type& config = {}) {
    replay_result r;
    r.policy = std::string(Policy::name);
    r.capacity = capacity;
    r.mode = replay_mode::flat;
    Policy policy(capacity, config);
    flat_slot_map where(capacity);                 // key -> slot
    std::vector<std::uint64_t> key_of(capacity);  // [capacity] slot -> key
    std::uint32_t used = 0;
    std::uint64_t accesses = 0, hits = 0, misses = 0, evictions = 0;
    access_context ctx;
    auto replay_one = [&](const access_record& a) {
        // Logical time is the 1-based access index; it is also what next_use counts.
        ctx.now = ++accesses;
        ctx.key = a.obj_id;
        ctx.size = static_cast<std::uint32_t>(std::max<std::uint64_t>(a.obj_size, 1));
        ctx.next_use = next_use(accesses - 1);
        std::uint32_t slot = where.find(a.obj_id);
        if (slot != no_index) {
            ++hits;
            policy.on_access(item_id{slot}, ctx);
            return;
        }
        ++misses;
        policy.on_miss(ctx);
        if (used == capacity) {
            // Through pop_victims into a plain item_id: GCC built pop_victim's
            // optional on the stack in two narrow stores and read it back in
            // one wide load, a store-forwarding stall on every eviction (30%
            // of an LRU replay at 10^4 blocks). Nothing is held here, so a
            // victim always exists.
            item_id victim{0};
            (void)policy.pop_victims(std::span<item_id>(&victim, 1), ctx.now);
            slot = victim.value;
            where.erase(key_of[slot]);
            ++evictions;
        } else {
            slot = used++;
        }
        where.insert(a.obj_id, slot);
        key_of[slot] = a.obj_id;
        policy.on_insert(item_id{slot}, ctx);
    };
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (batch_source<Source>) {
        std::vector<access_record> batch(4096);  // 96 KiB: stays in L2 beside the policy's arrays
        for (std::size_t n; (n = source.next_batch(batch)) > 0;)
            for (std::size_t i = 0; i < n; ++i) replay_one(batch[i]);
    } else {
        for (access_record a; source.next(a);) replay_one(a);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.accesses = accesses;
    r.hits = hits;
    r.misses = misses;
    r.evictions = evictions;
    return r;
}

/// Reads an oracle stream back as access records.
class oracle_source {
public:
    explicit oracle_source(const oracle_accesses& a) : a_(&a) {}
    bool next(access_record& out) noexcept {
        if (i_ == a_->keys.size()) return false;
        out.obj_id = a_->keys[i_];
        out.obj_size = a_->sizes.empty() ? 1 : a_->sizes[i_];
        ++i_;
        return true;
    }

private:
    const oracle_accesses* a_;
    std::size_t i_ = 0;
};

/// Flat accesses of a request stream: each hash id, in order.
template <class RequestSource>
class flattened_requests {
public:
    explicit flattened_requests(RequestSource& s) : source_(&s) {}
    bool next(access_record& out) {
        while (i_ == request_.hash_ids.size()) {
            if (!source_->next(request_)) return false;
            i_ = 0;
        }
        out.time = request_.timestamp_ms;
        out.obj_id = request_.hash_ids[i_++];
        out.obj_size = 1;
        return true;
    }
    /// As csv_reader::next_batch: 0 only at the end.
    std::size_t next_batch(std::span<access_record> out) {
        std::size_t n = 0;
        while (n < out.size()) {
            if (i_ == request_.hash_ids.size()) {
                if (n > 0 || !source_->next(request_)) break;  // an error never takes rows with it
                i_ = 0;
                continue;
            }
            const std::size_t take = std::min(out.size() - n, request_.hash_ids.size() - i_);
            for (std::size_t k = 0; k < take; ++k)
                out[n + k] = {request_.timestamp_ms, request_.hash_ids[i_ + k], 1};
            n += take;
            i_ += take;
        }
        return n;
    }

private:
    RequestSource* source_;
    request_record request_;
    std::size_t i_ = 0;
};

/// Requests held in memory (the built-in workload, or a trace read for Belady).
class vector_request_source {
public:
    explicit vector_request_source(const std::vector<request_record>& r) : requests_(&r) {}
    bool next(request_record& out) {
        if (i_ == requests_->size()) return false;
        out = (*requests_)[i_++];
        return true;
    }

private:
    const std::vector<request_record>* requests_;
    std::size_t i_ = 0;
};

/// Sessions for traces that do not name them (Mooncake's JSONL has no
/// session field). A conversation's next turn repeats its history: its
/// prompt starts with every full block of the previous turn's prompt (the
/// last, partial block changes as the answer is appended). So a request
/// joins the session of the earlier request whose last full block is the
/// deepest of its own blocks; otherwise it opens a new session. A block is
/// registered only by the request that first computed it, so that a shared
/// system prompt (seen before, in other sessions) ties nothing together.
/// Online (earlier requests only), one hash lookup per block. On the agentic
/// trace, which names its sessions, README "kvpolicy-sim" gives how often
/// the derived session agrees with the named one.
class session_deriver {
public:
    std::uint64_t session_of(const request_record& r, std::uint32_t block_size) {
        std::uint64_t session = next_;
        for (std::size_t i = r.hash_ids.size(); i-- > 0;)
            if (auto it = owner_.find(r.hash_ids[i]); it != owner_.end()) {
                session = it->second;
                break;
            }
        if (session == next_) ++next_;
        const std::size_t full = std::min<std::size_t>(r.hash_ids.size(), r.input_length / std::max<std::uint32_t>(block_size, 1));
        bool fresh_last = false;
        for (std::size_t i = 0; i < r.hash_ids.size(); ++i) {
            const bool fresh = seen_.insert(r.hash_ids[i]).second;
            if (i + 1 == full) fresh_last = fresh;
        }
        if (full > 0 && fresh_last) owner_[r.hash_ids[full - 1]] = session;
        return session;
    }

private:
    std::unordered_map<std::uint64_t, std::uint64_t> owner_;  // last full block -> its request's session
    std::unordered_set<std::uint64_t> seen_;                   // every block computed so far
    std::uint64_t next_ = 0;
};

/// What the request-level engines need besides the policies.
struct request_replay_config {
    std::size_t capacity = 0;      ///< GPU tier, blocks
    std::size_t cpu_capacity = 0;  ///< CPU tier, blocks (tiered mode)
    std::uint32_t block_size = 16;
    std::uint32_t num_layers = 1;  ///< > 1: layer-chunk items (needs a per-layer cache type)
    pensieve_linear cost{};        ///< recompute seconds of one block from its context
    double bandwidth_bytes_per_s = 25e9;     ///< CPU -> GPU
    double remote_bandwidth_bytes_per_s = 12.5e9;  ///< remote store -> CPU (100 Gb/s; replay_instances)
    double kv_bytes_per_token = 131072;      ///< Llama-3-8B, fp16: 2 x 32 layers x 8 heads x 128 x 2 B
    /// The ready time's pipeline stages when items are whole blocks (the
    /// model's layers: Llama-3-8B has 32); with layer-chunk items, one stage
    /// per item layer (`num_layers`).
    std::uint32_t pipeline_layers = 32;
    bool skip_bad_lines = false;
    std::string trace_name = "built-in";
    /// The CPU tier's policy where its type is a runtime_choice (kvpolicy-sim's lru or checkerboard).
    std::string cpu_policy = "lru";
    /// [request]: when each request's release says its session is expected
    /// back (compute_expected_returns); null: releases carry no hint.
    /// replay_requests only.
    const std::vector<timestamp>* expected_returns = nullptr;
    /// The waiting queue the cache hears (tiered_cache::enqueue), one of:
    /// `lookahead` D > 0: before each request starts, the next D are queued;
    /// `serve_rate` > 0: one instance prefills new (uncached) tokens at this
    /// many per second, requests start in arrival order (the trace's
    /// timestamps) once the previous one is done, and the queue holds those
    /// arrived and not yet started. 0 and 0: no queue. replay_requests only.
    std::size_t lookahead = 0;
    double serve_rate = 0;
};

/// The "now" of each request, and each block's next use in those units
/// (for Belady): requests in memory.
struct request_times {
    std::vector<timestamp> now;                   // [request]
    std::vector<std::vector<timestamp>> next_use; // [request][block]
    std::size_t uncached_above = 0;  ///< requests longer than this were not counted as uses (0: none skipped)
    std::size_t longest_request = 0; ///< blocks
};

/// Monotonic request times: the trace's milliseconds in microseconds, with
/// requests in the same microsecond spread by one tick so time always moves.
inline timestamp request_time(timestamp previous, std::uint64_t timestamp_ms) noexcept {
    return std::max(previous + 1, timestamp_ms * 1000);
}

/// Each request's time on the replay's clock (request_time over the trace).
inline std::vector<timestamp> request_clock(const std::vector<request_record>& requests) {
    std::vector<timestamp> now(requests.size());
    timestamp prev = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) now[i] = prev = request_time(prev, requests[i].timestamp_ms);
    return now;
}

/// When each request's session makes its next request, on the replay's
/// clock (`never`: it makes none): the hint an engine that knew its
/// sessions' future would pass at each release
/// (tiered_cache::release(session, output_tokens, expected_return)), to
/// measure what such hints are worth. `log_error` > 0 makes each hint's gap
/// (from the request to the next) off by a factor e^(log_error x z), z
/// standard normal from `seed` and the request's index: such a hint explains
/// v / (v + log_error^2) of the variance of the log gap, v its variance (on
/// the agentic trace v = 1.49^2, so 1 explains 69%, 3 explains 20%, about
/// what session_aware_lru's own fit does). Sessions are
/// the trace's, or derived from prefixes as replay_requests derives them.
/// Throws: config_error if `log_error` is negative or not finite.
inline std::vector<timestamp> compute_expected_returns(const std::vector<request_record>& requests,
                                                       std::uint32_t block_size, double log_error = 0.0,
                                                       std::uint64_t seed = 1) {
    if (!(log_error >= 0.0) || !std::isfinite(log_error))
        throw config_error("return hints: log error " + std::to_string(log_error) +
                           " must be finite and >= 0 (0: exact; 1.2: a factor e^1.2 = 3.3 off, one sigma)");
    const std::vector<timestamp> now = request_clock(requests);
    std::vector<std::uint64_t> session(requests.size());
    session_deriver sessions;
    for (std::size_t i = 0; i < requests.size(); ++i)
        session[i] = requests[i].has_session ? requests[i].session : sessions.session_of(requests[i], block_size);
    // A standard normal per request by Box-Muller over two hashed uniforms:
    // the same on every platform, whatever order the runs take.
    auto normal = [seed](std::uint64_t i) {
        auto mix = [](std::uint64_t x) {
            x += 0x9e3779b97f4a7c15ULL;
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
            return x ^ (x >> 31);
        };
        const std::uint64_t a = mix(seed * 0x632be59bd9b4e019ULL + 2 * i), b = mix(a ^ (2 * i + 1));
        const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    };
    std::vector<timestamp> back(requests.size(), never);
    std::unordered_map<std::uint64_t, timestamp> next;  // session -> its next request's time
    for (std::size_t i = requests.size(); i-- > 0;) {
        const auto it = next.find(session[i]);
        if (it != next.end()) {
            double gap = static_cast<double>(it->second - now[i]);
            if (log_error > 0.0) gap *= std::exp(log_error * normal(i));
            back[i] = now[i] + static_cast<timestamp>(std::clamp(gap, 1.0, 1e18));
        }
        next[session[i]] = now[i];
    }
    return back;
}

/// The hints of an engine that knows only when a session ends (its client
/// closed the conversation, its agent finished the task): `never` on each
/// session's last request, 0 (no hint) on the others.
inline std::vector<timestamp> compute_session_ends(const std::vector<request_record>& requests,
                                                   std::uint32_t block_size) {
    std::vector<timestamp> back = compute_expected_returns(requests, block_size);
    for (timestamp& t : back) t = t == never ? never : 0;
    return back;
}

/// Hints an engine's own predictor made, to replay what they are worth: one
/// line per request of `requests`, in order: empty or 0 (no hint), `never`
/// (the session ends), or the milliseconds from the request's timestamp to
/// when its session is expected back (a non-negative number; rounded to the
/// replay's clock, at least one tick ahead). Throws: parse_error naming
/// `name`:line for a line that is none of these, config_error if the line
/// count is not the request count.
inline std::vector<timestamp> parse_expected_returns(std::istream& in, const std::string& name,
                                                     const std::vector<request_record>& requests) {
    std::vector<timestamp> back;
    back.reserve(requests.size());
    timestamp now = 0;
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t n = back.size() + 1;
        const auto first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
        const std::string v = first == std::string::npos ? std::string{} : line.substr(first, last - first + 1);
        if (back.size() == requests.size())
            throw config_error("return hints " + name + ": more lines than the trace's " +
                               std::to_string(requests.size()) + " requests; give one line per request");
        now = request_time(now, requests[back.size()].timestamp_ms);
        if (v.empty() || v == "0") {
            back.push_back(0);
            continue;
        }
        if (v == "never") {
            back.push_back(never);
            continue;
        }
        char* end = nullptr;
        const double ms = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || !(ms >= 0.0) || !std::isfinite(ms))
            throw parse_error(name, n, "'" + v + "' is not a hint: give milliseconds until the session's next "
                                       "request (a number >= 0), never, or 0 / an empty line for none");
        back.push_back(now + static_cast<timestamp>(std::clamp(std::round(ms * 1000.0), 1.0, 1e18)));
    }
    if (back.size() != requests.size())
        throw config_error("return hints " + name + ": " + std::to_string(back.size()) + " lines for the trace's " +
                           std::to_string(requests.size()) + " requests; give one line per request");
    return back;
}

/// Next uses for a replay at `capacity` blocks (0: any capacity that holds
/// every request). A request longer than the capacity is served uncached
/// (`replay_requests`): it reads nothing from the cache, so it is no use of
/// its blocks, and counting it would make Belady keep blocks for a request
/// that cannot hit them (tests/sim_belady_optimal.cpp found such a case).
inline request_times compute_request_times(const std::vector<request_record>& requests, std::size_t capacity = 0) {
    request_times t;
    t.uncached_above = capacity;
    t.now = request_clock(requests);
    for (const request_record& r : requests) t.longest_request = std::max(t.longest_request, r.hash_ids.size());
    t.next_use.resize(requests.size());
    std::unordered_map<std::uint64_t, timestamp> seen;
    for (std::size_t i = requests.size(); i-- > 0;) {
        auto& nu = t.next_use[i];
        nu.resize(requests[i].hash_ids.size());
        for (std::size_t b = 0; b < nu.size(); ++b) {
            auto it = seen.find(requests[i].hash_ids[b]);
            nu[b] = it == seen.end() ? never : it->second;
        }
        if (capacity > 0 && requests[i].hash_ids.size() > capacity) continue;  // served uncached
        for (std::uint64_t h : requests[i].hash_ids) seen[h] = t.now[i];
    }
    return t;
}

/// The configuration a replay builds policy `P` with: its default, but a
/// policy that prices recompute with the replay's kind of cost model
/// (retention_value's `pensieve_linear`) is given the replay's own, as a
/// deployment calibrates it to its GPU (kvpolicy::calibrate): its decisions
/// then weigh the costs the replay charges.
template <class P>
[[nodiscard]] typename P::config_type replay_policy_config(const request_replay_config& cfg) {
    typename P::config_type c{};
    if constexpr (requires { requires std::same_as<decltype(c.cost), pensieve_linear>; }) c.cost = cfg.cost;
    return c;
}

/// The CPU tier's config: replay_policy_config's, and for a runtime_choice
/// the alternative `cfg.cpu_policy` names, each alternative priced as above.
template <class P>
[[nodiscard]] typename P::config_type replay_cpu_policy_config(const request_replay_config& cfg) {
    if constexpr (is_runtime_choice<P>) {
        typename P::config_type c;
        c.policy = cfg.cpu_policy;
        [&]<class... As>(type_list<As...>) { c.configs = {replay_policy_config<As>(cfg)...}; }(typename P::alternatives{});
        return c;
    } else {
        return replay_policy_config<P>(cfg);
    }
}

/// Whether `t` gives the right next uses for a replay at `capacity`: only
/// if no request is longer than both, or they were computed for it.
[[nodiscard]] inline bool times_fit(const request_times& t, std::size_t capacity) noexcept {
    if (t.uncached_above == capacity) return true;
    const bool none_skipped = t.uncached_above == 0 || t.longest_request <= t.uncached_above;
    return none_skipped && t.longest_request <= capacity;
}

/// Prefix or tiered replay through `tiered_cache<Gpu, Cpu, Traits>`.
/// `times`, when given, supplies each block's next use (Belady), computed
/// for this capacity (`compute_request_times(requests, cfg.capacity)`).
/// Throws: usage_error if `times` was computed for another capacity and a
/// request is longer than one of them (its uses would be counted wrongly);
/// parse_error naming file:line for a request whose hash chain is
/// malformed (unless skipping bad lines, which counts it instead).
template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_requests(RequestSource& source, const request_replay_config& cfg, replay_mode mode,
                              const request_times* times = nullptr) {
    if (times && !times_fit(*times, cfg.capacity))
        throw usage_error("replay_requests: next uses computed for capacity " + std::to_string(times->uncached_above) +
                          " replayed at " + std::to_string(cfg.capacity) + " with a request of " +
                          std::to_string(times->longest_request) +
                          " blocks; compute them with compute_request_times(requests, capacity)");
    const std::uint32_t items = cfg.num_layers;
    tiered_cache<Gpu, Cpu, Traits> cache({.gpu_capacity = cfg.capacity * items,
                                          .cpu_capacity = mode == replay_mode::tiered ? cfg.cpu_capacity * items : 0,
                                          .block_size = cfg.block_size,
                                          .num_layers = cfg.num_layers,
                                          .items = items > 1 ? granularity::per_layer : granularity::whole_block,
                                          .item_bytes = static_cast<std::size_t>(cfg.kv_bytes_per_token) * cfg.block_size / items},
                                         replay_policy_config<Gpu>(cfg), replay_cpu_policy_config<Cpu>(cfg));
    replay_result r;
    r.policy = std::string(Gpu::name);
    r.capacity = cfg.capacity;
    r.cpu_capacity = mode == replay_mode::tiered ? cfg.cpu_capacity : 0;
    r.mode = mode;
    const double transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.bandwidth_bytes_per_s;
    if (cfg.lookahead > 0 && cfg.serve_rate > 0)
        throw config_error("the waiting queue: give a lookahead or a serve rate, not both");
    if (cfg.serve_rate < 0 || !std::isfinite(cfg.serve_rate))
        throw config_error("serve rate " + std::to_string(cfg.serve_rate) +
                           " tokens/s: give a finite rate > 0 (or 0 for no queue)");
    r.queue_modelled = cfg.lookahead > 0 || cfg.serve_rate > 0;
    if (items == 1 && cfg.pipeline_layers == 0)
        throw config_error("the ready time's pipeline: 0 model layers; give the model's layer count (Llama-3-8B: 32)");
    // The ready time (critical_path.hpp): one stage per item layer, or the
    // model's layers when an item is a whole block (its copy then spreads
    // over them, as an engine copies a block layer by layer).
    const std::uint32_t stages = items > 1 ? items : cfg.pipeline_layers;
    std::vector<stage_work> work(stages);
    std::vector<std::size_t> loads_at(items);  // [item layer]: CPU -> GPU copies this request
    ready_time_stats ready;
    // Blocks [from, n) computed at every layer; `loads_at` copied.
    auto ready_time = [&](const std::vector<std::uint64_t>& ids, std::size_t from) {
        double compute = 0;
        for (std::size_t i = from; i < ids.size(); ++i) compute += cfg.cost.cost(i * cfg.block_size);
        const double item_load_s = transfer_s / items;
        for (std::uint32_t s = 0; s < stages; ++s) {
            work[s].compute_s = compute / stages;
            work[s].load_s = items > 1 ? static_cast<double>(loads_at[s]) * item_load_s
                                       : static_cast<double>(loads_at[0]) * item_load_s / stages;
        }
        return pipelined_ready_time(work);
    };
    // Requests read from the source and not yet served: the first is served
    // next, the others queued (enqueued) once they have arrived.
    struct pending {
        request_record req;
        std::size_t index;
        timestamp now;
        session_id session;
        bool queued;
    };
    std::deque<pending> ahead;
    std::size_t read = 0;
    timestamp now = 0;
    session_deriver sessions;
    auto read_one = [&]() -> bool {
        pending p;
        if (!source.next(p.req)) return false;
        p.index = read++;
        now = times ? times->now[p.index] : request_time(now, p.req.timestamp_ms);
        p.now = now;
        p.session = session_id{p.req.has_session ? p.req.session : sessions.session_of(p.req, cfg.block_size)};
        p.queued = false;
        ahead.push_back(std::move(p));
        return true;
    };
    double free_at = 0;  // serve_rate: when the instance finishes the request it is serving
    std::vector<std::uint32_t> depths;
    std::unordered_set<std::uint64_t> seen_sessions;  // admitted with a block: those fairness counts
    std::unordered_set<std::uint64_t> computed;       // every block some request computed
    // Misses from block `from` on: count those computed before, remember all.
    auto count_reprefill = [&](const std::vector<std::uint64_t>& ids, std::size_t from) {
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const bool fresh = computed.insert(ids[i]).second;
            if (i >= from && !fresh) ++r.reprefill_blocks;
        }
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        if (ahead.empty() && !read_one()) break;
        // The queue when ahead.front() starts: the next `lookahead` requests,
        // or those arrived by the time the instance is free.
        double start = 0;
        if (cfg.lookahead > 0) {
            while (ahead.size() <= cfg.lookahead && read_one()) {}
        } else if (cfg.serve_rate > 0) {
            start = std::max(static_cast<double>(ahead.front().req.timestamp_ms) / 1000.0, free_at);
            while (static_cast<double>(ahead.back().req.timestamp_ms) / 1000.0 <= start && read_one()) {}
        }
        if (r.queue_modelled) {
            std::uint32_t depth = 0;
            for (std::size_t k = 1; k < ahead.size(); ++k) {
                pending& q = ahead[k];
                if (cfg.serve_rate > 0 && static_cast<double>(q.req.timestamp_ms) / 1000.0 > start) break;
                ++depth;
                if (!q.queued) cache.enqueue(q.index, q.session, q.req.hash_ids);
                q.queued = true;
            }
            depths.push_back(depth);
        }
        pending p = std::move(ahead.front());
        ahead.pop_front();
        const request_record& req = p.req;
        const std::size_t index = p.index;
        ++r.requests;
        cache.clock().set(p.now);
        if (p.queued) (void)cache.dequeue(index);
        const std::size_t n = req.hash_ids.size();
        r.accesses += n;
        const std::uint64_t tokens = std::max<std::uint64_t>(req.input_length, n * cfg.block_size);
        r.tokens += tokens;
        const session_id session = p.session;
        cache.begin_step();
        admission a;
        try {
            a = cache.admit(session, req.hash_ids, {},
                            times ? std::span<const timestamp>(times->next_use[index]) : std::span<const timestamp>{});
        } catch (const capacity_error&) {
            (void)cache.end_step();  // longer than the tier: served uncached
            ++r.bypassed_requests;
            r.misses += n;
            count_reprefill(req.hash_ids, 0);
            std::fill(loads_at.begin(), loads_at.end(), 0);
            ready.add(ready_time(req.hash_ids, 0));
            free_at = start + (cfg.serve_rate > 0 ? static_cast<double>(tokens) / cfg.serve_rate : 0.0);
            continue;
        } catch (const usage_error& e) {
            (void)cache.end_step();
            parse_error bad(cfg.trace_name, req.line, e.what());
            if (!cfg.skip_bad_lines) throw bad;
            r.bad_lines.add(bad);
            r.accesses -= n;
            r.tokens -= tokens;
            free_at = start;
            continue;
        }
        const swap_plan& plan = cache.end_step();
        // Each swap-in's layer, read from the GPU slot it fills (an
        // exchange's hit fills the victim's slot, its source).
        std::fill(loads_at.begin(), loads_at.end(), 0);
        for (const block_transfer& t : plan.transfers)
            if (t.to == tier::gpu || t.exchange)
                ++loads_at[items > 1 ? cache.gpu().meta(t.exchange ? t.src : t.dst).layer.value : 0];
        ready.add(ready_time(req.hash_ids, a.match.run));
        if (n > 0) {
            const timestamp back =
                    cfg.expected_returns && index < cfg.expected_returns->size() ? (*cfg.expected_returns)[index] : 0;
            cache.release(session, req.output_length, back);
            seen_sessions.insert(session.value);
        }
        r.hits += a.match.run;
        r.misses += n - a.match.run;
        count_reprefill(req.hash_ids, a.match.run);
        const std::uint64_t hit_tokens = std::min<std::uint64_t>(a.match.run * cfg.block_size, tokens);
        r.hit_tokens += hit_tokens;
        for (std::size_t i = 0; i < a.match.run; ++i) r.prefill_seconds_saved += cfg.cost.cost(i * cfg.block_size);
        r.prefill_seconds_saved -= static_cast<double>(a.match.cpu_blocks) * transfer_s;
        if (cfg.serve_rate > 0) free_at = start + static_cast<double>(tokens - hit_tokens) / cfg.serve_rate;
    }
    if (!depths.empty()) {
        double sum = 0;
        for (std::uint32_t d : depths) sum += d;
        r.queue_depth_mean = sum / static_cast<double>(depths.size());
        auto quantile = [&](double q) {
            const auto k = static_cast<std::ptrdiff_t>(q * static_cast<double>(depths.size() - 1));
            std::nth_element(depths.begin(), depths.begin() + k, depths.end());
            return static_cast<std::size_t>(depths[static_cast<std::size_t>(k)]);
        };
        r.queue_depth_p50 = quantile(0.5);
        r.queue_depth_p99 = quantile(0.99);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.ready_s_total = ready.total();
    r.ready_s_mean = ready.mean();
    r.ready_s_p99 = ready.quantile(0.99);
    const cache_metrics m = cache.metrics();
    r.evictions = m.gpu.evictions / items;
    r.gpu_hits = m.gpu.hit_blocks;
    r.cpu_hits = m.cpu.hit_blocks;
    r.recomputed_blocks = m.recomputed_blocks;
    r.swap_out_blocks = m.swap_out_items / items;
    r.sessions = seen_sessions.size();
    r.fairness = m.fairness;
    return r;
}

/// A remote store's contents as the simulator sees them: the keys it holds,
/// at most `capacity`, evicting the least recently written or read (what
/// Redis's allkeys-lru approximates). A `remote_directory`.
class store_model {
public:
    explicit store_model(std::size_t capacity) : capacity_(capacity) {}
    [[nodiscard]] std::size_t present_prefix(std::span<const std::uint64_t> keys) const {
        std::size_t n = 0;
        while (n < keys.size() && index_.contains(keys[n])) ++n;
        return n;
    }
    /// A write-back; returns false when the store holds nothing (capacity 0).
    bool put(std::uint64_t key) {
        if (capacity_ == 0) return false;
        touch_or_insert(key);
        return true;
    }
    /// A fetch: true (and the key becomes the most recent) if it is there.
    bool get(std::uint64_t key) {
        auto it = index_.find(key);
        if (it == index_.end()) return false;
        order_.splice(order_.end(), order_, it->second);
        return true;
    }

private:
    void touch_or_insert(std::uint64_t key) {
        if (auto it = index_.find(key); it != index_.end()) {
            order_.splice(order_.end(), order_, it->second);
            return;
        }
        if (index_.size() == capacity_) {
            index_.erase(order_.front());
            order_.pop_front();
        }
        index_[key] = order_.insert(order_.end(), key);
    }
    std::size_t capacity_;
    std::list<std::uint64_t> order_;
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> index_;
};
static_assert(remote_directory<store_model>);

/// Tiered replay over `instances` serving instances (requests routed by
/// session), each with its own GPU and CPU tiers, and a remote tier: one
/// store of `remote_capacity` blocks shared by all (`shared`), or one store
/// of remote_capacity / instances blocks each (isolated instances with the
/// same memory). Victims are written back, lookups go through the store
/// (admit_through), fetches of values the store dropped meanwhile fail and
/// are recomputed. hits = blocks served from any tier, the store included.
/// Throws: as replay_requests; config_error without a CPU tier or instances.
template <eviction_policy Gpu, eviction_policy Cpu, cache_traits Traits = default_cache_traits, class RequestSource>
replay_result replay_instances(RequestSource& source, const request_replay_config& cfg, std::size_t instances,
                               std::size_t remote_capacity, bool shared) {
    if (instances == 0) throw config_error("--instances 0: give at least one serving instance");
    if (cfg.lookahead > 0 || cfg.serve_rate > 0)
        throw config_error("the waiting queue (--lookahead, --serve-rate) is modelled for one instance without a "
                           "remote store; drop it, or --instances and --remote-capacity");
    if (cfg.cpu_capacity == 0)
        throw config_error("the remote tier stages its hits through the CPU tier: give --cpu-capacity N (blocks)");
    const std::uint32_t items = cfg.num_layers;
    using cache_type = tiered_cache<Gpu, Cpu, Traits>;
    std::vector<std::unique_ptr<cache_type>> caches;
    std::vector<store_model> stores;
    for (std::size_t i = 0; i < instances; ++i) {
        caches.push_back(std::make_unique<cache_type>(cache_config{
            .gpu_capacity = cfg.capacity * items,
            .cpu_capacity = cfg.cpu_capacity * items,
            .block_size = cfg.block_size,
            .num_layers = cfg.num_layers,
            .items = items > 1 ? granularity::per_layer : granularity::whole_block,
            .item_bytes = static_cast<std::size_t>(cfg.kv_bytes_per_token) * cfg.block_size / items,
            .remote = true}, replay_policy_config<Gpu>(cfg), replay_cpu_policy_config<Cpu>(cfg)));
        if (shared ? i == 0 : true) stores.emplace_back((shared ? remote_capacity : remote_capacity / instances) * items);
    }
    replay_result r;
    r.policy = std::string(Gpu::name);
    r.capacity = cfg.capacity;
    r.cpu_capacity = cfg.cpu_capacity;
    r.mode = replay_mode::tiered;
    r.instances = instances;
    r.remote_capacity = remote_capacity;
    const double transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.bandwidth_bytes_per_s;
    const double remote_transfer_s = cfg.kv_bytes_per_token * cfg.block_size / cfg.remote_bandwidth_bytes_per_s;
    request_record req;
    timestamp now = 0;
    std::vector<transfer_status> status;
    std::vector<std::uint32_t> chunks;
    const auto t0 = std::chrono::steady_clock::now();
    while (source.next(req)) {
        const std::size_t index = r.requests++;
        now = request_time(now, req.timestamp_ms);
        const session_id session{req.has_session ? req.session : index};
        cache_type& cache = *caches[session.value % instances];
        store_model& store = stores[shared ? 0 : session.value % instances];
        cache.clock().set(now);
        const std::size_t n = req.hash_ids.size();
        r.accesses += n;
        const std::uint64_t tokens = std::max<std::uint64_t>(req.input_length, n * cfg.block_size);
        r.tokens += tokens;
        cache.begin_step();
        remote_admission a;
        try {
            a = admit_through(cache, store, session, req.hash_ids);
        } catch (const capacity_error&) {
            (void)cache.end_step();
            ++r.bypassed_requests;
            r.misses += n;
            continue;
        } catch (const usage_error& e) {
            (void)cache.end_step();
            parse_error bad(cfg.trace_name, req.line, e.what());
            if (!cfg.skip_bad_lines) throw bad;
            r.bad_lines.add(bad);
            r.accesses -= n;
            r.tokens -= tokens;
            continue;
        }
        const swap_plan& plan = cache.end_step();
        // The plan's remote copies against the store model; local ones succeed.
        status.assign(plan.transfers.size(), transfer_status::done);
        std::size_t failed_fetches = 0;
        for (std::size_t i = 0; i < plan.transfers.size(); ++i) {
            const block_transfer& t = plan.transfers[i];
            if (t.to == tier::remote && !store.put(plan.remote_keys[t.dst.index()])) status[i] = transfer_status::failed;
            if (t.from == tier::remote && !store.get(plan.remote_keys[t.src.index()])) {
                status[i] = transfer_status::failed;
                ++failed_fetches;
            }
        }
        const transfer_report report = cache.complete_transfers(plan, status);
        if (n > 0) cache.release(session, req.output_length);
        chunks.clear();
        for (const recompute_item& x : report.recompute) chunks.push_back(x.chunk.value);
        std::sort(chunks.begin(), chunks.end());
        const std::size_t recomputed_blocks =
            static_cast<std::size_t>(std::unique(chunks.begin(), chunks.end()) - chunks.begin());
        const std::size_t served = a.local.match.run - std::min(a.local.match.run, recomputed_blocks);
        r.hits += served;
        r.misses += n - served;
        r.hit_tokens += std::min<std::uint64_t>(served * cfg.block_size, tokens);
        const std::size_t remote_arrived = a.remote_blocks - std::min(a.remote_blocks, recomputed_blocks);
        r.remote_hits += remote_arrived;
        r.remote_failed_fetches += failed_fetches / items;
        // Seconds saved as replay_requests counts them: the recompute cost of
        // each block served (a recomputed one saved nothing), less the swap-in
        // of those that came from the CPU tier (staged ones included: only
        // they fail here), less the store -> CPU copy of those that arrived.
        for (std::size_t i = 0; i < a.local.match.run; ++i)
            if (!std::binary_search(chunks.begin(), chunks.begin() + static_cast<std::ptrdiff_t>(recomputed_blocks),
                                    static_cast<std::uint32_t>(i)))
                r.prefill_seconds_saved += cfg.cost.cost(i * cfg.block_size);
        const std::size_t cpu_served = a.local.match.cpu_blocks - std::min(a.local.match.cpu_blocks, recomputed_blocks);
        r.prefill_seconds_saved -= static_cast<double>(cpu_served) * transfer_s +
                                   static_cast<double>(remote_arrived) * remote_transfer_s;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& c : caches) {
        const cache_metrics m = c->metrics();
        r.evictions += m.gpu.evictions / items;
        r.gpu_hits += m.gpu.hit_blocks;
        r.cpu_hits += m.cpu.hit_blocks;
        r.recomputed_blocks += m.recomputed_blocks;
        r.swap_out_blocks += m.swap_out_items / items;
    }
    return r;
}

}  // namespace kvpolicy::sim
