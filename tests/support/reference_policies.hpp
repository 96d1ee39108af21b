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
#include <bit>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <kvpolicy/core/access_context.hpp>
#include <kvpolicy/core/ids.hpp>
#include <kvpolicy/core/item_key.hpp>
#include <kvpolicy/eviction/return_gap_model.hpp>
#include <kvpolicy/eviction/w_tinylfu.hpp>

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

/// FIFO: stamp at insert only; accesses and holds change nothing.
struct ref_fifo : ref_ordered_by_stamp {
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, clock++, false}); }
    void on_access(item_id, const access_context&) {}
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { find(id)->held = false; }
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

/// retention_value with pensieve_linear: keeps each item's latest context
/// and, at every pop, computes cost / time_inactive for every evictable item
/// with the formula written out (same operation order, so the doubles are
/// bit-identical): seed 000's rule (seed000_retention_value, loss `chunk`),
/// or with `seed_rule = false` the default one (uniform weights, the chunk
/// and its session's later chunks). Items used at
/// `now` rank after every idle one, among themselves by cost; ties by id.
struct ref_retention_value {
    bool seed_rule = true;
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
    double base(std::uint64_t context) const {
        return (alpha * static_cast<double>(context) + beta) + const_non_attention;
    }
    double cost(const access_context& c) const {
        if (!seed_rule) {
            // Chunks [chunk, total), each at its own context: for a linear
            // cost, their count times the mean of the first's and the last's.
            const std::uint32_t after = c.session_total_chunks - c.chunk.value;
            std::uint64_t block = c.block_tokens;
            if (block == 0 && c.chunk.value > 0) block = c.context_length / c.chunk.value;
            const double first = base(c.context_length), last = base(c.context_length + block * (after - 1));
            return (1.0 * 1.0) * (static_cast<double>(after) * ((first + last) / 2));
        }
        const double layer_w = static_cast<double>(c.num_layers - c.layer.value) / static_cast<double>(c.num_layers);
        const double position_w = static_cast<double>(c.chunk.value + 1) / static_cast<double>(c.session_total_chunks);
        return layer_w * position_w * base(c.context_length);
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
            const bool better =
                best == nullptr || (!fresh && best_fresh) ||
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

// --- Part B references: arc, s3fifo, lirs, w_tinylfu, gdsf, belady. Each is
// written from its paper's pseudo-code with vectors, deques and linear scans.

/// Shared by the part-B references: one record per tracked item, found by
/// linear scan; list order is a use stamp (smaller = older), so "the LRU of
/// T1" is the evictable T1 record with the smallest stamp.
template <class Entry>
struct ref_records {
    std::vector<Entry> items;
    std::uint64_t clock = 0;

    Entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void erase(item_id id) {
        std::erase_if(items, [&](const Entry& e) { return e.id == id.value; });
    }
    template <class Pred>
    Entry* oldest_evictable(Pred pred) {
        Entry* best = nullptr;
        for (auto& e : items)
            if (!e.held && pred(e) && (best == nullptr || e.stamp < best->stamp)) best = &e;
        return best;
    }
    template <class Pred>
    std::size_t count(Pred pred) const {
        return static_cast<std::size_t>(std::count_if(items.begin(), items.end(), pred));
    }
    bool any_evictable() const {
        return std::any_of(items.begin(), items.end(), [](const Entry& e) { return !e.held; });
    }
};

inline bool ref_erase_key(std::deque<std::uint64_t>& d, std::uint64_t key) {
    const auto it = std::find(d.begin(), d.end(), key);
    if (it == d.end()) return false;
    d.erase(it);
    return true;
}

/// ARC, Fig. 4 of Megiddo & Modha: T1/T2 as stamped records, B1/B2 as
/// deques of keys (newest at the back, at most c each), p a double.
/// `on_miss` runs cases II/III before REPLACE; without it, pop_victim runs
/// case IV and the ghost hit adapts p at insert.
struct ref_arc {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        bool t2, held;
        std::uint64_t stamp;
    };
    std::size_t c;
    ref_records<entry> r;
    std::deque<std::uint64_t> b1, b2;
    double p = 0.0;
    std::optional<std::pair<std::uint64_t, int>> pending;  // key, 0 / 1 = in B1 / 2 = in B2

    explicit ref_arc(std::size_t capacity) : c(capacity) {}

    int adapt(std::uint64_t key) {
        const auto n1 = static_cast<double>(b1.size()), n2 = static_cast<double>(b2.size());
        if (std::find(b1.begin(), b1.end(), key) != b1.end()) {
            p = std::min(p + std::max(n2 / n1, 1.0), static_cast<double>(c));
            ref_erase_key(b1, key);
            return 1;
        }
        if (std::find(b2.begin(), b2.end(), key) != b2.end()) {
            p = std::max(p - std::max(n1 / n2, 1.0), 0.0);
            ref_erase_key(b2, key);
            return 2;
        }
        return 0;
    }
    void on_miss(const access_context& ctx) { pending = std::pair{ctx.key, adapt(ctx.key)}; }
    void on_insert(item_id id, const access_context& ctx) {
        const int g = (pending && pending->first == ctx.key) ? pending->second : adapt(ctx.key);
        pending.reset();
        r.items.push_back({id.value, ctx.key, g != 0, false, r.clock++});
    }
    void on_access(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->t2 = true;
        e->stamp = r.clock++;
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->held = false;
        e->stamp = r.clock++;
    }
    void on_erase(item_id id) { r.erase(id); }

    std::optional<item_id> evict(entry* e, std::deque<std::uint64_t>* ghost) {
        const item_id v{e->id};
        const std::uint64_t key = e->key;
        r.erase(v);
        if (ghost != nullptr) {
            ref_erase_key(b1, key);
            ref_erase_key(b2, key);
            if (ghost->size() == c) ghost->pop_front();
            ghost->push_back(key);
        }
        return v;
    }
    std::optional<item_id> replace(bool key_in_b2) {
        const auto t1 = static_cast<double>(r.count([](const entry& e) { return !e.t2; }));
        entry* lru1 = r.oldest_evictable([](const entry& e) { return !e.t2; });
        entry* lru2 = r.oldest_evictable([](const entry& e) { return e.t2; });
        const bool rule_t1 = t1 > p || (t1 == p && key_in_b2);
        if (lru1 != nullptr && (rule_t1 || lru2 == nullptr)) return evict(lru1, &b1);
        return evict(lru2, &b2);
    }
    std::optional<item_id> pop_victim(timestamp) {
        if (!r.any_evictable()) return std::nullopt;
        if (pending && pending->second != 0) return replace(pending->second == 2);
        const std::size_t t1 = r.count([](const entry& e) { return !e.t2; });
        const std::size_t t2 = r.items.size() - t1;
        if (t1 + b1.size() >= c) {
            if (!b1.empty()) {
                b1.pop_front();
            } else if (entry* lru1 = r.oldest_evictable([](const entry& e) { return !e.t2; })) {
                return evict(lru1, nullptr);
            }
        } else if (t1 + t2 + b1.size() + b2.size() >= 2 * c && !b2.empty()) {
            b2.pop_front();
        }
        return replace(false);
    }
};

/// S3-FIFO, Algorithm 1 of Yang et al. with libCacheSim's rules: S and M as
/// stamped records (FIFO order), G a deque of keys trimmed to its share at
/// each insert (it may hold one more key in between).
struct ref_s3fifo {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        bool main, held;
        int freq;
        std::uint64_t stamp;
    };
    std::size_t small_target, ghost_target;
    bool fill_main;  // libCacheSim's newer rule: M fills once S is full, until the first eviction
    bool evicted_once = false;
    ref_records<entry> r;
    std::deque<std::uint64_t> ghost;

    explicit ref_s3fifo(std::size_t capacity, bool fill_main_before_first_eviction = false)
            : small_target(static_cast<std::size_t>(static_cast<double>(capacity) * 0.1)),
              ghost_target(static_cast<std::size_t>(static_cast<double>(capacity) * 0.9)),
              fill_main(fill_main_before_first_eviction) {}

