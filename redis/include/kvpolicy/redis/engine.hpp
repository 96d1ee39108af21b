// redis engine: a remote_transfer_engine that runs a swap plan's copies,
// the local ones (GPU <-> CPU) by memcpy between host arenas and the remote
// ones (write-backs, fetches) as pipelined SET and GET batches.
//
// Plan order is kept where it matters and only there: remote ops queue in a
// batch, and the batch is sent (one round trip) before a local copy reads
// or writes a slot a queued fetch fills, when its values reach
// `max_in_flight_bytes`, and at the end. A write-back's value is encoded
// when it is queued (header + payload, remote_value.hpp), so a later copy
// may reuse its slot at once. Per op: a SET is done when the server answered
// OK; a GET when the value arrived and verified (key, namespace, layout,
// length, checksum), and only then are its bytes copied into the CPU slot;
// otherwise the slot is overwritten with a fill pattern (what a cut-off
// read leaves), the op fails, and the cache recomputes what read it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/cache/host_memcpy_engine.hpp"
#include "kvpolicy/cache/remote_value.hpp"
#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/store.hpp"

namespace kvpolicy::redis {

class engine {
public:
    /// Throws: config_error if the arenas' block sizes differ from each other
    /// or from the namespace's item bytes.
    engine(block_arena& gpu, block_arena& cpu, store& remote)
        : local_(gpu, cpu), gpu_(&gpu), cpu_(&cpu), store_(&remote), ns_hash_(remote.config().ns.hash()) {
        if (remote.config().ns.item_bytes != gpu.block_bytes())
            throw config_error("redis engine: the store's namespace has item_bytes " +
                               std::to_string(remote.config().ns.item_bytes) + " but the arenas' blocks have " +
                               std::to_string(gpu.block_bytes()) + "; make store_config::ns.item_bytes the block size");
    }

    /// Ops with no remote side only (a plan without a remote tier).
    std::size_t execute(std::span<const block_transfer> ops, std::span<transfer_status> status) {
        return execute(ops, {}, status);
    }

    /// Runs `ops` in plan order (see above); `remote_keys` as in swap_plan.
    /// Returns the ops done. Throws: usage_error if `status` is shorter than
    /// `ops` (nothing run).
    std::size_t execute(std::span<const block_transfer> ops, std::span<const std::uint64_t> remote_keys,
                        std::span<transfer_status> status) {
        if (status.size() < ops.size())
            throw usage_error("redis engine::execute: " + std::to_string(status.size()) + " status slots for " +
                              std::to_string(ops.size()) + " ops; give one per op");
        std::size_t done = 0;
        status_ = status;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const block_transfer& op = ops[i];
            // A copy that reads or writes a slot a queued fetch fills waits for it.
            if (touches_pending_fetch(op)) done += send();
            if (op.from != tier::remote && op.to != tier::remote) {
                done += local_.execute(ops.subspan(i, 1), status.subspan(i, 1));
                continue;
            }
            const std::size_t k = op.from == tier::remote ? op.src.index() : op.dst.index();
            const bool well_formed = k < remote_keys.size() && !op.exchange &&
                                     (op.from == tier::remote ? op.to == tier::cpu && op.dst.index() < cpu_->capacity()
                                                              : op.src.index() < arena(op.from)->capacity());
            if (!well_formed) {
                status[i] = transfer_status::failed;
                continue;
            }
            if (op.to == tier::remote) queue_set(i, remote_keys[k], arena(op.from)->block(op.src));
            else queue_get(i, remote_keys[k], op.dst);
            if (queued_bytes_ >= store_->config().max_in_flight_bytes) done += send();
        }
        done += send();
        return done;
    }

    [[nodiscard]] std::size_t round_trips() const noexcept { return round_trips_; }
    [[nodiscard]] std::size_t bytes_sent() const noexcept { return bytes_sent_; }
    [[nodiscard]] std::size_t bytes_received() const noexcept { return bytes_received_; }
    /// Fetches refused by verification (not counting missing values).
    [[nodiscard]] std::size_t rejected_values() const noexcept { return rejected_; }

private:
    struct queued {
        std::size_t op;
        bool is_set;
        std::uint64_t key;
        block_id cpu_slot;      // GET: where the value goes
        std::size_t value_pos;  // SET: its value in values_
        std::size_t value_len;
        std::size_t key_pos;    // its key text in keys_
        std::size_t key_len;
    };

    block_arena* arena(tier t) const noexcept { return t == tier::gpu ? gpu_ : cpu_; }

