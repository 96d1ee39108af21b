// The trace readers' parsers: one Mooncake JSONL line, one CSV row, and the
// scanners under them (kvpolicy/sim/trace.hpp says why they are written for
// these two schemas rather than over a general JSON library).
#pragma once

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kvpolicy/sim/records.hpp"

namespace kvpolicy::sim {

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
        if constexpr (Terminated)
            digits = sentinel_uint(c.p, v);
        else
            digits = bounded_uint(c.p, c.end, v);
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
            if (key == "timestamp")
                err = number(out.timestamp_ms, seen_ts);
            else if (key == "input_length")
                err = number(out.input_length, seen_in);
            else if (key == "output_length")
                err = number(out.output_length, seen_out);
            else if (key == "session")
                err = number(out.session, out.has_session);
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

}  // namespace kvpolicy::sim
