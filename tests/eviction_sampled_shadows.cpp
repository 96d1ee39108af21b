// best_of_shadows' sampled shadows and leader-only state (issue 36):
// - at sample rate 1 each shadow hits exactly where its expert, run alone at
//   full size on the same references, hits;
// - at a lower rate each shadow's hit ratio is within a bound derived from
//   the sample (below) of its expert's full-size hit ratio, on long random
//   skewed traces;
// - with leader_only, only the followed expert exists; a switch to LRU
//   rebuilds LRU's order exactly (the victims are those of an LRU that saw
//   every operation), and under random operations with holds, erases and
//   session ends and a choice that moves often, every victim is a cached,
//   unheld item (the driver's checks);
// - with leader_only and no switch, the victims are those of the full mode.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/adaptive_kv.hpp>
#include <kvpolicy/eviction/lrfu.hpp>
#include <kvpolicy/eviction/lru.hpp>
#include <kvpolicy/eviction/superseded_lru.hpp>

#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "support/policy_driver.hpp"

using namespace kvpolicy;
using namespace kvpolicy::testing;

namespace {

struct reference_step {
    std::uint64_t key;
    std::uint64_t session;
};

// Zipf(alpha)-distributed keys over `universe` keys (inverse CDF), a session
// per key.
std::vector<reference_step> zipf_trace(std::size_t n, std::uint64_t universe, double alpha, std::uint64_t seed) {
    std::vector<double> cdf(universe);
    double sum = 0.0;
    for (std::uint64_t k = 0; k < universe; ++k) cdf[k] = sum += std::pow(static_cast<double>(k + 1), -alpha);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, sum);
    std::vector<reference_step> out(n);
    for (auto& s : out) {
        const auto k = static_cast<std::uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
        // Spread the ranks over the key space, differently per seed: the
        // sample (by hash) is another set of ranks for each seed.
        s.key = (k + 1) * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
        s.session = k % 61;
    }
    return out;
}

// A flat cache in front of `p`: hits, and each key's hits.
template <class Policy>
std::uint64_t replay(Policy& p, const std::vector<reference_step>& trace,
                     std::unordered_map<std::uint64_t, std::uint64_t>* key_hits = nullptr) {
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(p.capacity());
    std::uint32_t used = 0;
    std::uint64_t hits = 0;
    timestamp now = 0;
    for (const reference_step& s : trace) {
        access_context ctx;
        ctx.now = ++now;
        ctx.key = s.key;
        ctx.session = session_id{s.session};
        if (auto it = where.find(s.key); it != where.end()) {
            ++hits;
            if (key_hits) ++(*key_hits)[s.key];
            p.on_access(item_id{it->second}, ctx);
            continue;
        }
        p.on_miss(ctx);
        std::uint32_t slot;
        if (used < p.capacity()) {
            slot = used++;
        } else {
            slot = p.pop_victim(now)->value;
            where.erase(key_of[slot]);
        }
        where[s.key] = slot;
        key_of[slot] = s.key;
        p.on_insert(item_id{slot}, ctx);
    }
    return hits;
}

template <class Expert>
double full_hit_ratio(std::size_t capacity, const std::vector<reference_step>& trace,
                      std::unordered_map<std::uint64_t, std::uint64_t>* key_hits = nullptr) {
    Expert alone(capacity);
    return static_cast<double>(replay(alone, trace, key_hits)) / static_cast<double>(trace.size());
}

using three = best_of_shadows<lru, lrfu, superseded_lru>;

}  // namespace

TEST_CASE("sampled shadows at rate 1 hit exactly where each expert alone at full size hits",
          "[eviction][best_of_shadows][sampled]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const auto trace = zipf_trace(200'000, 20'000, 0.8, seed);
    const std::size_t capacity = 1500;
    // Every key sampled, no halving of the counts: the shadows' totals are
    // their experts' hits.
    for (const bool leader_only : {false, true}) {
        three p(capacity, {.shadow_items = capacity, .sample_rate = 1.0, .window = 1e9, .leader_only = leader_only});
        REQUIRE(p.sample_rate() == 1.0);
        REQUIRE(p.shadow_capacity() == capacity);
        (void)replay(p, trace);
        REQUIRE(p.shadow_references() == trace.size());
        const auto hits = p.shadow_total_hits();
        lru a(capacity);
        lrfu b(capacity);
        superseded_lru c(capacity);
        REQUIRE(hits[0] == replay(a, trace));
        REQUIRE(hits[1] == replay(b, trace));
        REQUIRE(hits[2] == replay(c, trace));
        REQUIRE(hits[0] != hits[1]);  // the experts differ on this trace
    }
}