    void on_insert(item_id id, const access_context& ctx) {
        const bool ghost_hit = ref_erase_key(ghost, ctx.key);
        if (ghost.size() > ghost_target) ghost.pop_front();
        const std::size_t small = r.count([](const entry& e) { return !e.main; });
        const bool to_main = ghost_hit || (fill_main && !evicted_once && small >= small_target);
        r.items.push_back({id.value, ctx.key, to_main, false, 0, r.clock++});
    }
    void on_access(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->freq = std::min(e->freq + 1, 3);
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    // A release is not a new reference: queue, place (stamp) and freq stay.
    void on_release(item_id id, const access_context&) { r.find(id)->held = false; }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        if (!r.any_evictable()) return std::nullopt;
        evicted_once = true;
        auto in_small = [](const entry& e) { return !e.main; };
        auto in_main = [](const entry& e) { return e.main; };
        if (r.oldest_evictable(in_small) != nullptr &&
            (r.count(in_small) >= small_target || r.oldest_evictable(in_main) == nullptr)) {
            while (entry* t = r.oldest_evictable(in_small)) {
                if (t->freq >= 2) {
                    *t = {t->id, t->key, true, false, 0, r.clock++};
                    continue;
                }
                const item_id v{t->id};
                const std::uint64_t key = t->key;
                r.erase(v);
                if (ghost_target > 0) {
                    ref_erase_key(ghost, key);
                    if (ghost.size() == ghost_target + 1) ghost.pop_front();
                    ghost.push_back(key);
                }
                return v;
            }
        }
        for (;;) {
            entry* t = r.oldest_evictable(in_main);
            if (t->freq > 0) {
                --t->freq;
                t->stamp = r.clock++;
                continue;
            }
            const item_id v{t->id};
            r.erase(v);
            return v;
        }
    }
};

/// LIRS as the paper's section 3.3 describes it: S a vector of entries from
/// bottom (index 0) to top, Q a vector of ids (front = victim), the
/// non-resident entries' keys in a deque in the order they became
/// non-resident (at most `max_nonresident`, the oldest forgotten first).
struct ref_lirs {
    struct item {
        std::uint32_t id;
        std::uint64_t key;
        bool lir, held;
    };
    struct node {
        bool resident;
        std::uint32_t id;   // resident entries
        std::uint64_t key;  // non-resident entries
    };
    std::size_t hir_target, lir_target, max_nonresident;
    std::vector<item> items;
    std::vector<node> s;           // bottom first
    std::vector<std::uint32_t> q;  // evictable resident HIR ids, front first
    std::deque<std::uint64_t> nonresident;

    explicit ref_lirs(std::size_t capacity, double hir_fraction = 0.01)
            : hir_target(
                  std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(capacity) * hir_fraction))),
              lir_target(capacity - hir_target),
              max_nonresident(capacity) {}

    item* find(std::uint32_t id) {
        for (auto& e : items)
            if (e.id == id) return &e;
        return nullptr;
    }
    std::size_t lir_count() const {
        return static_cast<std::size_t>(std::count_if(items.begin(), items.end(), [](const item& e) { return e.lir; }));
    }
    std::ptrdiff_t s_pos(std::uint32_t id) const {
        for (std::size_t i = 0; i < s.size(); ++i)
            if (s[i].resident && s[i].id == id) return static_cast<std::ptrdiff_t>(i);
        return -1;
    }
    void s_remove(std::uint32_t id) {
        if (auto i = s_pos(id); i >= 0) s.erase(s.begin() + i);
    }
    void q_remove(std::uint32_t id) { std::erase(q, id); }
    void forget(std::uint64_t key) {
        std::erase_if(s, [&](const node& n) { return !n.resident && n.key == key; });
        ref_erase_key(nonresident, key);
    }
    void prune() {
        while (!s.empty() && !(s.front().resident && find(s.front().id)->lir)) {
            if (!s.front().resident) ref_erase_key(nonresident, s.front().key);
            s.erase(s.begin());
        }
    }
    void demote_bottom() {
        item* b = find(s.front().id);
        s.erase(s.begin());
        b->lir = false;
        if (!b->held) q.push_back(b->id);
        prune();
    }
    void make_lir_on_top(item* x) {
        x->lir = true;
        s.push_back({true, x->id, 0});
        if (lir_count() > lir_target) demote_bottom();
    }
    void on_insert(item_id id, const access_context& ctx) {
        items.push_back({id.value, ctx.key, false, false});
        item* x = &items.back();
        const bool in_s = std::find(nonresident.begin(), nonresident.end(), ctx.key) != nonresident.end();
        if (in_s) {
            forget(ctx.key);
            make_lir_on_top(x);
        } else if (lir_count() < lir_target) {
            make_lir_on_top(x);
        } else {
            s.push_back({true, x->id, 0});
            q.push_back(x->id);
            prune();
        }
    }
    void on_access(item_id id, const access_context&) {
        item* x = find(id.value);
        if (x->lir) {
            const bool was_bottom = s_pos(x->id) == 0;
            s_remove(x->id);
            s.push_back({true, x->id, 0});
            if (was_bottom) prune();
        } else if (s_pos(x->id) >= 0 || lir_count() < lir_target) {
            q_remove(x->id);
            s_remove(x->id);
            make_lir_on_top(x);
        } else {
            s.push_back({true, x->id, 0});
            if (!x->held) {
                q_remove(x->id);
                q.push_back(x->id);
            }
            prune();
        }
    }
    void on_hold(item_id id) {
        item* x = find(id.value);
        x->held = true;
        q_remove(x->id);
    }
    void on_release(item_id id, const access_context&) {
        item* x = find(id.value);
        x->held = false;
        if (!x->lir) q.push_back(x->id);
    }
    void on_erase(item_id id) {
        q_remove(id.value);
        s_remove(id.value);
        std::erase_if(items, [&](const item& e) { return e.id == id.value; });
        prune();
    }
    std::optional<item_id> pop_victim(timestamp) {
        if (std::all_of(items.begin(), items.end(), [](const item& e) { return e.held; })) return std::nullopt;
        while (q.empty()) demote_bottom();
        const std::uint32_t v = q.front();
        q.erase(q.begin());
        const std::uint64_t key = find(v)->key;
        if (const auto i = s_pos(v); i >= 0) {
            std::erase_if(s, [&](const node& n) { return !n.resident && n.key == key; });  // repeated key
            ref_erase_key(nonresident, key);
            if (max_nonresident > 0 && nonresident.size() == max_nonresident) forget(nonresident.front());
            const auto j = s_pos(v);
            if (max_nonresident > 0) {
                s[static_cast<std::size_t>(j)] = {false, 0, key};
                nonresident.push_back(key);
            } else {
                s.erase(s.begin() + j);
            }
        }
        std::erase_if(items, [&](const item& e) { return e.id == v; });
        return item_id{v};
    }
};

/// W-TinyLFU: window, probation and protected as stamped records; the sketch
/// as 4 plain rows of small integers and a vector<bool> doorkeeper, indexed by
/// the policy's published hash functions.
struct ref_w_tinylfu {
    enum seg : std::uint8_t { window, probation, protected_ };
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        seg s;
        bool held;
        std::uint64_t stamp;
    };
    std::size_t window_target, protected_target, width, door_bits;
    std::uint64_t sample, additions = 0;
    std::vector<std::vector<int>> rows;
    std::vector<bool> door;
    ref_records<entry> r;

    explicit ref_w_tinylfu(std::size_t capacity, double window_fraction = 0.01)
            : window_target(
                  std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(capacity) * window_fraction))),
              protected_target((capacity - window_target) * 4 / 5),
              width(std::bit_ceil(std::max<std::size_t>(capacity, 16))),
              door_bits(std::bit_ceil(std::max<std::size_t>(8 * capacity, 64))),
              sample(10 * capacity),
              rows(4, std::vector<int>(width, 0)),
              door(door_bits, false) {}

    bool door_has(std::uint64_t key) const {
        return door[tinylfu_sketch::doorkeeper_index(key, 0, door_bits)] &&
               door[tinylfu_sketch::doorkeeper_index(key, 1, door_bits)];
    }
    void record(std::uint64_t key) {
        if (door_has(key)) {
            for (std::size_t i = 0; i < 4; ++i) {
                int& n = rows[i][tinylfu_sketch::counter_index(key, i, width)];
                n = std::min(n + 1, 15);
            }
        } else {
            door[tinylfu_sketch::doorkeeper_index(key, 0, door_bits)] = true;
            door[tinylfu_sketch::doorkeeper_index(key, 1, door_bits)] = true;
        }
        if (++additions == sample) {
            for (auto& row : rows)
                for (int& n : row) n /= 2;
            door.assign(door_bits, false);
            additions /= 2;
        }
    }
    int estimate(std::uint64_t key) const {
        int m = 15;
        for (std::size_t i = 0; i < 4; ++i) m = std::min(m, rows[i][tinylfu_sketch::counter_index(key, i, width)]);
        return m + (door_has(key) ? 1 : 0);
    }
    std::size_t count(seg s) const {
        return r.count([s](const entry& e) { return e.s == s; });
    }
    entry* lru(seg s) {
        return r.oldest_evictable([s](const entry& e) { return e.s == s; });
    }
    void on_insert(item_id id, const access_context& ctx) {
        record(ctx.key);
        r.items.push_back({id.value, ctx.key, window, false, r.clock++});
        if (count(window) > window_target)
            if (entry* w = lru(window)) *w = {w->id, w->key, probation, false, r.clock++};
    }
    void on_access(item_id id, const access_context&) {
        entry* e = r.find(id);
        record(e->key);
        const bool promoted = e->s == probation;
        if (promoted) e->s = protected_;
        e->stamp = r.clock++;
        if (promoted && count(protected_) > protected_target)
            if (entry* p = lru(protected_)) *p = {p->id, p->key, probation, false, r.clock++};
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->held = false;
        e->stamp = r.clock++;
    }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        if (!r.any_evictable()) return std::nullopt;
        entry* cand = count(window) >= window_target ? lru(window) : nullptr;
        entry* mv = lru(probation) != nullptr ? lru(probation) : lru(protected_);
        entry* v = nullptr;
        if (cand != nullptr && mv != nullptr) {
            if (estimate(cand->key) > estimate(mv->key)) {
                *cand = {cand->id, cand->key, probation, false, r.clock++};
                v = mv;
            } else {
                v = cand;
            }
        } else {
            v = cand != nullptr ? cand : mv != nullptr ? mv : lru(window);
        }
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

