// Lines of a plain or gzip trace file, for the trace readers
// (kvpolicy/sim/trace.hpp): one buffer, a '\0' sentinel after the unread
// bytes, and a way for a parser to scan the buffer itself.
#pragma once

#if defined(__CUDACC__)
#error "kvpolicy/sim headers are host-only (they use zlib); do not include them from .cu files"
#endif

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"

namespace kvpolicy::sim {

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

}  // namespace kvpolicy::sim
