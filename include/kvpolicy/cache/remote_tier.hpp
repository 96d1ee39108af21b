// remote_tier: one request's admission through a remote store.
//
// With `cache_config::remote`, the cache plans write-backs of its victims to
// a store shared by several instances and fetches of the blocks the store
// holds (tiered_cache.hpp's header comment). The cache itself never talks to
// the network: admit_through asks the store (any `remote_directory`: Redis
// in kvpolicy/redis/, a map in tests) how far the request's cached prefix
// extends past the local tiers, stages those blocks into the CPU tier
// (stage_remote) and admits. The step's plan then carries the fetches and
// write-backs; a `remote_transfer_engine` runs it, and complete_transfers
// turns whatever the store failed to give into recompute or drops.
//
// Design: LMCache's remote backends and Mooncake Store (Qin et al.,
// "Mooncake: A KVCache-centric Disaggregated Architecture for LLM Serving",
// FAST'25) share KV across instances by content key; here the key is the
// chain hash, so two instances that computed the same prefix share one copy.
// Departure: no global metadata service; the store is asked at lookup time,
// and a value it drops afterwards is found at fetch time and recomputed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpolicy/cache/tiered_cache.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

/// What admit_through did: the admission, and how many of its CPU hits
/// were staged from the store.
struct remote_admission {
    admission local;
    std::size_t remote_blocks = 0;
};

/// Looks `hashes` up in the cache, then in `store` past the cache's prefix,
/// stages the store's run of blocks into the CPU tier, and admits.
/// Throws: what admit throws (usage_error, capacity_error), checked before
/// anything is staged, so nothing changes then; and whatever the store
/// throws from present_prefix (before anything changes).
template <class Cache, remote_directory Store>
remote_admission admit_through(Cache& cache, Store& store, session_id session, std::span<const block_hash> hashes,
                               const access_context& ctx = {}) {
    if (!cache.in_step()) throw usage_error("admit_through: no step is open; call begin_step() first");
    if (!cache.gpu_room_for(hashes))
        return {cache.admit(session, hashes, ctx), 0};  // throws capacity_error, changing nothing
    remote_admission out;
    const prefix_match local = cache.lookup(hashes);
    if (cache.config().remote && local.run < hashes.size()) {
        const std::uint32_t per_block = cache.items_per_block();
        std::vector<std::uint64_t> keys;
        keys.reserve((hashes.size() - local.run) * per_block);
        for (std::size_t i = local.run; i < hashes.size(); ++i)
            for (std::uint32_t l = 0; l < per_block; ++l) keys.push_back(cache.item_key(hashes[i], l));
        const std::size_t blocks = store.present_prefix(keys) / per_block;
        out.remote_blocks = cache.stage_remote(session, hashes, local.run, blocks, ctx);
    }
    out.local = cache.admit(session, hashes, ctx);
    return out;
}

}  // namespace kvpolicy