/// GDSF with unit cost: H = L + freq / size; victim = lowest (H, time H was
/// set); L = the victim's H.
struct ref_gdsf {
    struct entry {
        std::uint32_t id;
        std::uint32_t freq;
        double per_use;  // cost / size
        double h;
        bool held;
        std::uint64_t stamp;
    };
    ref_records<entry> r;
    double inflation = 0.0;

    explicit ref_gdsf(std::size_t) {}

    void set_h(entry& e) {
        e.h = inflation + e.freq * e.per_use;
        e.stamp = r.clock++;
    }
    void on_insert(item_id id, const access_context& ctx) {
        r.items.push_back({id.value, 1, 1.0 / std::max<std::uint32_t>(ctx.size, 1), 0.0, false, 0});
        set_h(r.items.back());
    }
    void on_access(item_id id, const access_context&) {
        entry* e = r.find(id);
        ++e->freq;
        if (!e->held) set_h(*e);
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->held = false;
        set_h(*e);
    }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        const entry* best = nullptr;
        for (const auto& e : r.items)
            if (!e.held && (best == nullptr || e.h < best->h || (e.h == best->h && e.stamp < best->stamp))) best = &e;
        if (best == nullptr) return std::nullopt;
        inflation = best->h;
        const item_id v{best->id};
        r.erase(v);
        return v;
    }
};

/// Belady's MIN: victim = farthest next use; among equals, the deepest
/// (largest chunk), then the one whose next use was given first.
struct ref_belady {
    struct entry {
        std::uint32_t id;
        timestamp next_use;
        bool held;
        std::uint32_t depth;  // ctx.chunk: deeper first among equal next uses
        std::uint64_t stamp;
    };
    ref_records<entry> r;

    explicit ref_belady(std::size_t) {}

    void on_insert(item_id id, const access_context& ctx) {
        r.items.push_back({id.value, ctx.next_use, false, ctx.chunk.value, r.clock++});
    }
    void on_access(item_id id, const access_context& ctx) {
        entry* e = r.find(id);
        if (!e->held) *e = {e->id, ctx.next_use, false, ctx.chunk.value, r.clock++};
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) {
        *r.find(id) = {id.value, ctx.next_use, false, ctx.chunk.value, r.clock++};
    }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        const entry* best = nullptr;
        for (const auto& e : r.items) {
            if (e.held) continue;
            const bool better = best == nullptr || e.next_use > best->next_use ||
                                (e.next_use == best->next_use &&
                                 (e.depth > best->depth || (e.depth == best->depth && e.stamp < best->stamp)));
            if (better) best = &e;
        }
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        r.erase(v);
        return v;
    }
};

/// Which reference model checks which policy. Issue-by-issue, each new
/// policy adds its specialisation next to its reference.
template <class Policy>
struct reference_for;

// --- Part A references: round_robin, lfu, clock, sieve, slru, two_q,
// qos_aware, predictive. Each is written from its algorithm's definition
// (clock faces with a hand index, sorted scans), never from the optimized
// structure, and takes the capacity so the driver can build every reference
// alike.

/// Round robin: the evictable slot with the smallest id at or after the
/// hand, else (wrapping) the smallest evictable id; the hand moves past it.
struct ref_round_robin {
    struct entry {
        std::uint32_t id;
        bool held;
    };
    std::vector<entry> items;
    std::uint32_t hand = 0;

    explicit ref_round_robin(std::size_t = 0) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, false}); }
    void on_access(item_id, const access_context&) {}
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { find(id)->held = false; }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp) {
        const entry* at_or_after = nullptr;
        const entry* lowest = nullptr;
        for (const auto& e : items) {
            if (e.held) continue;
            if (e.id >= hand && (at_or_after == nullptr || e.id < at_or_after->id)) at_or_after = &e;
            if (lowest == nullptr || e.id < lowest->id) lowest = &e;
        }
        const entry* v = at_or_after != nullptr ? at_or_after : lowest;
        if (v == nullptr) return std::nullopt;
        const item_id victim{v->id};
        hand = victim.value + 1;
        on_erase(victim);
        return victim;
    }
};

/// LFU: the evictable item with the fewest uses (insert = 1, every access
/// +1; a release is not a use), ties to the oldest last insert / access.
struct ref_lfu {
    struct entry {
        std::uint32_t id;
        std::uint64_t count;
        std::uint64_t last_use;
        bool held;
    };
    std::vector<entry> items;
    std::uint64_t clock = 0;

    explicit ref_lfu(std::size_t = 0) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void use(entry& e) {
        ++e.count;
        e.last_use = clock++;
    }
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, 1, clock++, false}); }
    void on_access(item_id id, const access_context&) { use(*find(id)); }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) { find(id)->held = false; }  // nothing else
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp) {
        const entry* best = nullptr;
        for (const auto& e : items)
            if (!e.held &&
                (best == nullptr || e.count < best->count || (e.count == best->count && e.last_use < best->last_use)))
                best = &e;
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        on_erase(v);
        return v;
    }
};

/// CLOCK: a clock face (a circular array) and a hand index. New items go
/// just behind the hand with the bit clear; a hit sets the bit; the hand
/// clears set bits and evicts the first clear one. A held item stays on the
/// face; the hand passes over it, its bit untouched. Release: held = false;
/// nothing else.
struct ref_clock {
    struct slot {
        std::uint32_t id;
        bool referenced;
        bool held = false;
    };
    std::vector<slot> face;  // in hand order
    std::size_t hand = 0;    // index into face; face.size() means 0

    explicit ref_clock(std::size_t = 0) {}
    void place_behind_hand(slot s) {
        face.insert(face.begin() + static_cast<std::ptrdiff_t>(hand), s);
        ++hand;
    }
    std::optional<std::size_t> index_on_face(item_id id) const {
        for (std::size_t i = 0; i < face.size(); ++i)
            if (face[i].id == id.value) return i;
        return std::nullopt;
    }
    void take_off_face(std::size_t i) {
        face.erase(face.begin() + static_cast<std::ptrdiff_t>(i));
        if (i < hand) --hand;
    }
    void on_insert(item_id id, const access_context&) { place_behind_hand({id.value, false}); }
    void on_access(item_id id, const access_context&) { face[*index_on_face(id)].referenced = true; }
    void on_hold(item_id id) { face[*index_on_face(id)].held = true; }
    void on_release(item_id id, const access_context&) { face[*index_on_face(id)].held = false; }
    void on_erase(item_id id) { take_off_face(*index_on_face(id)); }
    std::optional<item_id> pop_victim(timestamp) {
        if (std::all_of(face.begin(), face.end(), [](const slot& s) { return s.held; })) return std::nullopt;
        for (;;) {
            if (hand >= face.size()) hand = 0;
            if (!face[hand].held && !face[hand].referenced) break;
            if (!face[hand].held) face[hand].referenced = false;
            ++hand;
        }
        const item_id v{face[hand].id};
        face.erase(face.begin() + static_cast<std::ptrdiff_t>(hand));  // the hand now rests on the next slot
        return v;
    }
};

