// tiered_cache, lookup and admission: admit() and stage_remote(), over the
// cache's state.
//
// Finding the longest cached prefix across the tiers, checking the hash
// chain, holding the hits, planning the swap-ins (and exchanges with GPU
// victims), sheltering the other victims in the CPU tier, and allocating the
// miss tail; for the remote tier, staging the store's run of blocks into CPU
// slots and writing back victims that would be dropped. The rules are in
// tiered_cache.hpp's header comment, which is the header to include. This
// part adds to the open step's plan (state.plan) and never reads what the
// other parts keep.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache_state.hpp"

namespace kvpolicy {

/// What admit() did for one request.
struct admission {
    prefix_match match;
    std::size_t computed_blocks = 0;  ///< the miss tail, allocated and to be computed
    std::size_t gpu_evictions = 0;    ///< GPU victims made to find room
};

namespace detail {

/// tiered_cache's admission: State is a tiered_state; the caller holds the
/// cache's mutex. Owns only scratch, kept between calls so that admitting
/// allocates nothing once the vectors have grown.
template <class State>
class tiered_admission {
public:
    /// Whether admit(hashes) finds room on the GPU (tiered_cache::gpu_room_for).
    [[nodiscard]] static bool gpu_room_for(const State& state, std::span<const block_hash> hashes) {
        std::size_t needed = 0;
        std::size_t own_evictable = 0;
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
                if (auto b = state.gpu.cached_block(state.item_key(h, l)))
                    own_evictable += state.gpu.is_evictable(*b) ? 1 : 0;
                else
                    ++needed;
            }
        return needed <= state.gpu.num_free_blocks() + state.gpu.num_evictable_blocks() - own_evictable;
    }

    /// tiered_cache::admit.
    admission admit(State& state, session_id session, std::span<const block_hash> hashes, const access_context& ctx,
                    std::span<const timestamp> next_use);

    /// tiered_cache::stage_remote.
    std::size_t stage_remote(State& state, session_id session, std::span<const block_hash> hashes, std::size_t begin,
                             std::size_t count, const access_context& ctx);

private:
    using session_state = typename State::session_state;

    struct pending_swap_in {
        block_id cpu_slot;
        std::uint64_t key;
        block_meta meta;
        access_context ctx;
        std::size_t held_pos;  // its place in the session's holds
    };
    struct new_item {
        std::uint64_t key;
        block_meta meta;
        access_context ctx;
        std::size_t held_pos;
    };

    static void fill(State& state, block_id g, std::uint64_t key, const block_meta& meta, const access_context& ctx,
                     session_state& s, std::size_t held_pos);
    void verify_chain(const State& state, std::span<const block_hash> hashes);
    void shelter(State& state, std::span<const block_id> victims, timestamp now);
    static void drop_or_write_back(State& state, tier from, block_id slot, std::uint64_t key, const block_meta& meta);

    access_context item_context(const State& state, const access_context& base, session_id session, block_hash hash,
                                std::size_t chunk, std::uint32_t layer, std::uint32_t total_chunks,
                                timestamp now) const noexcept {
        access_context c = base;
        c.now = now;
        c.key = state.item_key(hash, layer);
        c.session = session;
        c.chunk = chunk_index{static_cast<std::uint32_t>(chunk)};
        c.layer = layer_index{layer};
        c.num_layers = state.items_per_block;
        c.session_total_chunks = total_chunks;
        c.context_length = chunk * state.config.block_size;
        c.block_tokens = state.config.block_size;
        if (!next_use_.empty()) c.next_use = next_use_[chunk];
        return c;
    }

