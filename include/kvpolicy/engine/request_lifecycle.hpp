// request_lifecycle: the engine's requests, as a KV connector sees them
// come and go, turned into exactly the waiting queue a queue-aware policy
// needs (cache_policy_core::enqueue / dequeue).
//
// vLLM's scheduler tells a connector of every request three ways: on
// arrival (`on_new_request`, its block hashes already computed), when it is
// scheduled (`build_connector_meta`: new and resumed requests), and when it
// ends, finished or aborted (`request_finished`); a preempted request goes
// back to the waiting queue and is scheduled again later. So a request is
// waiting (queued: the policy keeps what it reads), running (not queued), or
// gone:
//
//   arrive:   (none)  -> waiting    enqueue
//   schedule: waiting -> running    dequeue
//   preempt:  running -> waiting    enqueue again (at the back: see below)
//   finish:   waiting -> (none)     dequeue;  running -> (none)
//
// Anything else is the engine telling us something we cannot use (an id
// never seen, a second arrival, a second schedule, a call after the end):
// it is ignored with a reason the caller logs, and nothing changes. A
// connector runs inside the engine's scheduler loop, where an exception
// would stop serving for a bookkeeping slip, so no call here throws for
// such an event.
//
// Behind a GPU prefix cache (`forecast_front_cache`), a request tells the
// queue only its keys past the hit that GPU cache is forecast to give it
// when it starts (front_cache_forecast.hpp says how, and why a CPU tier
// should not keep what the GPU will serve). A connector sees no block pool,
// so a request that ran stays in the forecast after it ends (`end`): its
// blocks stand for the GPU's free list's.
//
// Departure: a preempted request is queued again behind every waiting one
// (a new arrival position), though vLLM puts it at the front. Which
// requests are queued, and so which blocks are kept, is exact; only the
// order among queued blocks, used when nothing unqueued is left to evict,
// treats it as later than it is.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/access_context.hpp"
#include "kvpolicy/core/ids.hpp"
#include "kvpolicy/engine/front_cache_forecast.hpp"

namespace kvpolicy::engine {

/// What request_lifecycle does with the queue: cache_policy_core's calls.
template <class Q>
concept request_queue = requires(Q& q, std::uint64_t request, session_id session, std::span<const std::uint64_t> keys,
                                 const access_context& ctx) {
    q.enqueue(request, session, keys);
    q.dequeue(request, ctx);
};

enum class request_state : std::uint8_t { waiting, running };

/// The outcome of one event: applied, or ignored with the reason.
struct lifecycle_result {
    bool applied = true;
    std::string reason;  ///< why it was ignored (empty when applied)

    explicit operator bool() const noexcept { return applied; }
};

template <request_queue Queue>
class request_lifecycle {
public:
    explicit request_lifecycle(Queue& queue) noexcept : queue_(&queue) {}

    /// From now on, a request tells the queue only its keys past the hit
    /// forecast for a GPU prefix cache of `gpu_blocks` keys in front of the
    /// queue's tier (front_cache_forecast); 0: every key (the default).
    /// Requests here already join the forecast when they are preempted.
    void forecast_front_cache(std::size_t gpu_blocks) {
        forecast_.reset();
        if (gpu_blocks != 0) forecast_.emplace(gpu_blocks);
    }
    [[nodiscard]] std::size_t front_cache_blocks() const noexcept { return forecast_ ? forecast_->gpu_blocks() : 0; }

    /// A request arrived: waiting, reading `keys` (its offload keys, in
    /// block order). Ignored if `id` is known already.
    lifecycle_result arrive(std::string_view id, session_id session, std::span<const std::uint64_t> keys) {
        if (requests_.contains(id)) return ignored("arrive", id, "arrived already; a request id is used once");
        const std::uint64_t serial = next_serial_++;
        queue_->enqueue(serial, session, past_front_cache(serial, keys));
        requests_.emplace(std::string(id), entry{serial, serial, session, request_state::waiting, false});
        ++waiting_;
        return {};
    }