/// SIEVE, after the paper's pseudocode: a queue from tail (oldest, index 0)
/// to head (newest); the hand is an index or "none" (= start at the tail).
/// A held object stays in the queue; the hand passes over it, its bit
/// untouched. Release: held = false; nothing else.
struct ref_sieve {
    struct object {
        std::uint32_t id;
        bool visited;
        bool held = false;
    };
    std::vector<object> queue;
    std::optional<std::size_t> hand;

    explicit ref_sieve(std::size_t = 0) {}
    std::optional<std::size_t> index_of(item_id id) const {
        for (std::size_t i = 0; i < queue.size(); ++i)
            if (queue[i].id == id.value) return i;
        return std::nullopt;
    }
    // Removing the object under the hand leaves the hand on the next newer
    // object, or none past the head.
    void remove_at(std::size_t i) {
        queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
        if (hand && i < *hand) --*hand;
        if (hand && *hand == queue.size()) hand.reset();
    }
    void on_insert(item_id id, const access_context&) { queue.push_back({id.value, false}); }
    void on_access(item_id id, const access_context&) { queue[*index_of(id)].visited = true; }
    void on_hold(item_id id) { queue[*index_of(id)].held = true; }
    void on_release(item_id id, const access_context&) { queue[*index_of(id)].held = false; }
    void on_erase(item_id id) { remove_at(*index_of(id)); }
    std::optional<item_id> pop_victim(timestamp) {
        if (std::all_of(queue.begin(), queue.end(), [](const object& o) { return o.held; })) return std::nullopt;
        std::size_t o = hand.value_or(0);
        while (queue[o].held || queue[o].visited) {
            if (!queue[o].held) queue[o].visited = false;
            o = (o + 1 == queue.size()) ? 0 : o + 1;
        }
        const item_id v{queue[o].id};
        hand = o;
        remove_at(o);
        return v;
    }
};

/// SLRU: every item has a segment and a last-use stamp. Inserts go to
/// segment 0; a hit (an access) goes one segment up. A release is no hit:
/// held = false, most recent of its own segment, then the same cascade. After
/// each move, from the top segment down, a segment holding more than its
/// share of evictable items sends its least recent one to the segment
/// below as that segment's most recent. The victim is the least recent item
/// of the lowest segment that has an evictable item.
struct ref_slru {
    struct entry {
        std::uint32_t id;
        std::size_t segment;
        std::uint64_t stamp;
        bool held;
    };
    std::size_t segments = 4;
    std::size_t share = 1;
    std::vector<entry> items;
    std::uint64_t clock = 0;

    explicit ref_slru(std::size_t capacity, std::size_t segment_count = 4)
            : segments(segment_count), share(capacity / segment_count == 0 ? 1 : capacity / segment_count) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    entry* least_recent_in(std::size_t s) {
        entry* best = nullptr;
        for (auto& e : items)
            if (!e.held && e.segment == s && (best == nullptr || e.stamp < best->stamp)) best = &e;
        return best;
    }
    std::size_t evictable_in(std::size_t s) const {
        return static_cast<std::size_t>(
            std::count_if(items.begin(), items.end(), [&](const entry& e) { return !e.held && e.segment == s; }));
    }
    void hit(entry& e) {
        e.segment = std::min(e.segment + 1, segments - 1);
        if (e.held) return;
        refresh(e);
    }
    void refresh(entry& e) {
        e.stamp = clock++;
        for (std::size_t s = segments - 1; s > 0; --s)
            while (evictable_in(s) > share) {
                entry* lru = least_recent_in(s);
                lru->segment = s - 1;
                lru->stamp = clock++;
            }
    }
    void on_insert(item_id id, const access_context&) { items.push_back({id.value, 0, clock++, false}); }
    void on_access(item_id id, const access_context&) { hit(*find(id)); }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context&) {
        find(id)->held = false;
        refresh(*find(id));
    }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp) {
        for (std::size_t s = 0; s < segments; ++s)
            if (entry* e = least_recent_in(s)) {
                const item_id v{e->id};
                on_erase(v);
                return v;
            }
        return std::nullopt;
    }
};

/// 2Q, full version, as the paper's pseudocode with pages made items: A1in
/// (FIFO), Am (LRU), A1out (FIFO of keys, at most Kout). Kin and Kout are
/// counts (default 25% and 50% of the capacity, rounded down).
struct ref_two_q {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        bool in_am;
        std::uint64_t stamp;  // A1in: arrival order; Am: recency
        bool held;
    };
    std::size_t kin = 0, kout = 0;
    std::vector<entry> items;
    std::deque<std::uint64_t> a1out;  // oldest first
    std::uint64_t clock = 0;
    std::uint64_t ghost_hits = 0;

    explicit ref_two_q(std::size_t capacity) : kin(capacity / 4), kout(capacity / 2) {}
    ref_two_q(std::size_t kin_items, std::size_t kout_keys) : kin(kin_items), kout(kout_keys) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void on_insert(item_id id, const access_context& ctx) {
        const auto ghost = std::find(a1out.begin(), a1out.end(), ctx.key);
        const bool remembered = ghost != a1out.end();
        if (remembered) {
            a1out.erase(ghost);
            ++ghost_hits;
        }
        items.push_back({id.value, ctx.key, remembered, clock++, false});
    }
    void on_access(item_id id, const access_context&) {
        entry& e = *find(id);
        if (e.in_am && !e.held) e.stamp = clock++;  // A1in: do nothing
    }
    void on_hold(item_id id) { find(id)->held = true; }
    // A release is not a new reference: A1in keeps its arrival stamp; Am
    // (an LRU list) takes it as its most recent.
    void on_release(item_id id, const access_context&) {
        entry& e = *find(id);
        e.held = false;
        if (e.in_am) e.stamp = clock++;
    }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    entry* oldest(bool in_am) {
        entry* best = nullptr;
        for (auto& e : items)
            if (!e.held && e.in_am == in_am && (best == nullptr || e.stamp < best->stamp)) best = &e;
        return best;
    }
    std::optional<item_id> pop_victim(timestamp) {
        const auto a1in_size = static_cast<std::size_t>(
            std::count_if(items.begin(), items.end(), [](const entry& e) { return !e.in_am; }));
        entry* from_a1in = oldest(false);
        entry* from_am = oldest(true);
        if (from_a1in != nullptr && (a1in_size > kin || from_am == nullptr)) {
            const item_id v{from_a1in->id};
            const std::uint64_t key = from_a1in->key;
            std::erase(a1out, key);
            a1out.push_back(key);
            if (a1out.size() > kout) a1out.pop_front();
            on_erase(v);
            return v;
        }
        if (from_am == nullptr) return std::nullopt;
        const item_id v{from_am->id};
        on_erase(v);
        return v;
    }
};

/// QoS: each use sets (priority, priority_until) and makes the item the
/// most recent. At each pop, expired non-default priorities (until <= now)
/// fall back to the default, in (until, id) order, each as a use. The victim
/// is the lowest priority's least recent evictable item.
struct ref_qos_aware {
    struct entry {
        std::uint32_t id;
        std::int32_t priority;
        timestamp until;
        std::uint64_t stamp;
        bool held;
    };
    std::vector<entry> items;
    std::uint64_t clock = 0;

    explicit ref_qos_aware(std::size_t = 0) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void use(entry& e, const access_context& ctx) {
        e.priority = ctx.priority;
        e.until = ctx.priority_until;
        e.stamp = clock++;
    }
    void on_insert(item_id id, const access_context& ctx) {
        items.push_back({id.value, 0, 0, 0, false});
        use(items.back(), ctx);
    }
    void on_access(item_id id, const access_context& ctx) { use(*find(id), ctx); }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) {
        find(id)->held = false;
        use(*find(id), ctx);
    }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp now) {
        std::vector<entry*> expired;
        for (auto& e : items)
            if (!e.held && e.priority != default_priority && e.until <= now) expired.push_back(&e);
        std::sort(expired.begin(), expired.end(), [](const entry* a, const entry* b) {
            return a->until != b->until ? a->until < b->until : a->id < b->id;
        });
        for (entry* e : expired) {
            e->priority = default_priority;
            e->until = never;
            e->stamp = clock++;
        }
        const entry* best = nullptr;
        for (const auto& e : items)
            if (!e.held && (best == nullptr || e.priority < best->priority ||
                            (e.priority == best->priority && e.stamp < best->stamp)))
                best = &e;
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        on_erase(v);
        return v;
    }
};

