// Fuzzes the composed cache (tiered_cache) with operation sequences decoded
// from the input. The first choice picks one of two harnesses:
//
// 1. Differential (compositions the reference models: LRU or FIFO on each
//    tier, exclusive or inclusive, and GPU-only): the driver the Catch test
//    runs (tests/support/differential_driver.hpp), with every choice taken
//    from the input instead of a generator: capacities from 1 block, copies
//    failing where the input says, cancellations. After every step: the
//    reference's decisions, residency, the bytes behind every cached item,
//    check_invariants().
//
// 2. Invariants only, for compositions the reference cannot model (the
//    presets pensieve_cache and trtllm_like_cache, and tiered_cache over
//    s3fifo, arc, lfu, sieve, w_tinylfu, gdsf, predictive, lirs, belady,
//    slru; whole-block or per-layer items, exclusive or inclusive, chain
//    verification on or off): any call in any order with any arguments —
//    begin_step, end_step, admit (arbitrary hash chains: repeats, other
//    parents; arbitrary contexts and next-use times), complete_transfers
//    (any statuses, wrong counts, stale or repeated plans), release of a
//    session or of one block, pin, unpin, free_session, the clock. After
//    every call:
//    - check_invariants() is empty;
//    - a call that throws throws a kvpolicy::error and changes nothing
//      (every slot, hold and counter: tests/support/cache_snapshot.hpp);
//      admit refuses for want of room exactly when the items it must place
//      exceed the free and evictable GPU slots not its own;
//    - conservation: every item is in a tier, free, or reported dropped.
//      An item leaves the tiers only as one of the step's plan.drops (admit),
//      a report's drops (complete_transfers: each item once, with no copy
//      left) or a cancelled session's forgotten items (free_session, as many
//      as it returns, all its own), and the dropped-item counter moves by
//      exactly that; items appear only by admit, and only the request's;
//    - an admitted request is on the GPU, held once per item by its session;
//      admit's match is lookup's, and lookup agrees with where() block by
//      block; a pinned block stays on the GPU, pinned, unless a failed copy
//      dropped it; a recompute report names a GPU item its session holds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <kvpolicy/cache/presets.hpp>
#include <kvpolicy/cache/tiered_cache.hpp>
#include <kvpolicy/eviction/registry.hpp>

#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "support/cache_snapshot.hpp"
#include "support/differential_driver.hpp"

using namespace kvpolicy;
using kvpolicy::fuzzing::abort_checker;
using kvpolicy::fuzzing::fuzz_input;
using kvpolicy::testing::cache_snapshot;
using kvpolicy::testing::composition;
using kvpolicy::testing::ref_rule;

static_assert(kvpolicy::testing::choice_source<fuzz_input>);

namespace {

// --- 1. differential ---------------------------------------------------------

template <class Cache>
void differential(fuzz_input& in, const composition& comp) {
    const std::size_t gpu_cap = 1 + in.choose(32);
    const std::size_t cpu_cap = in.choose(4) == 0 ? 0 : 1 + in.choose(32);
    const kvpolicy::testing::differential_params params{.gpu_capacity = gpu_cap,
                                                        .cpu_capacity = cpu_cap,
                                                        .steps = 100'000,
                                                        .chosen_failures = in.flag(),
                                                        .cancellations = in.flag()};
    abort_checker check{std::string("differential, ") + comp.name + ", gpu " + std::to_string(gpu_cap) + ", cpu " +
                        std::to_string(cpu_cap) + (params.chosen_failures ? ", failed copies" : "") +
                        (params.cancellations ? ", cancellations" : "")};
    (void)kvpolicy::testing::run_differential<Cache>(comp, params, in, check);
}

// --- 2. invariants only --------------------------------------------------------

constexpr std::size_t n_sessions = 6;

template <class Cache>
class invariant_run {
public:
    invariant_run(fuzz_input& in, const cache_config& config, std::string context)
            : in_(in), cache_(config), context_(std::move(context)) {
        for (std::size_t s = 0; s < n_sessions; ++s) sessions_.push_back(session_id{s});
    }

