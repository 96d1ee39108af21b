// Drives an eviction policy with a long random operation sequence, the way a
// cache would: inserts while there is room (popping a victim when full),
// hits, holds and releases (as requests acquire and finish with blocks),
// erases (as sessions are freed). Checks the protocol invariants after every
// operation and, given a reference model, that both sides choose the same
// victims in the same order.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <type_traits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <kvpolicy/core/access_context.hpp>
#include <kvpolicy/core/concepts.hpp>

namespace kvpolicy::testing {

struct driver_options {
    std::size_t capacity = 64;
    std::size_t operations = 100'000;
    std::uint64_t seed = 1;
    /// Keys are drawn from this many distinct values, so evicted keys come
    /// back and ghost lists get hits.
    std::uint64_t key_universe = 256;
    /// A key's session is key % sessions, ...
    std::uint64_t sessions = 7;
    /// ... except for one access in this many (0: none), which comes from a
    /// random session, as a shared prefix is read by several.
    std::uint64_t foreign_every = 0;
};

/// What the driver knows independently of the policy: which slot holds which
/// key, and whether it is held.
struct driver_state {
    enum class slot : std::uint8_t { free, evictable, held };
    std::vector<slot> slots;
    std::vector<std::uint64_t> key_of_slot;
    std::size_t tracked = 0, held = 0;
};

/// The access_context of a hand-written trace: time `now`, `key`, the rest
/// defaulted.
inline access_context at(timestamp now, std::uint64_t key = 0) {
    access_context ctx;
    ctx.now = now;
    ctx.key = key;
    return ctx;
}

/// Fills an access_context for an operation at logical time `now` on `key`
/// (sessions as driver_options says); every field a policy may read varies,
/// so each policy's rule is exercised.
inline access_context make_context(std::mt19937_64& rng, std::uint64_t now, std::uint64_t key, std::uint64_t sessions,
                                   std::uint64_t foreign_every) {
    access_context ctx;
    ctx.now = now;
    ctx.key = key;
    ctx.session = session_id{key % sessions};
    if (foreign_every != 0 && rng() % foreign_every == 0) ctx.session = session_id{rng() % sessions};
    ctx.chunk = chunk_index{static_cast<std::uint32_t>(key % 13)};
    ctx.layer = layer_index{static_cast<std::uint32_t>(key % 5)};
    ctx.num_layers = 5;
    ctx.session_total_chunks = 13;
    ctx.context_length = (key % 13) * 16;
    ctx.size = 1 + static_cast<std::uint32_t>(key % 3);
    ctx.priority = static_cast<std::int32_t>(rng() % 3);
    ctx.priority_until = (rng() % 4 == 0) ? now + rng() % 50 : never;
    if (rng() % 3 == 0) ctx.estimated_lifetime = static_cast<double>(rng() % 100);
    ctx.max_length = (rng() % 2 == 0) ? 0 : 100 + rng() % 100;
    ctx.sequence_length = ctx.max_length == 0 ? rng() % 50 : rng() % ctx.max_length;
    ctx.next_use = (rng() % 5 == 0) ? never : now + 1 + rng() % 1000;
    return ctx;
}

/// What a release says the finished request generated: 0 (unknown) one time
/// in four, else 1-2000 tokens; a hash of the time and key, not a draw, so
/// the operation sequence is the one it was before releases said it.
inline std::uint64_t release_output_tokens(std::uint64_t now, std::uint64_t key) noexcept {
    std::uint64_t h = (now + 0x9e3779b97f4a7c15ULL) ^ (key * 0xbf58476d1ce4e5b9ULL);
    h = (h ^ (h >> 31)) * 0x94d049bb133111ebULL;
    h ^= h >> 29;
    return h % 4 == 0 ? 0 : 1 + (h >> 2) % 2000;
}

/// When a release says the engine expects the session back: no hint half
/// the time, `never` one time in 16, else 1-600 ticks after `now`; a hash
/// like release_output_tokens', with other constants.
inline timestamp release_expected_return(std::uint64_t now, std::uint64_t key) noexcept {
    std::uint64_t h = (now * 0xd6e8feb86659fd93ULL) ^ (key + 0x2545f4914f6cdd1dULL);
    h = (h ^ (h >> 32)) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    if (h % 2 == 0) return 0;
    if ((h >> 1) % 8 == 0) return never;
    return now + 1 + (h >> 4) % 600;
}

/// Runs `policy` (and `reference`, when given) through `opt.operations`
/// random operations. Returns the victims in order.
template <eviction_policy Policy, class Reference = std::nullptr_t>
std::vector<std::uint32_t> drive(Policy& policy, const driver_options& opt, Reference* reference = nullptr) {
    constexpr bool checked = !std::is_same_v<Reference, std::nullptr_t>;
    std::mt19937_64 rng(opt.seed);
    driver_state st;
    st.slots.assign(opt.capacity, driver_state::slot::free);
    st.key_of_slot.assign(opt.capacity, 0);
    std::vector<std::uint32_t> victims;

    auto pick_slot = [&](driver_state::slot want) -> std::optional<std::uint32_t> {
        // Uniform among slots in state `want`, by rejection then scan.
        for (int tries = 0; tries < 8; ++tries) {
            const auto s = static_cast<std::uint32_t>(rng() % opt.capacity);
            if (st.slots[s] == want) return s;
        }
        for (std::uint32_t s = 0; s < opt.capacity; ++s)
            if (st.slots[s] == want) return s;
        return std::nullopt;
    };
    auto accept_victim = [&](std::optional<item_id> v, std::uint64_t now) -> bool {
        if constexpr (checked) {
            const auto r = reference->pop_victim(now);
            REQUIRE(v.has_value() == r.has_value());
            if (v) REQUIRE(v->value == r->value);
        }
        if (!v) {
            REQUIRE(st.tracked == st.held);  // nothing evictable, or the policy lost an item
            return false;
        }
        REQUIRE(v->value < opt.capacity);
        REQUIRE(st.slots[v->value] == driver_state::slot::evictable);
        st.slots[v->value] = driver_state::slot::free;
        --st.tracked;
        victims.push_back(v->value);
        return true;
    };
    auto pop_one = [&](std::uint64_t now) { return accept_victim(policy.pop_victim(now), now); };

    for (std::uint64_t now = 1; now <= opt.operations; ++now) {
        const auto dice = rng() % 100;
        if (dice < 45) {  // a request for some key: hit or miss
            const std::uint64_t key = rng() % opt.key_universe;
            std::optional<std::uint32_t> hit;
            for (std::uint32_t s = 0; s < opt.capacity && !hit; ++s)
                if (st.slots[s] != driver_state::slot::free && st.key_of_slot[s] == key) hit = s;
            const access_context ctx = make_context(rng, now, key, opt.sessions, opt.foreign_every);
            if (hit) {
                policy.on_access(item_id{*hit}, ctx);
                if constexpr (checked) reference->on_access(item_id{*hit}, ctx);
            } else {
                if (st.tracked == opt.capacity && !pop_one(now)) continue;
                const auto s = *pick_slot(driver_state::slot::free);
                policy.on_insert(item_id{s}, ctx);
                if constexpr (checked) reference->on_insert(item_id{s}, ctx);
                st.slots[s] = driver_state::slot::evictable;
                st.key_of_slot[s] = key;
                ++st.tracked;
            }
        } else if (dice < 60) {  // a request acquires a block
            if (auto s = pick_slot(driver_state::slot::evictable)) {
                policy.on_hold(item_id{*s});
                if constexpr (checked) reference->on_hold(item_id{*s});
                st.slots[*s] = driver_state::slot::held;
                ++st.held;
            }
        } else if (dice < 75) {  // a request finishes with it
            if (auto s = pick_slot(driver_state::slot::held)) {
                access_context ctx = make_context(rng, now, st.key_of_slot[*s], opt.sessions, opt.foreign_every);
                ctx.output_tokens = release_output_tokens(now, ctx.key);
                ctx.expected_return = release_expected_return(now, ctx.key);
                policy.on_release(item_id{*s}, ctx);
                if constexpr (checked) reference->on_release(item_id{*s}, ctx);
                st.slots[*s] = driver_state::slot::evictable;
                --st.held;
            }
        } else if (dice < 80) {  // a session is freed
            // Policies that hear it are told a session ended: a hash of the
            // time picks it, not a draw, so other policies' sequences stay.
            if constexpr (hears_session_ends<Policy>) {
                const session_id ended{(now * 0x9e3779b97f4a7c15ULL >> 17) % opt.sessions};
                policy.on_session_end(ended, now);
                if constexpr (checked) reference->on_session_end(ended, now);
            }
            const auto want = (rng() % 2) ? driver_state::slot::held : driver_state::slot::evictable;
            if (auto s = pick_slot(want)) {
                policy.on_erase(item_id{*s});
                if constexpr (checked) reference->on_erase(item_id{*s});
                if (want == driver_state::slot::held) --st.held;
                st.slots[*s] = driver_state::slot::free;
                --st.tracked;
            }
        } else if (dice < 85) {  // memory pressure: evict a batch ahead of need
            item_id batch[4];
            const auto want = static_cast<std::size_t>(rng() % 5);
            const std::size_t got = policy.pop_victims(std::span<item_id>(batch, want), now);
            REQUIRE(got <= want);
            for (std::size_t i = 0; i < got; ++i) accept_victim(batch[i], now);
            if (got < want) REQUIRE(!accept_victim(std::nullopt, now));
        } else {  // a hit on a held block (another request shares the prefix)
            if (auto s = pick_slot(driver_state::slot::held)) {
                const access_context ctx = make_context(rng, now, st.key_of_slot[*s], opt.sessions, opt.foreign_every);
                policy.on_access(item_id{*s}, ctx);
                if constexpr (checked) reference->on_access(item_id{*s}, ctx);
            }
        }
        // Invariants after every operation.
        REQUIRE(policy.size() == st.tracked);
        REQUIRE(policy.evictable_size() == st.tracked - st.held);
        REQUIRE(policy.size() <= policy.capacity());
    }
    for (std::uint32_t s = 0; s < opt.capacity; ++s)
        REQUIRE(policy.contains(item_id{s}) == (st.slots[s] != driver_state::slot::free));
    return victims;
}

}  // namespace kvpolicy::testing
