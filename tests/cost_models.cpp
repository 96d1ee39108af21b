// Cost models and weights of seed 000: pensieve_linear's validation,
// measured_table's interpolation against an independent computation,
// calibrate's least-squares fit and residuals, and the two weights.
#include <catch2/catch.hpp>

#include <kvpolicy/cost/calibrate.hpp>
#include <kvpolicy/cost/measured_table.hpp>
#include <kvpolicy/cost/pensieve_linear.hpp>
#include <kvpolicy/cost/pipelined_depth.hpp>
#include <kvpolicy/cost/session_relative.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace kvpolicy;

namespace {
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_v = std::numeric_limits<double>::infinity();

bool near(double a, double b, double tol) { return std::abs(a - b) <= tol; }

// The message of the config_error `f` throws; fails the test if none.
template <class F>
std::string config_error_of(F f) {
    try {
        f();
    } catch (const config_error& e) {
        return e.what();
    }
    FAIL("no config_error thrown");
    return {};
}
}  // namespace

TEST_CASE("pensieve_linear: alpha * context_length + beta + const_non_attention", "[cost][pensieve_linear]") {
    const pensieve_linear m({.alpha = 0.001, .beta = 0.01, .const_non_attention = 0.005});
    REQUIRE(near(m.cost(0), 0.015, 1e-15));
    REQUIRE(near(m.cost(32), 0.047, 1e-15));
    REQUIRE(near(m.cost(4096), 4.111, 1e-12));
    const pensieve_linear d;  // the seed's defaults
    REQUIRE(d.config() == pensieve_linear_config{.alpha = 0.001, .beta = 0.01, .const_non_attention = 0.005});
    REQUIRE(pensieve_linear({.alpha = 0.0, .beta = 0.0, .const_non_attention = 1.0}).cost(1000) == 1.0);
}

TEST_CASE("pensieve_linear: bad parameters are rejected, naming the parameter and the fix", "[cost][pensieve_linear]") {
    struct bad_case {
        pensieve_linear_config config;
        const char* names;
    };
    const bad_case cases[] = {
        {{.alpha = nan_v}, "alpha"},
        {{.alpha = -0.001}, "alpha"},
        {{.alpha = inf_v}, "alpha"},
        {{.beta = nan_v}, "beta"},
        {{.beta = -1.0}, "beta"},
        {{.beta = inf_v}, "beta"},
        {{.const_non_attention = nan_v}, "const_non_attention"},
        {{.const_non_attention = -0.5}, "const_non_attention"},
        {{.const_non_attention = -inf_v}, "const_non_attention"},
        {{.alpha = 0.0, .beta = 0.0, .const_non_attention = 0.0}, "all 0"},
    };
    for (const auto& c : cases) {
        std::optional<pensieve_linear> m;
        const std::string what = config_error_of([&] { m.emplace(c.config); });
        CAPTURE(what);
        REQUIRE_FALSE(m.has_value());  // nothing constructed
        REQUIRE_THAT(what, Catch::Contains(c.names));
        REQUIRE_THAT(what, Catch::Contains("give"));  // says how to fix it
    }
    // beta's message must not blame alpha (the check names the right one).
    REQUIRE_THAT(config_error_of([] { (void)pensieve_linear({.beta = -1.0}); }), !Catch::Contains("alpha ="));
}

TEST_CASE("measured_table: interpolation at and between points, any input order", "[cost][measured_table]") {
    // Unsorted on purpose.
    const std::vector<cost_measurement> pts{{512, 0.30}, {0, 0.02}, {128, 0.05}, {2048, 0.90}};
    const measured_table t(pts);
    REQUIRE(t.points().size() == 4);
    REQUIRE(t.points()[0].context_length == 0);
    REQUIRE(t.points()[3].context_length == 2048);
    for (const auto& p : pts) REQUIRE(t.cost(p.context_length) == p.seconds);

    // Independently: the straight line through the two bracketing points.
    auto line = [](double x0, double y0, double x1, double y1, double x) {
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    };
    std::mt19937_64 rng(7);
    for (int i = 0; i < 2000; ++i) {
        const std::uint64_t x = rng() % 2049;
        double want;
        if (x <= 128)
            want = line(0, 0.02, 128, 0.05, double(x));
        else if (x <= 512)
            want = line(128, 0.05, 512, 0.30, double(x));
        else
            want = line(512, 0.30, 2048, 0.90, double(x));
        CAPTURE(x);
        REQUIRE(near(t.cost(x), want, 1e-14));
    }
    REQUIRE(near(t.cost(64), 0.035, 1e-15));  // a midpoint, by hand
}