    std::vector<block_id> victims_;
    std::vector<block_id> cpu_victims_;
    std::vector<pending_swap_in> swap_ins_pending_;
    std::vector<new_item> new_items_;
    std::vector<std::uint64_t> recomputed_copies_;  // inclusive CPU copies of new items, sorted
    std::vector<block_hash> chain_scratch_;
    std::span<const timestamp> next_use_;  // of the admit in progress
};

template <class State>
admission tiered_admission<State>::admit(State& state, session_id session, std::span<const block_hash> hashes,
                                         const access_context& ctx, std::span<const timestamp> next_use) {
    auto& gpu = state.gpu;
    auto& cpu = state.cpu;
    const cache_config& config = state.config;
    cache_metrics& counters = state.counters;
    if (!state.in_step) throw usage_error("admit: no step is open; call begin_step() first");
    if (!next_use.empty() && next_use.size() != hashes.size())
        throw usage_error("admit: " + std::to_string(next_use.size()) + " next-use times for " +
                          std::to_string(hashes.size()) + " blocks; give one per block or none");
    next_use_ = next_use;
    verify_chain(state, hashes);
    const prefix_match match = state.lookup(hashes);

    // Validate: every item not on the GPU needs a GPU slot, from a free
    // slot or an evictable item outside this request.
    std::size_t gpu_items_needed = 0;
    std::size_t own_evictable = 0;
    for (const block_hash h : hashes)
        for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
            if (auto b = gpu.cached_block(state.item_key(h, l)))
                own_evictable += gpu.is_evictable(*b) ? 1 : 0;
            else
                ++gpu_items_needed;
        }
    const std::size_t available = gpu.num_free_blocks() + gpu.num_evictable_blocks() - own_evictable;
    if (gpu_items_needed > available)
        throw capacity_error("admit: session " + std::to_string(session.value) + " needs " +
                             std::to_string(gpu_items_needed) + " GPU items but only " + std::to_string(available) +
                             " are free or evictable (the rest are held by running requests or pinned); "
                             "raise the GPU capacity or admit fewer requests this step");

    // Mutate.
    const timestamp now = state.clock.now();
    session_state& s = state.sessions[session];
    s.returned_after_loss = s.returned_after_loss || s.lost_kv;
    ++counters.requests;
    counters.lookup_blocks += hashes.size();
    s.lookup_blocks += hashes.size();
    s.hit_blocks += match.run;
    counters.gpu.hit_blocks += match.gpu_blocks;
    counters.cpu.hit_blocks += match.cpu_blocks;
    counters.gpu.hit_tokens = counters.gpu.hit_blocks * config.block_size;
    counters.cpu.hit_tokens = counters.cpu.hit_blocks * config.block_size;
    counters.miss_blocks += hashes.size() - match.run;
    counters.miss_tokens += (hashes.size() - match.run) * config.block_size;
    const std::uint32_t total_chunks = static_cast<std::uint32_t>(std::max<std::size_t>(hashes.size(), 1));