/// Predictive: items with a lifetime estimate go first, shortest first;
/// then items with only a completion ratio, most complete first; then the
/// rest; ties (and the last group) by least recent use. Each use re-reads
/// lifetime and ratio.
struct ref_predictive {
    struct entry {
        std::uint32_t id;
        int group;  // 0 lifetime, 1 ratio, 2 neither
        double lifetime;
        double ratio;
        std::uint64_t stamp;
        bool held;
    };
    std::vector<entry> items;
    std::uint64_t clock = 0;

    explicit ref_predictive(std::size_t = 0) {}
    entry* find(item_id id) {
        for (auto& e : items)
            if (e.id == id.value) return &e;
        return nullptr;
    }
    void use(entry& e, const access_context& ctx) {
        e.group = 2;
        if (ctx.max_length > 0) {
            e.group = 1;
            e.ratio = static_cast<double>(ctx.sequence_length) / static_cast<double>(ctx.max_length);
        }
        if (!std::isnan(ctx.estimated_lifetime)) {
            e.group = 0;
            e.lifetime = ctx.estimated_lifetime;
        }
        e.stamp = clock++;
    }
    static bool evict_before(const entry& a, const entry& b) {
        if (a.group != b.group) return a.group < b.group;
        if (a.group == 0 && a.lifetime != b.lifetime) return a.lifetime < b.lifetime;
        if (a.group == 1 && a.ratio != b.ratio) return a.ratio > b.ratio;
        return a.stamp < b.stamp;
    }
    void on_insert(item_id id, const access_context& ctx) {
        items.push_back({id.value, 2, 0.0, 0.0, 0, false});
        use(items.back(), ctx);
    }
    void on_access(item_id id, const access_context& ctx) { use(*find(id), ctx); }
    void on_hold(item_id id) { find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) {
        find(id)->held = false;
        use(*find(id), ctx);
    }
    void on_erase(item_id id) {
        std::erase_if(items, [&](const entry& e) { return e.id == id.value; });
    }
    std::optional<item_id> pop_victim(timestamp) {
        const entry* best = nullptr;
        for (const auto& e : items)
            if (!e.held && (best == nullptr || evict_before(e, *best))) best = &e;
        if (best == nullptr) return std::nullopt;
        const item_id v{best->id};
        on_erase(v);
        return v;
    }
};

}  // namespace kvpolicy::testing

namespace kvpolicy {
class round_robin;
class lfu;
class clock;
class sieve;
class slru;
class two_q;
class qos_aware;
class predictive;
}  // namespace kvpolicy

namespace kvpolicy::testing {

template <>
struct reference_for<round_robin> {
    using type = ref_round_robin;
};
template <>
struct reference_for<lfu> {
    using type = ref_lfu;
};
template <>
struct reference_for<clock> {
    using type = ref_clock;
};
template <>
struct reference_for<sieve> {
    using type = ref_sieve;
};
template <>
struct reference_for<slru> {
    using type = ref_slru;
};
template <>
struct reference_for<two_q> {
    using type = ref_two_q;
};
template <>
struct reference_for<qos_aware> {
    using type = ref_qos_aware;
};
template <>
struct reference_for<predictive> {
    using type = ref_predictive;
};

}  // namespace kvpolicy::testing

namespace kvpolicy::testing {

/// tail_reuse_learner, restated for ref_tail_aware_lru and
/// ref_session_aware_lru: an item's class is 1 (tail: the last block of its
/// request) or 0 (inner) until its first reuse (-1 after); ghosts are plain
/// deques of keys per class, oldest first, at most `capacity` long; the rates
/// are compared with the same cross-multiplication (the rule itself, not a
/// different formula, is what the reference restates).
struct ref_tail_rule {
    std::size_t capacity;
    double ratio;
    std::uint64_t min_samples, window;
    std::deque<std::uint64_t> ghosts[2];
    std::uint64_t inserted[2] = {0, 0}, reused[2] = {0, 0};

    explicit ref_tail_rule(std::size_t c, double demote_ratio = 0.5, std::uint64_t min_s = 64, std::uint64_t w = 4096)
            : capacity(c), ratio(demote_ratio), min_samples(min_s), window(w) {}

    bool demoting() const {
        if (inserted[0] < min_samples || inserted[1] < min_samples) return false;
        return static_cast<double>(reused[1]) * static_cast<double>(inserted[0]) <
               ratio * static_cast<double>(reused[0]) * static_cast<double>(inserted[1]);
    }
    // A new item: ghost hits count as reuses of their class; returns its class.
    int inserted_class(const access_context& ctx) {
        const int c = ctx.chunk.value + 1ULL >= ctx.session_total_chunks ? 1 : 0;
        for (int g = 0; g < 2; ++g)
            if (ref_erase_key(ghosts[g], ctx.key)) ++reused[g];
        if (++inserted[c] >= window) {
            inserted[c] /= 2;
            reused[c] /= 2;
        }
        return c;
    }
    void hit(int& fresh) {
        if (fresh >= 0) ++reused[fresh];
        fresh = -1;
    }
    void evicted(int fresh, std::uint64_t key) {
        if (fresh < 0) return;
        auto& g = ghosts[fresh];
        ref_erase_key(g, key);
        g.push_back(key);
        if (g.size() > capacity) g.pop_front();
    }
};

/// tail_aware_lru: each item remembers its class (ref_tail_rule) and whether
/// it sits in the demoted group. Victim: the demoted evictable item with the
/// smallest stamp if any, else the evictable item with the smallest stamp.
struct ref_tail_aware_lru {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        int fresh;  // 0 inner, 1 tail, -1 reused
        bool demoted;
        bool held;
        std::uint64_t stamp;
    };
    ref_records<entry> r;
    ref_tail_rule tails;

    explicit ref_tail_aware_lru(std::size_t c, double demote_ratio = 0.5, std::uint64_t min_s = 64,
                                std::uint64_t w = 4096)
            : tails(c, demote_ratio, min_s, w) {}

    void make_evictable(entry& e) {
        e.held = false;
        e.demoted = e.fresh == 1 && tails.demoting();
        e.stamp = r.clock++;
    }
    void on_insert(item_id id, const access_context& ctx) {
        r.items.push_back({id.value, ctx.key, tails.inserted_class(ctx), false, false, 0});
        make_evictable(r.items.back());
    }
    void on_access(item_id id, const access_context&) {
        entry* e = r.find(id);
        tails.hit(e->fresh);
        if (!e->held) make_evictable(*e);
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context&) { make_evictable(*r.find(id)); }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        entry* v = r.oldest_evictable([](const entry& e) { return e.demoted; });
        if (v == nullptr) v = r.oldest_evictable([](const entry&) { return true; });
        if (v == nullptr) return std::nullopt;
        tails.evicted(v->fresh, v->key);
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

}  // namespace kvpolicy::testing

namespace kvpolicy::testing {

/// pairwise_margin_tuner, restated: live pairs in a vector with their sample
/// number; a pair recorded `pending` samples ago is dropped unscored; bins
/// found by walking powers of two; the margin re-derived from the counts
/// after every scored pair.
struct ref_margin_tuner {
    struct pending_pair {
        std::uint64_t far_key, lru_key;
        int bin;
        std::uint64_t sample;
    };
    double margin = 16.0;
    bool enabled = true;
    std::uint64_t sample_every = 4, pending = 1024;
    double min_samples = 16, window = 4096;
    std::vector<pending_pair> live;
    std::uint64_t since = 0, samples = 0;
    double wins[16] = {}, losses[16] = {}, scored = 0;

