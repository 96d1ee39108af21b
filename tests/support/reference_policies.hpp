// Naive reference models of the eviction policies: vectors and linear scans,
// written to be obviously right rather than fast. The differential driver in
// policy_driver.hpp runs each real policy beside its reference on long random
// operation sequences and requires the identical sequence of victims.
//
// Every reference keeps one record per tracked item and follows the same
// `eviction_policy` protocol (insert / access / hold / release / erase /
// pop_victim), so the driver can treat both sides alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include <kvpolicy/core/access_context.hpp>
#include <kvpolicy/core/ids.hpp>

namespace kvpolicy::testing {

/// Shared by the simple references: tracked items with a sequence number
/// that orders them; a victim is the evictable item with the smallest one.
struct ref_ordered_by_stamp {
    struct entry {
        std::uint32_t id;
        std::uint64_t stamp;
        bool held;
    };
    std::vector<entry> items;
    std::uint64_t clock = 0;

    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_oldest_evictable() {
        const entry* best = nullptr;
        for (const auto& e : items)
            if (!e.held && (best == nullptr || e.stamp < best->stamp)) best = &e;
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        erase(v);
        return v;
    }
};

/// FIFO: stamp at insert and at release; accesses change nothing.
struct ref_fifo : ref_ordered_by_stamp {
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, clock++, false}); }
    void on_access(item_id, const access_context&) {}
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { *find(id) = {id.value, clock++, false}; }
    void on_erase(item_id id) { erase(id); }
    std::optional<item_id> pop_victim(timestamp) { return pop_oldest_evictable(); }
};

/// LRU: stamp at insert, at every access and at release.
struct ref_lru : ref_ordered_by_stamp {
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, clock++, false}); }
    void on_access(item_id id, const access_context&) { find(id)->stamp = clock++; }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { *find(id) = {id.value, clock++, false}; }
    void on_erase(item_id id) { erase(id); }
    std::optional<item_id> pop_victim(timestamp) { return pop_oldest_evictable(); }
};

/// Which reference model checks which policy. Issue-by-issue, each new
/// policy adds its specialisation next to its reference.
template <class Policy>
struct reference_for;

}  // namespace kvpolicy::testing
