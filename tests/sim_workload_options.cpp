// chat_workload_config::set (sim/workload.hpp): the workload's options by
// the names kvpolicy.simulate takes, each reaching its field; another name
// is refused listing them.
#include <catch2/catch.hpp>

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