    static int bin_of(double ratio) {
        if (!(ratio > 0.0)) return 0;
        int b = 0;  // bin b holds [2^(b-4), 2^(b-3)); the ends are open
        while (b < 15 && ratio >= std::ldexp(1.0, b - 3)) ++b;
        return b;
    }
    void decision(std::uint64_t far_key, std::uint64_t lru_key, double ratio) {
        if (!enabled || far_key == lru_key) return;
        if (++since < sample_every) return;
        for (const auto& p : live)
            if (p.far_key == far_key || p.lru_key == far_key || p.far_key == lru_key || p.lru_key == lru_key) return;
        since = 0;
        const std::uint64_t n = samples++;
        std::erase_if(live, [&](const pending_pair& p) { return p.sample + pending <= n; });
        live.push_back({far_key, lru_key, bin_of(ratio), n});
    }
    void requested(std::uint64_t key) {
        if (!enabled) return;
        for (std::size_t i = 0; i < live.size(); ++i) {
            if (live[i].far_key != key && live[i].lru_key != key) continue;
            const int bin = live[i].bin;
            if (live[i].lru_key == key)
                wins[bin] += 1.0;  // LRU's victim back first
            else
                losses[bin] += 1.0;
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
            if (++scored >= window) {
                for (int b = 0; b < 16; ++b) {
                    wins[b] /= 2;
                    losses[b] /= 2;
                }
                scored /= 2;
            }
            // From the top bin down, over bins with enough pairs, until one loses.
            int lowest = 16;
            bool judged = false;
            for (int b = 15; b >= 0; --b) {
                if (wins[b] + losses[b] < min_samples) continue;
                judged = true;
                if (wins[b] < losses[b]) break;
                lowest = b;
            }
            if (judged) margin = lowest == 16 ? std::numeric_limits<double>::infinity() : std::ldexp(1.0, lowest - 4);
            return;
        }
    }
};

/// session_aware_lru: every entry keeps its placement time, whether it is
/// its session's own (placed while no second session had used it and its
/// session was in the table) and, until its first reuse, its class for the
/// tail rule (ref_tail_rule). Each session is expected back at its latest
/// request + its mean gap. Victim: the demoted entry placed first; else LRU's
/// victim (earliest placement, then placement order), unless the session
/// expected back last (then the smaller id) among those with a gap and own
/// evictable entries is expected back more than the margin (ref_margin_tuner's,
/// from far_factor) x LRU's victim's idle time from now: then that session's
/// own entry placed first. Sessions are a vector scanned linearly.
struct ref_session_aware_lru {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        std::uint64_t session;
        bool shared;  // another session used it since its insert
        int fresh;    // 0 inner, 1 tail, -1 reused
        bool demoted;
        bool held;
        bool own;  // in its session's list since its latest placement
        timestamp placed;
        std::uint64_t stamp;
    };
    struct session {
        std::uint64_t id;
        timestamp last;
        double mean_gap;
        bool has_gap;
        double latest_gap = 0.0;
        std::uint64_t output_tokens = 0;  // the latest request's, once released
        double expected_gap = 0.0;        // 0: not taken by the session rule
        timestamp hint = 0;               // the engine's expected return for the latest request
    };
    ref_records<entry> r;
    double gap_weight;
    std::size_t max_sessions;
    std::size_t forget_at;
    std::vector<session> sessions;
    std::size_t forgotten = 0;  // sessions dropped from the table so far
    ref_tail_rule tails;
    ref_margin_tuner tuner;  // its margin starts at far_factor
    // The gap fit is the component itself, checked on its own against a
    // naive batch fit (tests/eviction_return_gap_model.cpp): what this model
    // restates is when it learns and when its prediction is used.
    return_gap_model gaps;

    explicit ref_session_aware_lru(std::size_t c, double far_factor = 16.0, double w = 0.25, std::size_t max_s = 0,
                                   bool tune = true, const return_gap_model::config_type& gap_fit = {})
            : gap_weight(w),
              max_sessions(max_s != 0 ? max_s : std::max<std::size_t>(c, 1024)),
              forget_at(2 * max_sessions),
              tails(c),
              tuner{},
              gaps(gap_fit, "ref_session_aware_lru") {
        tuner.margin = far_factor;
        tuner.enabled = tune;
    }

    session* find_session(std::uint64_t id) {
        for (auto& s : sessions)
            if (s.id == id) return &s;
        return nullptr;
    }
    double mean_gap(std::uint64_t id) {
        const session* s = find_session(id);
        return s == nullptr || !s->has_gap ? 0.0 : s->mean_gap;
    }
    bool owns_blocks(std::uint64_t id) const {
        for (const auto& e : r.items)
            if (!e.held && !e.demoted && e.own && e.session == id) return true;
        return false;
    }
    void arrival(const access_context& ctx) {
        session* s = find_session(ctx.session.value);
        if (s == nullptr) {
            sessions.push_back({ctx.session.value, ctx.now, 0.0, false});
            if (sessions.size() >= forget_at) {
                std::vector<timestamp> lasts;
                for (const auto& x : sessions) lasts.push_back(x.last);
                std::sort(lasts.begin(), lasts.end(), std::greater<>());
                const timestamp keep_from = lasts[max_sessions - 1];
                forgotten +=
                    std::erase_if(sessions, [&](const session& x) { return x.last < keep_from && !owns_blocks(x.id); });
                forget_at = std::max(2 * max_sessions, sessions.size() + max_sessions);
            }
            return;
        }
        if (ctx.now <= s->last) return;
        const double gap = static_cast<double>(ctx.now - s->last);
        // The gap after a request whose output is known is a sample.
        if (s->output_tokens != 0)
            gaps.observe(return_gap_model::features_of(s->output_tokens, s->has_gap, s->latest_gap, s->mean_gap), gap);
        s->mean_gap = s->has_gap ? s->mean_gap + gap_weight * (gap - s->mean_gap) : gap;
        s->has_gap = true;
        s->latest_gap = gap;
        s->last = ctx.now;
        s->output_tokens = 0;
        s->hint = 0;
        s->expected_gap = s->mean_gap;
    }
    // A release naming the finished request's output: the first of its
    // blocks to say so sets the session's prediction, once the fit is ready.
    void output_known(const access_context& ctx) {
        session* s = find_session(ctx.session.value);
        if (s == nullptr || s->output_tokens == ctx.output_tokens) return;
        s->output_tokens = ctx.output_tokens;
        if (gaps.ready() && s->hint == 0)
            s->expected_gap =
                gaps.predict(return_gap_model::features_of(s->output_tokens, s->has_gap, s->latest_gap, s->mean_gap));
    }
    // A release naming when the engine expects the session back: that time
    // is its expectation until its next request, over any fitted one.
    void hint_known(const access_context& ctx) {
        session* s = find_session(ctx.session.value);
        if (s == nullptr || s->hint == ctx.expected_return) return;
        s->hint = ctx.expected_return;
        if (s->hint == never)
            s->expected_gap = 1e300;  // past any time: ranked never - 1
        else
            s->expected_gap = s->hint > s->last ? static_cast<double>(s->hint - s->last) : 1.0;
    }
    void make_evictable(entry& e, timestamp now) {
        e.held = false;
        e.stamp = r.clock++;
        e.demoted = e.fresh == 1 && tails.demoting();
        e.own = false;
        if (e.demoted) return;
        e.placed = now;
        e.own = !e.shared && find_session(e.session) != nullptr;
    }
    void on_insert(item_id id, const access_context& ctx) {
        const int c = tails.inserted_class(ctx);
        tuner.requested(ctx.key);
        arrival(ctx);
        r.items.push_back({id.value, ctx.key, ctx.session.value, false, c, false, false, false, 0, 0});
        make_evictable(r.items.back(), ctx.now);
    }
    void on_access(item_id id, const access_context& ctx) {
        entry* e = r.find(id);
        tails.hit(e->fresh);
        tuner.requested(ctx.key);
        arrival(ctx);
        if (e->session != ctx.session.value) e->shared = true;
        e->session = ctx.session.value;
        if (!e->held) make_evictable(*e, ctx.now);
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) {
        if (ctx.output_tokens != 0) output_known(ctx);
        if (ctx.expected_return != 0) hint_known(ctx);
        make_evictable(*r.find(id), ctx.now);
    }
    // The engine closed the session: as a `never` hint.
    void on_session_end(session_id s, timestamp now) {
        access_context ctx;
        ctx.session = s;
        ctx.now = now;
        ctx.expected_return = never;
        hint_known(ctx);
    }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp now) {
        entry* v = r.oldest_evictable([](const entry& e) { return e.demoted; });
        if (v == nullptr) {
            for (auto& e : r.items)
                if (!e.held && !e.demoted &&
                    (v == nullptr || e.placed < v->placed || (e.placed == v->placed && e.stamp < v->stamp)))
                    v = &e;
            if (v == nullptr) return std::nullopt;
            const session* far = nullptr;
            timestamp far_back = 0;
            for (const auto& s : sessions) {
                if (s.expected_gap <= 0.0 || !owns_blocks(s.id)) continue;
                const double b = static_cast<double>(s.last) + s.expected_gap;
                const timestamp back = b >= 1.8e19 ? never - 1 : static_cast<timestamp>(b);
                if (far == nullptr || back > far_back || (back == far_back && s.id < far->id)) {
                    far = &s;
                    far_back = back;
                }
            }
            if (far != nullptr && far_back > now) {
                entry* f = nullptr;
                for (auto& e : r.items)
                    if (!e.held && !e.demoted && e.own && e.session == far->id && (f == nullptr || e.stamp < f->stamp))
                        f = &e;
                const double idle = static_cast<double>(now - std::min(now, v->placed));
                const double wait = static_cast<double>(far_back - now);
                if (f->session != v->session) tuner.decision(f->key, v->key, wait / idle);
                if (wait > tuner.margin * idle) v = f;
            }
        }
        tails.evicted(v->fresh, v->key);
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

}  // namespace kvpolicy::testing

