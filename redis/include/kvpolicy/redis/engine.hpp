// redis engine: a remote_transfer_engine that runs a swap plan's copies,
// the local ones (GPU <-> CPU) by memcpy between host arenas and the remote
// ones (write-backs, fetches) as pipelined SET and GET batches.
//
// Plan order is kept where it matters and only there: remote ops queue in a
// batch, and the batch is sent (one round trip) before a local copy reads
// or writes a slot a queued fetch fills, when its values reach
// `max_in_flight_bytes`, and at the end. A write-back's bytes are sent from
// its slot (no copy; its header and checksum are made when it is queued),
// so an op that would overwrite that slot while the write-back is queued
// first copies the bytes aside and the write-back sends the copy. Per op:
// a SET is done when the server answered OK; a GET when the value arrived
// (read from the socket straight into the CPU slot, its checksum computed
// as it lands) and verified (key, namespace, layout, length, checksum, digest, MAC);
// otherwise the slot is overwritten with a fill pattern (what a cut-off
// read leaves), the op fails, and the cache recomputes what read it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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
            : local_(gpu, cpu),
              gpu_(&gpu),
              cpu_(&cpu),
              store_(&remote),
              ns_hash_(remote.config().ns.hash()),
              key_prefix_(remote.config().ns.prefix()),
              fetch_mark_(cpu.capacity(), 0),
              set_mark_{std::vector<std::uint32_t>(gpu.capacity(), 0), std::vector<std::uint32_t>(cpu.capacity(), 0)} {
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
        const store::batch_scope batch(*store_);  // one deadline for all of it, whatever the server does
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const block_transfer& op = ops[i];
            // A copy that reads or writes a slot a queued fetch fills waits for it.
            if (touches_pending_fetch(op)) done += send();
            // One that overwrites a slot a queued write-back reads takes the bytes aside first.
            spill_sets_overwritten_by(op);
            if (op.from != tier::remote && op.to != tier::remote) {
                done += local_.execute(ops.subspan(i, 1), status.subspan(i, 1));
                continue;
            }
            const std::size_t k = op.from == tier::remote ? op.src.index() : op.dst.index();
            const bool well_formed = k < remote_keys.size() && !op.exchange &&
                                     (op.from == tier::remote ? op.to == tier::cpu && op.dst.index() < cpu_->capacity()
                                                              : op.src.index() < arena(op.from)->capacity()) &&
                                     store_->config().ns.names(remote_keys[k]);  // a block whose digest is known
            if (!well_formed) {
                status[i] = transfer_status::failed;
                continue;
            }
            status[i] = transfer_status::failed;  // until its reply says otherwise
            if (op.to == tier::remote)
                queue_set(i, remote_keys[k], op.from, op.src);
            else
                queue_get(i, remote_keys[k], op.dst);
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
    /// Write-backs whose bytes were copied aside because a later op of the
    /// same batch overwrote their slot.
    [[nodiscard]] std::size_t spilled_values() const noexcept { return spilled_; }

private:
    struct queued {
        std::size_t op;
        bool is_set;
        std::uint64_t key;
        tier slot_tier;            // SET: where its bytes lie; GET: the CPU
        block_id slot;             // SET: its source slot; GET: the CPU slot its value fills
        const std::byte* payload;  // SET: its bytes (the slot, or a copy aside)
        std::size_t key_pos;       // its key text in keys_
        std::size_t key_len;
    };

    block_arena* arena(tier t) const noexcept { return t == tier::gpu ? gpu_ : cpu_; }

    void queue_key(queued& q, std::uint64_t key) {
        q.key_pos = keys_.size();
        keys_ += key_prefix_;
        (void)store_->config().ns.append_item(keys_, key);  // named: execute checked ns.names
        q.key_len = keys_.size() - q.key_pos;
    }
    void queue_set(std::size_t op, std::uint64_t key, tier from, block_id src) {
        const std::span<const std::byte> payload = arena(from)->block(src);
        queued q{op, true, key, from, src, payload.data(), 0, 0};
        queue_key(q, key);
        headers_.push_back(make_remote_header(store_->config().ns, ns_hash_, key, payload, remote_checksum(payload)));
        queued_bytes_ += remote_value_header::size + payload.size();
        queue_.push_back(q);
        set_mark_[from == tier::gpu ? 0 : 1][src.index()] = epoch_;
    }
    void queue_get(std::size_t op, std::uint64_t key, block_id slot) {
        queued q{op, false, key, tier::cpu, slot, nullptr, 0, 0};
        queue_key(q, key);
        queued_bytes_ += remote_value_header::size + cpu_->block_bytes();
        queue_.push_back(q);
        fetch_mark_[slot.index()] = epoch_;
    }

    // Whether slot `id` of tier `t` is marked in this batch (`marks` per slot; out of range: no).
    [[nodiscard]] bool marked(const std::vector<std::uint32_t>& marks, block_id id) const noexcept {
        return id.index() < marks.size() && marks[id.index()] == epoch_;
    }

    // Per-slot marks (the batch's epoch) make these checks O(1) per op; a
    // scan of the queue made a batch of n ops cost O(n^2).
    [[nodiscard]] bool touches_pending_fetch(const block_transfer& op) const noexcept {
        return (op.from == tier::cpu && marked(fetch_mark_, op.src)) ||
               (op.to == tier::cpu && marked(fetch_mark_, op.dst));
    }

    // The slots `op` writes: its destination, and its source too when it is an exchange.
    void spill_sets_overwritten_by(const block_transfer& op) {
        auto reads = [&](tier t, block_id id) {
            return (t == tier::gpu || t == tier::cpu) && marked(set_mark_[t == tier::gpu ? 0 : 1], id);
        };
        if (!reads(op.to, op.dst) && !(op.exchange && reads(op.from, op.src))) return;  // the common case
        for (queued& q : queue_) {
            if (!q.is_set || q.payload != arena(q.slot_tier)->block(q.slot).data()) continue;
            const bool overwritten = (op.to == q.slot_tier && op.dst == q.slot) ||
                                     (op.exchange && op.from == q.slot_tier && op.src == q.slot);
            if (!overwritten) continue;
            if (spill_used_ == spill_.size()) spill_.push_back(std::make_unique<std::byte[]>(cpu_->block_bytes()));
            std::byte* aside = spill_[spill_used_++].get();
            std::memcpy(aside, q.payload, cpu_->block_bytes());
            q.payload = aside;
            ++spilled_;
        }
    }

    // Sends the queued batch and reads its replies; returns the ops done.
    std::size_t send() {
        if (queue_.empty()) return 0;
        // However it ends, the batch is over: nothing of it is left queued
        // for the next one to report on.
        struct end_of_batch {
            engine* e;
            ~end_of_batch() { e->clear_batch(); }
        } const ender{this};
        cmds_.clear();
        sinks_.clear();
        heads_in_.clear();
        std::size_t gets = 0;
        for (const queued& q : queue_) gets += q.is_set ? 0 : 1;
        sinks_.reserve(gets);  // stable: commands point at them
        heads_in_.resize(gets);
        std::size_t set_at = 0;
        const std::size_t item_bytes = cpu_->block_bytes();
        for (const queued& q : queue_) {
            const std::string_view key(keys_.data() + q.key_pos, q.key_len);
            if (q.is_set) {
                const auto head = std::as_bytes(std::span<const remote_value_header, 1>(&headers_[set_at++], 1));
                cmds_.push_back({"SET", key, head, std::span<const std::byte>(q.payload, item_bytes)});
            } else {
                sinks_.push_back(
                    {std::as_writable_bytes(std::span<remote_value_header, 1>(&heads_in_[sinks_.size()], 1)),
                     cpu_->block(q.slot)});
                cmds_.push_back({"GET", key, {}, {}, &sinks_.back()});
            }
        }
        std::size_t done = 0;
        const remote_namespace& ns = store_->config().ns;
        store_->run(cmds_, [&](std::size_t j, reply_ptr reply) {
            const queued& q = queue_[j];
            const redisReply* r = reply.get();
            bool ok = false;
            if (q.is_set) {
                ok = r != nullptr && r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
                bytes_sent_ += ok ? remote_value_header::size + item_bytes : 0;
            } else {
                const bulk_sink& sink = *cmds_[j].into;
                const std::span<std::byte> dst = cpu_->block(q.slot);
                if (sink.filled) {  // the length was right; the header and the checksum say the rest
                    const remote_value_header& h = heads_in_[static_cast<std::size_t>(&sink - sinks_.data())];
                    ok = check_remote_header(h, ns, ns_hash_, q.key, dst.size()) == remote_value_check::ok &&
                         sink.body_checksum == h.checksum && check_remote_mac(h, ns, dst) == remote_value_check::ok;
                    rejected_ += ok ? 0 : 1;
                } else if (r != nullptr && r->type == REDIS_REPLY_STRING) {  // a value of another length: refused
                    const auto value = std::as_bytes(std::span<const char>(r->str, r->len));
                    ok = verify_and_copy_remote_value(value, ns, ns_hash_, q.key, dst) == remote_value_check::ok;
                    rejected_ += ok ? 0 : 1;
                }
                bytes_received_ += ok ? remote_value_header::size + item_bytes : 0;
                if (!ok) std::memset(dst.data(), 0xee, dst.size());
            }
            status_[q.op] = ok ? transfer_status::done : transfer_status::failed;
            done += ok ? 1 : 0;
        });
        ++round_trips_;
        return done;
    }

    void clear_batch() noexcept {
        queue_.clear();
        headers_.clear();
        keys_.clear();
        queued_bytes_ = 0;
        spill_used_ = 0;
        if (++epoch_ == 0) {  // the marks' epochs wrapped: clear them, so no old mark reads as current
            std::fill(fetch_mark_.begin(), fetch_mark_.end(), 0);
            for (auto& m : set_mark_) std::fill(m.begin(), m.end(), 0);
            epoch_ = 1;
        }
    }

    host_memcpy_engine local_;
    block_arena* gpu_;
    block_arena* cpu_;
    store* store_;
    std::uint64_t ns_hash_;
    std::string key_prefix_;                              // the namespace's key prefix, made once
    std::uint32_t epoch_ = 1;                             // the current batch, for the marks below
    std::vector<std::uint32_t> fetch_mark_;               // [cpu slot]: epoch_ when a queued GET fills it
    std::array<std::vector<std::uint32_t>, 2> set_mark_;  // [gpu, cpu][slot]: epoch_ when a queued SET reads it
    std::span<transfer_status> status_;
    std::vector<queued> queue_;
    std::vector<remote_value_header> headers_;   // the queued SETs' headers, in order
    std::vector<remote_value_header> heads_in_;  // the queued GETs' headers as read
    std::vector<bulk_sink> sinks_;
    std::vector<std::unique_ptr<std::byte[]>> spill_;  // write-backs' bytes copied aside, reused across batches
    std::size_t spill_used_ = 0;
    std::string keys_;  // the queued ops' key texts, back to back
    std::vector<command> cmds_;
    std::size_t queued_bytes_ = 0;
    std::size_t round_trips_ = 0;
    std::size_t bytes_sent_ = 0;
    std::size_t bytes_received_ = 0;
    std::size_t rejected_ = 0;
    std::size_t spilled_ = 0;
};

static_assert(remote_transfer_engine<engine>);

}  // namespace kvpolicy::redis