    /// The scheduler started it (new, or resumed after a preemption).
    /// Ignored for an unknown id or one already running.
    lifecycle_result schedule(std::string_view id, const access_context& ctx) {
        const auto it = requests_.find(id);
        if (it == requests_.end()) return ignored("schedule", id, "is not known (never arrived, or ended)");
        if (it->second.state == request_state::running) return ignored("schedule", id, "is running already");
        queue_->dequeue(it->second.serial, ctx);
        it->second.state = request_state::running;
        it->second.ran = true;
        --waiting_;
        return {};
    }

    /// The scheduler preempted it: waiting again, reading `keys` (its
    /// blocks now). Ignored for an unknown id or one already waiting.
    lifecycle_result preempt(std::string_view id, std::span<const std::uint64_t> keys) {
        const auto it = requests_.find(id);
        if (it == requests_.end()) return ignored("preempt", id, "is not known (never arrived, or ended)");
        if (it->second.state == request_state::waiting) return ignored("preempt", id, "is waiting already");
        const std::uint64_t serial = next_serial_++;
        queue_->enqueue(serial, it->second.session, past_front_cache(it->second.forecast_id, keys));
        it->second.serial = serial;
        it->second.state = request_state::waiting;
        ++waiting_;
        return {};
    }

    /// It ended (finished, or aborted): forgotten; if it was waiting, the
    /// queue lets go of its blocks. Ignored for an unknown id.
    lifecycle_result finish(std::string_view id, const access_context& ctx) {
        const auto it = requests_.find(id);
        if (it == requests_.end()) return ignored("finish", id, "is not known (never arrived, or ended already)");
        if (it->second.state == request_state::waiting) {
            queue_->dequeue(it->second.serial, ctx);
            --waiting_;
        }
        if (forecast_) {  // one that ran leaves its blocks in the GPU's free list
            if (it->second.ran)
                (void)forecast_->end(it->second.forecast_id);
            else
                (void)forecast_->leave(it->second.forecast_id);
        }
        requests_.erase(it);
        return {};
    }

    /// The state of `id`, or empty if it is not known.
    [[nodiscard]] std::optional<request_state> state(std::string_view id) const {
        const auto it = requests_.find(id);
        if (it == requests_.end()) return std::nullopt;
        return it->second.state;
    }
    /// The session `id` arrived with, or empty if it is not known.
    [[nodiscard]] std::optional<session_id> session(std::string_view id) const {
        const auto it = requests_.find(id);
        if (it == requests_.end()) return std::nullopt;
        return it->second.session;
    }
    [[nodiscard]] std::size_t waiting() const noexcept { return waiting_; }
    [[nodiscard]] std::size_t running() const noexcept { return requests_.size() - waiting_; }

private:
    struct entry {
        std::uint64_t serial;       // the queue's request id for its current wait
        std::uint64_t forecast_id;  // its id in the forecast: its first serial
        session_id session;
        request_state state;
        bool ran;  // scheduled at least once
    };

    std::span<const std::uint64_t> past_front_cache(std::uint64_t forecast_id, std::span<const std::uint64_t> keys) {
        if (!forecast_) return keys;
        return keys.subspan(forecast_->join(forecast_id, keys, [](std::uint64_t) { return false; }));
    }

    static lifecycle_result ignored(const char* event, std::string_view id, const char* why) {
        return {false, std::string(event) + ": request '" + std::string(id) + "' " + why + "; ignored"};
    }

    // Heterogeneous lookup: an event's id is looked up without a copy.
    struct id_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view id) const noexcept { return std::hash<std::string_view>{}(id); }
    };

    Queue* queue_;
    std::optional<front_cache_forecast> forecast_;
    std::unordered_map<std::string, entry, id_hash, std::equal_to<>> requests_;
    std::uint64_t next_serial_ = 0;
    std::size_t waiting_ = 0;
};

}  // namespace kvpolicy::engine
