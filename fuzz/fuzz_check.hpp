// How a harness reports a broken property: it prints what broke (and the
// context the harness set, e.g. the composition under test) and aborts, so
// libFuzzer saves the input as a crash and the replay build fails its CTest.
// A sanitizer report or an uncaught exception ends the run the same way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace kvpolicy::fuzzing {

[[noreturn]] inline void fail(std::string_view what, std::string_view context = {}) {
    std::string message = "\nkvpolicy fuzz: property failed: " + std::string(what) + "\n";
    if (!context.empty()) message += "  while " + std::string(context) + "\n";
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    std::abort();
}

inline void require(bool ok, std::string_view what) {
    if (!ok) fail(what);
}

/// The differential driver's checker (tests/support/differential_driver.hpp).
struct abort_checker {
    std::string context;
    void require(bool ok, std::string_view what) const {
        if (!ok) fail(what, context);
    }
};

}  // namespace kvpolicy::fuzzing