    // 1. Hold what is on the GPU (prefix and tail), so making room cannot
    //    take it, and take this request's CPU items out of candidacy:
    //    prefix items will be swapped in; tail items are recomputed, so an
    //    exclusive tier frees their stale copies now (an inclusive one
    //    keeps them as the copies of the items about to be recomputed).
    swap_ins_pending_.clear();
    new_items_.clear();
    recomputed_copies_.clear();
    for (std::size_t i = 0; i < hashes.size(); ++i) {
        const bool in_run = i < match.run;
        if (!in_run && state.dropped_keys.erase(hashes[i])) {
            ++counters.recomputed_blocks;
            counters.recomputed_tokens += config.block_size;
        }
        for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
            const std::uint64_t key = state.item_key(hashes[i], l);
            const access_context ictx = item_context(state, ctx, session, hashes[i], i, l, total_chunks, now);
            if (auto b = gpu.cached_block(key)) {
                gpu.touch(*b, ictx);
                gpu.hold(*b);
                s.held.push_back(b->value);
                continue;
            }
            // Its GPU slot is found below; keep its place in block order.
            const std::size_t pos = s.held.size();
            s.held.push_back(no_index);
            const std::optional<block_id> c = cpu ? cpu->cached_block(key) : std::nullopt;
            if (c && in_run) {
                cpu->touch(*c, ictx);
                swap_ins_pending_.push_back({*c, key, cpu->meta(*c), ictx, pos});
                // Exclusive: the item leaves the CPU tier, its slot reserved
                // until its swap-in is planned. Inclusive: the copy stays,
                // held so that making room cannot evict it first.
                if (config.inclusive)
                    cpu->hold(*c);
                else
                    cpu->unstore(*c);
                continue;
            }
            if (c && !config.inclusive) {
                cpu->unstore(*c);
                cpu->free_slot(*c);
            } else if (c) {
                recomputed_copies_.push_back(key);
            }
            const std::uint64_t parent = i == 0 ? State::no_parent : hashes[i - 1];
            new_items_.push_back(
                {key, {parent, session, chunk_index{static_cast<std::uint32_t>(i)}, layer_index{l}}, ictx, pos});
        }
    }

    std::sort(recomputed_copies_.begin(), recomputed_copies_.end());

    // 2. Make room. Free GPU slots go first to swap-ins; with the GPU
    //    full, each remaining swap-in is paired with a GPU victim in an
    //    exchange (the victim takes the hit's CPU slot, the hit the
    //    victim's GPU slot). Other victims are sheltered.
    const std::size_t needed = swap_ins_pending_.size() + new_items_.size();
    const std::size_t n_victims = needed > gpu.num_free_blocks() ? needed - gpu.num_free_blocks() : 0;
    const std::size_t n_pairs = config.inclusive ? 0 : std::min(n_victims, swap_ins_pending_.size());
    auto plan_swap_in = [&](const pending_swap_in& p) {
        const block_id g = *gpu.take_free();
        fill(state, g, p.key, p.meta, p.ctx, s, p.held_pos);
        state.plan.transfers.push_back({tier::cpu, p.cpu_slot, tier::gpu, g});
        state.plan_ops.push_back({p.key, 0, session});
        // The copy just planned reads the slot before anything later in
        // the plan can write it, so the slot is free to reuse now.
        if (config.inclusive)
            cpu->release(p.cpu_slot, now);
        else
            cpu->free_slot(p.cpu_slot);
        ++counters.swap_in_items;
        counters.swap_in_bytes += config.item_bytes;
    };
    // Every item bound for the GPU is a miss there; the policy hears of
    // each before it chooses victims (ARC adapts here).
    for (const pending_swap_in& p : swap_ins_pending_) gpu.note_miss(p.ctx);
    for (const new_item& n : new_items_) gpu.note_miss(n.ctx);
    if (!config.inclusive)  // the unpaired ones fit in the free slots
        for (std::size_t k = n_pairs; k < swap_ins_pending_.size(); ++k) plan_swap_in(swap_ins_pending_[k]);
    if (n_victims > 0) {
        const auto t0 = std::chrono::steady_clock::now();
        victims_.resize(n_victims);
        const std::size_t got = gpu.pop_victims(victims_, now);
        KVPOLICY_ASSERT(got == n_victims);
        (void)got;
        counters.gpu.evictions += n_victims;
        for (std::size_t k = 0; k < n_pairs; ++k) {
            const block_id g = victims_[k];
            const pending_swap_in& p = swap_ins_pending_[k];
            const std::uint64_t victim_key = gpu.key(g);
            cpu->store(p.cpu_slot, victim_key, gpu.meta(g), gpu.last_context(g, now), 0);
            fill(state, g, p.key, p.meta, p.ctx, s, p.held_pos);
            state.plan.transfers.push_back({tier::gpu, g, tier::cpu, p.cpu_slot, true});
            state.plan_ops.push_back({victim_key, p.key, session});
            ++counters.swap_in_items;
            ++counters.swap_out_items;
            counters.swap_in_bytes += config.item_bytes;
            counters.swap_out_bytes += config.item_bytes;
        }
        shelter(state, std::span<const block_id>(victims_.data() + n_pairs, n_victims - n_pairs), now);
        const auto t1 = std::chrono::steady_clock::now();
        counters.eviction_latency.record(
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    if (config.inclusive)
        for (const pending_swap_in& p : swap_ins_pending_) plan_swap_in(p);

    // 3. New items, computed by this step's forward pass.
    for (const new_item& n : new_items_) fill(state, *gpu.take_free(), n.key, n.meta, n.ctx, s, n.held_pos);
    return {match, hashes.size() - match.run, n_victims};
}

// Stores a swapped-in or new item in reserved GPU slot `g`, held by the session.
template <class State>
void tiered_admission<State>::fill(State& state, block_id g, std::uint64_t key, const block_meta& meta,
                                   const access_context& ctx, session_state& s, std::size_t held_pos) {
    state.gpu.store(g, key, meta, ctx, 1);
    s.held[held_pos] = g.value;
    state.filled[g.index()] = 1;
    state.filled_this_step.push_back(g.value);
}

template <class State>
void tiered_admission<State>::verify_chain(const State& state, std::span<const block_hash> hashes) {
    const auto& gpu = state.gpu;
    const auto& cpu = state.cpu;
    chain_scratch_.assign(hashes.begin(), hashes.end());
    std::sort(chain_scratch_.begin(), chain_scratch_.end());
    if (auto d = std::adjacent_find(chain_scratch_.begin(), chain_scratch_.end()); d != chain_scratch_.end())
        throw usage_error("admit: malformed hash chain: block hash " + std::to_string(*d) +
                          " appears twice in one request; hashes must be chained (parent, tokens, extra key)");
    if (!state.config.verify_chain) return;
    for (std::size_t i = 0; i < hashes.size(); ++i) {
        const std::uint64_t key = state.item_key(hashes[i], 0);
        const block_meta* m = nullptr;
        if (auto b = gpu.cached_block(key))
            m = &gpu.meta(*b);
        else if (cpu) {
            if (auto c = cpu->cached_block(key)) m = &cpu->meta(*c);
        }
        const std::uint64_t parent = i == 0 ? State::no_parent : hashes[i - 1];
        if (m != nullptr && m->parent_key != parent)
            throw usage_error("admit: malformed hash chain: block " + std::to_string(i) + " (hash " +
                              std::to_string(hashes[i]) +
                              ") is cached under another parent; equal hashes must "
                              "mean equal prefixes, so chain each hash from its parent's");
    }
}

// Moves GPU victims (in the policy's order, oldest first) to the CPU
// tier. As if they were sheltered one by one: the CPU first gives up its
// own victims, and if that is not room enough, the oldest GPU victims
// are the ones dropped (each newer one would have pushed them out).
// Inclusive: a victim whose CPU copy exists moves nothing; its copy is
// protected while the CPU picks its own victims, then counts as used.
template <class State>
void tiered_admission<State>::shelter(State& state, std::span<const block_id> victims, timestamp now) {
    auto& gpu = state.gpu;
    auto& cpu = state.cpu;
    const cache_config& config = state.config;
    cache_metrics& counters = state.counters;
    std::size_t to_copy = 0;
    if (cpu)
        for (const block_id v : victims) {
            const auto copy = config.inclusive ? cpu->cached_block(gpu.key(v)) : std::nullopt;
            if (copy)
                cpu->hold(*copy);
            else
                ++to_copy;
        }
    std::size_t cpu_room = 0;
    if (cpu && to_copy > 0) {
        cpu_room = cpu->num_free_blocks();
        for (const block_id v : victims)
            if (!(config.inclusive && cpu->cached_block(gpu.key(v)))) cpu->note_miss(gpu.last_context(v, now));
        if (to_copy > cpu_room) {
            cpu_victims_.resize(to_copy - cpu_room);
            const std::size_t got = cpu->pop_victims(cpu_victims_, now);
            counters.cpu.evictions += got;
            for (std::size_t i = 0; i < got; ++i) {
                // Inclusive: a CPU copy of an item still on the GPU, or
                // of one this admit recomputes there, is not a loss; the
                // GPU item just has no copy any more.
                const std::uint64_t key = cpu->key(cpu_victims_[i]);
                const bool on_gpu = gpu.cached_block(key) ||
                                    std::binary_search(recomputed_copies_.begin(), recomputed_copies_.end(), key);
                if (!(config.inclusive && on_gpu))
                    drop_or_write_back(state, tier::cpu, cpu_victims_[i], key, cpu->meta(cpu_victims_[i]));
                cpu->free_slot(cpu_victims_[i]);
            }
            cpu_room += got;
        }
    }
    std::size_t excess = to_copy > cpu_room ? to_copy - cpu_room : 0;
    for (const block_id v : victims) {
        const std::uint64_t key = gpu.key(v);
        if (const auto copy = cpu && config.inclusive ? cpu->cached_block(key) : std::nullopt) {
            cpu->release(*copy, now);  // now the only copy
        } else if (cpu && excess == 0) {
            const block_id c = *cpu->take_free();
            cpu->store(c, key, gpu.meta(v), gpu.last_context(v, now), 0);
            state.plan.transfers.push_back({tier::gpu, v, tier::cpu, c});
            state.plan_ops.push_back({key, 0, session_id{}});
            ++counters.swap_out_items;
            counters.swap_out_bytes += config.item_bytes;
        } else {
            if (excess > 0) --excess;
            drop_or_write_back(state, tier::gpu, v, key, gpu.meta(v));
        }
        gpu.free_slot(v);
    }
}

// A victim about to leave the cache: written back to the remote tier when
// that is worth the network (planned now, before anything reuses its slot),
// else dropped.
template <class State>
void tiered_admission<State>::drop_or_write_back(State& state, tier from, block_id slot, std::uint64_t key,
                                                 const block_meta& meta) {
    if (!state.config.remote || meta.chunk.value >= state.config.remote_write_back_chunks) {
        state.drop_into(state.plan.drops, key, meta);
        return;
    }
    const block_id remote_slot{static_cast<std::uint32_t>(state.plan.remote_keys.size())};
    state.plan.transfers.push_back({from, slot, tier::remote, remote_slot});
    state.plan.remote_keys.push_back(key);
    state.plan_ops.push_back({key, 0, session_id{}, meta});
    ++state.counters.remote_write_backs;
}

template <class State>
std::size_t tiered_admission<State>::stage_remote(State& state, session_id session, std::span<const block_hash> hashes,
                                                  std::size_t begin, std::size_t count, const access_context& ctx) {
    auto& gpu = state.gpu;
    auto& cpu = state.cpu;
    const cache_config& config = state.config;
    if (!state.in_step) throw usage_error("stage_remote: no step is open; call begin_step() first");
    if (!config.remote)
        throw usage_error("stage_remote: the cache has no remote tier; set cache_config::remote to stage store hits");
    if (begin > hashes.size() || count > hashes.size() - begin)
        throw usage_error("stage_remote: blocks [" + std::to_string(begin) + ", " + std::to_string(begin) + " + " +
                          std::to_string(count) + ") are outside the request's " + std::to_string(hashes.size()) +
                          " blocks; stage a range of its hashes");
    next_use_ = {};
    verify_chain(state, hashes);
    const prefix_match match = state.lookup(hashes);
    if (match.run != begin)
        throw usage_error("stage_remote: the cached prefix ends at block " + std::to_string(match.run) + ", not " +
                          std::to_string(begin) + "; stage from lookup(hashes).run");
    if (count == 0) return 0;

    // Room: free CPU slots and evictable CPU items, less this request's own
    // items there, which making room must not take. An item already cached
    // (a block the cache holds only some layers of, or a block after a gap)
    // is not staged again.
    auto local = [&](std::uint64_t key) { return gpu.cached_block(key) || cpu->cached_block(key); };
    std::size_t own_evictable = 0;
    for (const block_hash h : hashes)
        for (std::uint32_t l = 0; l < state.items_per_block; ++l)
            if (auto c = cpu->cached_block(state.item_key(h, l))) own_evictable += cpu->is_evictable(*c) ? 1 : 0;
    const std::size_t room = cpu->num_free_blocks() + cpu->num_evictable_blocks() - own_evictable;
    std::size_t blocks = 0;
    std::size_t items = 0;
    for (; blocks < count; ++blocks) {
        std::size_t need = 0;
        for (std::uint32_t l = 0; l < state.items_per_block; ++l)
            need += local(state.item_key(hashes[begin + blocks], l)) ? 0 : 1;
        if (items + need > room) break;
        items += need;
    }
    if (blocks == 0) return 0;

    const timestamp now = state.clock.now();
    if (items > cpu->num_free_blocks()) {
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < state.items_per_block; ++l)
                if (auto c = cpu->cached_block(state.item_key(h, l))) cpu->hold(*c);
        cpu_victims_.resize(items - cpu->num_free_blocks());
        const std::size_t got = cpu->pop_victims(cpu_victims_, now);
        KVPOLICY_ASSERT(got == cpu_victims_.size());
        state.counters.cpu.evictions += got;
        for (std::size_t i = 0; i < got; ++i) {
            const std::uint64_t key = cpu->key(cpu_victims_[i]);
            // Inclusive: a CPU copy of an item on the GPU is no loss.
            if (!(config.inclusive && gpu.cached_block(key)))
                drop_or_write_back(state, tier::cpu, cpu_victims_[i], key, cpu->meta(cpu_victims_[i]));
            cpu->free_slot(cpu_victims_[i]);
        }
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < state.items_per_block; ++l)
                if (auto c = cpu->cached_block(state.item_key(h, l))) cpu->release(*c, now);
    }
    const std::uint32_t total_chunks = static_cast<std::uint32_t>(hashes.size());
    for (std::size_t i = begin; i < begin + blocks; ++i) {
        const std::uint64_t parent = i == 0 ? State::no_parent : hashes[i - 1];
        for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
            const std::uint64_t key = state.item_key(hashes[i], l);
            if (local(key)) continue;
            const access_context ictx = item_context(state, ctx, session, hashes[i], i, l, total_chunks, now);
            const block_id c = *cpu->take_free();
            cpu->note_miss(ictx);
            cpu->store(c, key, {parent, session, chunk_index{static_cast<std::uint32_t>(i)}, layer_index{l}}, ictx, 0);
            state.plan.transfers.push_back(
                {tier::remote, block_id{static_cast<std::uint32_t>(state.plan.remote_keys.size())}, tier::cpu, c});
            state.plan.remote_keys.push_back(key);
            state.plan_ops.push_back({key, 0, session});
        }
    }
    state.counters.remote_staged_blocks += blocks;
    return blocks;
}

}  // namespace detail
}  // namespace kvpolicy