TEST_CASE("measured_table: extrapolation is flat below and clamped-linear above", "[cost][measured_table]") {
    const measured_table t{{100, 0.1}, {200, 0.3}};
    REQUIRE(t.cost(0) == 0.1);
    REQUIRE(t.cost(99) == 0.1);
    REQUIRE(near(t.cost(300), 0.5, 1e-15));  // last slope 0.002 per token, extended
    REQUIRE(near(t.cost(1200), 2.3, 1e-13));
    const measured_table falling{{100, 0.3}, {200, 0.2}};
    REQUIRE(falling.cost(5000) == 0.2);  // a falling last segment does not go negative
    REQUIRE(near(falling.cost(150), 0.25, 1e-15));
    const measured_table one{{64, 0.7}};
    REQUIRE(one.cost(0) == 0.7);
    REQUIRE(one.cost(64) == 0.7);
    REQUIRE(one.cost(1 << 20) == 0.7);
}

TEST_CASE("measured_table: errors name the point and leave nothing constructed", "[cost][measured_table]") {
    std::optional<measured_table> t;
    REQUIRE_THAT(config_error_of([&] { t.emplace(std::span<const cost_measurement>{}); }),
                 Catch::Contains("at least one"));
    REQUIRE_THAT(config_error_of([&] {
                     t.emplace(std::initializer_list<cost_measurement>{{0, 0.1}, {32, nan_v}});
                 }),
                 Catch::Contains("point 1") && Catch::Contains("context_length 32"));
    REQUIRE_THAT(config_error_of([&] {
                     t.emplace(std::initializer_list<cost_measurement>{{0, -0.1}});
                 }),
                 Catch::Contains("point 0"));
    REQUIRE_THAT(config_error_of([&] {
                     t.emplace(std::initializer_list<cost_measurement>{{0, inf_v}});
                 }),
                 Catch::Contains("finite"));
    REQUIRE_THAT(config_error_of([&] {
                     t.emplace(std::initializer_list<cost_measurement>{{32, 0.1}, {0, 0.0}, {32, 0.2}});
                 }),
                 Catch::Contains("two points at context_length 32"));
    REQUIRE_FALSE(t.has_value());
}

TEST_CASE("calibrate: noiseless samples give alpha and the intercept back", "[cost][calibrate]") {
    const double alpha = 0.00125, intercept = 0.0175;
    std::vector<cost_measurement> s;
    for (std::uint64_t x = 0; x <= 8192; x += 256) s.push_back({x, alpha * double(x) + intercept});
    const auto r = calibrate(s);
    REQUIRE(near(r.alpha, alpha, 1e-15));
    REQUIRE(near(r.intercept, intercept, 1e-12));
    REQUIRE(r.residuals.size() == s.size());
    for (double e : r.residuals) REQUIRE(std::abs(e) < 1e-12);
    REQUIRE(r.rms_residual < 1e-12);

    // The intercept is beta + const_non_attention; the split is the caller's.
    const pensieve_linear m = r.to_pensieve_linear(0.005);
    REQUIRE(near(m.beta(), 0.0125, 1e-12));
    REQUIRE(m.const_non_attention() == 0.005);
    REQUIRE(near(m.cost(1000), alpha * 1000 + intercept, 1e-12));
    REQUIRE(near(r.to_pensieve_linear().beta(), intercept, 1e-12));
    REQUIRE_THAT(config_error_of([&] { (void)r.to_pensieve_linear(0.02); }), Catch::Contains("beta"));
}