namespace kvpolicy::testing {

/// reuse_oracle_lru: each evictable item carries the oracle's answer from
/// its latest placement (insert, unheld access, release: next use `never`
/// or not) and a stamp. Victim: the dead evictable item with the smallest
/// stamp if any, else the evictable item with the smallest stamp.
struct ref_reuse_oracle_lru {
    struct entry {
        std::uint32_t id;
        bool dead;
        bool held;
        std::uint64_t stamp;
    };
    ref_records<entry> r;

    void make_evictable(entry& e, const access_context& ctx) {
        e.held = false;
        e.dead = ctx.next_use == never;
        e.stamp = r.clock++;
    }
    void on_insert(item_id id, const access_context& ctx) {
        r.items.push_back({id.value, false, false, 0});
        make_evictable(r.items.back(), ctx);
    }
    void on_access(item_id id, const access_context& ctx) {
        entry* e = r.find(id);
        if (!e->held) make_evictable(*e, ctx);
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context& ctx) { make_evictable(*r.find(id), ctx); }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        entry* v = r.oldest_evictable([](const entry& e) { return e.dead; });
        if (v == nullptr) v = r.oldest_evictable([](const entry&) { return true; });
        if (v == nullptr) return std::nullopt;
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

}  // namespace kvpolicy::testing

namespace kvpolicy::testing {

/// lrfu, restated: each item keeps the T of every one of its references (an
/// evicted item's list survives in a deque of at most `ghost_capacity` keys,
/// newest at the back); a victim is the evictable item with the lowest
/// log2(sum over references of 2^(-(last - t) / (half_life x capacity))) +
/// last / (half_life x capacity), the value summed at its last reference and
/// scaled to one time; equal values (within 1e-9) go to the earliest placed.
/// T counts references; references at one `now` share the T of the first.
/// Victims and erased items leave their lists to the ghosts.
struct ref_lrfu {
    struct entry {
        std::uint32_t id;
        std::uint64_t key;
        std::vector<std::uint64_t> refs;
        bool held;
        std::uint64_t stamp;
    };
    ref_records<entry> r;
    std::deque<std::pair<std::uint64_t, std::vector<std::uint64_t>>> ghosts;
    std::size_t ghost_capacity;
    double per_reference;
    std::uint64_t references = 0, step_start = 0;
    timestamp step_now = 0;
    bool started = false;

    ref_lrfu(std::size_t capacity, double half_life, double ghost_factor)
            : ghost_capacity(static_cast<std::size_t>(ghost_factor * static_cast<double>(capacity))),
              per_reference(1.0 / (half_life * static_cast<double>(capacity))) {}

    std::uint64_t reference(const access_context& ctx) {
        if (!started || ctx.now != step_now) {
            started = true;
            step_now = ctx.now;
            step_start = references;
        }
        ++references;
        return step_start;
    }
    double score(const entry& e) const {
        const std::uint64_t last = e.refs.back();
        double sum = 0.0;
        for (std::uint64_t t : e.refs) sum += std::exp2(-per_reference * static_cast<double>(last - t));
        return std::log2(sum) + per_reference * static_cast<double>(last);
    }
    void on_insert(item_id id, const access_context& ctx) {
        std::vector<std::uint64_t> refs;
        for (auto it = ghosts.begin(); it != ghosts.end(); ++it)
            if (it->first == ctx.key) {
                refs = it->second;
                ghosts.erase(it);
                break;
            }
        refs.push_back(reference(ctx));
        r.items.push_back({id.value, ctx.key, std::move(refs), false, r.clock++});
    }
    void on_access(item_id id, const access_context& ctx) {
        entry* e = r.find(id);
        e->refs.push_back(reference(ctx));
        if (!e->held) e->stamp = r.clock++;
    }
    void on_hold(item_id id) { r.find(id)->held = true; }
    void on_release(item_id id, const access_context&) {
        entry* e = r.find(id);
        e->held = false;
        e->stamp = r.clock++;
    }
    void remember(const entry& e) {
        if (ghost_capacity == 0) return;
        std::erase_if(ghosts, [&](const auto& g) { return g.first == e.key; });
        ghosts.emplace_back(e.key, e.refs);
        if (ghosts.size() > ghost_capacity) ghosts.pop_front();
    }
    void on_erase(item_id id) {
        remember(*r.find(id));
        r.erase(id);
    }
    std::optional<item_id> pop_victim(timestamp) {
        entry* v = nullptr;
        double best = 0.0;
        for (auto& e : r.items) {
            if (e.held) continue;
            const double s = score(e);
            if (v == nullptr || s < best - 1e-9 || (s <= best + 1e-9 && e.stamp < v->stamp)) {
                v = &e;
                best = s;
            }
        }
        if (v == nullptr) return std::nullopt;
        remember(*v);
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

/// best_of_shadows<E...>, restated over reference experts: every expert
/// sees every call on the cached items; victims come from the followed one
/// and are erased from the rest. Each shadow is a vector of (key, held)
/// slots under its own reference expert, fed with the references of sampled
/// keys (all when shadow_items >= capacity, else mix64(key) < rate x 2^64),
/// holding, releasing and forgetting them with the real cache. A shadow hit
/// is a reference to a key it holds. Every choose_every sampled references
/// the expert with the most shadow hits (the first of them) is followed if
/// its hits less the followed one's exceed `sigmas` x the square root of the
/// references exactly one of the two hit, and that lead is at least `gain` x
/// the sampled references, each weighed 1/2 per halving since it; every
/// halve_every, all counts halve.
template <class... RefExperts>
struct ref_best_of_shadows {
    struct shadow_slot {
        bool used = false;
        std::uint64_t key = 0;
        bool held = false;
    };
    template <class R>
    struct ref_shadow {
        R policy;
        std::vector<shadow_slot> slots;
        std::vector<std::uint32_t> freed;  // erased slots, reused last first
        std::uint32_t next_unused = 0;
        double hits = 0.0;

        std::optional<std::uint32_t> slot_of(std::uint64_t key) const {
            for (std::uint32_t i = 0; i < slots.size(); ++i)
                if (slots[i].used && slots[i].key == key) return i;
            return std::nullopt;
        }
        void reference(const access_context& ctx) {
            if (auto s = slot_of(ctx.key)) {
                hits += 1.0;
                policy.on_access(item_id{*s}, ctx);
                return;
            }
            std::uint32_t s;
            if (!freed.empty()) {
                s = freed.back();
                freed.pop_back();
            } else if (next_unused < slots.size()) {
                s = next_unused++;
            } else {
                const auto v = policy.pop_victim(ctx.now);
                if (!v) return;
                s = v->value;
            }
            slots[s] = {true, ctx.key, false};
            policy.on_insert(item_id{s}, ctx);
        }
        void hold(std::uint64_t key) {
            if (auto s = slot_of(key); s && !slots[*s].held) {
                slots[*s].held = true;
                policy.on_hold(item_id{*s});
            }
        }
        void release(const access_context& ctx) {
            if (auto s = slot_of(ctx.key); s && slots[*s].held) {
                slots[*s].held = false;
                policy.on_release(item_id{*s}, ctx);
            }
        }
        void forget(std::uint64_t key) {
            if (auto s = slot_of(key)) {
                slots[*s] = {};
                policy.on_erase(item_id{*s});
                freed.push_back(*s);
            }
        }
    };

    std::tuple<RefExperts...> real;
    std::tuple<ref_shadow<RefExperts>...> shadows;
    std::vector<std::uint64_t> key_of;  // [capacity]
    double rate;
    std::uint64_t halve_every, choose_every, references = 0;
    std::vector<std::vector<double>> only;  // [x][y] references shadow x hit and y missed, halved with the hits
    double sigmas;
    double gain;
    std::vector<std::uint64_t> per_halving;  // [k] sampled references between halvings k and k + 1
    std::size_t followed = 0;

    /// `make(capacity)` builds one of each reference expert, in order.
    template <class Make>
    ref_best_of_shadows(std::size_t capacity, std::size_t shadow_items, double window, double switch_sigmas, Make make,
                        double switch_gain = 0.0)
            : real(make(capacity)),
              shadows(shadows_of(make, capacity, shadow_items)),
              key_of(capacity, 0),
              rate(std::min(1.0, static_cast<double>(shadow_items) / static_cast<double>(capacity))),
              only(sizeof...(RefExperts), std::vector<double>(sizeof...(RefExperts), 0.0)),
              sigmas(switch_sigmas),
              gain(switch_gain),
              per_halving(1, 0) {
        const std::size_t shadow_capacity = std::get<0>(shadows).slots.size();
        halve_every =
            std::max<std::uint64_t>(16, static_cast<std::uint64_t>(window * static_cast<double>(shadow_capacity)));
        choose_every = std::max<std::uint64_t>(16, halve_every / 16);
    }
    template <class Make>
    static std::tuple<ref_shadow<RefExperts>...> shadows_of(Make make, std::size_t capacity, std::size_t shadow_items) {
        const double rate = std::min(1.0, static_cast<double>(shadow_items) / static_cast<double>(capacity));
        const std::size_t n =
            std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(rate * static_cast<double>(capacity))));
        return std::apply(
            [&](auto&&... e) {
                return std::tuple<ref_shadow<RefExperts>...>{
                    ref_shadow<RefExperts>{std::move(e), std::vector<shadow_slot>(n), {}, 0, 0.0}...};
            },
            make(n));
    }
    bool sampled(std::uint64_t key) const {
        return rate >= 1.0 || mix64(key) < static_cast<std::uint64_t>(std::ldexp(rate, 64));
    }
    template <class F>
    void each_real(F f) {
        std::apply([&](auto&... e) { (f(e), ...); }, real);
    }
    template <class F>
    void each_shadow(F f) {
        std::apply([&](auto&... s) { (f(s), ...); }, shadows);
    }

