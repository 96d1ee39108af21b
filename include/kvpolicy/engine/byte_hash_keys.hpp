// Block keys of byte hashes: the 64-bit keys under which an offload_manager
// stores blocks that an engine names by byte strings (vLLM's BlockHash, a
// 32-byte SHA-256 digest), with two distinct hashes always two blocks.
//
// A byte hash's key starts at its fold (`fold_bytes`: mix64 of its length,
// then one mix64 per 8 bytes, the last word zero-padded): fast, but not
// collision resistant (two 32-byte hashes share a fold by chance about 3e-6
// of the time for 10^7 blocks, or on purpose, since anyone can craft one).
// So the fold is where a block's key starts, not its identity: the table
// keeps each slot's whole bytes, and `resolve` compares a hash with the bytes
// held under its fold; another block there sends the hash to the next key of
// a probe sequence (`probe`), until a key holds its own bytes (the block) or
// no block (a miss, and where a store puts it). A hash stored past its fold
// is remembered (`probed`), so that it is found whatever leaves before it in
// its sequence. Two new hashes of one call that land on one free key are told
// apart: each free key goes to the first hash that asks for it.
//
// A slot is named by its bytes (`name_bytes`), by its key alone (`name_by_key`:
// a block stored through 64-bit keys, taken as any byte hash's that reaches
// it), or as another kind of object (`name_other`: an int, never a byte
// hash's block). Items that are not byte hashes keep the keys given.
//
// The table does not own the blocks: it asks the manager (a `slot_finder`,
// offload_manager or any_offload_manager) which slot holds a key. Python's
// kvpolicy.vllm.OffloadingManager reads vLLM's hashes through it
// (python/src/offload.cpp); tests/engine_byte_hash_keys.cpp checks it
// against a manager keyed by the whole bytes.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvpolicy/core/index_list.hpp"
#include "kvpolicy/core/item_key.hpp"

