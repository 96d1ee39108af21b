// critical_path: how long a request waits for its KV to be ready, with seed
// 000's layer-wise pipeline, the figure retention_value's weights claim to
// minimise.
//
// The forward pass runs the model's layers in order. Before layer l can
// compute, its KV for the cached prefix must be on the GPU: the copies from
// the CPU tier run on a copy stream in layer order from the start of the
// step, so layer l's copies overlap the compute of layers 0..l-1 (Pensieve,
// Yu et al., EuroSys'25, §4.3.2). What the cache does not serve is computed
// at every layer: the request's blocks from the first one not cached in
// either tier (a prefix cache recomputes from there on, whatever later blocks
// it still holds, and a block with any layer missing is recomputed whole).
//
//     loaded(l)   = loaded(l-1) + load(l)
//     computed(l) = max(computed(l-1), loaded(l)) + compute(l)
//     ready       = computed(last layer)
//
// So a back layer's reload hides behind the compute of the layers before it,
// and a front layer's does not: that is what makes pipelined_depth right for
// the GPU tier's choice of what to shelter in the CPU tier. A recompute hides
// behind nothing: to rebuild layer l of a chunk the chunk's tokens must pass
// through layers 0..l, so a dropped back layer costs the chunk's whole forward
// pass, not a 1/num_layers share of it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvpolicy::sim {

/// One layer's (or one pipeline stage's) work for one request, in seconds.
struct stage_work {
    double load_s = 0;     ///< CPU -> GPU copies of this layer's cached KV
    double compute_s = 0;  ///< this layer's forward pass over the blocks not served

    friend constexpr bool operator==(const stage_work&, const stage_work&) noexcept = default;
};

/// Seconds from the start of a request's step until its KV is ready at every
/// layer: copies on one stream in stage order from time 0, each stage's
/// compute after the previous stage's compute and its own copies (the
/// recurrence in the header comment). Complexity: O(stages).
[[nodiscard]] inline double pipelined_ready_time(std::span<const stage_work> stages) noexcept {
    double loaded = 0;
    double computed = 0;
    for (const stage_work& s : stages) {
        loaded += s.load_s;
        computed = std::max(computed, loaded) + s.compute_s;
    }
    return computed;
}

/// Per-request ready times of a replay: total, mean and p99.
class ready_time_stats {
public:
    void add(double seconds) {
        times_.push_back(seconds);
        total_ += seconds;
    }
    [[nodiscard]] double total() const noexcept { return total_; }
    [[nodiscard]] std::size_t count() const noexcept { return times_.size(); }
    [[nodiscard]] double mean() const noexcept {
        return times_.empty() ? 0.0 : total_ / static_cast<double>(times_.size());
    }
    /// The nearest-rank quantile (`q` in [0, 1]): the smallest time that at
    /// least q of the requests do not exceed. Reorders the stored times.
    [[nodiscard]] double quantile(double q) {
        if (times_.empty()) return 0.0;
        const auto n = static_cast<double>(times_.size());
        const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
        const auto k = static_cast<std::ptrdiff_t>(std::min(rank, times_.size()) - 1);
        std::nth_element(times_.begin(), times_.begin() + k, times_.end());
        return times_[static_cast<std::size_t>(k)];
    }

private:
    std::vector<double> times_;
    double total_ = 0;
};

}  // namespace kvpolicy::sim
