// A naive model of tiered_cache for whole-block items with LRU or FIFO
// tiers: std::map from key to entry and linear scans, no slots, no index.
// It states the cache's rules directly:
// - an item is evictable iff cached, unreferenced and unpinned;
// - LRU orders candidates by their last insert/hit/release, FIFO by their
//   insert alone (a hit while held changes nothing for either);
// - admit holds the GPU items first, then takes victims for what is missing;
//   free GPU slots go to CPU hits first; with the GPU full each remaining
//   CPU hit is exchanged with a victim (the oldest victims first), the other
//   victims are sheltered at the CPU's most-recent end, the CPU evicting its
//   own victims (dropped, unless inclusive and the item is on the GPU or is
//   one the request recomputes) when it has no room, the newest victims
//   pushing the oldest out when even that is not enough;
// - a finished request's holds are released tail first (reverse block order);
// - failed copies (complete): a copy's output is lost if it failed or read a
//   lost output; an item whose last copy's output is lost and that is still
//   in that tier: CPU -> dropped; GPU -> recompute if held (owned by the
//   requester), else dropped; an exchange loses both halves; an item is
//   reported dropped once, and only if no copy of it is left. Tracked by
//   key: (tier, key) rather than slots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

namespace kvpolicy::testing {

enum class ref_rule { lru, fifo };

struct reference_cache {
    struct gpu_entry {
        std::uint32_t refs = 0;
        bool pinned = false;
        std::uint64_t stamp = 0;
    };
    struct cpu_entry {
        std::uint32_t refs = 0;  // inclusive: a GPU victim's copy, protected while the CPU picks victims
        std::uint64_t stamp = 0;
    };
    struct match_t {
        std::size_t run = 0, gpu = 0, cpu = 0;
    };

    std::size_t gpu_cap, cpu_cap;
    ref_rule gpu_rule, cpu_rule;
    bool inclusive;
    std::map<std::uint64_t, gpu_entry> gpu;
    std::map<std::uint64_t, cpu_entry> cpu;
    std::map<std::uint64_t, std::vector<std::uint64_t>> held;  // session -> gpu keys, in hold order
    std::vector<std::uint64_t> drops;                          // this step
    // key -> the session that computed the copy in each tier (copies move with it)
    std::map<std::uint64_t, std::uint64_t> gpu_owner, cpu_owner;
    enum class op_kind { swap_in, swap_out, exchange };
    struct op {
        op_kind kind;
        std::uint64_t to_gpu = 0, to_cpu = 0;  // keys written to each tier
        std::uint64_t requester = 0;
    };
    std::vector<op> ops;  // this step's copies, in the cache's planning order
    std::uint64_t clock = 0;

    reference_cache(std::size_t g, std::size_t c, ref_rule gr, ref_rule cr, bool incl)
            : gpu_cap(g), cpu_cap(c), gpu_rule(gr), cpu_rule(cr), inclusive(incl) {}

    match_t lookup(const std::vector<std::uint64_t>& keys) const {
        match_t m;
        for (std::uint64_t k : keys) {
            if (gpu.contains(k))
                ++m.gpu;
            else if (cpu.contains(k))
                ++m.cpu;
            else
                break;
            ++m.run;
        }
        return m;
    }

    void begin_step() {
        drops.clear();
        ops.clear();
    }

    void release_gpu(std::uint64_t k) {
        auto& e = gpu.at(k);
        if (--e.refs == 0 && !e.pinned && gpu_rule == ref_rule::lru) e.stamp = ++clock;
    }
    void release(std::uint64_t session) {
        auto& h = held.at(session);
        for (auto k = h.rbegin(); k != h.rend(); ++k) release_gpu(*k);
        h.clear();
    }
    /// free_session(session, /*forget_blocks=*/true).
    void forget(std::uint64_t session) {
        if (held.contains(session)) release(session);
        held.erase(session);
        std::erase_if(gpu, [&](const auto& p) {
            return p.second.refs == 0 && !p.second.pinned && gpu_owner.at(p.first) == session;
        });
        std::erase_if(cpu, [&](const auto& p) { return p.second.refs == 0 && cpu_owner.at(p.first) == session; });
    }

