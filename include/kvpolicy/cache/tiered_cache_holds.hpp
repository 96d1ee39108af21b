// tiered_cache, holds, pins and the waiting queue: release, free_session,
// pin/unpin, enqueue/dequeue, over the cache's state.
//
// A finished request's holds go in reverse block order (its tail leaves
// before its prefix); a hold on an item filled in the open step is released
// at end_step, once the forward pass has written it (state.deferred_releases).
// The rules are in tiered_cache.hpp's header comment, the header to include.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/tiered_cache_state.hpp"

namespace kvpolicy::detail {

/// tiered_cache's holds: State is a tiered_state; the caller holds the
/// cache's mutex. Owns only scratch (enqueue's item keys).
template <class State>
class tiered_holds {
public:
    /// tiered_cache::held_by.
    [[nodiscard]] static std::vector<block_id> held_by(const State& state, session_id session) {
        std::vector<block_id> out;
        if (auto it = state.sessions.find(session); it != state.sessions.end())
            for (std::uint32_t b : it->second.held) out.push_back(block_id{b});
        return out;
    }

    /// tiered_cache::release (every hold of a session).
    static std::size_t release(State& state, session_id session, std::uint64_t output_tokens,
                               timestamp expected_return);
    /// tiered_cache::release (one hold).
    static void release(State& state, session_id session, block_id block);
    /// tiered_cache::free_session.
    static std::size_t free_session(State& state, session_id session, bool forget_blocks);
    /// tiered_cache::enqueue.
    void enqueue(State& state, std::uint64_t request, session_id session, std::span<const block_hash> hashes);
    /// tiered_cache::dequeue.
    static session_id dequeue(State& state, std::uint64_t request);
    /// tiered_cache::pin.
    static void pin(State& state, block_hash hash);
    /// tiered_cache::unpin.
    static void unpin(State& state, block_hash hash);

private:
    static void release_holds(State& state, session_id by, const std::vector<std::uint32_t>& held,
                              std::uint64_t output_tokens, timestamp expected_return);
    static void release_one(State& state, std::uint32_t b, timestamp now, session_id by, std::uint64_t output_tokens,
                            timestamp expected_return);
    template <class Pool>
    static std::size_t forget_owned(Pool& pool, session_id session);

