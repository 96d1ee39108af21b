// Access and request sources held in memory, for the replay engines:
// accesses with their next uses (Belady's input), a request stream read
// as flat block accesses, and requests from a vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/sim/records.hpp"

namespace kvpolicy::sim {

/// An access stream in memory, with each access's next use (for Belady).
struct oracle_accesses {
    std::vector<std::uint64_t> keys;
    std::vector<std::uint32_t> sizes;
    std::vector<timestamp> next_use;  ///< index of the key's next access, or `never`

    /// Fills `next_use` with one backward pass.
    void compute_next_use() {
        next_use.assign(keys.size(), never);
        std::unordered_map<std::uint64_t, timestamp> seen;
        seen.reserve(keys.size() / 4 + 16);
        for (std::size_t i = keys.size(); i-- > 0;) {
            auto [it, fresh] = seen.try_emplace(keys[i], static_cast<timestamp>(i + 1));
            if (!fresh) {
                next_use[i] = it->second;
                it->second = static_cast<timestamp>(i + 1);
            }
        }
    }
};

/// Reads an oracle stream back as access records.
class oracle_source {
public:
    explicit oracle_source(const oracle_accesses& a) : a_(&a) {}
    bool next(access_record& out) noexcept {
        if (i_ == a_->keys.size()) return false;
        out.obj_id = a_->keys[i_];
        out.obj_size = a_->sizes.empty() ? 1 : a_->sizes[i_];
        ++i_;
        return true;
    }

private:
    const oracle_accesses* a_;
    std::size_t i_ = 0;
};

/// Flat accesses of a request stream: each hash id, in order.
template <class RequestSource>
class flattened_requests {
public:
    explicit flattened_requests(RequestSource& s) : source_(&s) {}
    bool next(access_record& out) {
        while (i_ == request_.hash_ids.size()) {
            if (!source_->next(request_)) return false;
            i_ = 0;
        }
        out.time = request_.timestamp_ms;
        out.obj_id = request_.hash_ids[i_++];
        out.obj_size = 1;
        return true;
    }
    /// As csv_reader::next_batch: 0 only at the end.
    std::size_t next_batch(std::span<access_record> out) {
        std::size_t n = 0;
        while (n < out.size()) {
            if (i_ == request_.hash_ids.size()) {
                if (n > 0 || !source_->next(request_)) break;  // an error never takes rows with it
                i_ = 0;
                continue;
            }
            const std::size_t take = std::min(out.size() - n, request_.hash_ids.size() - i_);
            for (std::size_t k = 0; k < take; ++k) out[n + k] = {request_.timestamp_ms, request_.hash_ids[i_ + k], 1};
            n += take;
            i_ += take;
        }
        return n;
    }

private:
    RequestSource* source_;
    request_record request_;
    std::size_t i_ = 0;
};

/// Requests held in memory (the built-in workload, or a trace read for Belady).
class vector_request_source {
public:
    explicit vector_request_source(const std::vector<request_record>& r) : requests_(&r) {}
    bool next(request_record& out) {
        if (i_ == requests_->size()) return false;
        out = (*requests_)[i_++];
        return true;
    }

private:
    const std::vector<request_record>* requests_;
    std::size_t i_ = 0;
};

}  // namespace kvpolicy::sim