namespace kvpolicy::engine {

/// A byte string's 64-bit fold: mix64 of its length, then one mix64 per 8
/// bytes, the last word zero-padded. The whole words are read by fixed-size
/// copies (a load each): one copy of variable size per word was a call to
/// memcpy, nearly twice the time (measured in docs/performance.md).
[[nodiscard]] inline std::uint64_t fold_bytes(std::string_view b) noexcept {
    const char* p = b.data();
    const std::size_t n = b.size();
    std::uint64_t k = mix64(n);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, p + i, 8);
        k = mix64(k ^ w);
    }
    if (i < n) {
        std::uint64_t w = 0;
        std::memcpy(&w, p + i, n - i);
        k = mix64(k ^ w);
    }
    return k;
}
[[nodiscard]] inline std::uint64_t fold_bytes(std::span<const std::byte> b) noexcept {
    return fold_bytes(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

/// What byte_hash_keys asks of the blocks' owner: the slot of a key
/// (no_index for none), one or many.
template <class M>
concept slot_finder = requires(const M& m, std::uint64_t k, std::span<const std::uint64_t> keys,
                               std::span<std::uint32_t> slots) {
    { m.find(k) } -> std::same_as<std::uint32_t>;
    m.find_all(keys, slots);
    { m.capacity() } -> std::convertible_to<std::size_t>;
};

class byte_hash_keys {
public:
    /// The k-th key of the probe sequence after `fold` (k >= 1); never 0,
    /// the key of every fold under mask 0.
    [[nodiscard]] static constexpr std::uint64_t probe(std::uint64_t fold, std::uint64_t k) noexcept {
        return mix64(fold + 0x9e3779b97f4a7c15ULL * k) | 1;
    }

    /// Tests: folds are `fold_bytes & mask`, so that distinct hashes collide
    /// at will (mask 0: all of them). Set it before any block is stored.
    void set_fold_mask(std::uint64_t mask) noexcept { mask_ = mask; }
    /// The fold of a hash whose fold_bytes is `full`.
    [[nodiscard]] std::uint64_t fold(std::uint64_t full) const noexcept { return full & mask_; }
    [[nodiscard]] std::uint64_t fold(std::string_view b) const noexcept { return fold(fold_bytes(b)); }
    /// Hashes remembered past their fold.
    [[nodiscard]] std::size_t probed() const noexcept { return probed_.size(); }

    /// The key of byte hash `b`: the key of its block in `m`, else the first
    /// key of its probe sequence that holds no block and is not in `taken`
    /// (`is_free` says which).
    template <slot_finder M>
    [[nodiscard]] std::uint64_t key_of(const M& m, std::string_view b,
                                       const std::vector<std::uint64_t>* taken = nullptr,
                                       bool* is_free = nullptr) const {
        return key_of(m, b, fold(b), taken, is_free);
    }

    /// The keys of one call's blocks in `m`: item i's key is keys[i] unless
    /// `bytes_of(i)` (a std::optional<std::string_view>) gives its bytes,
    /// whose fold_bytes keys[i] is; then it is key_of's, with two distinct
    /// hashes of the call never given one free key. Valid until the next call.
    template <slot_finder M, class BytesOf>
    std::span<const std::uint64_t> resolve(const M& m, std::span<const std::uint64_t> keys, BytesOf&& bytes_of) {
        const std::size_t n = keys.size();
        resolved_.assign(keys.begin(), keys.end());
        bool any = false;
        for (std::size_t i = 0; i < n; ++i)
            if (bytes_of(i)) {
                resolved_[i] = fold(resolved_[i]);
                any = true;
            }
        if (!any) return resolved_;
        // Each fold's slot, probed in a pipeline; then each hash is the block
        // there (its row compared), a miss, or (another block there, or some
        // hash stored past its fold) resolved the slow way.
        found_.resize(n);
        m.find_all(resolved_, found_);
        free_.clear();
        constexpr std::size_t ahead = 8;
        for (std::size_t i = 0; i < n; ++i) {
            if (i + ahead < n && found_[i + ahead] != no_index && !rows_.empty())
                __builtin_prefetch(&rows_[found_[i + ahead]]);
            const std::optional<std::string_view> b = bytes_of(i);
            if (!b) continue;
            const std::uint32_t s = found_[i];
            bool is_free = s == no_index;
            if (!probed_.empty() || (!is_free && !holds(s, *b)))
                resolved_[i] = key_of(m, *b, fold(keys[i]), nullptr, &is_free);
            if (is_free) free_.push_back({resolved_[i], static_cast<std::uint32_t>(i)});
        }
        if (free_.size() < 2) return resolved_;
        std::sort(free_.begin(), free_.end());
        bool clash = false;
        for (std::size_t j = 1; j < free_.size() && !clash; ++j)
            clash =
                free_[j].first == free_[j - 1].first && *bytes_of(free_[j].second) != *bytes_of(free_[j - 1].second);
        if (!clash) return resolved_;
        // The slow path (a fold shared within the call): resolve again in
        // order, each free key given to the first hash that asks for it, the
        // same bytes again the same key.
        std::vector<std::uint64_t> taken;
        std::vector<std::string_view> owner;  // taken[j] went to these bytes
        for (std::size_t i = 0; i < n; ++i) {
            const std::optional<std::string_view> b = bytes_of(i);
            if (!b) continue;
            const auto again = std::find(owner.begin(), owner.end(), *b);
            if (again != owner.end()) {
                resolved_[i] = taken[static_cast<std::size_t>(again - owner.begin())];
                continue;
            }
            resolved_[i] = key_of(m, *b, fold(keys[i]), &taken, nullptr);
            if (m.find(resolved_[i]) == no_index) {
                taken.push_back(resolved_[i]);
                owner.push_back(*b);
            }
        }
        return resolved_;
    }

    /// Slot `s` of `m` now holds the block of byte hash `b` under `key`
    /// (key_of's): its bytes are kept, and a key past b's fold remembered.
    template <slot_finder M>
    void name_bytes(const M& m, std::uint32_t s, std::string_view b, std::uint64_t key) {
        row& r = row_of(m.capacity(), s);
        if (b.size() > inline_bytes) {
            r.tag = tag_long;
            long_.resize(rows_.size());
            long_[s].assign(b);
        } else {
            std::memcpy(r.bytes.data(), b.data(), b.size());
            r.tag = static_cast<std::uint8_t>(b.size());
        }
        if (key != fold(b)) remember_probed(m, b, key);
    }
    /// Slot `s` holds a block named by its key only (any byte hash that
    /// reaches it takes it as its own).
    void name_by_key(std::uint32_t s) noexcept {
        if (!rows_.empty()) rows_[s].tag = tag_key;
    }
    /// Slot `s` holds a block named otherwise (an int): no byte hash's.
    void name_other(std::size_t capacity, std::uint32_t s) { row_of(capacity, s).tag = tag_other; }

private:
    // key_of's, for `b` whose fold is `fold0`.
    template <slot_finder M>
    [[nodiscard]] std::uint64_t key_of(const M& m, std::string_view b, std::uint64_t fold0,
                                       const std::vector<std::uint64_t>* taken, bool* is_free) const {
        if (!probed_.empty())
            if (const auto it = probed_.find(b); it != probed_.end()) {
                const std::uint32_t s = m.find(it->second);
                if (s != no_index && holds(s, b)) {
                    if (is_free) *is_free = false;
                    return it->second;
                }
            }
        std::uint64_t key = fold0;
        for (std::uint64_t k = 1;; ++k) {
            const std::uint32_t s = m.find(key);
            if (s != no_index ? holds(s, b)
                              : (taken == nullptr || std::find(taken->begin(), taken->end(), key) == taken->end())) {
                if (is_free) *is_free = s == no_index;
                return key;
            }
            key = probe(fold0, k);
        }
    }

    static constexpr std::size_t inline_bytes = 32;  // vLLM's: kept in the row
    static constexpr std::uint8_t tag_long = 253, tag_other = 254, tag_key = 255;
    // [slot] how the block there is named: its bytes inline (tag = length),
    // tag_long (bytes past inline_bytes, in long_), tag_other or tag_key.
    struct row {
        std::array<char, inline_bytes> bytes{};
        std::uint8_t tag = tag_key;
    };
    struct string_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view v) const noexcept { return std::hash<std::string_view>{}(v); }
    };

    row& row_of(std::size_t capacity, std::uint32_t s) {
        if (rows_.empty()) rows_.resize(capacity);
        return rows_[s];
    }
    // Whether slot `s`'s block is byte hash `b` (a block named by its key
    // is taken as b's).
    [[nodiscard]] bool holds(std::uint32_t s, std::string_view b) const noexcept {
        if (rows_.empty()) return true;
        const std::uint8_t tag = rows_[s].tag;
        if (tag <= inline_bytes) return b.size() == tag && std::memcmp(rows_[s].bytes.data(), b.data(), tag) == 0;
        if (tag == tag_long) return long_[s] == b;
        return tag == tag_key;
    }
    // Whether slot `s` holds exactly the bytes `b` (not a key-named block).
    [[nodiscard]] bool holds_bytes(std::uint32_t s, std::string_view b) const noexcept {
        return !rows_.empty() && rows_[s].tag != tag_key && holds(s, b);
    }
    // A hash stored past its fold; entries whose block left are dropped when
    // there are more of them than slots.
    template <slot_finder M>
    void remember_probed(const M& m, std::string_view b, std::uint64_t key) {
        if (probed_.size() >= m.capacity())
            std::erase_if(probed_, [&](const auto& e) {
                const std::uint32_t s = m.find(e.second);
                return s == no_index || !holds_bytes(s, e.first);
            });
        probed_.insert_or_assign(std::string(b), key);
    }

    std::uint64_t mask_ = ~std::uint64_t{0};
    std::vector<row> rows_;          // [slot], empty until a slot is named otherwise than by key
    std::vector<std::string> long_;  // [slot] bytes of a tag_long row
    std::unordered_map<std::string, std::uint64_t, string_hash, std::equal_to<>> probed_;  // hash -> key past its fold
    std::vector<std::uint64_t> resolved_;                                                  // scratch: one call's keys
    std::vector<std::uint32_t> found_;                                                     // scratch: their slots
    std::vector<std::pair<std::uint64_t, std::uint32_t>> free_;  // scratch: hashes on free keys
};

}  // namespace kvpolicy::engine
