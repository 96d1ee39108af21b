// fault_injecting_engine: host_memcpy_engine with failures on demand.
//
// A failed op reports `failed` and scribbles over what it would have
// written (both blocks of an exchange), as a copy cut off half-way would:
// a cache that trusted a failed copy's output then shows a wrong checksum.
// Ops fail when their index in the batch is in `fail_next` (chosen
// failures, consumed by the next execute), or at random with probability
// `fail_rate`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <set>
#include <span>

#include <kvpolicy/cache/host_memcpy_engine.hpp>

namespace kvpolicy::testing {

class fault_injecting_engine {
public:
    fault_injecting_engine(block_arena& gpu, block_arena& cpu, double fail_rate = 0.0, std::uint64_t seed = 1)
            : inner_(gpu, cpu), gpu_(&gpu), cpu_(&cpu), fail_rate_(fail_rate), rng_(seed) {}

    std::set<std::size_t> fail_next;  ///< op indices to fail in the next execute
    std::size_t failures = 0;         ///< ops failed so far

    std::size_t execute(std::span<const block_transfer> ops, std::span<transfer_status> status) {
        std::bernoulli_distribution coin(fail_rate_);
        std::size_t done = 0;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            if (fail_next.contains(i) || (fail_rate_ > 0 && coin(rng_))) {
                scribble(ops[i].to, ops[i].dst);
                if (ops[i].exchange) scribble(ops[i].from, ops[i].src);
                status[i] = transfer_status::failed;
                ++failures;
                continue;
            }
            done += inner_.execute(ops.subspan(i, 1), status.subspan(i, 1));
        }
        fail_next.clear();
        return done;
    }

private:
    void scribble(tier t, block_id b) {
        block_arena* a = t == tier::gpu ? gpu_ : t == tier::cpu ? cpu_ : nullptr;
        if (a == nullptr || b.index() >= a->capacity()) return;
        const std::uint64_t junk = rng_();
        std::memcpy(a->block(b).data(), &junk, std::min(sizeof junk, a->block_bytes()));
    }

    host_memcpy_engine inner_;
    block_arena* gpu_;
    block_arena* cpu_;
    double fail_rate_;
    std::mt19937_64 rng_;
};

static_assert(transfer_engine<fault_injecting_engine>);

}  // namespace kvpolicy::testing
