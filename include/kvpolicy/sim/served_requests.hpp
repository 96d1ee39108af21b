// The order a one-instance request replay serves its requests in, and the
// waiting queue each one starts with (request_replay_config::lookahead,
// serve_rate): what replay_requests and replay_offload share, so that both
// engines see the same queue on the same trace and load.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/replay_config.hpp"
#include "kvpolicy/sim/replay_result.hpp"
#include "kvpolicy/sim/request_times.hpp"

namespace kvpolicy::sim {

/// A request read from the source and not yet served.
struct pending_request {
    request_record req;
    std::size_t index = 0;  ///< its position in the trace
    timestamp now = 0;      ///< its time on the replay's clock
    session_id session{};   ///< named by the trace, else derived (session_deriver)
    bool queued = false;    ///< the cache has been told it waits
};

/// Reads `source` ahead as far as the queue model needs. With `lookahead`
/// D, the D requests after the one starting are queued; with `serve_rate`,
/// one instance prefills `serve_rate` uncached tokens a second, requests
/// start in arrival order once the previous one is done, and those arrived
/// by then are queued. Neither: no queue.
template <class RequestSource>
class served_requests {
public:
    /// Throws: config_error for both a lookahead and a serve rate, or a
    /// serve rate that is negative or not finite.
    served_requests(RequestSource& source, const request_replay_config& cfg, const request_times* times)
            : source_(source), cfg_(cfg), times_(times) {
        if (cfg.lookahead > 0 && cfg.serve_rate > 0)
            throw config_error("the waiting queue: give a lookahead or a serve rate, not both");
        if (cfg.serve_rate < 0 || !std::isfinite(cfg.serve_rate))
            throw config_error("serve rate " + std::to_string(cfg.serve_rate) +
                               " tokens/s: give a finite rate > 0 (or 0 for no queue)");
    }

    /// Whether the queue is modelled at all.
    [[nodiscard]] bool queue_modelled() const noexcept { return cfg_.lookahead > 0 || cfg_.serve_rate > 0; }

    /// Moves the next request to serve into `out`, first calling
    /// `enqueue(pending_request&)` once for each request that has joined
    /// the queue by the time it starts. False when the source is done.
    template <class Enqueue>
    bool next(pending_request& out, Enqueue&& enqueue) {
        if (ahead_.empty() && !read_one()) return false;
        start_ = 0;
        if (cfg_.lookahead > 0) {
            while (ahead_.size() <= cfg_.lookahead && read_one()) {}
        } else if (cfg_.serve_rate > 0) {
            start_ = std::max(seconds(ahead_.front()), free_at_);
            while (seconds(ahead_.back()) <= start_ && read_one()) {}
        }
        if (queue_modelled()) {
            std::uint32_t depth = 0;
            for (std::size_t k = 1; k < ahead_.size(); ++k) {
                pending_request& q = ahead_[k];
                if (cfg_.serve_rate > 0 && seconds(q) > start_) break;
                ++depth;
                if (!q.queued) enqueue(q);
                q.queued = true;
            }
            depths_.push_back(depth);
        }
        out = std::move(ahead_.front());
        ahead_.pop_front();
        return true;
    }

    /// The request just started prefills `uncached_tokens` (serve_rate: the
    /// instance is busy until then; 0: free at once).
    void served(std::uint64_t uncached_tokens) noexcept {
        free_at_ = start_ + (cfg_.serve_rate > 0 ? static_cast<double>(uncached_tokens) / cfg_.serve_rate : 0.0);
    }

    /// The queue depths seen, into `r` (mean, p50, p99), where modelled.
    void report(replay_result& r) {
        r.queue_modelled = queue_modelled();
        if (depths_.empty()) return;
        double sum = 0;
        for (std::uint32_t d : depths_) sum += d;
        r.queue_depth_mean = sum / static_cast<double>(depths_.size());
        auto quantile = [&](double q) {
            const auto k = static_cast<std::ptrdiff_t>(q * static_cast<double>(depths_.size() - 1));
            std::nth_element(depths_.begin(), depths_.begin() + k, depths_.end());
            return static_cast<std::size_t>(depths_[static_cast<std::size_t>(k)]);
        };
        r.queue_depth_p50 = quantile(0.5);
        r.queue_depth_p99 = quantile(0.99);
    }

private:
    static double seconds(const pending_request& p) noexcept {
        return static_cast<double>(p.req.timestamp_ms) / 1000.0;
    }
    bool read_one() {
        pending_request p;
        if (!source_.next(p.req)) return false;
        p.index = read_++;
        now_ = times_ ? times_->now[p.index] : request_time(now_, p.req.timestamp_ms);
        p.now = now_;
        p.session = session_id{p.req.has_session ? p.req.session : sessions_.session_of(p.req, cfg_.block_size)};
        ahead_.push_back(std::move(p));
        return true;
    }

    RequestSource& source_;
    const request_replay_config& cfg_;
    const request_times* times_;
    std::deque<pending_request> ahead_;  // the first is served next, the others queued once arrived
    std::size_t read_ = 0;
    timestamp now_ = 0;
    session_deriver sessions_;
    double start_ = 0;    // serve_rate: when the request being served started
    double free_at_ = 0;  // serve_rate: when the instance is done with it
    std::vector<std::uint32_t> depths_;
};

}  // namespace kvpolicy::sim