    void shadow_reference(const access_context& ctx) {
        std::vector<bool> hit;
        each_shadow([&](auto& s) {
            const double before = s.hits;
            s.reference(ctx);
            hit.push_back(s.hits != before);
        });
        for (std::size_t x = 0; x < hit.size(); ++x)
            for (std::size_t y = 0; y < hit.size(); ++y) only[x][y] += hit[x] && !hit[y] ? 1.0 : 0.0;
        ++references;
        ++per_halving.back();
        if (references % choose_every == 0) {
            std::vector<double> hits;
            each_shadow([&](auto& s) { hits.push_back(s.hits); });
            std::size_t best = followed;
            for (std::size_t i = 0; i < hits.size(); ++i)
                if (hits[i] > hits[best]) best = i;
            double window_references = 0.0;
            for (std::size_t k = 0; k < per_halving.size(); ++k)
                window_references += static_cast<double>(per_halving[k]) *
                                     std::pow(0.5, static_cast<double>(per_halving.size() - 1 - k));
            const double lead = only[best][followed] - only[followed][best];
            if (best != followed && lead > sigmas * std::sqrt(only[best][followed] + only[followed][best]) &&
                lead >= gain * window_references)
                followed = best;
        }
        if (references % halve_every == 0) {
            per_halving.push_back(0);
            each_shadow([](auto& s) { s.hits *= 0.5; });
            for (auto& row : only)
                for (double& n : row) n *= 0.5;
        }
    }
    void on_insert(item_id id, const access_context& ctx) {
        each_real([&](auto& e) { e.on_insert(id, ctx); });
        key_of[id.index()] = ctx.key;
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_access(item_id id, const access_context& ctx) {
        each_real([&](auto& e) { e.on_access(id, ctx); });
        if (sampled(ctx.key)) shadow_reference(ctx);
    }
    void on_hold(item_id id) {
        each_real([&](auto& e) { e.on_hold(id); });
        if (sampled(key_of[id.index()])) each_shadow([&](auto& s) { s.hold(key_of[id.index()]); });
    }
    void on_release(item_id id, const access_context& ctx) {
        each_real([&](auto& e) { e.on_release(id, ctx); });
        if (sampled(ctx.key)) each_shadow([&](auto& s) { s.release(ctx); });
    }
    void on_erase(item_id id) {
        each_real([&](auto& e) { e.on_erase(id); });
        if (sampled(key_of[id.index()])) each_shadow([&](auto& s) { s.forget(key_of[id.index()]); });
    }
    // Every expert that hears session ends hears it, real and shadow alike.
    void on_session_end(session_id session, timestamp now) {
        const auto tell = [&](auto& p) {
            if constexpr (requires { p.on_session_end(session, now); }) p.on_session_end(session, now);
        };
        each_real(tell);
        each_shadow([&](auto& s) { tell(s.policy); });
    }
    std::optional<item_id> pop_victim(timestamp now) {
        std::optional<item_id> v;
        std::size_t i = 0;
        each_real([&](auto& e) {
            if (i++ == followed) v = e.pop_victim(now);
        });
        if (v) {
            i = 0;
            each_real([&](auto& e) {
                if (i++ != followed) e.on_erase(*v);
            });
        }
        return v;
    }
};

}  // namespace kvpolicy::testing

namespace kvpolicy::testing {

/// superseded_lru, restated: each item records the session that used it
/// last, whether two sessions used it, the `now` it became evictable at and
/// a stamp. A reference by a session at `now` supersedes, in stamp order,
/// each of that session's evictable, unshared, not yet superseded items
/// placed at an earlier `now`, numbering them as it goes; a victim is the
/// superseded evictable item with the lowest number, else the not
/// superseded evictable item with the lowest stamp (LRU).
struct ref_superseded_lru {
    struct entry {
        std::uint32_t id;
        std::uint64_t owner;
        bool shared;
        timestamp placed;
        std::uint64_t stamp;
        bool held;
        bool superseded;
        std::uint64_t number;
    };
    ref_records<entry> r;
    std::uint64_t numbers = 0;

    void reference(const access_context& ctx) {
        std::vector<entry*> moved_on;
        for (auto& e : r.items)
            if (!e.held && !e.shared && !e.superseded && e.owner == ctx.session.value && e.placed < ctx.now)
                moved_on.push_back(&e);
        std::sort(moved_on.begin(), moved_on.end(), [](const entry* a, const entry* b) { return a->stamp < b->stamp; });
        for (entry* e : moved_on) {
            e->superseded = true;
            e->number = numbers++;
        }
    }
    void make_evictable(entry& e, timestamp now) {
        e.held = false;
        e.superseded = false;
        e.placed = now;
        e.stamp = r.clock++;
    }
    void on_insert(item_id id, const access_context& ctx) {
        reference(ctx);
        r.items.push_back({id.value, ctx.session.value, false, 0, 0, false, false, 0});
        make_evictable(r.items.back(), ctx.now);
    }
    void on_access(item_id id, const access_context& ctx) {
        reference(ctx);
        entry* e = r.find(id);
        if (e->owner != ctx.session.value) e->shared = true;
        e->owner = ctx.session.value;
        if (!e->held) make_evictable(*e, ctx.now);
    }
    void on_hold(item_id id) {
        entry* e = r.find(id);
        e->held = true;
        e->superseded = false;
    }
    void on_release(item_id id, const access_context& ctx) { make_evictable(*r.find(id), ctx.now); }
    void on_erase(item_id id) { r.erase(id); }
    std::optional<item_id> pop_victim(timestamp) {
        entry* v = nullptr;
        for (auto& e : r.items)
            if (!e.held && e.superseded && (v == nullptr || e.number < v->number)) v = &e;
        if (v == nullptr) v = r.oldest_evictable([](const entry& e) { return !e.superseded; });
        if (v == nullptr) return std::nullopt;
        const item_id victim{v->id};
        r.erase(victim);
        return victim;
    }
};

}  // namespace kvpolicy::testing
