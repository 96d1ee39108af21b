// A small multi-session scenario on two tiers, composed from policies alone:
// an LRU GPU tier that shelters its victims in a FIFO CPU tier, which drops
// its own victims. Prints every eviction and why it happened.
//
//   two_tier_scenario [gpu_blocks] [cpu_blocks]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <kvpolicy/kvpolicy.hpp>

using namespace kvpolicy;

namespace {

struct block_name {
    std::uint64_t session;
    std::uint32_t chunk;
};

// One tier: a policy over slots plus what each slot holds.
template <eviction_policy Policy>
struct tier_state {
    const char* label;
    Policy policy;
    std::vector<block_name> slots;
    std::vector<bool> used;

    tier_state(const char* l, std::size_t capacity) : label(l), policy(capacity, {}), slots(capacity), used(capacity) {}

    std::optional<std::uint32_t> free_slot() const {
        for (std::uint32_t i = 0; i < used.size(); ++i)
            if (!used[i]) return i;
        return std::nullopt;
    }
    std::optional<std::uint32_t> find(block_name b) const {
        for (std::uint32_t i = 0; i < used.size(); ++i)
            if (used[i] && slots[i].session == b.session && slots[i].chunk == b.chunk) return i;
        return std::nullopt;
    }
};

std::string str(block_name b) { return "s" + std::to_string(b.session) + "/c" + std::to_string(b.chunk); }

}  // namespace

int main(int argc, char** argv) {
    const std::size_t gpu_blocks = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 6;
    const std::size_t cpu_blocks = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4;
    try {
        tier_state<lru> gpu("gpu", gpu_blocks);
        tier_state<fifo> cpu("cpu", cpu_blocks);
        manual_clock clock;
        std::size_t hits = 0, swap_ins = 0, recomputed = 0;

        // Insert into the CPU tier, dropping its FIFO victim if it is full.
        auto shelter = [&](block_name b) {
            if (!cpu.free_slot()) {
                const auto v = cpu.policy.pop_victim(clock.now());
                const block_name gone = cpu.slots[v->value];
                cpu.used[v->value] = false;
                std::printf("    cpu full: fifo drops %s (oldest in cpu) -> dropped, recompute on next use\n",
                            str(gone).c_str());
            }
            const std::uint32_t s = *cpu.free_slot();
            cpu.slots[s] = b;
            cpu.used[s] = true;
            cpu.policy.on_insert(item_id{s}, {.now = clock.now()});
        };
        // Make room on the GPU: LRU victim moves to the CPU tier.
        auto gpu_slot = [&]() {
            if (auto s = gpu.free_slot()) return *s;
            const auto v = gpu.policy.pop_victim(clock.now());
            const block_name out = gpu.slots[v->value];
            gpu.used[v->value] = false;
            std::printf("    gpu full: lru evicts %s (least recently used) -> sheltered in cpu\n", str(out).c_str());
            shelter(out);
            return v->value;
        };

        // Three chat sessions taking turns; each turn reads its whole history
        // and appends one block.
        const std::uint64_t turns[][2] = {{0, 2}, {1, 2}, {0, 3}, {2, 3}, {1, 3}, {0, 4}, {2, 4}, {1, 4}};
        for (const auto& t : turns) {
            clock.advance(1);
            const std::uint64_t session = t[0];
            const std::uint32_t blocks = static_cast<std::uint32_t>(t[1]);
            std::printf("t=%llu session %llu reads %u blocks\n", static_cast<unsigned long long>(clock.now()),
                        static_cast<unsigned long long>(session), blocks);
            for (std::uint32_t c = 0; c < blocks; ++c) {
                const block_name b{session, c};
                const access_context ctx{.now = clock.now(), .session = session_id{session}, .chunk = chunk_index{c}};
                if (auto s = gpu.find(b)) {
                    gpu.policy.on_access(item_id{*s}, ctx);
                    ++hits;
                    continue;
                }
                if (auto s = cpu.find(b)) {  // exclusive tiers: the block moves up
                    cpu.policy.on_erase(item_id{*s});
                    cpu.used[*s] = false;
                    std::printf("    %s found in cpu -> swap in\n", str(b).c_str());
                    ++swap_ins;
                } else {
                    std::printf("    %s not cached -> compute\n", str(b).c_str());
                    ++recomputed;
                }
                const std::uint32_t s = gpu_slot();
                gpu.slots[s] = b;
                gpu.used[s] = true;
                gpu.policy.on_insert(item_id{s}, ctx);
            }
        }
        std::printf("\ngpu hits %zu, swap-ins %zu, computed %zu; gpu evictions %llu, cpu drops %llu\n", hits, swap_ins,
                    recomputed, static_cast<unsigned long long>(gpu.policy.counters().evictions),
                    static_cast<unsigned long long>(cpu.policy.counters().evictions));
    } catch (const kvpolicy::error& e) {
        std::fprintf(stderr, "two_tier_scenario: %s\n", e.what());
        return 2;
    }
    return 0;
}
