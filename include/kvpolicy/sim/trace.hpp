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
#pragma once

#if defined(__CUDACC__)
#error "kvpolicy/sim headers are host-only (they use zlib); do not include them from .cu files"
#endif

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <span>
#include <utility>
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

/// Lines of a plain or gzip file. Gzip (by its magic bytes) goes through
/// zlib; plain files are read straight into the buffer, which saves zlib's
/// extra copy of every byte.
///
/// The unread bytes are always followed by a '\0' that is not part of the
/// file (and `padding` readable bytes in all): a scanner reading digits or
/// looking for a separator stops there without comparing its pointer with
/// the end on every byte.
class line_source {
public:
    /// Throws: config_error naming the file if it cannot be opened.
    explicit line_source(std::string path, std::size_t buffer_bytes = 1 << 20) : path_(std::move(path)) {
        plain_ = std::fopen(path_.c_str(), "rb");
        if (plain_ == nullptr)
            throw config_error("cannot open trace '" + path_ + "': " + std::strerror(errno) +
                               "; check the path and that the file is readable");
        unsigned char magic[2] = {0, 0};
        const bool gzip = std::fread(magic, 1, 2, plain_) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
        std::rewind(plain_);
        if (gzip) {
            std::fclose(plain_);
            plain_ = nullptr;
            gz_ = gzopen(path_.c_str(), "rb");
            if (gz_ == nullptr) throw config_error("cannot open trace '" + path_ + "' as gzip");
            gzbuffer(gz_, 256 * 1024);
        }
        buffer_.resize(std::max<std::size_t>(buffer_bytes, 2) + padding);
        buffer_[0] = '\0';
    }
    line_source(const line_source&) = delete;
    line_source& operator=(const line_source&) = delete;
    ~line_source() {
        if (gz_ != nullptr) gzclose(gz_);
        if (plain_ != nullptr) std::fclose(plain_);
    }

    /// Readable bytes after the unread ones: the '\0' sentinel, then 7 more.
    static constexpr std::size_t padding = 8;

    [[nodiscard]] const std::string& path() const noexcept { return path_; }
    /// 1-based number of the line last returned.
    [[nodiscard]] std::size_t line_number() const noexcept { return line_; }

    /// The next line without its newline (and without a trailing '\r');
    /// valid until the next call. False at the end of the file.
    /// Throws: parse_error on a read error or a line longer than the buffer
    /// can grow to (1 GiB).
    bool next(std::string_view& out) {
        for (;;) {
            const char* nl = static_cast<const char*>(std::memchr(buffer_.data() + begin_, '\n', end_ - begin_));
            if (nl != nullptr) {
                const std::size_t len = static_cast<std::size_t>(nl - (buffer_.data() + begin_));
                out = trim_cr({buffer_.data() + begin_, len});
                begin_ += len + 1;
                ++line_;
                return true;
            }
            if (eof_) {
                if (begin_ == end_) return false;
                out = trim_cr({buffer_.data() + begin_, end_ - begin_});  // last line, no newline
                begin_ = end_;
                ++line_;
                return true;
            }
            refill();
        }
    }

    // For parsers that scan the buffer themselves (one pass over each byte):
    // the unread bytes (*unread_end() is the '\0' sentinel), and a way to
    // mark whole lines as read.
    [[nodiscard]] const char* unread_begin() const noexcept { return buffer_.data() + begin_; }
    [[nodiscard]] const char* unread_end() const noexcept { return buffer_.data() + end_; }
    /// Marks the bytes up to `next_line` (just past a '\n') as `lines` lines read.
    void consume_lines(const char* next_line, std::size_t lines) noexcept {
        begin_ = static_cast<std::size_t>(next_line - buffer_.data());
        line_ += lines;
    }

private:
    static std::string_view trim_cr(std::string_view s) noexcept {
        return (!s.empty() && s.back() == '\r') ? s.substr(0, s.size() - 1) : s;
    }
    void refill() {
        if (begin_ > 0) {  // move the partial line to the front
            std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
            end_ -= begin_;
            begin_ = 0;
            buffer_[end_] = '\0';
        }
        if (end_ + padding == buffer_.size()) {  // full
            if (buffer_.size() >= (std::size_t{1} << 30))
                throw parse_error(path_, line_ + 1, "line longer than 1 GiB; is this a text trace?");
            buffer_.resize(2 * (buffer_.size() - padding) + padding);
        }
        const std::size_t room = buffer_.size() - padding - end_;
        std::size_t n = 0;
        if (gz_ != nullptr) {
            const int got = gzread(gz_, buffer_.data() + end_, static_cast<unsigned>(room));
            if (got < 0) {
                int code = 0;
                throw parse_error(path_, line_ + 1, std::string("read error: ") + gzerror(gz_, &code));
            }
            n = static_cast<std::size_t>(got);
        } else {
            n = std::fread(buffer_.data() + end_, 1, room, plain_);
            if (n == 0 && std::ferror(plain_)) throw parse_error(path_, line_ + 1, "read error");
        }
        if (n == 0) eof_ = true;
        end_ += n;
        buffer_[end_] = '\0';
    }

