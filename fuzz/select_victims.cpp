// Fuzzes seed 002's batch API, victim_batch_selector<Rule>::select_victims,
// for every rule (lru, lfu, fifo, qos_aware, predictive), with arbitrary
// candidate lists: duplicate ids (the all-ones id too, which the selector's
// id table tracks apart), pinned candidates, NaN / infinite / negative /
// subnormal lifetimes, completion ratios of huge lengths, ties in every
// field, thousands of candidates, up to 65536 blocks each, and requirements
// of 0, exactly all, one more than all, or near SIZE_MAX. Interleaved with
// update_access and forget, which feed the metrics.
//
// Checked after every call:
// - select_victims returns what the naive reference returns
//   (tests/support/naive_select_victims.hpp: sort everything, take the
//   shortest prefix), the blocks freed, and the shortfall;
// - a list with a repeated id throws usage_error naming the id and both
//   positions, and changes nothing (metrics and per-sequence records);
// - the metrics match a naive model of seed 002's definitions (selections,
//   evictions, re-prefills and their rate; Jain's fairness up to rounding,
//   since the sums run in another order), and so do last_access and
//   access_count of every sequence seen.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <kvpolicy/eviction/select_victims.hpp>

#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "support/naive_select_victims.hpp"

using namespace kvpolicy;
using kvpolicy::fuzzing::fuzz_input;
using kvpolicy::fuzzing::require;

namespace {

constexpr std::size_t max_blocks_per_candidate = 1 << 16;

// Only a candidate's block count is read, so every candidate views a prefix
// of one shared table.
const std::vector<block_id>& block_table() {
    static const std::vector<block_id> table = [] {
        std::vector<block_id> t(max_blocks_per_candidate);
        for (std::uint32_t i = 0; i < t.size(); ++i) t[i] = block_id{i};
        return t;
    }();
    return table;
}

// Seed 002's metrics, written out from their definitions.
struct naive_metrics {
    struct record {
        std::uint64_t requests = 0, re_prefills = 0;
        timestamp last_access = 0;
        bool evicted = false;
    };
    std::map<std::uint64_t, record> records;
    std::vector<double> retired;  // service of forgotten sequences that were requested
    std::uint64_t selections = 0, total_evictions = 0, re_prefills = 0;

