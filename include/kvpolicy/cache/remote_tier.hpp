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
//
// Identity: blocks named by 32-byte digests go through the digest
// overload of admit_through, which binds each item's handle to its digest
// (remote_identities, the store namespace's `identities`), so the store key
// and the value header carry the digest whole; forget_identities drops the
// bindings of blocks the cache no longer holds, between steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpolicy/cache/block_hasher.hpp"
#include "kvpolicy/cache/remote_value.hpp"
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

namespace detail {
// bind_identities, adding the items it bound fresh to `fresh`; on a clash,
// forgets every item in `fresh` (this call's and the caller's earlier ones).
template <class Cache>
std::vector<block_hash> bind_identities(const Cache& cache, remote_identities& ids,
                                        std::span<const block_digest> digests, std::vector<std::uint64_t>& fresh) {
    std::vector<block_hash> hashes(digests.size());
    const std::uint32_t per_block = cache.items_per_block();
    for (std::size_t i = 0; i < digests.size(); ++i) {
        hashes[i] = digest_handle(digests[i]);
        for (std::uint32_t l = 0; l < per_block; ++l) {
            const std::uint64_t item = cache.item_key(hashes[i], l);
            const bool is_new = !ids.find(item).has_value();
            if (!ids.bind(item, digests[i], l)) {
                for (const std::uint64_t b : fresh) ids.forget(b);
                throw usage_error("bind_identities: block " + std::to_string(i) + "'s 64-bit handle " +
                                  std::to_string(hashes[i]) +
                                  " is another block's (the first 8 bytes of two digests "
                                  "are equal); compute this request without the cache, or retry once the other "
                                  "block has left (forget_identities)");
            }
            if (is_new) fresh.push_back(item);
        }
    }
    return hashes;
}
}  // namespace detail

/// Binds every item of the blocks `digests` (their handles are
/// digest_handle(d)) to its digest and layer in `ids`, and returns the
/// handles. Throws: usage_error naming the block when a handle is already
/// another block's (two digests whose first 8 bytes are equal: the
/// instance cannot hold both under one handle), with nothing bound.
template <class Cache>
std::vector<block_hash> bind_identities(const Cache& cache, remote_identities& ids,
                                        std::span<const block_digest> digests) {
    std::vector<std::uint64_t> fresh;
    return detail::bind_identities(cache, ids, digests, fresh);
}

/// admit_through for blocks named by their digests (a collision-resistant
/// identity: kvpolicy/redis/identity.hpp's SHA-256, or the engine's own
/// 32-byte hashes), bound in `ids` (the store's `ns.identities`): the store
/// key and the value header carry the digest, and a handle already bound
/// to another digest is refused (bind_identities' usage_error, before
/// anything changes) rather than read as a hit on another block's bytes.
/// Call forget_identities between steps so `ids` holds only what the cache holds.
template <class Cache, remote_directory Store>
remote_admission admit_through(Cache& cache, Store& store, remote_identities& ids, session_id session,
                               std::span<const block_digest> digests, const access_context& ctx = {}) {
    if (!cache.in_step()) throw usage_error("admit_through: no step is open; call begin_step() first");
    const std::vector<block_hash> hashes = bind_identities(cache, ids, digests);
    return admit_through(cache, store, session, std::span<const block_hash>(hashes), ctx);
}

/// Forgets the identities of items the cache no longer holds; returns how
/// many. Between steps only (an open step's write-backs still need their
/// names). Throws: usage_error inside a step (nothing forgotten).
template <class Cache>
std::size_t forget_identities(const Cache& cache, remote_identities& ids) {
    if (cache.in_step())
        throw usage_error(
            "forget_identities: a step is open (its write-backs still need their names); call it "
            "after complete_transfers");
    return ids.retain([&](std::uint64_t, const remote_identities::identity& id) {
        return cache.where(digest_handle(id.digest), id.layer) != item_state::free;
    });
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

/// One request of a step named by its blocks' digests, for admit_all_through.
struct step_digest_request {
    session_id session{};
    std::span<const block_digest> digests;
    access_context ctx{};
};

/// admit_all_through for requests named by digests, bound in `ids` as the
/// digest admit_through binds them. Throws: usage_error outside a step, and
/// bind_identities' usage_error for any request's handle clash, before
/// anything changes (no request admitted, nothing bound); then as the hash
/// form above. Bindings made for a request that is not admitted stay until
/// forget_identities.
template <class Cache, remote_batch_directory Store>
std::vector<remote_admission> admit_all_through(Cache& cache, Store& store, remote_identities& ids,
                                                std::span<const step_digest_request> requests) {
    if (!cache.in_step()) throw usage_error("admit_all_through: no step is open; call begin_step() first");
    std::vector<std::uint64_t> fresh;
    std::vector<std::vector<block_hash>> hashes;
    hashes.reserve(requests.size());
    for (const step_digest_request& q : requests)
        hashes.push_back(detail::bind_identities(cache, ids, q.digests, fresh));
    std::vector<step_request> plain(requests.size());
    for (std::size_t r = 0; r < requests.size(); ++r) plain[r] = {requests[r].session, hashes[r], requests[r].ctx};
    return admit_all_through(cache, store, std::span<const step_request>(plain));
}

}  // namespace kvpolicy
