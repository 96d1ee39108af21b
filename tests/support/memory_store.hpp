// memory_store and memory_remote_engine: a remote tier in a map, for the
// cache's remote tests without a server (the Redis tests run the same
// checks against redis-server).
//
// The store owns its eviction (FIFO past `capacity` values) as a shared
// Redis with maxmemory does, and values carry the same header as Redis's
// (remote_value.hpp), checked on every fetch: a missing, lost or corrupted
// value fails its fetch and the CPU slot it was to fill is scribbled over,
// so a cache that trusted it would show another block's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/remote_value.hpp>

namespace kvpolicy::testing {

class memory_store {
public:
    explicit memory_store(std::size_t capacity = std::numeric_limits<std::size_t>::max()) : capacity_(capacity) {}

    [[nodiscard]] std::size_t present_prefix(std::span<const std::uint64_t> keys) const {
        std::size_t n = 0;
        while (n < keys.size() && values_.contains(keys[n])) ++n;
        return n;
    }
    void present_prefixes(std::span<const std::span<const std::uint64_t>> lists, std::span<std::size_t> out) {
        ++batched_lookups;
        for (std::size_t i = 0; i < lists.size(); ++i) out[i] = present_prefix(lists[i]);
    }
    std::size_t batched_lookups = 0;  ///< present_prefixes calls: one per step's lookups
    void put(std::uint64_t key, std::vector<std::byte> value) {
        if (!values_.contains(key)) {
            order_.push_back(key);
            while (order_.size() > capacity_) {  // the store's own eviction
                values_.erase(order_.front());
                order_.pop_front();
            }
        }
        values_[key] = std::move(value);
    }
    [[nodiscard]] const std::vector<std::byte>* get(std::uint64_t key) const {
        auto it = values_.find(key);
        return it == values_.end() ? nullptr : &it->second;
    }
    /// Forgets `key` behind the cache's back (an eviction, a restart).
    void lose(std::uint64_t key) {
        if (values_.erase(key)) std::erase(order_, key);
    }
    /// Flips a payload byte behind the cache's back.
    void corrupt(std::uint64_t key) {
        auto it = values_.find(key);
        if (it != values_.end() && it->second.size() > remote_value_header::size) it->second.back() ^= std::byte{0x5a};
    }
    [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
    [[nodiscard]] std::vector<std::uint64_t> keys() const { return {order_.begin(), order_.end()}; }

private:
    std::size_t capacity_;
    std::unordered_map<std::uint64_t, std::vector<std::byte>> values_;
    std::deque<std::uint64_t> order_;
};

class memory_remote_engine {
public:
    memory_remote_engine(block_arena& gpu, block_arena& cpu, memory_store& store, remote_namespace ns)
            : local_(gpu, cpu), gpu_(&gpu), cpu_(&cpu), store_(&store), ns_(std::move(ns)), ns_hash_(ns_.hash()) {}

    bool fail_writes = false;  ///< every write-back fails (a full store with noeviction, a dead link)
    std::size_t fetch_failures = 0;

    std::size_t execute(std::span<const block_transfer> ops, std::span<transfer_status> status) {
        return execute(ops, {}, status);
    }
    std::size_t execute(std::span<const block_transfer> ops, std::span<const std::uint64_t> keys,
                        std::span<transfer_status> status) {
        std::size_t done = 0;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const block_transfer& op = ops[i];
            if (op.from != tier::remote && op.to != tier::remote) {
                done += local_.execute(ops.subspan(i, 1), status.subspan(i, 1));
                continue;
            }
            const std::size_t k = op.from == tier::remote ? op.src.index() : op.dst.index();
            bool ok = k < keys.size();
            if (ok && op.to == tier::remote) {
                ok = !fail_writes;
                if (ok) {
                    const auto src = arena(op.from)->block(op.src);
                    std::vector<std::byte> v(remote_value_header::size + src.size());
                    encode_remote_header(
                        std::span<std::byte, remote_value_header::size>(v.data(), remote_value_header::size), ns_,
                        ns_hash_, keys[k], src);
                    std::memcpy(v.data() + remote_value_header::size, src.data(), src.size());
                    store_->put(keys[k], std::move(v));
                }
            } else if (ok) {
                const auto dst = cpu_->block(op.dst);
                const std::vector<std::byte>* v = store_->get(keys[k]);
                ok = v != nullptr &&
                     verify_remote_value(*v, ns_, ns_hash_, keys[k], dst.size()) == remote_value_check::ok;
                if (ok)
                    std::memcpy(dst.data(), v->data() + remote_value_header::size, dst.size());
                else {
                    std::memset(dst.data(), 0xee, dst.size());  // what a cut-off read leaves
                    ++fetch_failures;
                }
            }
            status[i] = ok ? transfer_status::done : transfer_status::failed;
            done += ok ? 1 : 0;
        }
        return done;
    }

private:
    block_arena* arena(tier t) const { return t == tier::gpu ? gpu_ : cpu_; }

    host_memcpy_engine local_;
    block_arena* gpu_;
    block_arena* cpu_;
    memory_store* store_;
    remote_namespace ns_;
    std::uint64_t ns_hash_;
};

static_assert(remote_transfer_engine<memory_remote_engine>);
static_assert(remote_directory<memory_store>);

}  // namespace kvpolicy::testing