    struct completion {
        std::vector<std::uint64_t> drops;                                // sorted
        std::vector<std::pair<std::uint64_t, std::uint64_t>> recompute;  // (key, holder), sorted
    };
    /// `failed[i]`: op i failed.
    completion complete(const std::vector<bool>& failed) {
        std::map<std::pair<int, std::uint64_t>, bool> valid;  // (0 gpu / 1 cpu, key)
        std::map<std::pair<int, std::uint64_t>, std::uint64_t> requester;
        auto ok_at = [&](int t, std::uint64_t k) {
            auto it = valid.find({t, k});
            return it == valid.end() || it->second;
        };
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const op& o = ops[i];
            bool ok = !failed[i];
            if (o.kind == op_kind::swap_in) ok = ok && ok_at(1, o.to_gpu);
            if (o.kind == op_kind::swap_out) ok = ok && ok_at(0, o.to_cpu);
            if (o.kind == op_kind::exchange) ok = ok && ok_at(0, o.to_cpu) && ok_at(1, o.to_gpu);
            if (o.kind != op_kind::swap_out) {
                valid[{0, o.to_gpu}] = ok;
                requester[{0, o.to_gpu}] = o.requester;
            }
            if (o.kind != op_kind::swap_in) valid[{1, o.to_cpu}] = ok;
        }
        completion c;
        for (const auto& [where, ok] : valid) {
            if (ok) continue;
            const auto [t, k] = where;
            if (t == 1 && cpu.contains(k)) {
                cpu.erase(k);
                c.drops.push_back(k);
            }
            if (t == 0 && gpu.contains(k)) {
                if (gpu.at(k).refs == 0) {
                    gpu.erase(k);
                    c.drops.push_back(k);
                    continue;
                }
                std::set<std::uint64_t> holders;
                for (const auto& [s, keys] : held)
                    if (std::find(keys.begin(), keys.end(), k) != keys.end()) holders.insert(s);
                for (std::uint64_t s : holders) c.recompute.emplace_back(k, s);
                const std::uint64_t r = requester.at(where);
                gpu_owner[k] = holders.contains(r) ? r : *holders.begin();
            }
        }
        // An item is dropped once, and only if no copy of it is left.
        std::erase_if(c.drops, [&](std::uint64_t k) { return gpu.contains(k) || cpu.contains(k); });
        std::sort(c.drops.begin(), c.drops.end());
        c.drops.erase(std::unique(c.drops.begin(), c.drops.end()), c.drops.end());
        std::sort(c.recompute.begin(), c.recompute.end());
        return c;
    }

    void pin(std::uint64_t k) { gpu.at(k).pinned = true; }
    void unpin(std::uint64_t k) {
        auto& e = gpu.at(k);
        e.pinned = false;
        if (e.refs == 0 && gpu_rule == ref_rule::lru) e.stamp = ++clock;
    }

    // The evictable key with the smallest stamp.
    std::optional<std::uint64_t> gpu_victim() const {
        std::optional<std::uint64_t> best;
        for (const auto& [k, e] : gpu)
            if (e.refs == 0 && !e.pinned && (!best || e.stamp < gpu.at(*best).stamp)) best = k;
        return best;
    }
    std::optional<std::uint64_t> cpu_victim() const {
        std::optional<std::uint64_t> best;
        for (const auto& [k, e] : cpu)
            if (e.refs == 0 && (!best || e.stamp < cpu.at(*best).stamp)) best = k;
        return best;
    }
    std::size_t gpu_evictable() const {
        return static_cast<std::size_t>(std::count_if(
            gpu.begin(), gpu.end(), [](const auto& p) { return p.second.refs == 0 && !p.second.pinned; }));
    }

