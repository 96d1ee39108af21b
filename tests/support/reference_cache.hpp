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
//   own victims (dropped) when it has no room, the newest victims pushing
//   the oldest out when even that is not enough;
// - a finished request's holds are released tail first (reverse block order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
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
    std::vector<std::uint64_t> drops;            // this step
    std::uint64_t clock = 0;

    reference_cache(std::size_t g, std::size_t c, ref_rule gr, ref_rule cr, bool incl)
        : gpu_cap(g), cpu_cap(c), gpu_rule(gr), cpu_rule(cr), inclusive(incl) {}

    match_t lookup(const std::vector<std::uint64_t>& keys) const {
        match_t m;
        for (std::uint64_t k : keys) {
            if (gpu.contains(k)) ++m.gpu;
            else if (cpu.contains(k)) ++m.cpu;
            else break;
            ++m.run;
        }
        return m;
    }

    void begin_step() { drops.clear(); }

    void release_gpu(std::uint64_t k) {
        auto& e = gpu.at(k);
        if (--e.refs == 0 && !e.pinned && gpu_rule == ref_rule::lru) e.stamp = ++clock;
    }
    void release(std::uint64_t session) {
        auto& h = held.at(session);
        for (auto k = h.rbegin(); k != h.rend(); ++k) release_gpu(*k);
        h.clear();
    }
    void pin(std::uint64_t k) {
        gpu.at(k).pinned = true;
    }
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
        return static_cast<std::size_t>(
            std::count_if(gpu.begin(), gpu.end(), [](const auto& p) { return p.second.refs == 0 && !p.second.pinned; }));
    }

    /// Returns the match and the number of GPU victims; throws
    /// std::length_error (and changes nothing) when there is no room.
    std::pair<match_t, std::size_t> admit(std::uint64_t session, const std::vector<std::uint64_t>& keys) {
        const match_t m = lookup(keys);
        std::size_t needed = 0, own = 0;
        for (std::uint64_t k : keys) {
            auto it = gpu.find(k);
            if (it == gpu.end()) ++needed;
            else if (it->second.refs == 0 && !it->second.pinned) ++own;
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
                if (inclusive) ++c->second.refs;  // protected until its copy is planned
                else cpu.erase(c);                // exclusive: it moves up
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
            for (std::size_t p = n_pairs; p < swap_ins.size(); ++p) add_gpu(swap_ins[p]);  // into free slots
        std::vector<std::uint64_t> victims;
        for (std::size_t v = 0; v < n_victims; ++v) {
            const std::uint64_t k = *gpu_victim();
            victims.push_back(k);
            gpu.erase(k);
        }
        for (std::size_t p = 0; p < n_pairs; ++p) {
            cpu[victims[p]] = {0, ++clock};
            add_gpu(swap_ins[p]);
        }
        // Shelter the other victims.
        // Inclusive: victims with a CPU copy move nothing; the copies are
        // protected while the CPU picks victims, then count as used.
        std::size_t to_copy = 0;
        for (std::size_t v = n_pairs; v < victims.size(); ++v) {
            if (inclusive && cpu.contains(victims[v])) ++cpu.at(victims[v]).refs;
            else ++to_copy;
        }
        std::size_t room = cpu_cap == 0 ? 0 : cpu_cap - cpu.size();
        if (cpu_cap > 0 && to_copy > room) {
            for (std::size_t d = to_copy - room; d > 0; --d) {
                const auto k = cpu_victim();
                if (!k) break;
                cpu.erase(*k);
                if (!(inclusive && gpu.contains(*k))) drops.push_back(*k);
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
            } else {
                if (excess > 0) --excess;
                drops.push_back(k);
            }
        }
        if (inclusive)
            for (std::uint64_t k : swap_ins) {
                add_gpu(k);
                if (--cpu.at(k).refs == 0 && cpu_rule == ref_rule::lru) cpu.at(k).stamp = ++clock;
            }
        for (std::uint64_t k : fresh) add_gpu(k);
        for (std::uint64_t k : keys) held[session].push_back(k);  // every block is held now, in block order
        return {m, n_victims};
    }
};

}  // namespace kvpolicy::testing
