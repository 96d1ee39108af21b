// Trace readers for the simulator: Mooncake JSONL requests and block-access
// CSV rows, streamed from plain or gzip files.
//
// Both readers are strict: a malformed line is a `parse_error` naming
// file:line and the reason, and the record passed in is left as it was. With `skip_bad_lines` they count such lines
// instead, keep the first few messages for the report, and go on.
//
// The JSONL parser is written for this one schema
// ({"timestamp", "input_length", "output_length", "hash_ids", "session"},
// other keys skipped) rather than through a general JSON library: replay
// throughput is a headline figure, and a request line is mostly one long
// array of integers.
//
// Parts: records.hpp (what the readers return), line_source.hpp (lines of
// a plain or gzip file), trace_parse.hpp (one line or row); the readers here.
#pragma once

#if defined(__CUDACC__)
#error "kvpolicy/sim headers are host-only (they use zlib); do not include them from .cu files"
#endif

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sim/line_source.hpp"
#include "kvpolicy/sim/records.hpp"
#include "kvpolicy/sim/trace_parse.hpp"

namespace kvpolicy::sim {

/// Requests of a Mooncake-format JSONL (or .jsonl.gz) trace, streamed.
class mooncake_reader {
public:
    /// `buffer_bytes`: the read buffer's starting size (it grows to fit a line).
    mooncake_reader(const std::string& path, bool skip_bad_lines, std::size_t buffer_bytes = std::size_t{1} << 20)
            : lines_(path, buffer_bytes), skip_(skip_bad_lines) {}

    /// Throws: parse_error (file:line: reason) unless skipping bad lines;
    /// `out` is unchanged then.
    bool next(request_record& out) {
        std::string_view line;
        while (lines_.next(line)) {
            if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank
            // Parsed into a scratch record, swapped in on success: the two
            // hash_ids buffers are reused in turn.
            const std::string err = detail::parse_mooncake_line<true>(line, scratch_);
            if (err.empty()) {
                scratch_.line = lines_.line_number();
                std::swap(out, scratch_);
                return true;
            }
            parse_error e(lines_.path(), lines_.line_number(), err);
            if (!skip_) throw e;
            bad_.add(e);
        }
        return false;
    }
    [[nodiscard]] const bad_line_report& bad_lines() const noexcept { return bad_; }

private:
    line_source lines_;
    bool skip_;
    bad_line_report bad_;
    request_record scratch_;
};

/// Rows of a `time,obj_id,obj_size` CSV (with that header), streamed.
class csv_reader {
public:
    /// Throws: parse_error if the header is missing or different.
    /// `buffer_bytes`: the read buffer's starting size (it grows to fit a line).
    csv_reader(const std::string& path, bool skip_bad_lines, std::size_t buffer_bytes = std::size_t{1} << 20)
            : lines_(path, buffer_bytes), skip_(skip_bad_lines) {
        std::string_view header;
        if (!lines_.next(header) || header != "time,obj_id,obj_size")
            throw parse_error(lines_.path(), 1, "expected the header 'time,obj_id,obj_size'");
    }

    /// Throws: parse_error (file:line: reason) unless skipping bad lines;
    /// `out` is unchanged then.
    bool next(access_record& out) { return next_batch({&out, 1}) == 1; }

    /// Fills `out` from the front with the next rows and returns how many:
    /// 0 only at the end of the file. The replay engines read this way: whole
    /// `digits,digits,digits\n` rows are parsed in one tight pass over the
    /// buffer (its '\0' sentinel stops every scan). Anything else (a row split
    /// by the buffer's end, '\r', blank lines, errors) takes the line-by-line
    /// path, and only at the start of a batch: the rows before it are
    /// returned first, so an error never takes rows already parsed with it.
    /// Throws: parse_error (file:line: reason) unless skipping bad lines;
    /// `out` is unchanged then.
    std::size_t next_batch(std::span<access_record> out) {
        std::size_t n = 0;
        while (n < out.size()) {
            const char* p = lines_.unread_begin();
            const char* row_start = p;
            const std::size_t first = n;
            access_record row;
            while (n < out.size() && time_.read(p, row.time) && detail::sentinel_uint(p, row.obj_id) && *p == ',' &&
                   size_.read(++p, row.obj_size)) {
                out[n++] = row;
                row_start = p;
            }
            if (n > first) lines_.consume_lines(row_start, n - first);
            if (n > 0 || !next_line_row(out[n])) break;
            ++n;
        }
        return n;
    }
    [[nodiscard]] const bad_line_report& bad_lines() const noexcept { return bad_; }

private:
    // The next non-blank row through line_source::next; false at the end.
    bool next_line_row(access_record& out) {
        std::string_view line;
        access_record row;
        while (lines_.next(line)) {
            if (line.empty()) continue;
            const char* err = parse_csv_row(line, row);
            if (err == nullptr) {
                out = row;
                return true;
            }
            parse_error e(lines_.path(), lines_.line_number(), err);
            if (!skip_) throw e;
            bad_.add(e);
        }
        return false;
    }

    line_source lines_;
    bool skip_;
    bad_line_report bad_;
    detail::repeated_field<','> time_;   // the rows of one request share a timestamp
    detail::repeated_field<'\n'> size_;  // and nearly every row has size 1
};

}  // namespace kvpolicy::sim
