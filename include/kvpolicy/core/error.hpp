// Errors and the error policy.
//
// The policy, in four rules:
//
// 1. Bad input and misuse throw. Configuration that cannot work (capacity 0, a
//    NaN or negative cost parameter) throws `config_error` from the
//    constructor. A call that breaks the protocol (double release, release of
//    an unknown block, pin of a dropped block) throws `usage_error`. A request
//    that cannot be met (more blocks than are evictable) throws
//    `capacity_error`. A malformed input file throws `parse_error`, which
//    names file and line.
// 2. Validate, then mutate: a public call that throws leaves every object
//    exactly as it was before the call. Tests check this for every error.
// 3. Queries that may find nothing return `std::optional` (or a count); they
//    do not throw. Finding no victim in an empty policy is not an error.
// 4. Policy hot-path members (`on_insert`, `on_access`, ...) have
//    preconditions instead of checks: the cache validates before it calls
//    them. Debug builds check the preconditions with KVPOLICY_ASSERT.
//
// Every message names the bad input and says how to fix it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvpolicy {

/// Base of every error kvpolicy throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A configuration value that cannot work.
class config_error : public error {
public:
    using error::error;
};

/// A name given at run time that no registered type has.
class unknown_name_error : public config_error {
public:
    using config_error::config_error;
};

/// A call that breaks the protocol of the object it is made on.
class usage_error : public error {
public:
    using error::error;
};

/// A request that cannot be met with what the cache holds.
class capacity_error : public error {
public:
    using error::error;
};

/// A malformed line of an input file: `file:line: reason`.
class parse_error : public error {
public:
    parse_error(std::string file, std::size_t line, const std::string& reason)
            : error(file + ":" + std::to_string(line) + ": " + reason),
              file_(std::move(file)),
              line_(line),
              reason_(reason) {}

    [[nodiscard]] const std::string& file() const noexcept { return file_; }
    [[nodiscard]] std::size_t line() const noexcept { return line_; }
    [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

private:
    std::string file_;
    std::size_t line_;
    std::string reason_;
};

namespace detail {
[[noreturn]] inline void assertion_failed(const char* expr, const char* file, int line) noexcept {
    std::fprintf(stderr, "%s:%d: kvpolicy precondition failed: %s\n", file, line, expr);
    std::abort();
}
}  // namespace detail

}  // namespace kvpolicy

// Precondition checks on hot paths: on in debug builds, or when
// KVPOLICY_ENABLE_ASSERTS is defined (the sanitizer preset defines it).
#if !defined(NDEBUG) || defined(KVPOLICY_ENABLE_ASSERTS)
#define KVPOLICY_ASSERT(expr) \
    ((expr) ? static_cast<void>(0) : ::kvpolicy::detail::assertion_failed(#expr, __FILE__, __LINE__))
#else
#define KVPOLICY_ASSERT(expr) static_cast<void>(0)
#endif
