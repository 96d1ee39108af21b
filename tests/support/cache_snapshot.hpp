// Everything observable about a tiered_cache, as one string, so that "a call
// that threw changed nothing" is one comparison: every slot of both tiers
// (state, key, holders, pin, metadata), the free and evictable counts, the
// step flag, the holds of the sessions named, and every counter. The order
// inside a policy is not observable without popping victims; the evictable
// count and the slots that feed it are.
#pragma once

#include <span>
#include <sstream>
#include <string>

#include <kvpolicy/cache/tiered_cache.hpp>

namespace kvpolicy::testing {

namespace detail {

template <class Pool>
void append_pool(std::ostringstream& o, const Pool& p) {
    o << p.num_free_blocks() << '/' << p.num_cached_blocks() << '/' << p.num_evictable_blocks() << ':';
    for (std::uint32_t i = 0; i < p.capacity(); ++i) {
        const block_id b{i};
        const auto st = p.state(b);
        o << static_cast<int>(st);
        if (st == Pool::slot_state::cached) {
            const block_meta& m = p.meta(b);
            o << '(' << p.key(b) << ',' << p.ref_count(b) << ',' << p.is_pinned(b) << ',' << m.parent_key << ','
              << m.owner.value << ',' << m.chunk.value << ',' << m.layer.value << ')';
        }
        o << ' ';
    }
}

}  // namespace detail

template <class Cache>
[[nodiscard]] std::string cache_snapshot(const Cache& c, std::span<const session_id> sessions = {}) {
    std::ostringstream o;
    o << "step " << c.in_step() << "; gpu ";
    detail::append_pool(o, c.gpu());
    if (c.has_cpu_tier()) {
        o << "; cpu ";
        detail::append_pool(o, c.cpu());
    }
    o << "; held";
    for (const session_id s : sessions) {
        o << ' ' << s.value << ':';
        for (const block_id b : c.held_by(s)) o << b.value << ',';
    }
    const cache_metrics m = c.metrics();
    o << "; metrics " << m.gpu.hit_blocks << ' ' << m.gpu.hit_tokens << ' ' << m.gpu.evictions << ' ' << m.gpu.used
      << ' ' << m.cpu.hit_blocks << ' ' << m.cpu.hit_tokens << ' ' << m.cpu.evictions << ' ' << m.cpu.used << ' '
      << m.requests << ' ' << m.lookup_blocks << ' ' << m.miss_blocks << ' ' << m.miss_tokens << ' ' << m.swap_in_items
      << ' ' << m.swap_in_bytes << ' ' << m.swap_out_items << ' ' << m.swap_out_bytes << ' ' << m.dropped_items << ' '
      << m.failed_transfers << ' ' << m.recompute_items << ' ' << m.dropped_tokens << ' ' << m.recomputed_blocks << ' '
      << m.recomputed_tokens << ' ' << m.re_prefill_rate << ' ' << m.fairness << ' ' << m.eviction_latency.samples
      << ' ' << m.remote_staged_blocks << ' ' << m.remote_write_backs;
    return o.str();
}

}  // namespace kvpolicy::testing