// The bound. A shadow at rate R sees the references of the keys whose hash
// falls below R, each key in or out independently of its popularity, and
// its hit ratio is hits / references over those keys: a ratio estimator of
// the full cache's hit ratio h over N references. Were each sampled key hit
// in the shadow as often as in the full cache (SHARDS: the shadow at R x C
// items sees each reference's reuse distance scaled by R), its variance is,
// to first order, (1 - R) / R x sum over keys of (hits_k - h refs_k)^2 / N^2,
// computed here from the full run (sigma_sample). The shadow's distances are
// R x d only on average: a binomial count of sampled keys, off by about
// sqrt(R C) at the capacity boundary, so the shadow behaves as a full cache
// of C x (1 +- z / sqrt(R C)) items; the hit ratio of the full cache at
// C x (1 -+ 3 / sqrt(R C)) bounds that blur (blur). The test allows
// 4 sigma_sample + blur.
TEST_CASE("a sampled shadow's hit ratio is its expert's at full size within the sample's error",
          "[eviction][best_of_shadows][sampled]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const double alpha = GENERATE(0.5, 0.7);
    const double rate = GENERATE(0.25, 0.5);
    const std::size_t capacity = 4000;
    const std::uint64_t universe = 40'000;
    const auto trace = zipf_trace(300'000, universe, alpha, seed);
    three p(capacity, {.shadow_items = capacity, .sample_rate = rate, .window = 1e9, .leader_only = true});
    REQUIRE(p.sample_rate() == Approx(rate));
    REQUIRE(p.shadow_capacity() == static_cast<std::size_t>(std::llround(rate * capacity)));
    (void)replay(p, trace);
    const auto hits = p.shadow_total_hits();
    const double references = static_cast<double>(p.shadow_references());
    // The sample is about R of the references.
    REQUIRE(references > 0.5 * rate * static_cast<double>(trace.size()));

    std::unordered_map<std::uint64_t, std::uint64_t> refs;
    for (const reference_step& s : trace) ++refs[s.key];
    const double n = static_cast<double>(trace.size());
    const double delta = 3.0 / std::sqrt(rate * static_cast<double>(capacity));
    const auto lower = static_cast<std::size_t>(static_cast<double>(capacity) * (1.0 - delta));
    const auto upper = static_cast<std::size_t>(static_cast<double>(capacity) * (1.0 + delta));
    const auto check = [&]<class Expert>(std::size_t i) {
        std::unordered_map<std::uint64_t, std::uint64_t> key_hits;
        const double h = full_hit_ratio<Expert>(capacity, trace, &key_hits);
        double spread = 0.0;
        for (const auto& [key, r] : refs) {
            const double e = static_cast<double>(key_hits[key]) - h * static_cast<double>(r);
            spread += e * e;
        }
        const double sigma = std::sqrt((1.0 - rate) / rate * spread) / n;
        const double blur =
            std::max(h - full_hit_ratio<Expert>(lower, trace), full_hit_ratio<Expert>(upper, trace) - h);
        const double sampled = static_cast<double>(hits[i]) / references;
        INFO("expert " << i << " seed " << seed << " alpha " << alpha << " rate " << rate << ": full " << h
                       << ", sampled " << sampled << ", sigma " << sigma << ", blur " << blur);
        REQUIRE(blur >= 0.0);
        REQUIRE(std::abs(sampled - h) <= 4.0 * sigma + blur);
        // And the bound is tighter than the hit ratio itself: the test can fail.
        REQUIRE(4.0 * sigma + blur < 0.5 * h);
    };
    check.operator()<lru>(0);
    check.operator()<lrfu>(1);
    check.operator()<superseded_lru>(2);
}

TEST_CASE("leader_only: only the followed expert keeps state, and a switch to LRU rebuilds LRU's order exactly",
          "[eviction][best_of_shadows][leader_only]") {
    // LRFU (32 capacities) first, so the rebuild of LRU is what makes the
    // victims; phases of frequent keys that go out of use make LRU lead.
    using lrfu_or_lru = best_of_shadows<basic_lrfu<32>, lru>;
    const std::size_t capacity = 100;
    lrfu_or_lru p(capacity, {.window = 1.0, .switch_sigmas = 1.0, .leader_only = true});
    REQUIRE(p.leader_only());
    // The LRU a full-state expert would be: every operation, and the
    // followed expert's victims erased.
    lru shadow_lru(capacity);
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(capacity);
    std::uint32_t used = 0;
    timestamp now = 0;
    std::size_t compared = 0;
    std::mt19937_64 rng(7);
    for (std::size_t ph = 0; ph < 12; ++ph) {
        for (std::size_t i = 0; i < 6000; ++i) {
            const std::uint64_t k = ph * 1000 + (rng() % 3 == 0 ? 100 + rng() % 400 : rng() % 80);
            access_context ctx;
            ctx.now = ++now;
            ctx.key = k;
            if (auto it = where.find(k); it != where.end()) {
                p.on_access(item_id{it->second}, ctx);
                shadow_lru.on_access(item_id{it->second}, ctx);
                continue;
            }
            p.on_miss(ctx);
            std::uint32_t slot;
            if (used < capacity) {
                slot = used++;
            } else {
                const bool lru_led = p.followed() == 1;
                slot = p.pop_victim(now)->value;
                if (lru_led) {
                    REQUIRE(shadow_lru.pop_victim(now)->value == slot);
                    ++compared;
                } else {
                    shadow_lru.on_erase(item_id{slot});
                }
                where.erase(key_of[slot]);
            }
            where[k] = slot;
            key_of[slot] = k;
            p.on_insert(item_id{slot}, ctx);
            shadow_lru.on_insert(item_id{slot}, ctx);
        }
    }
    REQUIRE(p.switches() > 0);
    REQUIRE(compared > 1000);
}

TEST_CASE(
    "leader_only under random operations, holds, erases and session ends, switching often: every victim "
    "cached and unheld",
    "[eviction][best_of_shadows][leader_only]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const double rate = GENERATE(1.0, 0.25);
    const std::size_t capacity = 97;
    adaptive_kv::config_type config;
    config.sample_rate = rate;
    config.window = 1.0;
    config.switch_sigmas = 0.0;
    config.leader_only = true;
    adaptive_kv p(capacity, config);
    const auto victims = drive(p, {.capacity = capacity,
                                   .operations = 100'000,
                                   .seed = seed,
                                   .key_universe = 4 * capacity + 8,
                                   .sessions = 7,
                                   .foreign_every = 8});
    REQUIRE(p.counters().evictions == victims.size());
    REQUIRE(victims.size() > 1000);
    INFO("seed " << seed << " rate " << rate);
    REQUIRE(p.switches() > 2);
}

TEST_CASE("leader_only makes the full mode's victims while it follows one expert",
          "[eviction][best_of_shadows][leader_only]") {
    // A choice that never moves (an unreachable threshold): the followed
    // expert sees the same calls in both modes.
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t capacity = 97;
    three full(capacity, {.sample_rate = 0.5, .switch_sigmas = 1e300, .leader_only = false});
    three leader(capacity, {.sample_rate = 0.5, .switch_sigmas = 1e300, .leader_only = true});
    const driver_options opt{.capacity = capacity,
                             .operations = 50'000,
                             .seed = seed,
                             .key_universe = 4 * capacity + 8,
                             .sessions = 7,
                             .foreign_every = 8};
    const auto a = drive(full, opt);
    const auto b = drive(leader, opt);
    REQUIRE(a.size() > 1000);
    REQUIRE(a == b);
    REQUIRE(full.switches() == 0);
    REQUIRE(leader.switches() == 0);
}

TEST_CASE("best_of_shadows refuses a sample rate outside 0 to 1 and names the setting and the fix",
          "[eviction][best_of_shadows][errors]") {
    using Catch::Matchers::Contains;
    for (const double bad : {0.0, -0.5, 1.5, std::nan("")}) {
        INFO(bad);
        REQUIRE_THROWS_WITH(three(8, {.sample_rate = bad}),
                            Contains("best_of_shadows: sample_rate") && Contains("must be in (0, 1]"));
    }
    REQUIRE(three(100'000, {.shadow_items = 4096, .sample_rate = 0.01}).sample_rate() == Approx(0.01));
    REQUIRE(three(100'000, {.shadow_items = 4096, .sample_rate = 0.01}).shadow_capacity() == 1000);
    REQUIRE(three(1000, {.shadow_items = 4096, .sample_rate = 0.05}).shadow_capacity() == 50);
}

namespace {

// LRFU restated over each key's references, for a cache whose half-life
// changes at switches: each reference is (T, halvings per reference of the
// LRFU in force when it was made), and the value at an item's last reference
// is summed recursively from its base, crf <- 1 + crf x 2^(-h x (t - t_prev))
// with the h of the newer reference. At a switch every value (a ghost's too)
// becomes a base: its value decayed at the old h to the switch's T. A victim
// has the lowest log2(crf) + h_now x T_last; equal values (within 1e-9) go
// to the earliest placed. A victim's history goes to a ghost deque of
// `ghost_capacity` keys.
struct switching_lrfu_model {
    struct entry {
        double base = 0.0;  // value at base_t (0: none)
        std::uint64_t base_t = 0;
        std::vector<std::pair<std::uint64_t, double>> refs;  // after base_t
        std::uint64_t stamp = 0;
    };
    std::unordered_map<std::uint32_t, entry> items;  // slot -> entry
    std::unordered_map<std::uint32_t, std::uint64_t> key_of;
    std::deque<std::pair<std::uint64_t, entry>> ghosts;
    std::size_t ghost_capacity;
    std::uint64_t references = 0, step_start = 0, clock = 0;
    timestamp step_now = 0;
    bool started = false;

    explicit switching_lrfu_model(std::size_t ghosts_kept) : ghost_capacity(ghosts_kept) {}

    std::uint64_t reference(timestamp now) {
        if (!started || now != step_now) {
            started = true;
            step_now = now;
            step_start = references;
        }
        ++references;
        return step_start;
    }
    static std::uint64_t last(const entry& e) { return e.refs.empty() ? e.base_t : e.refs.back().first; }
    static double crf(const entry& e) {
        double c = e.base;
        std::uint64_t prev = e.base_t;
        for (const auto& [t, h] : e.refs) {
            c = 1.0 + c * std::exp2(-h * static_cast<double>(t - prev));
            prev = t;
        }
        return c;
    }
    // A switch away from the LRFU whose rate was h_old.
    void rebase(double h_old) {
        const auto at_switch = [&](entry& e) {
            e.base = crf(e) * std::exp2(-h_old * static_cast<double>(step_start - last(e)));
            e.base_t = step_start;
            e.refs.clear();
        };
        for (auto& [slot, e] : items) at_switch(e);
        for (auto& [key, e] : ghosts) at_switch(e);
    }
    void insert(std::uint32_t slot, std::uint64_t key, timestamp now, double h) {
        entry e;
        for (auto it = ghosts.begin(); it != ghosts.end(); ++it)
            if (it->first == key) {
                e = it->second;
                ghosts.erase(it);
                break;
            }
        e.refs.emplace_back(reference(now), h);
        e.stamp = clock++;
        items[slot] = std::move(e);
        key_of[slot] = key;
    }
    void access(std::uint32_t slot, timestamp now, double h) {
        entry& e = items.at(slot);
        e.refs.emplace_back(reference(now), h);
        e.stamp = clock++;
    }
    std::uint32_t pop(double h_now) {
        std::uint32_t victim = 0;
        double best = 0.0;
        std::uint64_t best_stamp = 0;
        bool any = false;
        for (const auto& [slot, e] : items) {
            const double s = std::log2(crf(e)) + h_now * static_cast<double>(last(e));
            if (!any || s < best - 1e-9 || (s <= best + 1e-9 && e.stamp < best_stamp)) {
                victim = slot;
                best = s;
                best_stamp = e.stamp;
                any = true;
            }
        }
        std::erase_if(ghosts, [&](const auto& g) { return g.first == key_of[victim]; });
        ghosts.emplace_back(key_of[victim], items[victim]);
        if (ghosts.size() > ghost_capacity) ghosts.pop_front();
        items.erase(victim);
        return victim;
    }
};

}  // namespace

TEST_CASE(
    "leader_only: a switch from one LRFU to another carries values, times and ghosts, as a naive LRFU "
    "whose half-life changes at each switch",
    "[eviction][best_of_shadows][leader_only][carry]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    using two_lrfus = best_of_shadows<basic_lrfu<1>, basic_lrfu<32>>;
    const std::size_t capacity = 64;
    two_lrfus p(capacity, {.window = 1.0, .switch_sigmas = 0.5, .leader_only = true});
    const double h[2] = {1.0 / (1.0 * capacity), 1.0 / (32.0 * capacity)};  // halvings per reference
    switching_lrfu_model model(4 * capacity);
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(capacity);
    std::uint32_t used = 0;
    timestamp now = 0;
    std::mt19937_64 rng(seed);
    std::size_t compared = 0, after_switch = 0;
    for (std::size_t ph = 0; ph < 16; ++ph) {
        for (std::size_t i = 0; i < 2500; ++i) {
            // Phases alternate a hot set under a scan (frequency wins) and a
            // drifting working set (recency wins); a few keys per step.
            const std::uint64_t k =
                ph % 2 == 0 ? (rng() % 2 == 0 ? rng() % 40 : 1000 + rng() % 100000) : 500 + (i / 40) * 7 + rng() % 60;
            if (rng() % 3 != 0) ++now;
            const double h_now = h[p.followed()];
            access_context ctx;
            ctx.now = now;
            ctx.key = k;
            const std::size_t leader = p.followed();
            if (auto it = where.find(k); it != where.end()) {
                p.on_access(item_id{it->second}, ctx);
                model.access(it->second, now, h_now);
                if (p.followed() != leader) model.rebase(h_now);
                continue;
            }
            p.on_miss(ctx);
            std::uint32_t slot;
            if (used < capacity) {
                slot = used++;
            } else {
                slot = p.pop_victim(now)->value;
                REQUIRE(model.pop(h_now) == slot);
                ++compared;
                if (p.switches() > 0) ++after_switch;
                where.erase(key_of[slot]);
            }
            where[k] = slot;
            key_of[slot] = k;
            p.on_insert(item_id{slot}, ctx);
            model.insert(slot, k, now, h_now);
            if (p.followed() != leader) model.rebase(h_now);
        }
    }
    INFO("seed " << seed << ", switches " << p.switches());
    REQUIRE(p.switches() >= 2);
    REQUIRE(after_switch > 1000);
    REQUIRE(compared > 2000);
}

TEST_CASE(
    "leader_only: a switch to session_aware_lru carries its shadow's session rhythms, each session's "
    "mean gap as a naive running mean over all its requests, and the margin of session_aware_lru alone, "
    "with a waiting queue's holds let go later",
    "[eviction][best_of_shadows][leader_only][carry]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    using lru_or_sessions = best_of_shadows<lru, session_aware_lru>;
    const std::size_t capacity = 80;
    // Rate 1: the shadow sees every request, so what it carries is the whole truth.
    lru_or_sessions p(capacity, {.shadow_items = capacity, .window = 1.0, .switch_sigmas = 0.0, .leader_only = true});
    const double weight = session_aware_lru::config_type{}.gap_weight;
    struct naive_session {
        timestamp last = 0;
        double mean = 0.0;
        bool has_gap = false;
    };
    std::unordered_map<std::uint64_t, naive_session> naive;
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(capacity);
    std::uint32_t used = 0;
    // session_aware_lru alone over the same requests in a flat cache of the
    // same size: what the rate-1 shadow is. Its margin is what its tuner
    // learned from those requests; the rebuild's replay of the cached items
    // is no request and must not move it (it did: each replayed insert of a
    // key the shadow had evicted read as that block coming back).
    session_aware_lru alone(capacity);
    std::unordered_map<std::uint64_t, std::uint32_t> alone_where;
    std::vector<std::uint64_t> alone_key_of(capacity);
    std::uint32_t alone_used = 0;
    std::unordered_set<std::uint64_t> alone_held;
    std::size_t margins_moved = 0;
    timestamp now = 0;
    std::mt19937_64 rng(seed);
    std::size_t checks = 0, entered = 0;
    std::size_t was = p.followed();
    // One reference to a flat cache of `capacity` slots under `policy`:
    // an access if cached, else a miss, a victim when full, an insert.
    const auto reference_flat = [&](auto& policy, std::unordered_map<std::uint64_t, std::uint32_t>& at,
                                    std::vector<std::uint64_t>& key_in, std::uint32_t& filled,
                                    const access_context& ctx) {
        if (auto w = at.find(ctx.key); w != at.end()) {
            policy.on_access(item_id{w->second}, ctx);
            return;
        }
        policy.on_miss(ctx);
        std::uint32_t slot;
        if (filled < capacity) {
            slot = filled++;
        } else {
            slot = policy.pop_victim(ctx.now)->value;
            at.erase(key_in[slot]);
        }
        at[ctx.key] = slot;
        key_in[slot] = ctx.key;
        policy.on_insert(item_id{slot}, ctx);
    };
    // A waiting queue's hold: before each request, one cached block is held
    // (a queued request reads it) and let go before the next, released at
    // that later time with its last access's context, as tiered_cache's
    // queue does. A release is no request: no session's rhythm may move
    // (a rebuild once replayed such a block as read by its last reader at
    // the release's time).
    std::unordered_map<std::uint64_t, std::uint64_t> last_reader;  // key -> session
    std::optional<std::uint64_t> queued_key;
    for (std::size_t r = 0; r < 6000; ++r) {
        if (queued_key) {
            access_context let_go;
            let_go.now = now + 1;
            let_go.key = *queued_key;
            let_go.session = session_id{last_reader[*queued_key]};
            p.on_release(item_id{where.at(*queued_key)}, let_go);
            if (auto w = alone_where.find(*queued_key); w != alone_where.end() && alone_held.erase(*queued_key))
                alone.on_release(item_id{w->second}, let_go);
            queued_key.reset();
        }
        if (used == capacity && rng() % 2 == 0) {
            queued_key = key_of[rng() % capacity];
            p.on_hold(item_id{where.at(*queued_key)});
            if (auto w = alone_where.find(*queued_key); w != alone_where.end()) {
                alone.on_hold(item_id{w->second});
                alone_held.insert(*queued_key);
            }
        }
        // A request: a session (some come back often, some rarely) reads a
        // few blocks of its own and one shared block, all at one time.
        const std::uint64_t session = rng() % 4 == 0 ? 100 + rng() % 60 : rng() % 12;
        now += 1 + rng() % 3;
        auto [it, fresh] = naive.try_emplace(session);
        if (fresh) {
            it->second.last = now;
        } else {
            const double gap = static_cast<double>(now - it->second.last);
            it->second.mean = it->second.has_gap ? it->second.mean + weight * (gap - it->second.mean) : gap;
            it->second.has_gap = true;
            it->second.last = now;
        }
        const std::size_t blocks = 1 + rng() % 4;
        for (std::size_t b = 0; b <= blocks; ++b) {
            const std::uint64_t k = b == blocks ? 7 : session * 1000 + rng() % 8;
            access_context ctx;
            ctx.now = now;
            ctx.key = k;
            ctx.session = session_id{session};
            last_reader[k] = session;
            reference_flat(alone, alone_where, alone_key_of, alone_used, ctx);
            reference_flat(p, where, key_of, used, ctx);
        }
        if (p.followed() == 1 && was != 1) {
            ++entered;
            REQUIRE(p.expert<1>().far_factor() == alone.far_factor());
            REQUIRE(p.expert<1>().margin_tuner().wins() == alone.margin_tuner().wins());
            REQUIRE(p.expert<1>().margin_tuner().losses() == alone.margin_tuner().losses());
            if (alone.far_factor() != session_aware_lru::config_type{}.far_factor) ++margins_moved;
            // Just rebuilt: every session's rhythm is the naive one.
            for (const auto& [s, n] : naive) {
                INFO("session " << s);
                REQUIRE(p.expert<1>().mean_gap(session_id{s}) == Approx(n.has_gap ? n.mean : 0.0).epsilon(1e-12));
                ++checks;
            }
        }
        was = p.followed();
    }
    INFO("seed " << seed << ", switches " << p.switches());
    REQUIRE(entered >= 1);
    REQUIRE(checks > 50);
    REQUIRE(margins_moved >= 1);  // the margin had learned something by a switch
}

TEST_CASE("leader_only: renumbering the placement stamps changes no victim",
          "[eviction][best_of_shadows][leader_only]") {
    const std::uint64_t seed = GENERATE(1u, 2u);
    const std::size_t capacity = 97;
    adaptive_kv::config_type config;
    config.sample_rate = 0.5;
    config.window = 1.0;
    config.switch_sigmas = 0.0;
    config.leader_only = true;
    adaptive_kv plain(capacity, config), renumbered(capacity, config);
    const auto trace = zipf_trace(60'000, 600, 0.7, seed);
    std::unordered_map<std::uint64_t, std::uint32_t> where;
    std::vector<std::uint64_t> key_of(capacity);
    std::uint32_t used = 0;
    timestamp now = 0;
    std::size_t victims = 0;
    for (const reference_step& s : trace) {
        access_context ctx;
        ctx.now = ++now;
        ctx.key = s.key;
        ctx.session = session_id{s.session};
        if (now % 997 == 0) renumbered.renumber_stamps();
        if (auto it = where.find(s.key); it != where.end()) {
            plain.on_access(item_id{it->second}, ctx);
            renumbered.on_access(item_id{it->second}, ctx);
            continue;
        }
        plain.on_miss(ctx);
        renumbered.on_miss(ctx);
        std::uint32_t slot;
        if (used < capacity) {
            slot = used++;
        } else {
            slot = plain.pop_victim(now)->value;
            REQUIRE(renumbered.pop_victim(now)->value == slot);
            ++victims;
            where.erase(key_of[slot]);
        }
        where[s.key] = slot;
        key_of[slot] = s.key;
        plain.on_insert(item_id{slot}, ctx);
        renumbered.on_insert(item_id{slot}, ctx);
    }
    REQUIRE(victims > 10'000);
    REQUIRE(plain.switches() > 2);
    REQUIRE(plain.switches() == renumbered.switches());
}

TEST_CASE(
    "lrfu::adopt_history refuses an lrfu that holds items or another capacity, naming both, and changes "
    "nothing",
    "[eviction][lrfu][carry]") {
    using Catch::Matchers::Contains;
    basic_lrfu<2> from(8);
    access_context ctx;
    ctx.now = 1;
    ctx.key = 11;
    from.on_insert(item_id{0}, ctx);
    basic_lrfu<32> other_capacity(9);
    REQUIRE_THROWS_WITH(other_capacity.adopt_history(from), Contains("lrfu::adopt_history") && Contains("capacity 9") &&
                                                                Contains("capacity 8") && Contains("same capacity"));
    REQUIRE(other_capacity.size() == 0);
    basic_lrfu<32> holding(8);
    ctx.key = 12;
    holding.on_insert(item_id{3}, ctx);
    REQUIRE_THROWS_WITH(holding.adopt_history(from), Contains("holds 1 items"));
    REQUIRE(holding.size() == 1);
    REQUIRE(holding.contains(item_id{3}));
    REQUIRE(!holding.contains(item_id{0}));
    basic_lrfu<32> empty(8);
    empty.adopt_history(from);
    REQUIRE(empty.contains(item_id{0}));
    REQUIRE(empty.value(item_id{0}) == from.value(item_id{0}));
    REQUIRE(empty.pop_victim(2)->value == 0u);
}