    static double service(const record& r) {
        return static_cast<double>(r.requests - r.re_prefills) / static_cast<double>(r.requests);
    }
    void update_access(std::uint64_t id, timestamp now) {
        record& r = records[id];
        ++r.requests;
        r.last_access = now;
        if (r.evicted) {
            r.evicted = false;
            ++r.re_prefills;
            ++re_prefills;
        }
    }
    void forget(std::uint64_t id) {
        const auto it = records.find(id);
        if (it == records.end()) return;
        if (it->second.requests > 0) retired.push_back(service(it->second));
        records.erase(it);
    }
    [[nodiscard]] double fairness() const {
        std::vector<double> x = retired;
        for (const auto& [id, r] : records)
            if (r.requests > 0) x.push_back(service(r));
        double sum = 0, sum_sq = 0;
        for (const double v : x) {
            sum += v;
            sum_sq += v * v;
        }
        return sum_sq == 0.0 ? 1.0 : sum * sum / (static_cast<double>(x.size()) * sum_sq);
    }
};

template <class Rule>
void check_metrics(const victim_batch_selector<Rule>& selector, const naive_metrics& want,
                   const std::set<std::uint64_t>& ids_seen) {
    const victim_batch_metrics m = selector.metrics();
    require(m.selections == want.selections, "metrics: selections");
    require(m.total_evictions == want.total_evictions, "metrics: total_evictions");
    require(m.re_prefills == want.re_prefills, "metrics: re_prefills");
    const double rate = want.total_evictions == 0
                            ? 0.0
                            : static_cast<double>(want.re_prefills) / static_cast<double>(want.total_evictions);
    require(m.re_prefill_rate == rate, "metrics: re_prefill_rate = re-prefills / evictions");
    const double fairness = want.fairness();
    require(std::abs(m.fairness - fairness) <= 1e-9 * std::max(1.0, std::abs(fairness)), "metrics: Jain's fairness");
    require(m.fairness > 0.0 && m.fairness <= 1.0 + 1e-12, "metrics: fairness in (0, 1]");
    for (const std::uint64_t id : ids_seen) {
        const auto it = want.records.find(id);
        const bool requested = it != want.records.end() && it->second.requests > 0;
        require(selector.access_count(id) == (requested ? it->second.requests : 0), "access_count of a sequence");
        const std::optional<timestamp> last = selector.last_access(id);
        require(last.has_value() == requested && (!requested || *last == it->second.last_access),
                "last_access of a sequence");
    }
}

double lifetime(fuzz_input& in) {
    switch (in.choose(4)) {
        case 0:
            return std::numeric_limits<double>::quiet_NaN();  // unknown, the default
        case 1:
            return static_cast<double>(in.choose(8));  // ties
        case 2:
            return in.any_double();
        default: {
            constexpr double specials[] = {std::numeric_limits<double>::infinity(),
                                           -std::numeric_limits<double>::infinity(),
                                           -0.0,
                                           0.0,
                                           -std::numeric_limits<double>::quiet_NaN(),
                                           std::numeric_limits<double>::denorm_min(),
                                           std::numeric_limits<double>::max(),
                                           -1.0};
            return specials[in.choose(std::size(specials))];
        }
    }
}

std::size_t count_of(fuzz_input& in, std::size_t small, std::size_t large) {
    switch (in.choose(4)) {
        case 0:
            return in.choose(4);
        case 1:
            return in.choose(small + 1);
        case 2:
            return in.choose(small * 8 + 1);
        default:
            return in.choose(large + 1);
    }
}

// One select_victims call: a candidate list decoded from the input, checked
// against the reference; duplicates checked for their error.
template <class Rule>
void one_selection(fuzz_input& in, victim_batch_selector<Rule>& selector, naive_metrics& metrics,
                   std::set<std::uint64_t>& ids_seen) {
    const std::size_t n = count_of(in, 32, 4096);
    // Distinct ids from a stride (the common case), or each chosen freely
    // (duplicates likely: the error path).
    const bool free_ids = in.choose(4) == 0;
    const std::uint64_t base = in.choose(3) == 0 ? in.u64() : in.choose(16);
    const std::uint64_t stride = 1 + in.choose(4);
    std::vector<eviction_candidate> cs(n);
    std::size_t unpinned_blocks = 0;
    for (std::size_t i = 0; i < n; ++i) {
        eviction_candidate& c = cs[i];
        if (free_ids) {
            switch (in.choose(3)) {
                case 0:
                    c.sequence_id = in.choose(8);
                    break;
                case 1:
                    c.sequence_id = ~std::uint64_t{0} - in.choose(3);
                    break;  // the table's empty marker
                default:
                    c.sequence_id = in.u64();
                    break;
            }
        } else {
            c.sequence_id = base + stride * i;  // wraps past all-ones: still distinct
        }
        c.block_ids = std::span<const block_id>(block_table().data(), count_of(in, 8, max_blocks_per_candidate));
        c.last_access_time = in.flag() ? in.choose(8) : in.u64();
        c.access_count = in.flag() ? in.choose(4) : in.u64();
        c.priority = in.flag() ? static_cast<std::int32_t>(in.choose(3)) - 1 : static_cast<std::int32_t>(in.u32());
        c.pinned = in.choose(4) == 0;
        c.estimated_lifetime = lifetime(in);
        switch (in.choose(3)) {
            case 0:
                break;  // unknown completion
            case 1:
                c.max_length = in.choose(16);
                c.sequence_length = in.choose(c.max_length + 2);
                break;
            default:
                c.max_length = in.u64();
                c.sequence_length = in.u64();
                break;
        }
        if (!c.pinned) unpinned_blocks += c.block_ids.size();
    }
    std::size_t required = 0;
    switch (in.choose(6)) {
        case 0:
            required = 0;
            break;
        case 1:
            required = in.choose(unpinned_blocks + 2);
            break;
        case 2:
            required = unpinned_blocks;
            break;
        case 3:
            required = unpinned_blocks + 1;
            break;
        case 4:
            required = std::numeric_limits<std::size_t>::max() - in.choose(4);
            break;
        default:
            required = static_cast<std::size_t>(in.u64());
            break;
    }

    // The first repeated id, as the selector must name it: the earliest
    // second occurrence, and where that id first appeared.
    std::optional<std::pair<std::size_t, std::size_t>> duplicate;
    {
        std::map<std::uint64_t, std::size_t> first_at;
        for (std::size_t i = 0; i < n && !duplicate; ++i) {
            const auto [it, fresh] = first_at.emplace(cs[i].sequence_id, i);
            if (!fresh) duplicate = std::pair{it->second, i};
        }
    }
    for (const eviction_candidate& c : cs) ids_seen.insert(c.sequence_id);

    if (duplicate) {
        const auto [first, second] = *duplicate;
        const std::string expected = "select_victims: sequence " + std::to_string(cs[second].sequence_id) +
                                     " appears twice among the candidates (at " + std::to_string(first) + " and " +
                                     std::to_string(second) + "); pass each sequence once";
        bool thrown = false;
        try {
            (void)selector.select_victims(cs, required);
        } catch (const usage_error& e) {
            thrown = true;
            require(e.what() == expected, "a duplicate id: usage_error naming the id and both positions");
        }
        require(thrown, "a duplicate id throws usage_error");
        check_metrics(selector, metrics, ids_seen);  // nothing recorded
        return;
    }

    const victim_batch got = selector.select_victims(cs, required);
    const kvpolicy::testing::naive_result want = kvpolicy::testing::naive_select<Rule>(cs, required);
    require(got.evicted == want.evicted, "select_victims: the reference's victims, in order");
    require(got.freed_blocks == want.freed, "select_victims: blocks freed");
    require(got.shortfall == (want.freed < required ? required - want.freed : 0), "select_victims: shortfall");
    if (got.shortfall > 0) require(got.freed_blocks == unpinned_blocks, "a shortfall evicts every unpinned candidate");
    ++metrics.selections;
    metrics.total_evictions += got.evicted.size();
    for (const std::uint64_t id : got.evicted) metrics.records[id].evicted = true;
    check_metrics(selector, metrics, ids_seen);
}

template <class Rule>
void run(fuzz_input& in) {
    victim_batch_selector<Rule> selector;
    naive_metrics metrics;
    std::set<std::uint64_t> ids_seen;
    // A sequence the input names: one seen in a candidate list, or any.
    auto some_id = [&] {
        if (ids_seen.empty() || in.choose(8) == 0) return in.choose(16);
        auto it = ids_seen.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(in.choose(ids_seen.size())));
        return *it;
    };
    while (!in.exhausted()) {
        switch (in.choose(8)) {
            case 0: {
                const std::uint64_t id = some_id();
                const timestamp now = in.flag() ? in.choose(64) : in.u64();
                selector.update_access(id, now);
                metrics.update_access(id, now);
                ids_seen.insert(id);
                check_metrics(selector, metrics, ids_seen);
                break;
            }
            case 1: {
                const std::uint64_t id = some_id();
                selector.forget(id);
                metrics.forget(id);
                check_metrics(selector, metrics, ids_seen);
                break;
            }
            default:
                one_selection(in, selector, metrics, ids_seen);
                break;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz_input in(data, size);
    switch (in.choose(5)) {
        case 0:
            run<lru>(in);
            break;
        case 1:
            run<lfu>(in);
            break;
        case 2:
            run<fifo>(in);
            break;
        case 3:
            run<qos_aware>(in);
            break;
        default:
            run<predictive>(in);
            break;
    }
    return 0;
}
