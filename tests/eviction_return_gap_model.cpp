// return_gap_model against a naive batch fit (every sample's decayed weight
// recomputed from its age, the normal equations solved by Cholesky) on long
// random sample streams; recovery of a known log-linear law; bounded weights
// when a feature stops varying; readiness, ignored gaps and configuration
// errors.
#include <catch2/catch.hpp>

#include <kvpolicy/eviction/return_gap_model.hpp>
#include <kvpolicy/eviction/session_aware_lru.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace kvpolicy;

namespace {

constexpr std::size_t n_features = return_gap_model::features;
using vec = return_gap_model::vector_type;

struct sample {
    vec x;
    double y;  // log gap
};

// The weighted ridge fit from scratch: weight (1 - 1/window)^(n - 1 - i) for
// sample i of n, (sum w x x^T + ridge I) w = sum w x y by Cholesky.
vec naive_fit(const std::vector<sample>& samples, double window, double ridge) {
    std::array<std::array<double, n_features>, n_features> a{};
    vec b{};
    const std::size_t n = samples.size();
    for (std::size_t i = 0; i < n; ++i) {
        const double weight = std::pow(1.0 - 1.0 / window, static_cast<double>(n - 1 - i));
        for (std::size_t r = 0; r < n_features; ++r) {
            b[r] += weight * samples[i].x[r] * samples[i].y;
            for (std::size_t c = 0; c < n_features; ++c) a[r][c] += weight * samples[i].x[r] * samples[i].x[c];
        }
    }
    for (std::size_t r = 0; r < n_features; ++r) a[r][r] += ridge;
    std::array<std::array<double, n_features>, n_features> l{};  // a = l l^T
    for (std::size_t r = 0; r < n_features; ++r)
        for (std::size_t c = 0; c <= r; ++c) {
            double s = a[r][c];
            for (std::size_t k = 0; k < c; ++k) s -= l[r][k] * l[c][k];
            l[r][c] = r == c ? std::sqrt(s) : s / l[c][c];
        }
    vec z{}, w{};
    for (std::size_t r = 0; r < n_features; ++r) {
        double s = b[r];
        for (std::size_t k = 0; k < r; ++k) s -= l[r][k] * z[k];
        z[r] = s / l[r][r];
    }
    for (std::size_t r = n_features; r-- > 0;) {
        double s = z[r];
        for (std::size_t k = r + 1; k < n_features; ++k) s -= l[k][r] * w[k];
        w[r] = s / l[r][r];
    }
    return w;
}

// A session's features as a workload would make them: heavy-tailed output
// lengths and gaps, a first request (no gap) now and then.
vec random_features(std::mt19937_64& rng) {
    std::lognormal_distribution<double> tokens(5.0, 1.2), gap(7.0, 1.5);
    const bool has_gap = rng() % 5 != 0;
    const double latest = 1.0 + gap(rng), mean = 1.0 + gap(rng);
    return return_gap_model::features_of(static_cast<std::uint64_t>(tokens(rng)), has_gap, latest, mean);
}

}  // namespace

TEST_CASE("return_gap_model: its weights are the decayed ridge fit, recomputed naively", "[eviction][return_gap]") {
    const std::uint64_t seed = GENERATE(1u, 2u, 3u);
    const double window = GENERATE(16.0, 512.0);
    const double ridge = GENERATE(0.01, 1.0);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(0.0, 0.7);
    return_gap_model model({.window = window, .min_samples = 1, .ridge = ridge}, "test");
    std::vector<sample> samples;
    for (int i = 0; i < 3000; ++i) {
        const vec x = random_features(rng);
        const double log_gap = 1.5 + 0.6 * x[1] + 0.3 * x[2] + 0.2 * x[3] + 2.0 * x[4] + noise(rng);
        model.observe(x, std::exp(log_gap));
        samples.push_back({x, log_gap});
        if (i % 97 != 0 && i != 2999) continue;
        const vec expected = naive_fit(samples, window, ridge);
        for (std::size_t f = 0; f < n_features; ++f) {
            INFO("sample " << i << " feature " << f);
            REQUIRE(model.weights()[f] == Approx(expected[f]).epsilon(1e-7).margin(1e-9));
        }
        const vec probe = random_features(rng);
        double log_predicted = 0.0;
        for (std::size_t f = 0; f < n_features; ++f) log_predicted += expected[f] * probe[f];
        REQUIRE(model.predict(probe) == Approx(std::exp(log_predicted)).epsilon(1e-7));
    }
    REQUIRE(model.samples() == 3000);
}