    void run() {
        require_invariants("construction");
        while (!in_.exhausted()) one_call();
    }

private:
    // Every cached item, by (tier, key), with its owner. An inclusive item
    // may be in both tiers: it is lost when its key is in neither.
    using item_map = std::map<std::pair<tier, std::uint64_t>, session_id>;
    item_map cached_items() const {
        item_map items;
        auto add = [&](const auto& pool) {
            using pool_type = std::remove_cvref_t<decltype(pool)>;
            for (std::uint32_t i = 0; i < pool.capacity(); ++i)
                if (pool.state(block_id{i}) == pool_type::slot_state::cached)
                    items.emplace(std::pair{pool.which(), pool.key(block_id{i})}, pool.meta(block_id{i}).owner);
        };
        add(cache_.gpu());
        if (cache_.has_cpu_tier()) add(cache_.cpu());
        return items;
    }
    static std::set<std::uint64_t> keys_of(const item_map& items) {
        std::set<std::uint64_t> keys;
        for (const auto& [where, owner] : items) keys.insert(where.second);
        return keys;
    }

    void require(bool ok, std::string_view what) const {
        if (!ok) kvpolicy::fuzzing::fail(what, context_ + ", call " + std::to_string(calls_) + " (" + call_ + ")");
    }
    void require_invariants(std::string_view after) {
        const std::string broken = cache_.check_invariants();
        if (!broken.empty()) require(false, "check_invariants() after " + std::string(after) + ": " + broken);
    }

    block_hash some_hash() {
        switch (in_.choose(8)) {
            case 0:
                return in_.u64();  // anything, ~0 (no parent's marker) included
            case 1:
                return ~block_hash{0} - in_.choose(2);
            default:
                return 1 + in_.choose(24);  // a small universe: shared prefixes, repeats
        }
    }
    std::vector<block_hash> some_chain() {
        std::vector<block_hash> h;
        if (in_.choose(4) != 0 && !chains_.empty()) {  // a known chain, or its prefix, maybe extended
            h = chains_[in_.choose(chains_.size())];
            h.resize(in_.choose(h.size() + 1));
        }
        const std::size_t grow = in_.choose(5);
        for (std::size_t i = 0; i < grow; ++i) h.push_back(some_hash());
        return h;
    }
    access_context some_context() {
        access_context ctx;
        if (in_.flag()) return ctx;
        ctx.priority = in_.flag() ? static_cast<std::int32_t>(in_.choose(4)) - 1 : static_cast<std::int32_t>(in_.u32());
        ctx.priority_until = in_.flag() ? never : cache_.clock().now() + in_.choose(16);
        ctx.estimated_lifetime = in_.flag() ? ctx.estimated_lifetime : in_.any_double();
        ctx.max_length = in_.choose(3) == 0 ? in_.u64() : in_.choose(64);
        ctx.sequence_length = in_.choose(128);
        ctx.size = static_cast<std::uint32_t>(in_.choose(4));
        return ctx;
    }

    // Whether the GPU has room for the items of `hashes` it does not hold:
    // free slots, and evictable items other than the request's own.
    bool room_for(std::span<const block_hash> hashes) const {
        std::size_t needed = 0, own_evictable = 0;
        for (const block_hash h : hashes)
            for (std::uint32_t l = 0; l < cache_.items_per_block(); ++l) {
                const auto b = cache_.gpu().cached_block(cache_.item_key(h, l));
                if (!b)
                    ++needed;
                else if (cache_.gpu().is_evictable(*b))
                    ++own_evictable;
            }
        return needed <= cache_.gpu().num_free_blocks() + cache_.gpu().num_evictable_blocks() - own_evictable;
    }

    // lookup() against where(), block by block.
    void check_lookup(std::span<const block_hash> hashes, const prefix_match& m) {
        prefix_match want;
        for (const block_hash h : hashes) {
            bool all_gpu = true, cached = true;
            for (std::uint32_t l = 0; l < cache_.items_per_block(); ++l) {
                const item_state st = cache_.where(h, l);
                all_gpu = all_gpu && st == item_state::in_gpu;
                cached = cached && st != item_state::free;
            }
            if (!cached) break;
            ++want.run;
            (all_gpu ? want.gpu_blocks : want.cpu_blocks) += 1;
        }
        require(m == want, "lookup: the longest prefix of blocks whose every item is in a tier");
    }

