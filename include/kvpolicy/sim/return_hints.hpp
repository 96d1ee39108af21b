// Return hints for the replay (tiered_cache::release's expected_return):
// from the trace's future (each session's next request, or only its end),
// or read from a file of an engine's own predictions, to measure what such
// hints are worth.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <istream>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvpolicy/core/clock.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/request_times.hpp"

namespace kvpolicy::sim {

/// When each request's session makes its next request, on the replay's
/// clock (`never`: it makes none): the hint an engine that knew its
/// sessions' future would pass at each release
/// (tiered_cache::release(session, output_tokens, expected_return)), to
/// measure what such hints are worth. `log_error` > 0 makes each hint's gap
/// (from the request to the next) off by a factor e^(log_error x z), z
/// standard normal from `seed` and the request's index: such a hint explains
/// v / (v + log_error^2) of the variance of the log gap, v its variance (on
/// the agentic trace v = 1.49^2, so 1 explains 69%, 3 explains 20%, about
/// what session_aware_lru's own fit does). Sessions are
/// the trace's, or derived from prefixes as replay_requests derives them.
/// Throws: config_error if `log_error` is negative or not finite.
inline std::vector<timestamp> compute_expected_returns(const std::vector<request_record>& requests,
                                                       std::uint32_t block_size, double log_error = 0.0,
                                                       std::uint64_t seed = 1) {
    if (!(log_error >= 0.0) || !std::isfinite(log_error))
        throw config_error("return hints: log error " + std::to_string(log_error) +
                           " must be finite and >= 0 (0: exact; 1.2: a factor e^1.2 = 3.3 off, one sigma)");
    const std::vector<timestamp> now = request_clock(requests);
    std::vector<std::uint64_t> session(requests.size());
    session_deriver sessions;
    for (std::size_t i = 0; i < requests.size(); ++i)
        session[i] = requests[i].has_session ? requests[i].session : sessions.session_of(requests[i], block_size);
    // A standard normal per request by Box-Muller over two hashed uniforms:
    // the same on every platform, whatever order the runs take.
    auto normal = [seed](std::uint64_t i) {
        auto mix = [](std::uint64_t x) {
            x += 0x9e3779b97f4a7c15ULL;
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
            return x ^ (x >> 31);
        };
        const std::uint64_t a = mix(seed * 0x632be59bd9b4e019ULL + 2 * i), b = mix(a ^ (2 * i + 1));
        const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    };
    std::vector<timestamp> back(requests.size(), never);
    std::unordered_map<std::uint64_t, timestamp> next;  // session -> its next request's time
    for (std::size_t i = requests.size(); i-- > 0;) {
        const auto it = next.find(session[i]);
        if (it != next.end()) {
            double gap = static_cast<double>(it->second - now[i]);
            if (log_error > 0.0) gap *= std::exp(log_error * normal(i));
            back[i] = now[i] + static_cast<timestamp>(std::clamp(gap, 1.0, 1e18));
        }
        next[session[i]] = now[i];
    }
    return back;
}

/// The hints of an engine that knows only when a session ends (its client
/// closed the conversation, its agent finished the task): `never` on each
/// session's last request, 0 (no hint) on the others.
inline std::vector<timestamp> compute_session_ends(const std::vector<request_record>& requests,
                                                   std::uint32_t block_size) {
    std::vector<timestamp> back = compute_expected_returns(requests, block_size);
    for (timestamp& t : back) t = t == never ? never : 0;
    return back;
}

/// Hints an engine's own predictor made, to replay what they are worth: one
/// line per request of `requests`, in order: empty or 0 (no hint), `never`
/// (the session ends), or the milliseconds from the request's timestamp to
/// when its session is expected back (a non-negative number; rounded to the
/// replay's clock, at least one tick ahead). Throws: parse_error naming
/// `name`:line for a line that is none of these, config_error if the line
/// count is not the request count.
inline std::vector<timestamp> parse_expected_returns(std::istream& in, const std::string& name,
                                                     const std::vector<request_record>& requests) {
    std::vector<timestamp> back;
    back.reserve(requests.size());
    timestamp now = 0;
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t n = back.size() + 1;
        const auto first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
        const std::string v = first == std::string::npos ? std::string{} : line.substr(first, last - first + 1);
        if (back.size() == requests.size())
            throw config_error("return hints " + name + ": more lines than the trace's " +
                               std::to_string(requests.size()) + " requests; give one line per request");
        now = request_time(now, requests[back.size()].timestamp_ms);
        if (v.empty() || v == "0") {
            back.push_back(0);
            continue;
        }
        if (v == "never") {
            back.push_back(never);
            continue;
        }
        char* end = nullptr;
        const double ms = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || !(ms >= 0.0) || !std::isfinite(ms))
            throw parse_error(name, n,
                              "'" + v +
                                  "' is not a hint: give milliseconds until the session's next "
                                  "request (a number >= 0), never, or 0 / an empty line for none");
        back.push_back(now + static_cast<timestamp>(std::clamp(std::round(ms * 1000.0), 1.0, 1e18)));
    }
    if (back.size() != requests.size())
        throw config_error("return hints " + name + ": " + std::to_string(back.size()) + " lines for the trace's " +
                           std::to_string(requests.size()) + " requests; give one line per request");
    return back;
}

}  // namespace kvpolicy::sim
