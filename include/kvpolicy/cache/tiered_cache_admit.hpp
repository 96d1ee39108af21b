// tiered_cache, lookup and admission: admit() and what it calls.
//
// Finding the longest cached prefix across the tiers, checking the hash
// chain, holding the hits, planning the swap-ins (and exchanges with GPU
// victims), sheltering the other victims in the CPU tier, and allocating the
// miss tail. The rules are in tiered_cache.hpp's header comment; this file
// is included by tiered_cache.hpp, which is the header to include.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kvpolicy/cache/tiered_cache.hpp"

namespace kvpolicy {

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
admission tiered_cache<GpuPolicy, CpuPolicy, Traits>::admit(
        session_id session, std::span<const block_hash> hashes, const access_context& ctx,
        std::span<const timestamp> next_use) {
    std::scoped_lock lock(mutex_);
    if (!in_step_) throw usage_error("admit: no step is open; call begin_step() first");
    if (!next_use.empty() && next_use.size() != hashes.size())
        throw usage_error("admit: " + std::to_string(next_use.size()) + " next-use times for " +
                          std::to_string(hashes.size()) + " blocks; give one per block or none");
    next_use_ = next_use;
    verify_chain(hashes);
    const prefix_match match = lookup_unlocked(hashes);

    // Validate: every item not on the GPU needs a GPU slot, from a free
    // slot or an evictable item outside this request.
    std::size_t gpu_items_needed = 0;
    std::size_t own_evictable = 0;
    for (const block_hash h : hashes)
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            if (auto b = gpu_.cached_block(item_key(h, l))) own_evictable += gpu_.is_evictable(*b) ? 1 : 0;
            else ++gpu_items_needed;
        }
    const std::size_t available = gpu_.num_free_blocks() + gpu_.num_evictable_blocks() - own_evictable;
    if (gpu_items_needed > available)
        throw capacity_error("admit: session " + std::to_string(session.value) + " needs " +
                             std::to_string(gpu_items_needed) + " GPU items but only " + std::to_string(available) +
                             " are free or evictable (the rest are held by running requests or pinned); "
                             "raise the GPU capacity or admit fewer requests this step");