    std::string path_;
    std::FILE* plain_ = nullptr;
    gzFile gz_ = nullptr;
    std::vector<char> buffer_;  // [capacity + padding]: file bytes [begin_, end_), then '\0'
    std::size_t begin_ = 0, end_ = 0;
    std::size_t line_ = 0;
    bool eof_ = false;
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

namespace detail {

// A cursor over one line, with the small scanners the two formats need.
struct cursor {
    const char* p;
    const char* end;

    void skip_ws() noexcept {
        while (p < end && (*p == ' ' || *p == '\t')) ++p;
    }
    bool eat(char c) noexcept {
        skip_ws();
        if (p < end && *p == c) {
            ++p;
            return true;
        }
        return false;
    }
    bool uint(std::uint64_t& v) noexcept {
        skip_ws();
        const auto [ptr, ec] = std::from_chars(p, end, v);
        if (ec != std::errc{} || ptr == p) return false;
        p = ptr;
        return true;
    }
    bool string(std::string_view& s) noexcept {
        skip_ws();
        if (p >= end || *p != '"') return false;
        const char* start = ++p;
        while (p < end && *p != '"') {
            if (*p == '\\' && ++p == end) return false;  // an escape cut off by the line's end
            ++p;
        }
        if (p >= end) return false;
        s = {start, static_cast<std::size_t>(p - start)};
        ++p;
        return true;
    }
    // Skips one JSON value of any kind (for keys we do not use).
    bool skip_value(int depth = 0) noexcept {
        skip_ws();
        if (p >= end || depth > 32) return false;
        if (*p == '"') {
            std::string_view ignored;
            return string(ignored);
        }
        if (*p == '[' || *p == '{') {
            const char close = *p == '[' ? ']' : '}';
            ++p;
            if (eat(close)) return true;
            for (;;) {
                if (close == '}') {
                    std::string_view k;
                    if (!string(k) || !eat(':')) return false;
                }
                if (!skip_value(depth + 1)) return false;
                if (eat(close)) return true;
                if (!eat(',')) return false;
            }
        }
        const char* start = p;
        while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ') ++p;
        return p > start;
    }
};

}  // namespace detail

namespace detail {
// Up to 19 decimal digits (never overflows) in a buffer that ends with a
// non-digit sentinel, so no end check; false if none, or more.
//
// A plain digit loop: its exit branch is predicted well enough, and each
// field's end is found speculatively. An 8-byte SWAR conversion (mask, count
// trailing zeros, three multiplies) was measured 1.4x slower on the agentic
// trace: it makes every field's address wait on the previous field's length.
inline bool sentinel_uint(const char*& p, std::uint64_t& v) noexcept {
    const char* start = p;
    v = 0;
    for (unsigned d; (d = static_cast<unsigned char>(*p) - unsigned{'0'}) < 10; ++p) v = v * 10 + d;
    return p > start && p - start <= 19;
}

// A number field followed by `Separator`, in a sentinel-terminated buffer,
// that often repeats the previous row's text byte for byte (a request's rows
// share its timestamp; nearly every block has size 1). The last text read
// (digits and separator, up to 8 bytes) is kept as a word and a mask: one
// 8-byte compare then replaces the digit loop. Equal bytes mean an equal,
// already validated field; the sentinel never matches a digit or separator,
// so a match never reaches past it.
template <char Separator>
struct repeated_field {
    std::uint64_t text = 0;
    std::uint64_t mask = 0;  // 0: nothing to compare with
    std::uint64_t value = 0;
    std::uint32_t length = 0;  // digits and separator

    /// Reads the field and its separator at `p`, leaving `p` after them.
    bool read(const char*& p, std::uint64_t& v) noexcept {
        std::uint64_t w;
        std::memcpy(&w, p, 8);  // within line_source's padding
        if (((w ^ text) & mask) == 0 && mask != 0) {
            p += length;
            v = value;
            return true;
        }
        const char* start = p;
        if (!sentinel_uint(p, v) || *p != Separator) return false;
        ++p;
        length = static_cast<std::uint32_t>(p - start);
        if constexpr (std::endian::native == std::endian::little) {
            if (length <= 8) {
                text = w;
                mask = length == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * length)) - 1;
                value = v;
                return true;
            }
        }
        mask = 0;
        return true;
    }
};

// Up to 19 decimal digits (never overflows); false if none, or more.
inline bool bounded_uint(const char*& p, const char* end, std::uint64_t& v) noexcept {
    const char* start = p;
    v = 0;
    while (p < end && static_cast<unsigned char>(*p - '0') < 10) v = v * 10 + static_cast<std::uint64_t>(*p++ - '0');
    return p > start && p - start <= 19;
}
}  // namespace detail

