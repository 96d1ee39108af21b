// object_list_memo: the 64-bit keys of an engine's list of hash objects,
// remembered by the objects' addresses, for an engine that hands over the
// same objects call after call.
//
// vLLM's connector hands one request's list to lookup and touch, then its
// hit prefix to prepare_load and complete_load, then its tail to
// prepare_store and the blocks to store to complete_store: the same int or
// bytes objects each time. The memo keeps the objects of the last list it
// converted (a reference each, through the Keeper, so no other object can
// take their addresses) with their keys; a list whose items are those
// objects, or a prefix or suffix of them, costs one compare of addresses
// instead of a conversion per item. Only objects whose key cannot change
// are kept (the Keeper's key_of says which); a list holding another object
// is left to the caller, nothing kept.
//
// Python's kvpolicy.vllm.OffloadingManager reads vLLM's hash lists through
// it (python/src/offload.cpp: the Keeper holds Python's references);
// tests/engine_object_list_memo.cpp checks it against a conversion of every
// list and a model of the references held.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "kvpolicy/engine/byte_hash_resolver.hpp"

namespace kvpolicy::engine {

/// What an object_list_memo keeps, and how: `key_of(o, k)` sets o's key
/// and returns true where the key cannot change (false: the memo keeps no
/// list holding o); `keep` and `release` take and drop a reference (neither
/// may run the engine's code: the memo releases inside its own calls).
template <class K>
concept object_keeper = requires(typename K::object* o, std::uint64_t& key) {
    { K::key_of(o, key) }
    noexcept->std::same_as<bool>;
    { K::keep(o) }
    noexcept;
    { K::release(o) }
    noexcept;
};

template <object_keeper Keeper>
class object_list_memo {
public:
    using object = typename Keeper::object;

    object_list_memo() = default;
    object_list_memo(const object_list_memo&) = delete;  // it holds references
    object_list_memo& operator=(const object_list_memo&) = delete;
    ~object_list_memo() { forget(); }

    /// The keys of `items`: the remembered list's where `items` are its
    /// objects or a prefix or suffix of them (`from` names that list and
    /// where they start); else each item's key_of, and `items` becomes the
    /// remembered list (a new number in `from`). nullopt, nothing kept and
    /// `from` naming no list, where an item's key_of is false. Valid until
    /// the next call. Complexity: one compare of n addresses on a hit.
    std::optional<std::span<const std::uint64_t>> keys_of(std::span<object* const> items, hash_list_ref& from) {
        const std::size_t n = items.size();
        if (n > 0 && n <= objects_.size()) {
            for (const std::size_t at : {std::size_t{0}, objects_.size() - n})
                if (std::memcmp(items.data(), objects_.data() + at, n * sizeof(object*)) == 0) {
                    from = {.list = list_, .at = at, .size = objects_.size()};
                    return std::span<const std::uint64_t>(keys_).subspan(at, n);
                }
        }
        forget();
        from = {.list = ++list_, .at = 0, .size = n};
        keys_.resize(n);
        objects_.resize(n);
        // One pass: the objects are read from memory once (each a likely
        // cache miss, hence the prefetch some items ahead) and kept.
        constexpr std::size_t ahead = 8;
        for (std::size_t i = 0; i < n; ++i) {
            if (i + ahead < n) {  // an object (a bytes hash) may span two cache lines
                __builtin_prefetch(items[i + ahead]);
                __builtin_prefetch(reinterpret_cast<const char*>(items[i + ahead]) + 64);
            }
            if (!Keeper::key_of(items[i], keys_[i])) {
                objects_.resize(i);
                forget();
                from = {};
                return std::nullopt;
            }
            Keeper::keep(items[i]);
            objects_[i] = items[i];
        }
        return std::span<const std::uint64_t>(keys_);
    }

    /// Drops the remembered list (its references released).
    void forget() noexcept {
        for (object* o : objects_) Keeper::release(o);
        objects_.clear();
    }
    /// The remembered list's length.
    [[nodiscard]] std::size_t size() const noexcept { return objects_.size(); }

private:
    std::vector<object*> objects_;     // the remembered list's items, a reference each
    std::vector<std::uint64_t> keys_;  // their keys
    std::uint64_t list_ = 0;           // the remembered list's number (a new one each time it is replaced)
};

}  // namespace kvpolicy::engine
