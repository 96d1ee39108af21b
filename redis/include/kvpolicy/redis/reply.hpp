// redis replies: validation of everything the client reads from a server,
// which may be broken, out of step or hostile.
//
// - scan_reply: finds where the first RESP2 reply in a byte stream ends,
//   refusing what no Redis server sends (an unknown type byte, a length or
//   count that is not a number, a bulk string over 512 MiB, an array of
//   more than 2^20 elements or nested deeper than 7, a line over 1 MiB, a
//   bulk string not closed by "\r\n"). The connection hands hiredis's
//   reader only whole replies that passed it, so a hostile length never
//   reaches an allocation and the reader never holds half a reply.
// - parse_redirect: "MOVED <slot> <host>:<port>" and "ASK ...", the host
//   possibly empty (Redis 7: the node that answered).
// - parse_cluster_slots: CLUSTER SLOTS' ranges and masters.
// - parse_info_field: a number field of INFO's text.
// Each returns nothing (with a reason) for anything malformed; none throws.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace kvpolicy::redis {

struct endpoint {
    std::string host = "127.0.0.1";
    int port = 6379;

    [[nodiscard]] std::string str() const { return host + ":" + std::to_string(port); }
    friend bool operator==(const endpoint& a, const endpoint& b) { return a.port == b.port && a.host == b.host; }
};

/// What scan_reply accepts.
struct resp_limits {
    std::size_t max_bulk = std::size_t{512} << 20;  ///< Redis's own proto-max-bulk-len default
    std::size_t max_elements = std::size_t{1} << 20;
    std::size_t max_depth = 7;  ///< hiredis's reader nests no deeper
    std::size_t max_line = std::size_t{1} << 20;
};

struct resp_scan {
    enum class result : std::uint8_t { incomplete, complete, malformed };
    result status = result::incomplete;
    std::size_t length = 0;  ///< complete: the reply's bytes
    const char* why = "";    ///< malformed: what was wrong
};

namespace detail {
// A number as Redis writes it and hiredis reads it (string2ll): an optional
// '-', digits without a leading zero ("0" alone, never "-0"), within long
// long; nothing else.
[[nodiscard]] inline bool whole_integer(std::string_view text, long long& out) noexcept {
    const std::string_view digits = !text.empty() && text[0] == '-' ? text.substr(1) : text;
    if (digits.empty() || (digits[0] == '0' && (digits.size() > 1 || digits.size() != text.size()))) return false;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    return r.ec == std::errc{} && r.ptr == text.data() + text.size();
}
[[nodiscard]] inline bool whole_unsigned(std::string_view text, std::uint64_t& out) noexcept {
    if (text.empty()) return false;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    return r.ec == std::errc{} && r.ptr == text.data() + text.size();
}
}  // namespace detail

/// Where the first reply in `in` ends: complete (its length), incomplete
/// (more bytes needed), or malformed (the stream cannot be trusted).
[[nodiscard]] inline resp_scan scan_reply(std::string_view in, const resp_limits& limits = {}) noexcept {
    using result = resp_scan::result;
    std::array<long long, 8> left{};  // elements still to come, per open array
    std::size_t depth = 0;
    std::size_t pos = 0;
    for (;;) {
        const std::size_t nl = in.find('\n', pos);
        if (nl == std::string_view::npos) {
            if (in.size() - pos > limits.max_line) return {result::malformed, 0, "a line over 1 MiB"};
            return {result::incomplete, 0, ""};
        }
        if (nl - pos > limits.max_line) return {result::malformed, 0, "a line over 1 MiB"};
        if (nl == pos || in[nl - 1] != '\r' || nl - 1 == pos)
            return {result::malformed, 0, "a line without a type or \\r\\n"};
        const char type = in[pos];
        const std::string_view body = in.substr(pos + 1, nl - 1 - pos - 1);
        std::size_t next = nl + 1;
        long long n = 0;
        switch (type) {
            case '+':
            case '-':
                break;
            case ':':
                if (!detail::whole_integer(body, n))
                    return {result::malformed, 0, "an integer reply that is not a number"};
                break;
            case '$':
                if (!detail::whole_integer(body, n) || n < -1)
                    return {result::malformed, 0, "a bulk length that is not a length"};
                if (n >= 0) {
                    if (static_cast<unsigned long long>(n) > limits.max_bulk)
                        return {result::malformed, 0, "a bulk string over 512 MiB"};
                    const std::size_t len = static_cast<std::size_t>(n);
                    if (in.size() - next < len + 2) return {result::incomplete, 0, ""};
                    if (in[next + len] != '\r' || in[next + len + 1] != '\n')
                        return {result::malformed, 0, "a bulk string not closed by \\r\\n"};
                    next += len + 2;
                }
                break;
            case '*':
                if (!detail::whole_integer(body, n) || n < -1)
                    return {result::malformed, 0, "an array count that is not a count"};
                if (static_cast<unsigned long long>(n > 0 ? n : 0) > limits.max_elements)
                    return {result::malformed, 0, "an array of more than 2^20 elements"};
                if (n > 0) {
                    if (depth >= limits.max_depth || depth >= left.size())
                        return {result::malformed, 0, "arrays nested deeper than 7"};
                    left[depth++] = n;
                    pos = next;
                    continue;  // its elements follow
                }
                break;
            default:
                return {result::malformed, 0, "an unknown reply type"};
        }
        pos = next;
        // One element done: close the arrays it completes.
        while (depth > 0) {
            if (--left[depth - 1] > 0) break;
            --depth;
        }
        if (depth == 0) return {result::complete, pos, ""};
    }
}