    static std::string list(std::span<const block_hash> hashes) {
        std::string s = "[";
        for (const block_hash h : hashes) s += (s.size() > 1 ? " " : "") + std::to_string(h);
        return s + "]";
    }

    // KVPOLICY_FUZZ_TRACE=1 prints every call, to read a reproducer.
    void one_call() {
        ++calls_;
        kind_ = call_kind::other;
        try_one_call();
        if (trace_) std::fprintf(stderr, "call %zu: %s\n", calls_, call_.c_str());
    }

    void try_one_call() {
        const std::string before = cache_snapshot(cache_, sessions_);
        const item_map items_before = cached_items();
        const std::set<std::uint64_t> keys_before = keys_of(items_before);
        const std::uint64_t dropped_before = cache_.metrics().dropped_items;
        std::vector<std::uint64_t> reported_drops;  // complete_transfers' report
        std::optional<std::size_t> forgotten;       // free_session's count
        std::optional<session_id> forgotten_owner;
        std::vector<std::uint64_t> admitted;  // item keys an admit placed
        try {
            switch (in_.choose(12)) {
                case 0:
                    call_ = "begin_step";
                    cache_.begin_step();
                    step_lost_.clear();
                    break;
                case 1: {
                    call_ = "end_step";
                    const swap_plan& plan = cache_.end_step();
                    std::vector<std::uint64_t> drops;
                    for (const dropped_item& d : plan.drops) drops.push_back(d.key);
                    if (trace_) {
                        call_ += ": step " + std::to_string(plan.step) + ", copies";
                        for (const block_transfer& t : plan.transfers)
                            call_ += std::string(" ") + (t.from == tier::gpu ? "g" : "c") +
                                     std::to_string(t.src.value) + (t.exchange ? "<->" : "->") +
                                     (t.to == tier::gpu ? "g" : "c") + std::to_string(t.dst.value);
                        call_ += ", drops " + list(drops);
                    }
                    std::sort(drops.begin(), drops.end());
                    std::sort(step_lost_.begin(), step_lost_.end());
                    require(drops == step_lost_, "end_step: plan.drops are exactly the items the step's admits lost");
                    step_lost_.clear();
                    plans_.push_back(plan);
                    if (plans_.size() > 3) plans_.erase(plans_.begin());
                    break;
                }
                case 2:
                case 3:
                case 4: {
                    kind_ = call_kind::admit;
                    const session_id s = sessions_[in_.choose(n_sessions)];
                    const std::vector<block_hash> hashes = some_chain();
                    call_ = "admit session " + std::to_string(s.value) + " " + list(hashes);
                    const access_context ctx = some_context();
                    std::vector<timestamp> next_use;
                    if (in_.flag()) {
                        next_use.resize(in_.choose(8) == 0 ? in_.choose(8) : hashes.size());
                        for (timestamp& t : next_use) t = in_.flag() ? never : cache_.clock().now() + in_.choose(64);
                    }
                    std::set<block_hash> distinct(hashes.begin(), hashes.end());
                    const bool repeats = distinct.size() != hashes.size();
                    const bool fits = room_for(hashes);
                    const prefix_match looked = cache_.lookup(hashes);
                    const std::size_t held = cache_.held_by(s).size();
                    const bool well_formed = cache_.in_step() && (next_use.empty() || next_use.size() == hashes.size());
                    std::optional<admission> admitted_as;
                    try {
                        admitted_as = cache_.admit(s, hashes, ctx, next_use);
                    } catch (const capacity_error&) {
                        require(!fits, "admit refuses for want of room only when the items exceed the room");
                        throw;
                    }
                    const admission a = *admitted_as;
                    require(!(repeats && well_formed), "admit refuses a hash twice in one request");
                    require(fits, "admit places no more items than are free or evictable");
                    require(a.match == looked, "admit's match is lookup's");
                    require(a.computed_blocks == hashes.size() - looked.run, "admit computes the miss tail");
                    require(cache_.held_by(s).size() == held + hashes.size() * cache_.items_per_block(),
                            "admit holds every item of the request once");
                    for (const block_hash h : hashes)
                        for (std::uint32_t l = 0; l < cache_.items_per_block(); ++l) {
                            require(cache_.where(h, l) == item_state::in_gpu, "an admitted request is on the GPU");
                            admitted.push_back(cache_.item_key(h, l));
                        }
                    if (!hashes.empty()) chains_.push_back(hashes);
                    if (chains_.size() > 16) chains_.erase(chains_.begin());
                    for (const std::uint64_t key : keys_before)
                        if (!cache_.gpu().cached_block(key) &&
                            !(cache_.has_cpu_tier() && cache_.cpu().cached_block(key)))
                            step_lost_.push_back(key);
                    break;
                }
                case 5: {
                    kind_ = call_kind::complete_transfers;
                    call_ = "complete_transfers";
                    // The last plan (or an older one), with statuses from the
                    // input: mostly one per copy, done or failed.
                    if (plans_.empty()) break;
                    const swap_plan& plan = plans_[plans_.size() - 1 - in_.choose(plans_.size())];
                    std::vector<transfer_status> status(plan.transfers.size());
                    for (transfer_status& st : status)
                        st = in_.choose(3) == 0 ? transfer_status::failed : transfer_status::done;
                    if (in_.choose(8) == 0) status.resize(in_.choose(status.size() + 2));
                    if (!status.empty() && in_.choose(8) == 0)
                        status[in_.choose(status.size())] = static_cast<transfer_status>(2 + in_.choose(254));
                    call_ = "complete_transfers of step " + std::to_string(plan.step) + ", statuses";
                    for (const transfer_status st : status) call_ += " " + std::to_string(static_cast<unsigned>(st));
                    const transfer_report r = cache_.complete_transfers(plan, status);
                    std::set<std::uint64_t> seen;
                    for (const dropped_item& d : r.drops) {
                        require(seen.insert(d.key).second,
                                "complete_transfers: an item is dropped once (" + std::to_string(d.key) + " twice)");
                        reported_drops.push_back(d.key);
                    }
                    for (const recompute_item& x : r.recompute) {
                        require(cache_.gpu().state(x.block) ==
                                        block_pool<typename Cache::gpu_policy_type>::slot_state::cached &&
                                    cache_.gpu().key(x.block) == x.key,
                                "a recompute item is cached on the GPU, in the slot named");
                        const std::vector<block_id> h = cache_.held_by(x.session);
                        require(std::find(h.begin(), h.end(), x.block) != h.end(),
                                "a recompute item is held by its session");
                    }
                    break;
                }
                case 6: {
                    const session_id s = sessions_[in_.choose(n_sessions)];
                    call_ = "release session " + std::to_string(s.value);
                    cache_.release(s);
                    break;
                }
                case 7: {
                    const session_id s = sessions_[in_.choose(n_sessions)];
                    const std::vector<block_id> held = cache_.held_by(s);
                    const block_id b =
                        !held.empty() && in_.choose(4) != 0
                            ? held[in_.choose(held.size())]
                            : block_id{static_cast<std::uint32_t>(in_.choose(cache_.gpu().capacity() + 2))};
                    call_ = "release session " + std::to_string(s.value) + " block " + std::to_string(b.value);
                    cache_.release(s, b);
                    break;
                }
                case 8: {
                    const block_hash h = some_hash_or_cached();
                    call_ = "pin " + std::to_string(h);
                    cache_.pin(h);
                    pinned_.insert(h);
                    break;
                }
                case 9: {
                    const block_hash h =
                        !pinned_.empty() && in_.choose(4) != 0
                            ? *std::next(pinned_.begin(), static_cast<std::ptrdiff_t>(in_.choose(pinned_.size())))
                            : some_hash_or_cached();
                    call_ = "unpin " + std::to_string(h);
                    cache_.unpin(h);
                    pinned_.erase(h);
                    break;
                }
                case 10: {
                    const session_id s = sessions_[in_.choose(n_sessions)];
                    const bool forget = in_.flag();
                    call_ = "free_session " + std::to_string(s.value) + (forget ? ", forgetting its items" : "");
                    forgotten = cache_.free_session(s, forget);
                    forgotten_owner = s;
                    if (!forget) require(*forgotten == 0, "free_session without forgetting frees nothing");
                    break;
                }
                default: {
                    const timestamp ticks = in_.choose(100);
                    const std::vector<block_hash> hashes = some_chain();
                    call_ = "clock + " + std::to_string(ticks) + ", lookup " + list(hashes);
                    cache_.clock().advance(ticks);
                    check_lookup(hashes, cache_.lookup(hashes));
                    break;
                }
            }
        } catch (const kvpolicy::error& e) {
            call_ += std::string(" -> threw: ") + e.what();
            require(cache_snapshot(cache_, sessions_) == before, "a call that throws changes nothing");
            require_invariants("a call that threw");
            return;
        }
        require_invariants(call_);

        // Conservation.
        const item_map items_after = cached_items();
        const std::set<std::uint64_t> keys_after = keys_of(items_after);
        std::vector<std::uint64_t> lost;
        for (const std::uint64_t key : keys_before)
            if (!keys_after.contains(key)) lost.push_back(key);
        for (const std::uint64_t key : keys_after)
            require(keys_before.contains(key) || std::find(admitted.begin(), admitted.end(), key) != admitted.end(),
                    "items appear only by admit, and only the request's");
        const std::uint64_t dropped = cache_.metrics().dropped_items - dropped_before;
        if (forgotten) {
            std::size_t freed = 0;
            for (const auto& [where, owner] : items_before) {
                if (items_after.contains(where)) continue;
                ++freed;
                require(owner == *forgotten_owner, "free_session frees only the session's own items");
            }
            require(freed == *forgotten, "free_session frees as many items as it returns");
            require(items_after.size() + freed == items_before.size(), "free_session places nothing");
            require(dropped == 0, "forgotten items are not counted dropped");
        } else if (kind_ == call_kind::complete_transfers) {
            // By copy: a copy leaves with its item reported dropped, or while
            // another copy of it stays (inclusive: the other tier's, or the
            // GPU item its holders recompute). A dropped item has no copy left.
            std::sort(reported_drops.begin(), reported_drops.end());
            for (const auto& [where, owner] : items_before) {
                if (items_after.contains(where)) continue;
                require(std::binary_search(reported_drops.begin(), reported_drops.end(), where.second) ||
                            keys_after.contains(where.second),
                        "complete_transfers: a copy leaves only with its item reported dropped, or another copy left");
            }
            for (const std::uint64_t key : reported_drops)
                require(keys_before.contains(key) && !keys_after.contains(key),
                        "complete_transfers: a dropped item was cached and has no copy left");
            require(dropped == reported_drops.size(), "complete_transfers: every drop counted");
            require(items_after.size() <= items_before.size(), "complete_transfers places nothing");
        } else if (kind_ == call_kind::admit) {
            require(dropped == lost.size(), "admit: every item lost is counted dropped, and only those (" +
                                                std::to_string(lost.size()) + " lost, " + std::to_string(dropped) +
                                                " counted)");
        } else {
            require(lost.empty(), "only admit, complete_transfers and free_session lose items");
            require(dropped == 0, "nothing dropped");
        }
        // Pinned blocks stay pinned on the GPU; only a failed copy drops one.
        for (auto it = pinned_.begin(); it != pinned_.end();) {
            bool on_gpu = true;
            for (std::uint32_t l = 0; l < cache_.items_per_block(); ++l) {
                const auto b = cache_.gpu().cached_block(cache_.item_key(*it, l));
                on_gpu = on_gpu && b && cache_.gpu().is_pinned(*b);
            }
            if (on_gpu) {
                ++it;
                continue;
            }
            require(kind_ == call_kind::complete_transfers, "a pinned block stays pinned on the GPU");
            it = pinned_.erase(it);
        }
    }

