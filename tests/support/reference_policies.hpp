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

/// retention_value<> (pensieve_linear, pipelined_depth, session_relative):
/// keeps each item's latest context and, at every pop, computes cost /
/// time_inactive for every evictable item with seed 000's formula written
/// out (same operation order, so the doubles are bit-identical). Items used
/// at `now` rank after every idle one, among themselves by cost; ties by id.
struct ref_retention_value {
    double alpha = 0.001, beta = 0.01, const_non_attention = 0.005;
    struct entry {
        std::uint32_t id;
        access_context ctx;  // of the latest insert, access or release
        bool held;
    };
    std::vector<entry> items;

    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    double cost(const access_context& c) const {
        const double layer_w = static_cast<double>(c.num_layers - c.layer.value) / static_cast<double>(c.num_layers);
        const double position_w =
            static_cast<double>(c.chunk.value + 1) / static_cast<double>(c.session_total_chunks);
        const double base = (alpha * static_cast<double>(c.context_length) + beta) + const_non_attention;
        return layer_w * position_w * base;
    }
    void on_insert(item_id id, const access_context& ctx) { items.push_back({id.value, ctx, false}); }
    void on_access(item_id id, const access_context& ctx) { find(id)->ctx = ctx; }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) { *find(id) = {id.value, ctx, false}; }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp now) {
        const entry* best = nullptr;
        bool best_fresh = false;
        double best_value = 0.0;
        for (const auto& e : items) {
            if (e.held) continue;
            const bool fresh = e.ctx.now >= now;
            const double value = fresh ? cost(e.ctx) : cost(e.ctx) / static_cast<double>(now - e.ctx.now);
            const bool better = best == nullptr || (!fresh && best_fresh) ||
                                (fresh == best_fresh && (value < best_value || (value == best_value && e.id < best->id)));
            if (better) {
                best = &e;
                best_fresh = fresh;
                best_value = value;
            }
        }
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        on_erase(v);
        return v;
    }
};

/// lexicographic_checkerboard: sorts the evictable items by (layer
/// descending, session ascending, chunk ascending, id) at every pop, from the
/// fields given at insert.
struct ref_checkerboard {
    struct entry {
        std::uint32_t id, layer, chunk;
        std::uint64_t session;
        bool held;
    };
    std::vector<entry> items;

    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void on_insert(item_id id, const access_context& c) {
        items.push_back({id.value, c.layer.value, c.chunk.value, c.session.value, false});
    }
    void on_access(item_id, const access_context&) {}
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { find(id)->held = false; }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp) {
        std::vector<entry> order;
        for (const auto& e : items)
            if (!e.held) order.push_back(e);
        if (order.empty()) return std::nullopt;
        std::sort(order.begin(), order.end(), [](const entry& a, const entry& b) {
            if (a.layer != b.layer) return a.layer > b.layer;
            if (a.session != b.session) return a.session < b.session;
            if (a.chunk != b.chunk) return a.chunk < b.chunk;
            return a.id < b.id;
        });
        const item_id v{order.front().id};
        on_erase(v);
        return v;
    }
};

/// Which reference model checks which policy. Issue-by-issue, each new
/// policy adds its specialisation next to its reference.
template <class Policy>
struct reference_for;

}  // namespace kvpolicy::testing