/// A MOVED or ASK redirect.
struct redirect {
    bool ask = false;
    std::uint16_t slot = 0;
    endpoint to;  ///< host empty: the node that sent it
};

/// Parses "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (host
/// may be empty, or an IPv6 address: the port is after the last ':').
/// Nothing for any other text, a slot over 16383, a port outside 1-65535,
/// a host over 255 bytes or with spaces or control characters.
[[nodiscard]] inline std::optional<redirect> parse_redirect(std::string_view text) {
    redirect r;
    if (text.substr(0, 6) == "MOVED ")
        text.remove_prefix(6);
    else if (text.substr(0, 4) == "ASK ")
        r.ask = true, text.remove_prefix(4);
    else
        return std::nullopt;
    const auto space = text.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    std::uint64_t slot = 0;
    if (!detail::whole_unsigned(text.substr(0, space), slot) || slot >= 16384) return std::nullopt;
    const std::string_view address = text.substr(space + 1);
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    std::uint64_t port = 0;
    if (!detail::whole_unsigned(address.substr(colon + 1), port) || port == 0 || port > 65535) return std::nullopt;
    const std::string_view host = address.substr(0, colon);
    if (host.size() > 255) return std::nullopt;
    for (const char c : host)
        if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return std::nullopt;
    r.slot = static_cast<std::uint16_t>(slot);
    r.to = endpoint{std::string(host), static_cast<int>(port)};
    return r;
}

/// One range of CLUSTER SLOTS: slots [first, last] served by `master`.
struct slot_range {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    endpoint master;  ///< host empty (or "?", or nil): the node that answered
};

/// CLUSTER SLOTS: [[start, end, [host, port, id...], replicas...], ...].
/// Nothing (and `why`) when the reply is not that shape, a range is not
/// within 0-16383 or is backwards, a port is outside 1-65535, or a host is
/// not a plain string: a map that is wrong in part is not used at all.
[[nodiscard]] inline std::optional<std::vector<slot_range>> parse_cluster_slots(const redisReply* r, std::string& why) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        why = "not a non-empty array";
        return std::nullopt;
    }
    std::vector<slot_range> out;
    for (std::size_t i = 0; i < r->elements; ++i) {
        const redisReply* e = r->element[i];
        if (e == nullptr || e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2) {
            why = "entry " + std::to_string(i) + " is not [start, end, [host, port, ...], ...]";
            return std::nullopt;
        }
        const long long first = e->element[0]->integer, last = e->element[1]->integer;
        if (first < 0 || last < first || last >= 16384) {
            why = "entry " + std::to_string(i) + " has slots " + std::to_string(first) + "-" + std::to_string(last) +
                  ", not within 0-16383";
            return std::nullopt;
        }
        const redisReply* m = e->element[2];
        const redisReply* host = m->element[0];
        const redisReply* port = m->element[1];
        if ((host->type != REDIS_REPLY_STRING && host->type != REDIS_REPLY_NIL) || port->type != REDIS_REPLY_INTEGER ||
            port->integer < 1 || port->integer > 65535) {
            why = "entry " + std::to_string(i) + "'s master is not [host, port 1-65535]";
            return std::nullopt;
        }
        std::string h = host->type == REDIS_REPLY_STRING ? std::string(host->str, host->len) : std::string();
        if (h == "?") h.clear();
        if (h.size() > 255) {
            why = "entry " + std::to_string(i) + "'s host is over 255 bytes";
            return std::nullopt;
        }
        for (const char c : h)
            if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
                why = "entry " + std::to_string(i) + "'s host has a space or a control character";
                return std::nullopt;
            }
        out.push_back({static_cast<std::uint16_t>(first), static_cast<std::uint16_t>(last),
                       endpoint{std::move(h), static_cast<int>(port->integer)}});
    }
    return out;
}

/// A number field of INFO's text ("name:value" lines).
struct info_field {
    bool present = false;
    bool valid = false;
    std::uint64_t value = 0;
};

[[nodiscard]] inline info_field parse_info_field(std::string_view info, std::string_view name) {
    info_field f;
    std::size_t at = 0;
    for (;;) {
        const std::size_t pos = info.find(name, at);
        if (pos == std::string_view::npos) return f;
        at = pos + 1;
        const std::size_t colon = pos + name.size();
        if ((pos != 0 && info[pos - 1] != '\n') || colon >= info.size() || info[colon] != ':') continue;
        f.present = true;
        std::size_t end = info.find('\n', colon + 1);
        if (end == std::string_view::npos) end = info.size();
        std::string_view value = info.substr(colon + 1, end - colon - 1);
        if (!value.empty() && value.back() == '\r') value.remove_suffix(1);
        f.valid = detail::whole_unsigned(value, f.value);
        return f;
    }
}

}  // namespace kvpolicy::redis
