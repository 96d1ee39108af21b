// host_span / device_span (core/memory_space.hpp): which conversions exist
// (compile-time), and first/last/subspan/size_bytes against std::span on
// long random sequences of cuts. The must-not-compile side (a device span in
// a host algorithm, host data where device data is due) is in
// tests/compile_fail/memory_space_*.cpp.
#include <catch2/catch.hpp>

#include <kvpolicy/core/memory_space.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <span>
#include <vector>

using namespace kvpolicy;

// Within a space: T -> const T only.
static_assert(std::is_convertible_v<host_span<float>, host_span<const float>>);
static_assert(std::is_convertible_v<device_span<float>, device_span<const float>>);
static_assert(!std::is_convertible_v<device_span<const float>, device_span<float>>);
// Across spaces: nothing, in either direction, implicit or explicit.
static_assert(!std::is_constructible_v<device_span<float>, host_span<float>>);
static_assert(!std::is_constructible_v<device_span<const float>, host_span<float>>);
static_assert(!std::is_constructible_v<host_span<float>, device_span<float>>);
static_assert(!std::is_constructible_v<host_span<const float>, device_span<float>>);
// Host ranges make host spans (implicitly); they never make device spans.
static_assert(std::is_convertible_v<std::vector<float>&, host_span<float>>);
static_assert(std::is_convertible_v<std::span<const float>, host_span<const float>>);
static_assert(std::is_convertible_v<const std::vector<float>&, host_span<const float>>);
static_assert(!std::is_convertible_v<const std::vector<float>&, host_span<float>>);  // const stays const
static_assert(!std::is_constructible_v<host_span<float>, std::vector<float>&&>);     // would dangle
static_assert(!std::is_constructible_v<device_span<float>, std::vector<float>&>);
static_assert(!std::is_constructible_v<device_span<float>, std::span<float>>);
static_assert(!std::is_convertible_v<float*, device_span<float>>);  // only explicit {ptr, n}
static_assert(std::is_constructible_v<device_span<float>, float*, std::size_t>);
// A host span is a range std::span and the algorithms take; a device span is not.
static_assert(std::ranges::contiguous_range<host_span<const float>>);
static_assert(std::ranges::borrowed_range<host_span<const float>>);
static_assert(std::is_convertible_v<host_span<float>, std::span<const float>>);
static_assert(!std::ranges::range<device_span<const float>>);
static_assert(!std::is_constructible_v<std::span<const float>, device_span<const float>>);
static_assert(device_span<int>::space == memory_space::device && host_span<int>::space == memory_space::host);
// Kernels take them by value.
static_assert(std::is_trivially_copyable_v<host_span<double>> && std::is_trivially_copyable_v<device_span<double>>);

namespace {
template <class Span>
bool same_view(Span s, std::span<const int> ref) {
    return s.data() == ref.data() && s.size() == ref.size() && s.size_bytes() == ref.size_bytes() &&
           s.empty() == ref.empty();
}
}  // namespace

TEST_CASE("first, last and subspan cut as std::span does, in both spaces", "[memory_space]") {
    std::vector<int> storage(997);
    std::iota(storage.begin(), storage.end(), 0);
    std::mt19937_64 rng(13);
    // The same cuts applied to a std::span (the reference) and to both kinds
    // of space span over the same storage (a device span's pointer is never
    // read here, so host storage stands in for device memory).
    std::span<const int> ref(storage);
    host_span<const int> h(storage);
    device_span<const int> d{storage.data(), storage.size()};
    for (int step = 0; step < 20000; ++step) {
        if (ref.empty() || step % 50 == 0) {
            ref = std::span<const int>(storage);
            h = host_span<const int>(storage);
            d = device_span<const int>{storage.data(), storage.size()};
        }
        const std::size_t n = ref.size();
        const auto a = std::uniform_int_distribution<std::size_t>(0, n)(rng);
        switch (rng() % 4) {
            case 0:
                ref = ref.first(a), h = h.first(a), d = d.first(a);
                break;
            case 1:
                ref = ref.last(a), h = h.last(a), d = d.last(a);
                break;
            case 2:
                ref = ref.subspan(a), h = h.subspan(a), d = d.subspan(a);
                break;
            default: {
                const auto c = std::uniform_int_distribution<std::size_t>(0, n - a)(rng);
                ref = ref.subspan(a, c), h = h.subspan(a, c), d = d.subspan(a, c);
            }
        }
        REQUIRE(same_view(h, ref));
        REQUIRE(same_view(d, ref));
        REQUIRE(std::ranges::equal(h, ref));  // host element access reads what std::span reads
        if (!ref.empty()) {
            const auto i = std::uniform_int_distribution<std::size_t>(0, ref.size() - 1)(rng);
            REQUIRE(&h[i] == &ref[i]);
        }
    }
}

TEST_CASE("host spans come from host ranges and go to std::span", "[memory_space]") {
    std::array<float, 5> a{1, 2, 3, 4, 5};
    host_span<float> h = a;
    h[2] = 30.0f;
    CHECK(a[2] == 30.0f);
    const host_span<const float> c = h;  // T -> const T
    std::span<const float> s = c;        // a host span is what host algorithms take
    CHECK(s.data() == a.data());
    CHECK(s.size() == 5);
    CHECK(std::ranges::max(c) == 30.0f);
    const host_span<float> empty;
    CHECK(empty.empty());
    CHECK(empty.data() == nullptr);
    CHECK(empty.size_bytes() == 0);
}