    /// Returns the match and the number of GPU victims; throws
    /// std::length_error (and changes nothing) when there is no room.
    std::pair<match_t, std::size_t> admit(std::uint64_t session, const std::vector<std::uint64_t>& keys) {
        const match_t m = lookup(keys);
        std::size_t needed = 0, own = 0;
        for (std::uint64_t k : keys) {
            auto it = gpu.find(k);
            if (it == gpu.end())
                ++needed;
            else if (it->second.refs == 0 && !it->second.pinned)
                ++own;
        }
        if (needed > (gpu_cap - gpu.size()) + gpu_evictable() - own) throw std::length_error("no room");

        std::vector<std::uint64_t> swap_ins, fresh;
        for (std::size_t i = 0; i < keys.size(); ++i) {
            const std::uint64_t k = keys[i];
            if (auto it = gpu.find(k); it != gpu.end()) {
                if (gpu_rule == ref_rule::lru && it->second.refs == 0 && !it->second.pinned) it->second.stamp = ++clock;
                ++it->second.refs;
                continue;
            }
            auto c = cpu.find(k);
            if (c != cpu.end() && i < m.run) {
                if (cpu_rule == ref_rule::lru && c->second.refs == 0) c->second.stamp = ++clock;
                swap_ins.push_back(k);
                if (inclusive)
                    ++c->second.refs;  // protected until its copy is planned
                else
                    cpu.erase(c);  // exclusive: it moves up
                continue;
            }
            if (c != cpu.end() && !inclusive) cpu.erase(c);
            fresh.push_back(k);
        }
        const std::size_t want = swap_ins.size() + fresh.size();
        const std::size_t free_gpu = gpu_cap - gpu.size();
        const std::size_t n_victims = want > free_gpu ? want - free_gpu : 0;
        const std::size_t n_pairs = inclusive ? 0 : std::min(n_victims, swap_ins.size());
        auto add_gpu = [&](std::uint64_t k) { gpu[k] = {1, false, ++clock}; };
        if (!inclusive)
            for (std::size_t p = n_pairs; p < swap_ins.size(); ++p) {  // into free slots
                add_gpu(swap_ins[p]);
                gpu_owner[swap_ins[p]] = cpu_owner.at(swap_ins[p]);
                ops.push_back({op_kind::swap_in, swap_ins[p], 0, session});
            }
        std::vector<std::uint64_t> victims;
        for (std::size_t v = 0; v < n_victims; ++v) {
            const std::uint64_t k = *gpu_victim();
            victims.push_back(k);
            gpu.erase(k);
        }
        for (std::size_t p = 0; p < n_pairs; ++p) {
            cpu[victims[p]] = {0, ++clock};
            cpu_owner[victims[p]] = gpu_owner.at(victims[p]);
            add_gpu(swap_ins[p]);
            gpu_owner[swap_ins[p]] = cpu_owner.at(swap_ins[p]);
            ops.push_back({op_kind::exchange, swap_ins[p], victims[p], session});
        }
        // Shelter the other victims.
        // Inclusive: victims with a CPU copy move nothing; the copies are
        // protected while the CPU picks victims, then count as used.
        std::size_t to_copy = 0;
        for (std::size_t v = n_pairs; v < victims.size(); ++v) {
            if (inclusive && cpu.contains(victims[v]))
                ++cpu.at(victims[v]).refs;
            else
                ++to_copy;
        }
        std::size_t room = cpu_cap == 0 ? 0 : cpu_cap - cpu.size();
        if (cpu_cap > 0 && to_copy > room) {
            for (std::size_t d = to_copy - room; d > 0; --d) {
                const auto k = cpu_victim();
                if (!k) break;
                cpu.erase(*k);
                // Inclusive: a copy of an item on the GPU, or about to be
                // recomputed there, is no loss.
                const bool on_gpu = gpu.contains(*k) || std::find(fresh.begin(), fresh.end(), *k) != fresh.end();
                if (!(inclusive && on_gpu)) drops.push_back(*k);
                ++room;
            }
        }
        // Sheltered one by one, the newest victims push the oldest out.
        std::size_t excess = to_copy > room ? to_copy - room : 0;
        for (std::size_t v = n_pairs; v < victims.size(); ++v) {
            const std::uint64_t k = victims[v];
            if (inclusive && cpu.contains(k)) {
                if (--cpu.at(k).refs == 0 && cpu_rule == ref_rule::lru) cpu.at(k).stamp = ++clock;
                continue;
            }
            if (cpu_cap > 0 && excess == 0) {
                cpu[k] = {0, ++clock};
                cpu_owner[k] = gpu_owner.at(k);
                ops.push_back({op_kind::swap_out, 0, k, 0});
            } else {
                if (excess > 0) --excess;
                drops.push_back(k);
            }
        }
        if (inclusive)
            for (std::uint64_t k : swap_ins) {
                add_gpu(k);
                gpu_owner[k] = cpu_owner.at(k);
                ops.push_back({op_kind::swap_in, k, 0, session});
                if (--cpu.at(k).refs == 0 && cpu_rule == ref_rule::lru) cpu.at(k).stamp = ++clock;
            }
        for (std::uint64_t k : fresh) {
            add_gpu(k);
            gpu_owner[k] = session;
        }
        for (std::uint64_t k : keys) held[session].push_back(k);  // every block is held now, in block order
        return {m, n_victims};
    }
};

}  // namespace kvpolicy::testing
