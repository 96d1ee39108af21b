// The fuzz input as a source of choices: the harnesses decode everything
// (which composition, which operation, every argument) from the bytes
// libFuzzer gives them, through this one reader.
//
// choose(n) takes as few bytes as n needs (none for n <= 1, one for
// n <= 256, ...) and returns a value in [0, n); once the bytes run out every
// choice is 0 and exhausted() is true, so a harness can stop its loop there.
// Small values stay small after libFuzzer's byte mutations, which keeps the
// corpus meaningful when the fuzzer splices inputs together.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace kvpolicy::fuzzing {

class fuzz_input {
public:
    fuzz_input(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

    /// A value in [0, n) (0 for n <= 1).
    std::uint64_t choose(std::uint64_t n) noexcept {
        if (n <= 1) return 0;
        const int bytes = static_cast<int>((std::bit_width(n - 1) + 7) / 8);
        const std::uint64_t v = take_bytes(bytes);
        return v % n;
    }
    [[nodiscard]] bool exhausted() const noexcept { return pos_ >= size_; }

    bool flag() noexcept { return choose(2) == 1; }
    std::uint64_t u64() noexcept { return take_bytes(8); }
    std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(take_bytes(4)); }
    /// Any bit pattern: NaNs of both signs, infinities, subnormals, -0.0.
    double any_double() noexcept {
        const std::uint64_t bits = u64();
        double d;
        std::memcpy(&d, &bits, sizeof d);
        return d;
    }
    /// The next `n` bytes (fewer at the end of the input).
    std::span<const std::uint8_t> bytes(std::size_t n) noexcept {
        const std::size_t k = n < size_ - pos_ ? n : size_ - pos_;
        const std::span<const std::uint8_t> out(data_ + pos_, k);
        pos_ += k;
        return out;
    }
    /// What is left, as text.
    std::string_view rest() noexcept {
        const std::span<const std::uint8_t> r = bytes(size_ - pos_);
        return {reinterpret_cast<const char*>(r.data()), r.size()};
    }

private:
    std::uint64_t take_bytes(int n) noexcept {
        std::uint64_t v = 0;
        for (int i = 0; i < n && pos_ < size_; ++i) v |= std::uint64_t{data_[pos_++]} << (8 * i);
        return v;
    }

    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

}  // namespace kvpolicy::fuzzing
