// chat_workload_config::set (sim/workload.hpp) and run_options::set (the
// prefill cost's figures too): the options by the names kvpolicy.simulate
// takes, each reaching its field; another name is refused listing them.
#include <catch2/catch.hpp>

#include <kvpolicy/sim/run_options.hpp>
#include <kvpolicy/sim/workload.hpp>

using namespace kvpolicy;

TEST_CASE("chat_workload_config::set reaches each field by its name", "[sim]") {
    sim::chat_workload_config w;
    w.set("sessions", 7);
    w.set("session_rate", 2.5);
    w.set("turns", 3);
    w.set("prompt_tokens", 100);
    w.set("answer_tokens", 50);
    w.set("think_time", 4);
    w.set("system_prompt_tokens", 64);
    w.set("system_prompts", 2);
    REQUIRE(w.sessions == 7);
    REQUIRE(w.session_rate_per_s == 2.5);
    REQUIRE(w.mean_turns == 3);
    REQUIRE(w.mean_prompt_tokens == 100);
    REQUIRE(w.mean_answer_tokens == 50);
    REQUIRE(w.mean_think_time_s == 4);
    REQUIRE(w.system_prompt_tokens == 64);
    REQUIRE(w.system_prompts == 2);
    REQUIRE_THROWS_WITH(w.set("sesions", 3), Catch::StartsWith("unknown option 'sesions'; workload options: sessions"));
}

TEST_CASE("run_options::set reaches the prefill cost's figures and the workload's options by name", "[sim]") {
    sim::run_options o;
    o.set("alpha", 1e-9);
    o.set("beta", 2e-9);
    o.set("const", 3e-5);
    o.set("bandwidth", 50);
    o.set("remote_bandwidth", 6);
    o.set("kv_bytes_per_token", 4096);
    o.set("sessions", 9);
    REQUIRE(o.cost.alpha == 1e-9);
    REQUIRE(o.cost.beta == 2e-9);
    REQUIRE(o.cost.constant == 3e-5);
    REQUIRE(o.cost.bandwidth_gbps == 50);
    REQUIRE(o.cost.remote_bandwidth_gbps == 6);
    REQUIRE(o.cost.kv_bytes_per_token == 4096);
    REQUIRE(o.workload.sessions == 9);
    REQUIRE_FALSE(o.cost.set("sessions", 1));  // not a cost figure: nothing set
    REQUIRE_THROWS_WITH(o.set("alhpa", 1),
                        "unknown option 'alhpa'; workload options: sessions, session_rate, turns, prompt_tokens, "
                        "answer_tokens, think_time, system_prompt_tokens, system_prompts; prefill cost options: "
                        "alpha, beta, const, bandwidth, remote_bandwidth, kv_bytes_per_token");
}