    block_hash some_hash_or_cached() {
        if (in_.choose(4) == 0 || chains_.empty()) return some_hash();
        const std::vector<block_hash>& c = chains_[in_.choose(chains_.size())];
        return c[in_.choose(c.size())];
    }

    fuzz_input& in_;
    Cache cache_;
    std::string context_;
    std::vector<session_id> sessions_;
    std::vector<std::vector<block_hash>> chains_;  // admitted requests, the latest 16
    std::vector<swap_plan> plans_;                 // the latest 3
    std::vector<std::uint64_t> step_lost_;         // items the open step's admits lost
    std::set<block_hash> pinned_;
    std::size_t calls_ = 0;
    std::string call_ = "none";  // what the current call is, with its arguments
    enum class call_kind { admit, complete_transfers, other } kind_ = call_kind::other;
    bool trace_ = std::getenv("KVPOLICY_FUZZ_TRACE") != nullptr;
};

template <class Cache>
void invariants(fuzz_input& in, const char* name) {
    cache_config config;
    config.gpu_capacity = 1 + in.choose(48);
    config.cpu_capacity = in.choose(4) == 0 ? 0 : 1 + in.choose(48);
    config.block_size = 16;
    config.item_bytes = 64;
    config.inclusive = in.flag();
    config.verify_chain = in.choose(4) != 0;
    if (in.flag()) {
        config.items = granularity::per_layer;
        config.num_layers = static_cast<std::uint32_t>(1 + in.choose(4));
        config.gpu_capacity = std::max<std::size_t>(config.gpu_capacity, config.num_layers);
        if (config.cpu_capacity > 0)
            config.cpu_capacity = std::max<std::size_t>(config.cpu_capacity, config.num_layers);
    }
    const std::string context =
        std::string("invariants, ") + name + ", gpu " + std::to_string(config.gpu_capacity) + ", cpu " +
        std::to_string(config.cpu_capacity) + (config.inclusive ? ", inclusive" : ", exclusive") +
        (config.items == granularity::per_layer ? ", " + std::to_string(config.num_layers) + " layers per block"
                                                : std::string()) +
        (config.verify_chain ? "" : ", chains not verified");
    invariant_run<Cache>(in, config, context).run();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz_input in(data, size);
    switch (in.choose(16)) {
        // The reference's compositions (offload_v0_cache is tiered_cache<lru, fifo>).
        case 0:
            differential<tiered_cache<lru, lru>>(in, {"lru/lru exclusive", ref_rule::lru, ref_rule::lru, false});
            break;
        case 1:
            differential<tiered_cache<lru, lru>>(in, {"lru/lru inclusive", ref_rule::lru, ref_rule::lru, true});
            break;
        case 2:
            differential<offload_v0_cache>(in, {"lru/fifo exclusive", ref_rule::lru, ref_rule::fifo, false});
            break;
        case 3:
            differential<offload_v0_cache>(in, {"lru/fifo inclusive", ref_rule::lru, ref_rule::fifo, true});
            break;
        case 4:
            differential<tiered_cache<fifo, lru>>(in, {"fifo/lru inclusive", ref_rule::fifo, ref_rule::lru, true});
            break;
        case 5:
            differential<tiered_cache<fifo, lru>>(in, {"fifo/lru exclusive", ref_rule::fifo, ref_rule::lru, false});
            break;
        case 6:
            differential<tiered_cache<fifo, fifo>>(in, {"fifo/fifo exclusive", ref_rule::fifo, ref_rule::fifo, false});
            break;
        case 7:
            differential<tiered_cache<fifo, fifo>>(in, {"fifo/fifo inclusive", ref_rule::fifo, ref_rule::fifo, true});
            break;
        // Compositions only the invariants judge.
        case 8:
            invariants<pensieve_cache>(in, "pensieve_cache");
            break;
        case 9:
            invariants<trtllm_like_cache>(in, "trtllm_like_cache");
            break;
        case 10:
            invariants<tiered_cache<s3fifo, arc>>(in, "s3fifo/arc");
            break;
        case 11:
            invariants<tiered_cache<arc, s3fifo>>(in, "arc/s3fifo");
            break;
        case 12:
            invariants<tiered_cache<lfu, sieve>>(in, "lfu/sieve");
            break;
        case 13:
            invariants<tiered_cache<w_tinylfu, gdsf<>>>(in, "w_tinylfu/gdsf");
            break;
        case 14:
            invariants<tiered_cache<predictive, lirs>>(in, "predictive/lirs");
            break;
        default:
            invariants<tiered_cache<belady, slru>>(in, "belady/slru");
            break;
    }
    return 0;
}
