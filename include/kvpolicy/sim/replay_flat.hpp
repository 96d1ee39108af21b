// Flat replay (kvpolicy/sim/replay.hpp's first mode): every block access is
// independent, as in generic cache simulators; the policy alone, no cache
// type.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/key_index.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_result.hpp"

namespace kvpolicy::sim {

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
            if (key < limit)
                direct_.resize(std::min<std::uint64_t>(limit, std::max<std::uint64_t>(key + 1, 2 * direct_.size())),
                               no_index);
            else
                switch_to_hashing();
        }
        if (hashed_)
            index_.insert(key, slot);
        else
            direct_[key] = slot;
    }
    void erase(std::uint64_t key) noexcept {
        if (hashed_)
            index_.erase(key);
        else
            direct_[key] = no_index;
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
    flat_slot_map where(capacity);                // key -> slot
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

}  // namespace kvpolicy::sim