namespace detail {
// The elements and the closing ']' of a non-empty array of integers,
// appended to `ids`: the bulk of every line, one pass, digits then a
// separator. The vector is written through a pointer with its size set once
// at the end (push_back per id was 9% of a replay, not inlined).
template <bool Terminated>
bool parse_id_array(cursor& c, std::vector<std::uint64_t>& ids) {
    std::size_t n = ids.size();
    ids.resize(std::max<std::size_t>(ids.capacity(), n + 16));
    bool ok = false;
    for (;;) {
        std::uint64_t v = 0;
        c.skip_ws();
        bool digits = false;
        if constexpr (Terminated) digits = sentinel_uint(c.p, v);
        else digits = bounded_uint(c.p, c.end, v);
        if (!digits) break;
        if (n == ids.size()) ids.resize(2 * n);
        ids[n++] = v;
        if (c.p < c.end && *c.p == ',') {
            ++c.p;
            continue;
        }
        if (c.eat(']')) {
            ok = true;
            break;
        }
        if (!c.eat(',')) break;
    }
    ids.resize(n);
    return ok;
}

// A key from the trace as an error message quotes it: in double quotes,
// control bytes and DEL as \xHH (a NUL would cut the message short where it
// is read as a C string; an escape sequence would reach the terminal), at
// most 40 bytes of it.
inline std::string quoted(std::string_view key) {
    constexpr std::size_t shown = 40;
    std::string out = "\"";
    for (const char ch : key.substr(0, shown)) {
        const auto b = static_cast<unsigned char>(ch);
        if (b < 0x20 || b == 0x7f) {
            constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 15];
        } else {
            out += ch;
        }
    }
    out += key.size() > shown ? "...\"" : "\"";
    return out;
}

// `Terminated`: the byte just past `line` is readable and not a digit (a
// line from line_source: its '\n', '\r' or the buffer's sentinel), so the
// hash_ids digits are scanned with no end check.
template <bool Terminated>
std::string parse_mooncake_line(std::string_view line, request_record& out) {
    detail::cursor c{line.data(), line.data() + line.size()};
    out.hash_ids.clear();
    out.has_session = false;
    bool seen_ts = false, seen_in = false, seen_out = false, seen_ids = false;
    if (!c.eat('{')) return "expected a JSON object starting with '{'";
    if (!c.eat('}')) {
        for (;;) {
            std::string_view key;
            if (!c.string(key)) return "expected a quoted key";
            if (!c.eat(':')) return "expected ':' after " + quoted(key);
            auto number = [&](std::uint64_t& v, bool& seen) -> std::string {
                if (!c.uint(v)) return quoted(key) + " must be a non-negative integer";
                seen = true;
                return {};
            };
            std::string err;
            if (key == "timestamp") err = number(out.timestamp_ms, seen_ts);
            else if (key == "input_length") err = number(out.input_length, seen_in);
            else if (key == "output_length") err = number(out.output_length, seen_out);
            else if (key == "session") err = number(out.session, out.has_session);
            else if (key == "hash_ids") {
                out.hash_ids.clear();  // a repeated key: the last one counts, as for the numbers
                if (!c.eat('[')) return "hash_ids must be an array of integers";
                if (!c.eat(']') && !parse_id_array<Terminated>(c, out.hash_ids))
                    return "hash_ids must be an array of integers";
                seen_ids = true;
            } else if (!c.skip_value()) {
                return "malformed value for " + quoted(key);
            }
            if (!err.empty()) return err;
            if (c.eat('}')) break;
            if (!c.eat(',')) return "expected ',' or '}' after " + quoted(key);
        }
    }
    c.skip_ws();
    if (c.p != c.end) return "unexpected characters after the object";
    if (!seen_ts) return "missing field \"timestamp\"";
    if (!seen_in) return "missing field \"input_length\"";
    if (!seen_out) return "missing field \"output_length\"";
    if (!seen_ids) return "missing field \"hash_ids\"";
    return {};
}
}  // namespace detail

/// Parses one Mooncake JSONL line into `out` (its hash_ids buffer is
/// reused). Returns an empty string on success, else the reason.
inline std::string parse_mooncake_line(std::string_view line, request_record& out) {
    return detail::parse_mooncake_line<false>(line, out);
}


/// Parses one CSV row `time,obj_id,obj_size`. Returns nullptr on success,
/// else the reason (a static string: rows are the hot path).
inline const char* parse_csv_row(std::string_view line, access_record& out) noexcept {
    // Fast path: exactly digits,digits,digits. Anything else (spaces, signs,
    // 20-digit numbers, junk) takes the strict path below, which accepts
    // what it may and names what is wrong.
    const char* p = line.data();
    const char* const end = p + line.size();
    if (detail::bounded_uint(p, end, out.time) && p < end && *p++ == ',' && detail::bounded_uint(p, end, out.obj_id) &&
        p < end && *p++ == ',' && detail::bounded_uint(p, end, out.obj_size) && p == end)
        return nullptr;
    detail::cursor c{line.data(), line.data() + line.size()};
    if (!c.uint(out.time) || !c.eat(',') || !c.uint(out.obj_id) || !c.eat(',') || !c.uint(out.obj_size))
        return "expected three non-negative integers time,obj_id,obj_size";
    c.skip_ws();
    if (c.p != c.end) return "unexpected characters after obj_size";
    return nullptr;
}

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
    detail::repeated_field<','> time_;  // the rows of one request share a timestamp
    detail::repeated_field<'\n'> size_;  // and nearly every row has size 1
};

}  // namespace kvpolicy::sim