    // Mutate.
    const timestamp now = clock_.now();
    session_state& s = sessions_[session];
    s.returned_after_loss = s.returned_after_loss || s.lost_kv;
    ++metrics_.requests;
    metrics_.lookup_blocks += hashes.size();
    s.lookup_blocks += hashes.size();
    s.hit_blocks += match.run;
    metrics_.gpu.hit_blocks += match.gpu_blocks;
    metrics_.cpu.hit_blocks += match.cpu_blocks;
    metrics_.gpu.hit_tokens = metrics_.gpu.hit_blocks * config_.block_size;
    metrics_.cpu.hit_tokens = metrics_.cpu.hit_blocks * config_.block_size;
    metrics_.miss_blocks += hashes.size() - match.run;
    metrics_.miss_tokens += (hashes.size() - match.run) * config_.block_size;
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
        if (!in_run && dropped_keys_.erase(hashes[i])) {
            ++metrics_.recomputed_blocks;
            metrics_.recomputed_tokens += config_.block_size;
        }
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const std::uint64_t key = item_key(hashes[i], l);
            const access_context ictx = item_context(ctx, session, hashes[i], i, l, total_chunks, now);
            if (auto b = gpu_.cached_block(key)) {
                gpu_.touch(*b, ictx);
                gpu_.hold(*b);
                s.held.push_back(b->value);
                continue;
            }
            // Its GPU slot is found below; keep its place in block order.
            const std::size_t pos = s.held.size();
            s.held.push_back(no_index);
            const std::optional<block_id> c = cpu_ ? cpu_->cached_block(key) : std::nullopt;
            if (c && in_run) {
                cpu_->touch(*c, ictx);
                swap_ins_pending_.push_back({*c, key, cpu_->meta(*c), ictx, pos});
                // Exclusive: the item leaves the CPU tier, its slot reserved
                // until its swap-in is planned. Inclusive: the copy stays,
                // held so that making room cannot evict it first.
                if (config_.inclusive) cpu_->hold(*c);
                else cpu_->unstore(*c);
                continue;
            }
            if (c && !config_.inclusive) {
                cpu_->unstore(*c);
                cpu_->free_slot(*c);
            } else if (c) {
                recomputed_copies_.push_back(key);
            }
            const std::uint64_t parent = i == 0 ? no_parent : hashes[i - 1];
            new_items_.push_back({key, {parent, session, chunk_index{static_cast<std::uint32_t>(i)}, layer_index{l}}, ictx, pos});
        }
    }

    std::sort(recomputed_copies_.begin(), recomputed_copies_.end());

    // 2. Make room. Free GPU slots go first to swap-ins; with the GPU
    //    full, each remaining swap-in is paired with a GPU victim in an
    //    exchange (the victim takes the hit's CPU slot, the hit the
    //    victim's GPU slot). Other victims are sheltered.
    const std::size_t needed = swap_ins_pending_.size() + new_items_.size();
    const std::size_t n_victims = needed > gpu_.num_free_blocks() ? needed - gpu_.num_free_blocks() : 0;
    const std::size_t n_pairs = config_.inclusive ? 0 : std::min(n_victims, swap_ins_pending_.size());
    auto plan_swap_in = [&](const pending_swap_in& p) {
        const block_id g = *gpu_.take_free();
        fill(g, p.key, p.meta, p.ctx, s, p.held_pos);
        plan_.transfers.push_back({tier::cpu, p.cpu_slot, tier::gpu, g});
        plan_ops_.push_back({p.key, 0, session});
        // The copy just planned reads the slot before anything later in
        // the plan can write it, so the slot is free to reuse now.
        if (config_.inclusive) cpu_->release(p.cpu_slot, now);
        else cpu_->free_slot(p.cpu_slot);
        ++metrics_.swap_in_items;
        metrics_.swap_in_bytes += config_.item_bytes;
    };
    // Every item bound for the GPU is a miss there; the policy hears of
    // each before it chooses victims (ARC adapts here).
    for (const pending_swap_in& p : swap_ins_pending_) gpu_.note_miss(p.ctx);
    for (const new_item& n : new_items_) gpu_.note_miss(n.ctx);
    if (!config_.inclusive)  // the unpaired ones fit in the free slots
        for (std::size_t k = n_pairs; k < swap_ins_pending_.size(); ++k) plan_swap_in(swap_ins_pending_[k]);
    if (n_victims > 0) {
        const auto t0 = std::chrono::steady_clock::now();
        victims_.resize(n_victims);
        const std::size_t got = gpu_.pop_victims(victims_, now);
        KVPOLICY_ASSERT(got == n_victims);
        (void)got;
        metrics_.gpu.evictions += n_victims;
        for (std::size_t k = 0; k < n_pairs; ++k) {
            const block_id g = victims_[k];
            const pending_swap_in& p = swap_ins_pending_[k];
            const std::uint64_t victim_key = gpu_.key(g);
            cpu_->store(p.cpu_slot, victim_key, gpu_.meta(g), gpu_.last_context(g, now), 0);
            fill(g, p.key, p.meta, p.ctx, s, p.held_pos);
            plan_.transfers.push_back({tier::gpu, g, tier::cpu, p.cpu_slot, true});
            plan_ops_.push_back({victim_key, p.key, session});
            ++metrics_.swap_in_items;
            ++metrics_.swap_out_items;
            metrics_.swap_in_bytes += config_.item_bytes;
            metrics_.swap_out_bytes += config_.item_bytes;
        }
        shelter(std::span<const block_id>(victims_.data() + n_pairs, n_victims - n_pairs), now);
        const auto t1 = std::chrono::steady_clock::now();
        metrics_.eviction_latency.record(
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    if (config_.inclusive)
        for (const pending_swap_in& p : swap_ins_pending_) plan_swap_in(p);

    // 3. New items, computed by this step's forward pass.
    for (const new_item& n : new_items_) fill(*gpu_.take_free(), n.key, n.meta, n.ctx, s, n.held_pos);
    return {match, hashes.size() - match.run, n_victims};
}

// Stores a swapped-in or new item in reserved GPU slot `g`, held by the session.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::fill(
        block_id g, std::uint64_t key, const block_meta& meta, const access_context& ctx, session_state& s,
        std::size_t held_pos) {
    gpu_.store(g, key, meta, ctx, 1);
    s.held[held_pos] = g.value;
    filled_[g.index()] = 1;
    filled_this_step_.push_back(g.value);
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
prefix_match tiered_cache<GpuPolicy, CpuPolicy, Traits>::lookup_unlocked(
        std::span<const block_hash> hashes) const noexcept {
    prefix_match m;
    for (const block_hash h : hashes) {
        bool all_gpu = true;
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const std::uint64_t key = item_key(h, l);
            if (gpu_.cached_block(key)) continue;
            if (!(cpu_ && cpu_->cached_block(key))) return m;
            all_gpu = false;
        }
        ++m.run;
        (all_gpu ? m.gpu_blocks : m.cpu_blocks) += 1;
    }
    return m;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::verify_chain(std::span<const block_hash> hashes) {
    chain_scratch_.assign(hashes.begin(), hashes.end());
    std::sort(chain_scratch_.begin(), chain_scratch_.end());
    if (auto d = std::adjacent_find(chain_scratch_.begin(), chain_scratch_.end()); d != chain_scratch_.end())
        throw usage_error("admit: malformed hash chain: block hash " + std::to_string(*d) +
                          " appears twice in one request; hashes must be chained (parent, tokens, extra key)");
    if (!config_.verify_chain) return;
    for (std::size_t i = 0; i < hashes.size(); ++i) {
        const std::uint64_t key = item_key(hashes[i], 0);
        const block_meta* m = nullptr;
        if (auto b = gpu_.cached_block(key)) m = &gpu_.meta(*b);
        else if (cpu_) {
            if (auto c = cpu_->cached_block(key)) m = &cpu_->meta(*c);
        }
        const std::uint64_t parent = i == 0 ? no_parent : hashes[i - 1];
        if (m != nullptr && m->parent_key != parent)
            throw usage_error("admit: malformed hash chain: block " + std::to_string(i) + " (hash " +
                              std::to_string(hashes[i]) + ") is cached under another parent; equal hashes must "
                              "mean equal prefixes, so chain each hash from its parent's");
    }
}

// Moves GPU victims (in the policy's order, oldest first) to the CPU
// tier. As if they were sheltered one by one: the CPU first gives up its
// own victims, and if that is not room enough, the oldest GPU victims
// are the ones dropped (each newer one would have pushed them out).
// Inclusive: a victim whose CPU copy exists moves nothing; its copy is
// protected while the CPU picks its own victims, then counts as used.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::shelter(std::span<const block_id> victims, timestamp now) {
    std::size_t to_copy = 0;
    if (cpu_)
        for (const block_id v : victims) {
            const auto copy = config_.inclusive ? cpu_->cached_block(gpu_.key(v)) : std::nullopt;
            if (copy) cpu_->hold(*copy);
            else ++to_copy;
        }
    std::size_t cpu_room = 0;
    if (cpu_ && to_copy > 0) {
        cpu_room = cpu_->num_free_blocks();
        for (const block_id v : victims)
            if (!(config_.inclusive && cpu_->cached_block(gpu_.key(v)))) cpu_->note_miss(gpu_.last_context(v, now));
        if (to_copy > cpu_room) {
            cpu_victims_.resize(to_copy - cpu_room);
            const std::size_t got = cpu_->pop_victims(cpu_victims_, now);
            metrics_.cpu.evictions += got;
            for (std::size_t i = 0; i < got; ++i) {
                // Inclusive: a CPU copy of an item still on the GPU, or
                // of one this admit recomputes there, is not a loss; the
                // GPU item just has no copy any more.
                const std::uint64_t key = cpu_->key(cpu_victims_[i]);
                const bool on_gpu = gpu_.cached_block(key) ||
                                    std::binary_search(recomputed_copies_.begin(), recomputed_copies_.end(), key);
                if (!(config_.inclusive && on_gpu))
                    drop_or_write_back(tier::cpu, cpu_victims_[i], key, cpu_->meta(cpu_victims_[i]));
                cpu_->free_slot(cpu_victims_[i]);
            }
            cpu_room += got;
        }
    }
    std::size_t excess = to_copy > cpu_room ? to_copy - cpu_room : 0;
    for (const block_id v : victims) {
        const std::uint64_t key = gpu_.key(v);
        if (const auto copy = cpu_ && config_.inclusive ? cpu_->cached_block(key) : std::nullopt) {
            cpu_->release(*copy, now);  // now the only copy
        } else if (cpu_ && excess == 0) {
            const block_id c = *cpu_->take_free();
            cpu_->store(c, key, gpu_.meta(v), gpu_.last_context(v, now), 0);
            plan_.transfers.push_back({tier::gpu, v, tier::cpu, c});
            plan_ops_.push_back({key, 0, session_id{}});
            ++metrics_.swap_out_items;
            metrics_.swap_out_bytes += config_.item_bytes;
        } else {
            if (excess > 0) --excess;
            drop_or_write_back(tier::gpu, v, key, gpu_.meta(v));
        }
        gpu_.free_slot(v);
    }
}

