// The simulator's built-in workload: multi-turn chat sessions.
//
// Sessions arrive as a Poisson process. Each has a number of turns; a turn
// sends the whole conversation so far (a shared system prompt, then every
// earlier prompt and answer) plus a new prompt, and the answer is appended
// to the history. Between turns the user thinks. So consecutive turns of a
// session share ever longer prefixes, and all sessions share the system
// prompt: the two kinds of reuse a prefix cache exists for.
//
// Where the default numbers come from:
// - prompt and answer lengths: lognormal with the means of ShareGPT reported
//   in the vLLM paper (Kwon et al., SOSP'23, section 6.1: 161.31 input and
//   337.99 output tokens on average); sigma 1.0 gives ShareGPT's long tail;
// - turns: geometric with mean 4 (ShareGPT conversations average a few
//   rounds; multi-turn reuse is the point of the workload);
// - system prompt: 1024 tokens, one of 4 (a deployment serves a few
//   assistants); think time: exponential, mean 30 s; arrivals: 0.5
//   sessions/s. These three are assumptions, to be set from the command line.
// Everything is seeded: the same config gives the same requests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/item_key.hpp"
#include "kvpolicy/sim/trace.hpp"

namespace kvpolicy::sim {

struct chat_workload_config {
    std::uint32_t sessions = 200;
    double session_rate_per_s = 0.5;     ///< Poisson arrivals
    double mean_turns = 4;               ///< geometric, at least 1
    double mean_prompt_tokens = 161.31;  ///< per turn (vLLM paper, ShareGPT)
    double mean_answer_tokens = 337.99;  ///< per turn (vLLM paper, ShareGPT)
    double length_sigma = 1.0;           ///< lognormal shape of both lengths
    double mean_think_time_s = 30;       ///< exponential, between a session's turns
    std::uint32_t system_prompt_tokens = 1024;
    std::uint32_t system_prompts = 4;  ///< distinct system prompts, chosen uniformly
    std::uint32_t block_size = 16;     ///< tokens per block
    std::uint64_t seed = 1;

    /// Sets the field `name` (kvpolicy.simulate's workload={...} names:
    /// sessions, session_rate, turns, prompt_tokens, answer_tokens,
    /// think_time, system_prompt_tokens, system_prompts) to `v`. Throws:
    /// config_error for another name, listing these.
    void set(std::string_view name, double v) {
        const auto count = [v] { return static_cast<std::uint32_t>(v); };
        if (name == "sessions")
            sessions = count();
        else if (name == "session_rate")
            session_rate_per_s = v;
        else if (name == "turns")
            mean_turns = v;
        else if (name == "prompt_tokens")
            mean_prompt_tokens = v;
        else if (name == "answer_tokens")
            mean_answer_tokens = v;
        else if (name == "think_time")
            mean_think_time_s = v;
        else if (name == "system_prompt_tokens")
            system_prompt_tokens = count();
        else if (name == "system_prompts")
            system_prompts = count();
        else
            throw config_error("unknown option '" + std::string(name) +
                               "'; workload options: sessions, session_rate, turns, prompt_tokens, "
                               "answer_tokens, think_time, system_prompt_tokens, system_prompts");
    }

    /// Throws: config_error naming the bad field.
    void validate() const {
        auto positive = [](double v, const char* name) {
            if (!(v > 0) || !std::isfinite(v))
                throw config_error(std::string("workload: ") + name + " must be a positive number");
        };
        if (sessions == 0) throw config_error("workload: sessions must be at least 1");
        positive(session_rate_per_s, "session rate");
        if (!(mean_turns >= 1)) throw config_error("workload: mean turns must be at least 1");
        positive(mean_prompt_tokens, "mean prompt tokens");
        positive(mean_answer_tokens, "mean answer tokens");
        if (!(length_sigma >= 0) || !std::isfinite(length_sigma))
            throw config_error("workload: length sigma must be a finite number >= 0");
        if (!(mean_think_time_s >= 0)) throw config_error("workload: think time must be >= 0");
        if (system_prompts == 0) throw config_error("workload: system prompts must be at least 1");
        if (block_size == 0) throw config_error("workload: block size must be at least 1");
    }
};

/// The workload's requests in time order, each with the hash ids of its
/// full blocks (partial last blocks are not cached, as in vLLM).
inline std::vector<request_record> generate_chat_workload(const chat_workload_config& cfg) {
    cfg.validate();
    std::mt19937_64 rng(cfg.seed);
    std::exponential_distribution<double> gap(cfg.session_rate_per_s);
    std::exponential_distribution<double> think(cfg.mean_think_time_s > 0 ? 1.0 / cfg.mean_think_time_s : 1e9);
    std::geometric_distribution<std::uint32_t> extra_turns(1.0 / cfg.mean_turns);
    auto lognormal = [&](double mean) {
        const double mu = std::log(mean) - cfg.length_sigma * cfg.length_sigma / 2;
        std::lognormal_distribution<double> d(mu, cfg.length_sigma);
        return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(d(rng))));
    };
    std::uniform_int_distribution<std::uint32_t> pick_prompt(0, cfg.system_prompts - 1);

    const std::uint64_t shared_blocks = cfg.system_prompt_tokens / cfg.block_size;
    std::vector<request_record> out;
    double arrival = 0;
    for (std::uint32_t s = 0; s < cfg.sessions; ++s) {
        arrival += gap(rng);
        const std::uint32_t prompt_id = pick_prompt(rng);
        const std::uint32_t turns = 1 + extra_turns(rng);
        std::uint64_t history = cfg.system_prompt_tokens;  // tokens before this turn's prompt
        double t = arrival;
        for (std::uint32_t turn = 0; turn < turns; ++turn) {
            request_record r;
            r.timestamp_ms = static_cast<std::uint64_t>(t * 1000.0);
            r.input_length = history + lognormal(cfg.mean_prompt_tokens);
            r.output_length = lognormal(cfg.mean_answer_tokens);
            r.session = s;
            r.has_session = true;
            const std::uint64_t blocks = r.input_length / cfg.block_size;
            r.hash_ids.reserve(blocks);
            for (std::uint64_t b = 0; b < blocks; ++b) {
                // A block's content is fixed by its session (or system prompt)
                // and position, so equal ids mean equal prefixes.
                // The top bit keeps system-prompt ids and session ids apart;
                // mix64 is a bijection, so distinct inputs give distinct ids.
                r.hash_ids.push_back(b < shared_blocks
                                         ? mix64((std::uint64_t{1} << 63) | (std::uint64_t{prompt_id} << 32) | b)
                                         : mix64((std::uint64_t{s} << 32) | (b & 0xffffffffULL)));
            }
            history = r.input_length + r.output_length;
            out.push_back(std::move(r));
            t += think(rng);
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const request_record& a, const request_record& b) { return a.timestamp_ms < b.timestamp_ms; });
    for (std::size_t i = 0; i < out.size(); ++i) out[i].line = i + 1;
    return out;
}

}  // namespace kvpolicy::sim
