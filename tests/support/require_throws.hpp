// The bad-input tests' one assertion: a call throws exactly the error the
// catalogue promises, word for word.
#pragma once

#include <catch2/catch.hpp>

#include <string>

namespace kvpolicy::testing {

/// Runs `f`, which must throw an `E` (or a subclass) whose message is `message`.
template <class E, class F>
void require_throws(F&& f, const std::string& message) {
    bool thrown = false;
    try {
        f();
    } catch (const E& e) {
        thrown = true;
        REQUIRE(std::string(e.what()) == message);
    }
    REQUIRE(thrown);
}

}  // namespace kvpolicy::testing