TEST_CASE("return_gap_model: it recovers a law gaps follow, and predicts from it", "[eviction][return_gap]") {
    std::mt19937_64 rng(7);
    return_gap_model model({}, "test");
    // gap = 3 x (1 + output)^0.9 x latest^0.2, exactly.
    const auto law = [](const vec& x) { return std::exp(std::log(3.0) + 0.9 * x[1] + 0.2 * x[2]); };
    for (int i = 0; i < 20000; ++i) {
        const vec x = random_features(rng);
        model.observe(x, law(x));
    }
    // A request that wrote 1000 tokens after a 50-tick gap (mean 80).
    const vec x = return_gap_model::features_of(1000, true, 50.0, 80.0);
    REQUIRE(model.predict(x) == Approx(law(x)).epsilon(0.01));
    REQUIRE(model.weights()[1] == Approx(0.9).margin(0.01));
    REQUIRE(model.weights()[3] == Approx(0.0).margin(0.01));
    // Longer answers, longer predicted gaps.
    REQUIRE(model.predict(return_gap_model::features_of(4000, true, 50.0, 80.0)) > model.predict(x));
}

TEST_CASE("return_gap_model: weights stay finite when a feature stops varying", "[eviction][return_gap]") {
    // After warm-up every session has a gap: the "no gap yet" column is 0
    // for a million samples (recursive least squares with forgetting would
    // divide its covariance by the forgetting factor a million times there).
    return_gap_model model({.window = 64.0}, "test");
    std::mt19937_64 rng(3);
    for (int i = 0; i < 100; ++i) model.observe(return_gap_model::features_of(100 + rng() % 900, false, 0, 0), 500.0);
    for (int i = 0; i < 1'000'000; ++i)
        model.observe(return_gap_model::features_of(100 + rng() % 900, true, 400.0, 400.0), 400.0);
    for (double w : model.weights()) REQUIRE(std::isfinite(w));
    REQUIRE(model.predict(return_gap_model::features_of(500, true, 400.0, 400.0)) == Approx(400.0).epsilon(0.01));
}

TEST_CASE("return_gap_model: ready after min_samples and never when disabled, bad gaps ignored",
          "[eviction][return_gap]") {
    return_gap_model model({.min_samples = 3}, "test");
    const vec x = return_gap_model::features_of(10, true, 5.0, 5.0);
    model.observe(x, 0.0);
    model.observe(x, -4.0);
    model.observe(x, std::nan(""));
    model.observe(x, std::numeric_limits<double>::infinity());
    REQUIRE(model.samples() == 0);
    for (double w : model.weights()) REQUIRE(w == 0.0);
    model.observe(x, 5.0);
    model.observe(x, 5.0);
    REQUIRE_FALSE(model.ready());
    model.observe(x, 5.0);
    REQUIRE(model.ready());

    return_gap_model off({.enabled = false, .min_samples = 1}, "test");
    off.observe(x, 5.0);
    REQUIRE_FALSE(off.ready());
}

TEST_CASE("return_gap_model: configuration errors name the setting and the fix", "[eviction][return_gap][errors]") {
    REQUIRE_THROWS_AS(return_gap_model({.window = 1.0}, "pol"), config_error);
    REQUIRE_THROWS_WITH(return_gap_model({.window = 1.0}, "pol"), Catch::StartsWith("pol: return gap window"));
    REQUIRE_THROWS_WITH(return_gap_model({.window = std::nan("")}, "pol"), Catch::Contains(">= 2"));
    REQUIRE_THROWS_WITH(return_gap_model({.ridge = 0.0}, "pol"), Catch::Contains("ridge"));
    REQUIRE_THROWS_WITH(return_gap_model({.ridge = std::numeric_limits<double>::infinity()}, "pol"),
                        Catch::Contains("ridge"));
    REQUIRE_THROWS_WITH(return_gap_model({.min_samples = 0}, "pol"), Catch::Contains("min_samples"));
    // Through the policy that uses it.
    REQUIRE_THROWS_WITH(session_aware_lru(8, {.gaps = {.ridge = -1.0}}), Catch::StartsWith("session_aware_lru: "));
}
