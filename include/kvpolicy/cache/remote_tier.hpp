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
// admit_all_through does the same for all of a step's requests with one
// question to the store (any `remote_batch_directory`): one round trip for
// the step's lookups instead of one per request.
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
    bool admitted = true;  ///< admit_all_through: false for a request the GPU tier cannot hold
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

/// One request of a step, for admit_all_through.
struct step_request {
    session_id session{};
    std::span<const block_hash> hashes;
    access_context ctx{};
};

/// admit_through for each of a step's `requests`, in order, with the store
/// asked once for all of them (present_prefixes: one round trip). Each
/// request's question starts where its local prefix ended before any of
/// the step's admissions; when it is admitted, the staged run starts where
/// its local prefix ends now (an earlier request of the step may have
/// staged or computed some of it) and stops where the store's answer
/// stopped. If an earlier admission shortened its local prefix below the
/// asked point, nothing is staged (the store was not asked about the
/// blocks between): those blocks are computed. As with admit_through, the
/// answer is a hint; a value gone by fetch time is a failed fetch,
/// recomputed. A request the GPU tier cannot hold is not admitted
/// (`admitted` false, what admit's capacity_error says) and the others go on.
/// Throws: usage_error outside a step, and whatever the store throws, both
/// before anything changes; usage_error for a request admit refuses (the
/// requests before it stay admitted).
template <class Cache, remote_batch_directory Store>
std::vector<remote_admission> admit_all_through(Cache& cache, Store& store, std::span<const step_request> requests) {
    if (!cache.in_step()) throw usage_error("admit_all_through: no step is open; call begin_step() first");
    const bool remote = cache.config().remote;
    const std::uint32_t per_block = cache.items_per_block();
    std::vector<std::size_t> asked_from(requests.size(), 0);
    std::vector<std::vector<std::uint64_t>> keys(requests.size());
    for (std::size_t r = 0; r < requests.size(); ++r) {
        const std::span<const block_hash> hashes = requests[r].hashes;
        asked_from[r] = cache.lookup(hashes).run;
        if (!remote || !cache.gpu_room_for(hashes)) continue;
        keys[r].reserve((hashes.size() - asked_from[r]) * per_block);
        for (std::size_t i = asked_from[r]; i < hashes.size(); ++i)
            for (std::uint32_t l = 0; l < per_block; ++l) keys[r].push_back(cache.item_key(hashes[i], l));
    }
    std::vector<std::size_t> present(requests.size(), 0);
    if (remote) {
        const std::vector<std::span<const std::uint64_t>> lists(keys.begin(), keys.end());
        store.present_prefixes(lists, present);
    }
    std::vector<remote_admission> out(requests.size());
    for (std::size_t r = 0; r < requests.size(); ++r) {
        const step_request& q = requests[r];
        if (!cache.gpu_room_for(q.hashes)) {
            out[r].admitted = false;
            continue;
        }
        const std::size_t store_end = asked_from[r] + present[r] / per_block;  // blocks [asked_from, store_end) held
        const std::size_t local = cache.lookup(q.hashes).run;
        if (remote && local >= asked_from[r] && local < store_end)
            out[r].remote_blocks = cache.stage_remote(q.session, q.hashes, local, store_end - local, q.ctx);
        out[r].local = cache.admit(q.session, q.hashes, q.ctx);
    }
    return out;
}

}  // namespace kvpolicy
