// host_memcpy_engine: a transfer engine that moves real bytes between host
// arenas, one arena per tier.
//
// Tests and the simulator run swap plans through it so that what they check
// is the data, not only the bookkeeping: write a checksum into a block, swap
// it out and back in any number of times, and the checksum must survive. On a
// GPU, the CUDA ring loader takes its place behind the same concept.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/tier.hpp"

namespace kvpolicy {

/// `capacity` blocks of `block_bytes` bytes each, contiguous.
class block_arena {
public:
    /// Throws: config_error if either size is 0.
    block_arena(std::size_t capacity, std::size_t block_bytes) : block_bytes_(block_bytes), capacity_(capacity) {
        if (capacity == 0 || block_bytes == 0)
            throw config_error("block_arena: capacity " + std::to_string(capacity) + " x block_bytes " +
                               std::to_string(block_bytes) + " holds nothing; both must be at least 1");
        bytes_.resize(capacity * block_bytes);
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }

    /// The bytes of block `b`. Precondition: b < capacity().
    [[nodiscard]] std::span<std::byte> block(block_id b) noexcept {
        return {bytes_.data() + b.index() * block_bytes_, block_bytes_};
    }
    [[nodiscard]] std::span<const std::byte> block(block_id b) const noexcept {
        return {bytes_.data() + b.index() * block_bytes_, block_bytes_};
    }

private:
    std::size_t block_bytes_;
    std::size_t capacity_;
    std::vector<std::byte> bytes_;  // [capacity][block_bytes]
};

class host_memcpy_engine {
public:
    /// Arenas for the GPU and CPU tiers (a `remote` op fails: no arena).
    /// Throws: config_error if their block sizes differ.
    host_memcpy_engine(block_arena& gpu, block_arena& cpu) : arenas_{&gpu, &cpu, nullptr} {
        if (gpu.block_bytes() != cpu.block_bytes())
            throw config_error("host_memcpy_engine: gpu blocks have " + std::to_string(gpu.block_bytes()) +
                               " bytes, cpu blocks " + std::to_string(cpu.block_bytes()) + "; make them equal");
    }

    /// Copies each op's block; an op naming a tier without an arena or a block
    /// out of range fails and copies nothing. Ops run in order, so a plan may
    /// swap a block out and then reuse its slot in the same batch.
    /// Throws: usage_error if `status` is shorter than `ops` (nothing copied).
    std::size_t execute(std::span<const block_transfer> ops, std::span<transfer_status> status) {
        if (status.size() < ops.size())
            throw usage_error("host_memcpy_engine::execute: " + std::to_string(status.size()) + " status slots for " +
                              std::to_string(ops.size()) + " ops; give one per op");
        std::size_t done = 0;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const block_transfer& op = ops[i];
            block_arena* from = arenas_[static_cast<std::size_t>(op.from)];
            block_arena* to = arenas_[static_cast<std::size_t>(op.to)];
            const bool ok = from != nullptr && to != nullptr && op.src.index() < from->capacity() &&
                            op.dst.index() < to->capacity() && !(from == to && op.src == op.dst);
            if (ok && op.exchange) {
                bounce_.resize(from->block_bytes());
                std::memcpy(bounce_.data(), to->block(op.dst).data(), bounce_.size());
                std::memcpy(to->block(op.dst).data(), from->block(op.src).data(), bounce_.size());
                std::memcpy(from->block(op.src).data(), bounce_.data(), bounce_.size());
                bytes_moved_ += 2 * from->block_bytes();
                ++done;
            } else if (ok) {
                std::memcpy(to->block(op.dst).data(), from->block(op.src).data(), from->block_bytes());
                bytes_moved_ += from->block_bytes();
                ++done;
            }
            status[i] = ok ? transfer_status::done : transfer_status::failed;
        }
        return done;
    }

    [[nodiscard]] std::size_t bytes_moved() const noexcept { return bytes_moved_; }

private:
    std::array<block_arena*, tier_count> arenas_;
    std::size_t bytes_moved_ = 0;
    std::vector<std::byte> bounce_;  // one block, for exchanges
};

static_assert(transfer_engine<host_memcpy_engine>);

}  // namespace kvpolicy