TEST_CASE("calibrate: noisy samples fit within tolerance, residuals are measured minus fitted", "[cost][calibrate]") {
    const double alpha = 2.0e-5, intercept = 0.004, sigma = 1.0e-4;
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
    std::normal_distribution<double> noise(0.0, sigma);
    std::vector<cost_measurement> s;
    for (int i = 0; i < 400; ++i) {
        const std::uint64_t x = 64 + rng() % 16384;
        s.push_back({x, alpha * double(x) + intercept + noise(rng)});
    }
    const auto r = calibrate(s);
    // Standard errors here are about 1e-9 (slope) and 1e-5 (intercept).
    REQUIRE(near(r.alpha, alpha, 2e-8));
    REQUIRE(near(r.intercept, intercept, 1e-4));
    double ss = 0.0, sum = 0.0, sum_x = 0.0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const double want = s[i].seconds - (r.alpha * double(s[i].context_length) + r.intercept);
        REQUIRE(near(r.residuals[i], want, 1e-15));
        ss += want * want;
        sum += want;
        sum_x += want * double(s[i].context_length);
    }
    REQUIRE(near(r.rms_residual, std::sqrt(ss / double(s.size())), 1e-15));
    REQUIRE(r.rms_residual > 0.7 * sigma);
    REQUIRE(r.rms_residual < 1.3 * sigma);
    // Least squares: residuals are orthogonal to 1 and to x.
    REQUIRE(std::abs(sum) < 1e-12);
    REQUIRE(std::abs(sum_x) < 1e-8);
}

TEST_CASE("calibrate: errors", "[cost][calibrate]") {
    REQUIRE_THAT(config_error_of([] { (void)calibrate({}); }), Catch::Contains("2 distinct"));
    const std::vector<cost_measurement> one{{32, 0.1}};
    REQUIRE_THAT(config_error_of([&] { (void)calibrate(one); }), Catch::Contains("2 distinct"));
    const std::vector<cost_measurement> same{{32, 0.1}, {32, 0.2}, {32, 0.3}};
    REQUIRE_THAT(config_error_of([&] { (void)calibrate(same); }), Catch::Contains("2 distinct"));
    const std::vector<cost_measurement> with_nan{{0, 0.1}, {32, 0.2}, {64, nan_v}};
    REQUIRE_THAT(config_error_of([&] { (void)calibrate(with_nan); }), Catch::Contains("sample 2"));
    const std::vector<cost_measurement> negative{{0, -0.1}, {32, 0.2}};
    REQUIRE_THAT(config_error_of([&] { (void)calibrate(negative); }), Catch::Contains("sample 0"));
    const std::vector<cost_measurement> infinite{{0, 0.1}, {32, inf_v}};
    REQUIRE_THAT(config_error_of([&] { (void)calibrate(infinite); }), Catch::Contains("sample 1"));
    const std::vector<cost_measurement> two{{0, 0.1}, {32, 0.2}};
    REQUIRE(near(calibrate(two).alpha, 0.1 / 32, 1e-15));  // two distinct lengths suffice
}

TEST_CASE("pipelined_depth and session_relative: seed 000's weights", "[cost][weights]") {
    const pipelined_depth lw;
    REQUIRE(lw.weight(layer_index{0}, 40) == 1.0);
    REQUIRE(near(lw.weight(layer_index{19}, 40), 0.525, 1e-15));
    REQUIRE(near(lw.weight(layer_index{39}, 40), 0.025, 1e-15));
    for (std::uint32_t l = 1; l < 40; ++l) REQUIRE(lw.weight(layer_index{l}, 40) < lw.weight(layer_index{l - 1}, 40));
    const session_relative pw;
    REQUIRE(pw.weight(chunk_index{0}, 4) == 0.25);
    REQUIRE(pw.weight(chunk_index{3}, 4) == 1.0);
    REQUIRE(near(pw.weight(chunk_index{0}, 100), 0.01, 1e-15));
    REQUIRE(pw.weight(chunk_index{0}, 1) == 1.0);
}