    std::vector<std::uint64_t> queue_keys_;  // scratch for enqueue
};

template <class State>
std::size_t tiered_holds<State>::release(State& state, session_id session, std::uint64_t output_tokens,
                                         timestamp expected_return) {
    auto it = state.sessions.find(session);
    if (it == state.sessions.end() || it->second.held.empty())
        throw usage_error("release: session " + std::to_string(session.value) +
                          " holds no blocks (released twice, or never admitted)");
    if (expected_return != 0 && expected_return <= state.clock.now())
        throw usage_error("release: session " + std::to_string(session.value) + " expected back at " +
                          std::to_string(expected_return) + ", not after now (" + std::to_string(state.clock.now()) +
                          "); give a time on this cache's clock, or 0 for no hint");
    release_holds(state, session, it->second.held, output_tokens, expected_return);
    const std::size_t n = it->second.held.size();
    it->second.held.clear();
    state.gpu.request_ended(session, state.clock.now());
    if (state.cpu) state.cpu->request_ended(session, state.clock.now());
    return n;
}

template <class State>
void tiered_holds<State>::release(State& state, session_id session, block_id block) {
    auto it = state.sessions.find(session);
    auto pos = it == state.sessions.end() ? std::vector<std::uint32_t>::iterator{}
                                          : std::find(it->second.held.begin(), it->second.held.end(), block.value);
    if (it == state.sessions.end() || pos == it->second.held.end())
        throw usage_error("release: session " + std::to_string(session.value) + " does not hold gpu block " +
                          std::to_string(block.value) + " (released twice, or never acquired)");
    it->second.held.erase(pos);
    release_one(state, block.value, state.clock.now(), session, 0, 0);
}

template <class State>
std::size_t tiered_holds<State>::free_session(State& state, session_id session, bool forget_blocks) {
    auto it = state.sessions.find(session);
    if (it == state.sessions.end()) return 0;
    release_holds(state, session, it->second.held, 0, 0);
    it->second.held.clear();
    state.gpu.session_ended(session, state.clock.now());
    if (state.cpu) state.cpu->session_ended(session, state.clock.now());
    std::size_t freed = 0;
    if (forget_blocks) {
        freed += forget_owned(state.gpu, session);
        if (state.cpu) freed += forget_owned(*state.cpu, session);
    }
    state.sessions.erase(it);
    return freed;
}

template <class State>
void tiered_holds<State>::enqueue(State& state, std::uint64_t request, session_id session,
                                  std::span<const block_hash> hashes) {
    queue_keys_.clear();
    for (block_hash h : hashes)
        for (std::uint32_t l = 0; l < state.items_per_block; ++l) queue_keys_.push_back(state.item_key(h, l));
    const timestamp now = state.clock.now();
    state.queue.enqueue(request, session, queue_keys_, [&](std::uint64_t key, std::uint64_t position) {
        state.gpu.queued_read_changed(key, position, now);
        if (state.cpu) state.cpu->queued_read_changed(key, position, now);
    });
}

template <class State>
session_id tiered_holds<State>::dequeue(State& state, std::uint64_t request) {
    const timestamp now = state.clock.now();
    return state.queue.dequeue(request, [&](std::uint64_t key, std::optional<std::uint64_t> next) {
        state.gpu.queued_read_changed(key, next, now);
        if (state.cpu) state.cpu->queued_read_changed(key, next, now);
    });
}

template <class State>
void tiered_holds<State>::pin(State& state, block_hash hash) {
    auto& gpu = state.gpu;
    for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
        const auto b = gpu.cached_block(state.item_key(hash, l));
        if (!b)
            throw usage_error("pin: block " + std::to_string(hash) + " is " +
                              std::string(to_string(state.where(state.item_key(hash, l)))) +
                              ", not on the gpu; admit it first");
        if (gpu.is_pinned(*b)) throw usage_error("pin: block " + std::to_string(hash) + " is already pinned");
    }
    for (std::uint32_t l = 0; l < state.items_per_block; ++l) gpu.pin(*gpu.cached_block(state.item_key(hash, l)));
}

template <class State>
void tiered_holds<State>::unpin(State& state, block_hash hash) {
    auto& gpu = state.gpu;
    for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
        const auto b = gpu.cached_block(state.item_key(hash, l));
        if (!b || !gpu.is_pinned(*b)) throw usage_error("unpin: block " + std::to_string(hash) + " is not pinned");
    }
    const timestamp now = state.clock.now();
    for (std::uint32_t l = 0; l < state.items_per_block; ++l) {
        const block_id b = *gpu.cached_block(state.item_key(hash, l));
        gpu.unpin(b, now);
    }
}

// Releases in reverse hold order (tail first); an item filled in the
// open step has no data yet, so its release waits for end_step.
template <class State>
void tiered_holds<State>::release_holds(State& state, session_id by, const std::vector<std::uint32_t>& held,
                                        std::uint64_t output_tokens, timestamp expected_return) {
    const timestamp now = state.clock.now();
    for (auto b = held.rbegin(); b != held.rend(); ++b) release_one(state, *b, now, by, output_tokens, expected_return);
}

template <class State>
void tiered_holds<State>::release_one(State& state, std::uint32_t b, timestamp now, session_id by,
                                      std::uint64_t output_tokens, timestamp expected_return) {
    if (state.in_step && state.filled[b])
        state.deferred_releases.push_back({b, by, output_tokens, expected_return});
    else
        state.gpu.release(block_id{b}, now, by, output_tokens, expected_return);
}

template <class State>
template <class Pool>
std::size_t tiered_holds<State>::forget_owned(Pool& pool, session_id session) {
    std::size_t freed = 0;
    for (std::uint32_t i = 0; i < pool.capacity(); ++i) {
        const block_id b{i};
        if (pool.state(b) == Pool::slot_state::cached && pool.meta(b).owner == session && pool.is_evictable(b)) {
            pool.unstore(b);
            pool.free_slot(b);
            ++freed;
        }
    }
    return freed;
}

}  // namespace kvpolicy::detail
