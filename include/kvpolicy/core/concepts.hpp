// The seams of kvpolicy: one concept per kind of policy.
//
// Each concept names exactly what the composed cache calls, so a class that
// lacks a member fails at the `using` line that composes it, with the
// concept's name in the diagnostic. Every model is followed by
// `static_assert(concept<model>)` in its own header.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/core/sparse_context.hpp"
#include "kvpolicy/core/transfer.hpp"

namespace kvpolicy {

/// `T::name` is a compile-time string: the name a type is registered under.
template <class T>
concept named = requires {
    { T::name } -> std::convertible_to<std::string_view>;
    typename std::integral_constant<std::size_t, std::string_view{T::name}.size()>;
};

/// Whether a policy's victim order is fixed between accesses.
enum class eviction_order : std::uint8_t {
    /// The order changes only when an item is inserted, accessed or released
    /// (LRU, ARC, SIEVE, ...): a victim pops in O(1) or O(log n).
    static_between_accesses,
    /// The order changes as time passes (retention value = cost / time
    /// inactive): victims are chosen by scoring every candidate at `now` and
    /// selecting the lowest through a `victim_selector`.
    time_varying,
};

/// An eviction strategy over dense item ids 0 .. capacity-1.
///
/// Construction: `P(capacity, config)`; `capacity` is the most items the
/// policy tracks at once. Items are tracked from `on_insert` until they are
/// popped as victims or erased. A tracked item is *evictable* unless held;
/// only evictable items are ever victims, so a block a running request holds
/// can never be chosen.
///
/// - `on_miss(ctx)`: a key that is not tracked was requested; room for it is
///   about to be made (pops), then it is inserted. ARC adapts its target
///   here, before REPLACE, as the paper does; most policies ignore it.
/// - `on_insert(id, ctx)`: a new item, evictable. Pre: not tracked, size() < capacity().
/// - `on_access(id, ctx)`: a hit on a tracked item (evictable or held).
/// - `on_hold(id)`: the item stops being evictable; its state is kept. Pre: evictable.
/// - `on_release(id, ctx)`: evictable again. Pre: held. A release is not a
///   new reference (the access or insert before the hold was counted):
///   position-based policies (fifo, clock, sieve, s3fifo, 2Q's A1in, lfu,
///   round_robin) put the item back where it was, bits and counts unchanged;
///   recency-ordered (LRU-family) lists put it at their most-recent end.
/// - `on_erase(id)`: forget a tracked item without evicting it (no ghost).
/// - `pop_victim(now)`: remove and return the next victim; empty when nothing
///   is evictable. Ghost-keeping policies remember the victim's key.
/// - `pop_victims(out, now)`: up to `out.size()` victims in order; the count.
/// - `size()`: tracked items; `evictable_size()`: those not held.
template <class P>
concept eviction_policy = named<P> && std::movable<P> && requires {
    typename P::config_type;
} && std::constructible_from<P, std::size_t, const typename P::config_type&> && requires {
    typename std::integral_constant<eviction_order, P::order>;
} && requires(P& p, const P& cp, item_id id, const access_context& ctx, std::span<item_id> out, timestamp now) {
    { p.on_miss(ctx) } -> std::same_as<void>;
    { p.on_insert(id, ctx) } -> std::same_as<void>;
    { p.on_access(id, ctx) } -> std::same_as<void>;
    { p.on_hold(id) } -> std::same_as<void>;
    { p.on_release(id, ctx) } -> std::same_as<void>;
    { p.on_erase(id) } -> std::same_as<void>;
    { p.pop_victim(now) } -> std::same_as<std::optional<item_id>>;
    { p.pop_victims(out, now) } -> std::same_as<std::size_t>;
    { cp.capacity() } -> std::same_as<std::size_t>;
    { cp.size() } -> std::same_as<std::size_t>;
    { cp.evictable_size() } -> std::same_as<std::size_t>;
    { cp.contains(id) } -> std::same_as<bool>;
    { cp.counters() } -> std::same_as<const policy_counters&>;
};

/// Whether policy `P` hears that a session has ended (an optional hook, not
/// part of eviction_policy: only a policy that ranks sessions has use for
/// it): `on_session_end(session, now)`, called by tiered_cache::free_session
/// when the engine closes a conversation or its agent finishes, usually long
/// after the session's last release. session_aware_lru then expects the
/// session back never, until it makes another request.
template <class P>
inline constexpr bool hears_session_ends = requires(P& p, session_id s, timestamp now) {
    { p.on_session_end(s, now) } -> std::same_as<void>;
};

/// Whether policy `P` hears where a session's requests end (an optional
/// hook: predicted_return): `on_request_end(session, now)`, called when a
/// request of `session` finishes (tiered_cache::release,
/// engine::cache_policy_core::end_request). A policy that learns each
/// session's gaps between requests then starts a new request at the
/// session's first insert or access after it, rather than guessing from
/// time: inside an engine one request's stores complete a step or more
/// apart.
template <class P>
inline constexpr bool hears_request_ends = requires(P& p, session_id s, timestamp now) {
    { p.on_request_end(s, now) } -> std::same_as<void>;
};

/// Whether policy `P` hears the engine's waiting queue (an optional hook:
/// queue_aware): `on_queued(id, position)` says tracked item `id` will be
/// read by a queued request, the earliest of which has `position` (arrival
/// order: lower is sooner; called again when that changes),
/// `on_unqueued(id, ctx)` that no queued request reads it any more (they
/// started or were dropped); `ctx` is the item's last access context, as a
/// release would give. Called by the cache (tiered_cache::enqueue,
/// dequeue, and each insert of an item some queued request reads).
template <class P>
inline constexpr bool hears_waiting_queue = requires(P& p, item_id id, std::uint64_t position,
                                                     const access_context& ctx) {
    { p.on_queued(id, position) } -> std::same_as<void>;
    { p.on_unqueued(id, ctx) } -> std::same_as<void>;
};

/// Whether policy `P` can rank an item before it exists (an optional hook:
/// predicted_return): `evictable_before(ctx, limit)` is how many of its
/// evictable items would be evicted before an item inserted now with `ctx`
/// (counted up to `limit`, then `limit`). An engine that may decline to
/// store (vLLM's manager storing fewer chunks than offered) stores a new
/// item only past free room where it would not itself be the next victim:
/// Belady's MIN with bypass, with the policy's prediction in place of the
/// future (engine::cache_policy_core::admissible).
template <class P>
inline constexpr bool ranks_new_items = requires(const P& p, const access_context& ctx, std::size_t limit) {
    { p.evictable_before(ctx, limit) } -> std::same_as<std::size_t>;
};

/// Whether policy `P` can stop keeping its victim order and rebuild it on
/// demand (an optional hook: lrfu): `suspend_order()` leaves only O(1) state
/// updates per operation, `resume_order()` rebuilds the order in O(n), and
/// the victims after it are those the policy would have chosen had it kept
/// its order all along. best_of_shadows suspends the experts it does not
/// follow.
template <class P>
inline constexpr bool orders_on_demand = requires(P& p) {
    { p.suspend_order() } -> std::same_as<void>;
    { p.resume_order() } -> std::same_as<void>;
};

/// Whether policy `P` reads `ctx.next_use` (belady, reuse_oracle_lru): a
/// simulator must compute the trace's next uses for it; nothing live can.
template <class P>
inline constexpr bool uses_future = requires {
    requires P::uses_future;
};

/// The setting a policy is built for, when it is not every setting: its
/// `built_for` text (checkerboard: the CPU tier of layer-chunk items), so a
/// table that ranks it elsewhere can say so; empty for the others.
template <class P>
[[nodiscard]] constexpr std::string_view built_for() noexcept {
    if constexpr (requires { std::string_view{P::built_for}; })
        return P::built_for;
    else
        return {};
}

/// Seconds to recompute one item whose session has `context_length` tokens
/// before it (Pensieve: alpha * context_length + beta + const_non_attention).
template <class C>
concept cost_model = named<C> && std::copyable<C> && requires(const C& c, std::uint64_t context_length) {
    { c.cost(context_length) } -> std::same_as<double>;
};

/// How much of an item's cost lies on the critical path, by layer.
template <class W>
concept layer_weight = named<W> && std::copyable<W> &&
    requires(const W& w, layer_index layer, std::uint32_t num_layers) {
    { w.weight(layer, num_layers) } -> std::same_as<double>;
};

/// How expensive an item is to recompute, by its position in its session.
template <class W>
concept position_weight = named<W> && std::copyable<W> &&
    requires(const W& w, chunk_index chunk, std::uint32_t total_chunks) {
    { w.weight(chunk, total_chunks) } -> std::same_as<double>;
};

/// Given scores and ids, writes the `out.size()` lowest (fewer if there are
/// fewer ids) into `out` in ascending (score, id) order and returns the
/// count. Ties are broken by id, so results are deterministic. NaN scores are
/// rejected with `usage_error`. Non-const: a selector may keep scratch space
/// so repeated calls do not allocate.
template <class S, class Score = double>
concept victim_selector = named<S> &&
    requires(S& s, std::span<const Score> scores, std::span<const item_id> ids, std::span<item_id> out) {
    { s.select_lowest(scores, ids, out) } -> std::same_as<std::size_t>;
};

namespace detail {
template <class S>
concept sparse_selector_flags = named<S> && requires {
    typename std::bool_constant<S::supports_prefill>;
    typename std::bool_constant<S::supports_decode>;
    typename std::bool_constant<S::requires_block_selection>;
};
}  // namespace detail

/// Chooses which offloaded blocks a query reads (seeds 001 and 004).
/// `select` writes a subset of `available` to `out` (out.size() >=
/// available.size()) and returns its length; `on_offload` sees a block's keys
/// while they are still on the device, before the copy to the CPU tier.
template <class S>
concept sparse_selector = detail::sparse_selector_flags<S> &&
    requires(S& s, std::span<const block_id> available, const selection_context& ctx, std::span<block_id> out,
             block_id block, layer_index layer, const key_block_view& keys) {
    { s.select(available, ctx, out) } -> std::same_as<std::size_t>;
    { s.on_offload(block, layer, keys) } -> std::same_as<void>;
};

/// The same seam for a selector whose query and keys are device memory
/// (kvpolicy/cuda/quest.cuh's device_quest): it takes the device context and
/// key views (core/sparse_context.hpp), so host selectors and device
/// selectors cannot be handed each other's memory. The block ids stay on
/// the host, as in sparse_selector.
/// `S::key_element` names the type the keys are stored in (float, bf16,
/// fp16), and `on_offload` takes keys of that type.
template <class S>
concept device_sparse_selector = detail::sparse_selector_flags<S> && requires {
    typename S::key_element;
} && requires(S& s, std::span<const block_id> available, const device_selection_context& ctx, std::span<block_id> out,
              block_id block, layer_index layer, const basic_device_key_block_view<typename S::key_element>& keys) {
    { s.select(available, ctx, out) } -> std::same_as<std::size_t>;
    { s.on_offload(block, layer, keys) } -> std::same_as<void>;
};

/// A sparse selector that computes prefill attention itself (seed 004:
/// MInference changes how prefill attention is computed, not what is
/// loaded), over views in memory space `Space`: a host sparse_selector with
/// host views, a device_sparse_selector with device views (one never
/// accepts the other's memory). Only a selector with `supports_prefill` can
/// model it; the layer-wise offload prefill calls `sparse_prefill_attention`
/// and then offloads all of the layer's KV. It writes o and lse for every
/// query (lse in natural log, so partial results merge with
/// merge_attention_state).
template <class S, memory_space Space = memory_space::host>
concept prefill_sparse_selector =
    (Space == memory_space::host
         ? sparse_selector<S>
         : device_sparse_selector<S>)&&S::supports_prefill&& requires(S& s, const basic_prefill_qkv_view<Space>& qkv,
                                                                      layer_index layer,
                                                                      const basic_prefill_output_view<Space>& out) {
    { s.sparse_prefill_attention(qkv, layer, out) } -> std::same_as<void>;
};

/// Carries out block copies between tiers. `execute(ops, status)` performs
/// every op (status.size() >= ops.size()), writes each op's outcome and
/// returns how many are done. A failed op leaves its destination unspecified
/// and its source intact.
template <class T>
concept transfer_engine = requires(T& t, std::span<const block_transfer> ops, std::span<transfer_status> status) {
    { t.execute(ops, status) } -> std::same_as<std::size_t>;
};

/// A transfer engine that also reaches a remote store: an op with `from` or
/// `to` equal to `tier::remote` names, on that side, an index into
/// `remote_keys` (the item's key) instead of a slot. Returns the ops done.
template <class T>
concept remote_transfer_engine = transfer_engine<T> &&
    requires(T& t, std::span<const block_transfer> ops, std::span<const std::uint64_t> remote_keys,
             std::span<transfer_status> status) {
    { t.execute(ops, remote_keys, status) } -> std::same_as<std::size_t>;
};

/// What a remote store tells a lookup: `present_prefix(keys)` is how many of
/// `keys`, from the first, the store holds now (it may drop them later: it
/// owns its eviction, and a fetch that finds one gone fails).
template <class T>
concept remote_directory = requires(T& t, std::span<const std::uint64_t> keys) {
    { t.present_prefix(keys) } -> std::same_as<std::size_t>;
};

/// A remote_directory that answers a step's lookups together:
/// `present_prefixes(lists, out)` sets out[i] to present_prefix(lists[i])
/// for every list, in one round trip to the store instead of one per list.
template <class T>
concept remote_batch_directory = remote_directory<T> &&
    requires(T& t, std::span<const std::span<const std::uint64_t>> lists, std::span<std::size_t> out) {
    { t.present_prefixes(lists, out) } -> std::same_as<void>;
};

}  // namespace kvpolicy
