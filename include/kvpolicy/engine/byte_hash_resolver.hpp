// byte_hash_resolver: one engine call's block hashes as an offload_manager's
// keys, for an engine that names blocks by byte strings (vLLM's BlockHash)
// and hands over the same list call after call.
//
// The keys themselves are byte_hash_keys' (byte_hash_keys.hpp: the fold, the
// probe sequence, two distinct hashes always two blocks). What this adds is
// the engine's rhythm: vLLM's connector passes one request's list to lookup
// and touch, then its hit prefix to the loads and its tail to the store, so a
// list resolved once is remembered (the caller numbers its lists, and says
// where in one a call's hashes start) and a later call of that list or a
// part of it takes the remembered keys, as long as no block has been stored
// since (a block that left only frees its key, a miss either way, and
// byte_hash_keys remembers what is stored past its fold). A store names the
// blocks it takes: by their bytes, as another kind of item (an int, never a
// byte hash's block), or by their keys (the engine passed 64-bit keys).
//
// Python's kvpolicy.vllm.OffloadingManager reads vLLM's hashes through it
// (python/src/offload.cpp); tests/engine_byte_hash_resolver.cpp checks it
// against a manager keyed by the whole bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpolicy/engine/byte_hash_keys.hpp"
#include "kvpolicy/engine/offload_manager.hpp"

namespace kvpolicy::engine {

/// Where one call's hashes come from: a part of a list the engine passes
/// again and again.
struct hash_list_ref {
    static constexpr std::uint64_t none = ~std::uint64_t{0};
    std::uint64_t list = none;  ///< the list's number (a new one for each new list), or none
    std::size_t at = 0;         ///< where the call's hashes start in that list
    std::size_t size = 0;       ///< the whole list's length
};

class byte_hash_resolver {
public:
    /// The table of keys (key_of, probed).
    [[nodiscard]] const byte_hash_keys& table() const noexcept { return table_; }

    /// Tests: folds are `fold_bytes & mask` (byte_hash_keys::set_fold_mask).
    /// Set it before any block is stored.
    void set_fold_mask(std::uint64_t mask) noexcept {
        table_.set_fold_mask(mask);
        ++generation_;
    }

    /// The keys of one call's hashes in `m` (byte_hash_keys::resolve's:
    /// item i's key is keys[i] unless `bytes_of(i)` gives its bytes), taken
    /// from the remembered list when `from` names it and nothing was stored
    /// since; a whole list `from` names is remembered. Valid until the next
    /// call.
    template <slot_finder M, class BytesOf>
    std::span<const std::uint64_t> resolve(const M& m, std::span<const std::uint64_t> keys, BytesOf&& bytes_of,
                                           hash_list_ref from = {}) {
        const std::size_t n = keys.size();
        const bool listed = from.list != hash_list_ref::none;
        last_from_memo_ =
            listed && memo_list_ == from.list && memo_generation_ == generation_ && from.at + n <= memo_.size();
        if (last_from_memo_) return std::span<const std::uint64_t>(memo_).subspan(from.at, n);
        const std::span<const std::uint64_t> out = table_.resolve(m, keys, bytes_of);
        if (listed && from.at == 0 && n == from.size) {
            memo_.assign(out.begin(), out.end());
            memo_list_ = from.list;
            memo_generation_ = generation_;
            last_from_memo_ = true;
        }
        return out;
    }

    /// m.prepare_store(keys), with the blocks it stores named: each by its
    /// bytes where `bytes_of` (of its position in `keys`) gives them, else
    /// as another kind of item; all by their keys when `by_key`. `keys`: the
    /// last resolve()'s answer, or 64-bit keys (`by_key`).
    template <class M, class BytesOf>
    std::optional<store_plan> prepare_store(M& m, std::span<const std::uint64_t> keys, BytesOf&& bytes_of,
                                            bool by_key) {
        const bool memo_keys = last_from_memo_ && !by_key;
        std::optional<store_plan> plan = m.prepare_store(keys);
        if (!plan) return plan;
        for (std::size_t j = 0; j < plan->slots.size(); ++j) {
            const std::uint32_t s = plan->slots[j];
            const std::uint32_t at = plan->positions[j];
            if (by_key)
                table_.name_by_key(s);
            else if (const std::optional<std::string_view> b = bytes_of(at))
                table_.name_bytes(m, s, *b, keys[at]);
            else
                table_.name_other(m.capacity(), s);
        }
        if (!plan->slots.empty()) {
            // Keys now name blocks that resolve() saw free. The remembered
            // list stays resolved when these keys were its own: its keys are
            // pairwise distinct (resolve tells one call's apart), so the
            // blocks stored took the keys of exactly the items stored.
            ++generation_;
            if (memo_keys) memo_generation_ = generation_;
        }
        return plan;
    }

private:
    byte_hash_keys table_;
    std::uint64_t generation_ = 0;     // stores that stored something, and fold masks set
    std::vector<std::uint64_t> memo_;  // the remembered list's keys
    std::uint64_t memo_list_ = hash_list_ref::none, memo_generation_ = 0;
    bool last_from_memo_ = false;  // the last resolve() answered with the remembered keys
};

}  // namespace kvpolicy::engine