// A victim about to leave the cache: written back to the remote tier when
// that is worth the network (planned now, before anything reuses its slot),
// else dropped.
template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
void tiered_cache<GpuPolicy, CpuPolicy, Traits>::drop_or_write_back(tier from, block_id slot, std::uint64_t key,
                                                                  const block_meta& meta) {
    if (!config_.remote || meta.chunk.value >= config_.remote_write_back_chunks) {
        drop(key, meta);
        return;
    }
    plan_.transfers.push_back({from, slot, tier::remote, block_id{static_cast<std::uint32_t>(plan_.remote_keys.size())}});
    plan_.remote_keys.push_back(key);
    plan_ops_.push_back({key, 0, session_id{}, meta});
    ++metrics_.remote_write_backs;
}

template <eviction_policy GpuPolicy, eviction_policy CpuPolicy, cache_traits Traits>
std::size_t tiered_cache<GpuPolicy, CpuPolicy, Traits>::stage_remote(session_id session,
                                                                   std::span<const block_hash> hashes,
                                                                   std::size_t begin, std::size_t count,
                                                                   const access_context& ctx) {
    std::scoped_lock lock(mutex_);
    if (!in_step_) throw usage_error("stage_remote: no step is open; call begin_step() first");
    if (!config_.remote)
        throw usage_error("stage_remote: the cache has no remote tier; set cache_config::remote to stage store hits");
    if (begin > hashes.size() || count > hashes.size() - begin)
        throw usage_error("stage_remote: blocks [" + std::to_string(begin) + ", " + std::to_string(begin) + " + " +
                          std::to_string(count) + ") are outside the request's " + std::to_string(hashes.size()) +
                          " blocks; stage a range of its hashes");
    next_use_ = {};
    verify_chain(hashes);
    const prefix_match match = lookup_unlocked(hashes);
    if (match.run != begin)
        throw usage_error("stage_remote: the cached prefix ends at block " + std::to_string(match.run) + ", not " +
                          std::to_string(begin) + "; stage from lookup(hashes).run");
    if (count == 0) return 0;

    // Room: free CPU slots and evictable CPU items, less this request's own
    // items there, which making room must not take. An item already cached
    // (a block the cache holds only some layers of, or a block after a gap)
    // is not staged again.
    auto local = [&](std::uint64_t key) { return gpu_.cached_block(key) || cpu_->cached_block(key); };
    std::size_t own_evictable = 0;
    for (const block_hash h : hashes)
        for (std::uint32_t l = 0; l < items_per_block_; ++l)
            if (auto c = cpu_->cached_block(item_key(h, l))) own_evictable += cpu_->is_evictable(*c) ? 1 : 0;
    const std::size_t room = cpu_->num_free_blocks() + cpu_->num_evictable_blocks() - own_evictable;
    std::size_t blocks = 0;
    std::size_t items = 0;
    for (; blocks < count; ++blocks) {
        std::size_t need = 0;
        for (std::uint32_t l = 0; l < items_per_block_; ++l) need += local(item_key(hashes[begin + blocks], l)) ? 0 : 1;
        if (items + need > room) break;
        items += need;
    }
    if (blocks == 0) return 0;

    const timestamp now = clock_.now();
    if (items > cpu_->num_free_blocks()) {
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < items_per_block_; ++l)
                if (auto c = cpu_->cached_block(item_key(h, l))) cpu_->hold(*c);
        cpu_victims_.resize(items - cpu_->num_free_blocks());
        const std::size_t got = cpu_->pop_victims(cpu_victims_, now);
        KVPOLICY_ASSERT(got == cpu_victims_.size());
        metrics_.cpu.evictions += got;
        for (std::size_t i = 0; i < got; ++i) {
            const std::uint64_t key = cpu_->key(cpu_victims_[i]);
            // Inclusive: a CPU copy of an item on the GPU is no loss.
            if (!(config_.inclusive && gpu_.cached_block(key)))
                drop_or_write_back(tier::cpu, cpu_victims_[i], key, cpu_->meta(cpu_victims_[i]));
            cpu_->free_slot(cpu_victims_[i]);
        }
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < items_per_block_; ++l)
                if (auto c = cpu_->cached_block(item_key(h, l))) cpu_->release(*c, now);
    }
    const std::uint32_t total_chunks = static_cast<std::uint32_t>(hashes.size());
    for (std::size_t i = begin; i < begin + blocks; ++i) {
        const std::uint64_t parent = i == 0 ? no_parent : hashes[i - 1];
        for (std::uint32_t l = 0; l < items_per_block_; ++l) {
            const std::uint64_t key = item_key(hashes[i], l);
            if (local(key)) continue;
            const access_context ictx = item_context(ctx, session, hashes[i], i, l, total_chunks, now);
            const block_id c = *cpu_->take_free();
            cpu_->note_miss(ictx);
            cpu_->store(c, key, {parent, session, chunk_index{static_cast<std::uint32_t>(i)}, layer_index{l}}, ictx, 0);
            plan_.transfers.push_back(
                {tier::remote, block_id{static_cast<std::uint32_t>(plan_.remote_keys.size())}, tier::cpu, c});
            plan_.remote_keys.push_back(key);
            plan_ops_.push_back({key, 0, session});
        }
    }
    metrics_.remote_staged_blocks += blocks;
    return blocks;
}

}  // namespace kvpolicy
