// A cache in "flat mode", the way a trace simulator drives a policy: every
// request is a lookup by key; a hit calls on_access, a miss pops a victim
// when the cache is full and inserts the key into the freed slot. This is
// libCacheSim's get(): find, then evict while full, then insert; with
// `announce_misses` the policy's `on_miss` runs first (ARC needs it to see
// the paper's cases II/III before REPLACE).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kvpolicy/core/access_context.hpp>
#include <kvpolicy/core/concepts.hpp>

namespace kvpolicy::testing {

template <class Policy, bool AnnounceMisses = false>
class flat_cache {
public:
    flat_cache(std::size_t capacity, Policy policy) : policy_(std::move(policy)), key_of_(capacity, 0) {
        for (std::size_t s = capacity; s-- > 0;) free_.push_back(static_cast<std::uint32_t>(s));
    }
    /// With the policy's default configuration.
    explicit flat_cache(std::size_t capacity) requires requires {
        typename Policy::config_type;
    } : flat_cache(capacity, Policy(capacity, typename Policy::config_type{})) {}

    struct outcome {
        bool hit;
        std::optional<std::uint64_t> evicted;  // key of the victim, if a pop happened
    };

    /// One request for `key` at the next logical time; `next_use` feeds Belady.
    outcome request(std::uint64_t key, timestamp next_use = never) {
        access_context ctx;
        ctx.now = ++now_;
        ctx.key = key;
        ctx.next_use = next_use;
        if (const auto it = slot_of_.find(key); it != slot_of_.end()) {
            policy_.on_access(item_id{it->second}, ctx);
            return {true, std::nullopt};
        }
        if constexpr (AnnounceMisses) policy_.on_miss(ctx);
        std::optional<std::uint64_t> evicted;
        if (free_.empty()) {
            const auto v = policy_.pop_victim(now_);
            if (!v) throw std::logic_error("flat_cache: full cache but no victim");
            evicted = key_of_[v->index()];
            slot_of_.erase(*evicted);
            free_.push_back(v->value);
        }
        const std::uint32_t s = free_.back();
        free_.pop_back();
        policy_.on_insert(item_id{s}, ctx);
        slot_of_[key] = s;
        key_of_[s] = key;
        return {false, evicted};
    }

    [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
    [[nodiscard]] bool resident(std::uint64_t key) const { return slot_of_.count(key) != 0; }

private:
    Policy policy_;
    std::unordered_map<std::uint64_t, std::uint32_t> slot_of_;
    std::vector<std::uint64_t> key_of_;
    std::vector<std::uint32_t> free_;
    timestamp now_ = 0;
};

/// The next request time of each request's key (`never` if none): what
/// Belady's `ctx.next_use` is on a trace.
inline std::vector<timestamp> next_uses(const std::vector<std::uint64_t>& keys) {
    std::vector<timestamp> out(keys.size(), never);
    std::unordered_map<std::uint64_t, std::size_t> later;
    for (std::size_t i = keys.size(); i-- > 0;) {
        if (const auto it = later.find(keys[i]); it != later.end()) out[i] = it->second + 1;  // times start at 1
        later[keys[i]] = i;
    }
    return out;
}

}  // namespace kvpolicy::testing