    void queue_key(queued& q, std::uint64_t key) {
        q.key_pos = keys_.size();
        keys_ += store_->config().ns.prefix();
        remote_namespace::append_hex(keys_, key);
        q.key_len = keys_.size() - q.key_pos;
    }
    void queue_set(std::size_t op, std::uint64_t key, std::span<const std::byte> payload) {
        queued q{op, true, key, block_id{}, values_used_, remote_value_header::size + payload.size(), 0, 0};
        queue_key(q, key);
        grow_values(values_used_ + q.value_len);
        values_used_ += q.value_len;
        encode_remote_value(std::span<std::byte>(values_.get() + q.value_pos, q.value_len), store_->config().ns,
                            ns_hash_, key, payload);
        queued_bytes_ += q.value_len;
        queue_.push_back(q);
    }
    void queue_get(std::size_t op, std::uint64_t key, block_id slot) {
        queued q{op, false, key, slot, 0, 0, 0, 0};
        queue_key(q, key);
        queued_bytes_ += cpu_->block_bytes();
        queue_.push_back(q);
    }

    // The batch's values, back to back: grown (never zero-filled: every byte
    // is written before it is sent) to hold a whole batch, then reused.
    void grow_values(std::size_t need) {
        if (need <= values_capacity_) return;
        const std::size_t cap = std::max({need, 2 * values_capacity_,
                                          std::min(store_->config().max_in_flight_bytes, std::size_t{1} << 30) +
                                              remote_value_header::size + cpu_->block_bytes()});
        std::unique_ptr<std::byte[]> bigger(new std::byte[cap]);
        if (values_used_ > 0) std::memcpy(bigger.get(), values_.get(), values_used_);
        values_ = std::move(bigger);
        values_capacity_ = cap;
    }

    [[nodiscard]] bool touches_pending_fetch(const block_transfer& op) const noexcept {
        for (const queued& q : queue_)
            if (!q.is_set && ((op.from == tier::cpu && op.src == q.cpu_slot) ||
                              (op.to == tier::cpu && op.dst == q.cpu_slot)))
                return true;
        return false;
    }

    // Sends the queued batch and reads its replies; returns the ops done.
    std::size_t send() {
        if (queue_.empty()) return 0;
        cmds_.clear();
        for (const queued& q : queue_) {
            const std::string_view key(keys_.data() + q.key_pos, q.key_len);
            if (q.is_set) cmds_.push_back({"SET", key, std::span<const std::byte>(values_.get() + q.value_pos, q.value_len)});
            else cmds_.push_back({"GET", key, {}});
        }
        std::size_t done = 0;
        const remote_namespace& ns = store_->config().ns;
        // Each reply is used (and freed) as it arrives.
        store_->run(cmds_, [&](std::size_t j, reply_ptr reply) {
            const queued& q = queue_[j];
            const redisReply* r = reply.get();
            bool ok = false;
            if (q.is_set) {
                ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
                bytes_sent_ += ok ? q.value_len : 0;
            } else {
                const std::span<std::byte> dst = cpu_->block(q.cpu_slot);
                if (r != nullptr && r->type == REDIS_REPLY_STRING) {
                    const auto value = std::as_bytes(std::span<const char>(r->str, r->len));
                    // Verified and copied in one pass; a refused value's partial copy is overwritten below.
                    ok = verify_and_copy_remote_value(value, ns, ns_hash_, q.key, dst) == remote_value_check::ok;
                    rejected_ += ok ? 0 : 1;
                    bytes_received_ += ok ? value.size() : 0;
                }
                if (!ok) std::memset(dst.data(), 0xee, dst.size());
            }
            status_[q.op] = ok ? transfer_status::done : transfer_status::failed;
            done += ok ? 1 : 0;
        });
        ++round_trips_;
        queue_.clear();
        values_used_ = 0;
        keys_.clear();
        queued_bytes_ = 0;
        return done;
    }

    host_memcpy_engine local_;
    block_arena* gpu_;
    block_arena* cpu_;
    store* store_;
    std::uint64_t ns_hash_;
    std::span<transfer_status> status_;
    std::vector<queued> queue_;
    std::unique_ptr<std::byte[]> values_;  // the queued SETs' values, back to back
    std::size_t values_used_ = 0;
    std::size_t values_capacity_ = 0;
    std::string keys_;               // the queued ops' key texts, back to back
    std::vector<command> cmds_;
    std::size_t queued_bytes_ = 0;
    std::size_t round_trips_ = 0;
    std::size_t bytes_sent_ = 0;
    std::size_t bytes_received_ = 0;
    std::size_t rejected_ = 0;
};

static_assert(remote_transfer_engine<engine>);

}  // namespace kvpolicy::redis
