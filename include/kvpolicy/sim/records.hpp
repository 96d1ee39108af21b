// What the trace readers hand the replay engines: a request of a Mooncake
// trace, a row of a block-access CSV, and the bad lines a reader skipped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::sim {

/// One request of a Mooncake-format trace.
struct request_record {
    std::uint64_t timestamp_ms = 0;
    std::uint64_t input_length = 0;
    std::uint64_t output_length = 0;
    std::uint64_t session = 0;
    bool has_session = false;
    std::vector<std::uint64_t> hash_ids;  ///< per-block prefix hashes, in order
    std::size_t line = 0;                 ///< where it came from
};

/// One row of a block-access CSV.
struct access_record {
    std::uint64_t time = 0;
    std::uint64_t obj_id = 0;
    std::uint64_t obj_size = 1;
};

/// Bad lines seen with skip_bad_lines on.
struct bad_line_report {
    std::size_t count = 0;
    std::vector<std::string> first_messages;  ///< up to 5

    void add(const parse_error& e) {
        ++count;
        if (first_messages.size() < 5) first_messages.emplace_back(e.what());
    }
};

}  // namespace kvpolicy::sim
