// Device victim selection and retention scoring against their host
// references, on fresh random inputs, outputs poisoned before every run,
// every CUDA call checked:
// - select_lowest (radix select and radix sort, float and double) and
//   thrust_selector on the CUDA system == nth_element_selector, ties, -0/+0,
//   infinities, k = 0, k = n, k > n, n = 0, 10^6 items; NaN reported with
//   the output untouched; too-small temporary storage rejected;
// - retention_value on cub_selector and on thrust_selector<cuda> picks the
//   victims it picks on nth_element_selector;
// - compute_retention in double == the host formula bit for bit, in float
//   within half an ulp; select_lowest_retention (fused) == host selection of
//   the host scores; a broken precondition shows up as a NaN report.
// Exits 77 (CTest: skipped) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <kvpolicy/cuda/score.cuh>
#include <kvpolicy/cuda/select.cuh>
#include <kvpolicy/eviction/retention_value.hpp>
#include <kvpolicy/select/nth_element_selector.hpp>

#include "cuda_test.cuh"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace cuda_select_score {
using namespace kvpolicy;
using namespace kvpolicy::cuda;

namespace {

// cudaMemcpy and cudaMemset run on the legacy stream, which does not order
// with the non-blocking stream the selections run on: settle first.
void settle() { KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize()); }

template <class T>
device_span<const T> device_copy(const std::vector<T>& h, device_buffer<T>& d) {
    d.reserve(std::max<std::size_t>(h.size(), 1));
    if (!h.empty()) KVPOLICY_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    settle();
    return d.view(h.size());
}

template <class T>
std::vector<T> host_copy(device_span<T> d) {
    const std::size_t n = d.size();
    std::vector<T> h(n);
    if (n > 0) KVPOLICY_CUDA_CHECK(cudaMemcpy(h.data(), d.data(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

template <class Score>
std::vector<std::uint32_t> host_select(const std::vector<Score>& scores, const std::vector<std::uint32_t>& ids,
                                       std::size_t k) {
    std::vector<item_id> in(ids.size()), out(std::min(k, ids.size()));
    for (std::size_t i = 0; i < ids.size(); ++i) in[i] = item_id{ids[i]};
    nth_element_selector host;
    out.resize(host.select_lowest<Score>(scores, in, out));
    std::vector<std::uint32_t> r(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) r[i] = out[i].value;
    return r;
}

template <class Score>
std::vector<Score> random_scores(std::mt19937_64& rng, std::size_t n, bool coarse) {
    std::vector<Score> s(n);
    std::uniform_real_distribution<double> u(0.0, 1000.0);
    for (std::size_t i = 0; i < n; ++i) {
        const auto r = rng() % 100;
        s[i] = coarse ? static_cast<Score>(static_cast<int>(rng() % 41) - 20) / Score{8} : static_cast<Score>(u(rng));
        if (r < 3) s[i] = std::numeric_limits<Score>::infinity();
        if (r == 3) s[i] = -std::numeric_limits<Score>::infinity();
        if (r == 4) s[i] = -Score{0};
        if (r == 5) s[i] = Score{0};
    }
    return s;
}

// Runs the CUB path once with poisoned output and checks it against the host.
template <class Score>
void check_select(std::mt19937_64& rng, std::size_t n, std::size_t k, bool coarse, bool with_ids, select_algorithm algo,
                  cudaStream_t stream) {
    const auto scores = random_scores<Score>(rng, n, coarse);
    std::vector<std::uint32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i)
        ids[i] = with_ids ? static_cast<std::uint32_t>(rng() % (4 * n + 1)) : static_cast<std::uint32_t>(i);
    device_buffer<Score> d_scores;
    device_buffer<std::uint32_t> d_ids, d_out;
    device_buffer<select_status> d_status;
    device_buffer<std::byte> temp;
    const std::size_t kk = std::min(k, n);
    d_out.reserve(std::max<std::size_t>(k, 1));
    d_status.reserve(1);
    KVPOLICY_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, std::max<std::size_t>(k, 1) * sizeof(std::uint32_t)));
    settle();
    KVPOLICY_CUDA_CHECK(cudaMemset(d_status.get(), 0xff, sizeof(select_status)));
    settle();
    const device_span<const Score> s = device_copy(scores, d_scores);
    const device_span<const std::uint32_t> i = with_ids ? device_copy(ids, d_ids) : device_span<const std::uint32_t>{};
    const device_span<std::uint32_t> out = d_out.view(std::max<std::size_t>(k, 1));
    std::size_t bytes = 0;
    select_lowest<Score>({}, bytes, s, i, out, static_cast<std::uint32_t>(k), d_status.view(1), stream, algo);
    temp.reserve(bytes);
    KVPOLICY_CUDA_CHECK(cudaMemset(temp.get(), 0xa5, bytes));
    settle();  // stale state must not matter
    select_lowest<Score>(temp.view(bytes), bytes, s, i, out, static_cast<std::uint32_t>(k), d_status.view(1), stream,
                         algo);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto status = host_copy(d_status.view(1))[0];
    KVPOLICY_EXPECT(status.nan_count == 0);
    KVPOLICY_EXPECT(status.selected == kk);
    const auto got = host_copy(out);
    const auto want = host_select(scores, ids, k);
    KVPOLICY_EXPECT(std::equal(want.begin(), want.end(), got.begin()));
    if (k > kk) KVPOLICY_EXPECT(got[kk] == 0xffffffffu);  // nothing past min(k, n)
    if (!std::equal(want.begin(), want.end(), got.begin()))
        std::printf("  select mismatch: n=%zu k=%zu coarse=%d ids=%d algo=%d score bytes=%zu\n", n, k, coarse, with_ids,
                    static_cast<int>(algo), sizeof(Score));
}

template <class Score>
void check_nan(cudaStream_t stream, select_algorithm algo) {
    std::vector<Score> scores{3, 1, 2, 5, 4};
    scores[3] = std::numeric_limits<Score>::quiet_NaN();
    scores[1] = std::numeric_limits<Score>::quiet_NaN();
    const std::vector<std::uint32_t> ids{10, 11, 12, 13, 14};
    device_buffer<Score> d_scores;
    device_buffer<std::uint32_t> d_ids, d_out(4);
    device_buffer<select_status> d_status(1);
    device_buffer<std::byte> temp;
    KVPOLICY_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, 4 * sizeof(std::uint32_t)));
    settle();
    for (std::uint32_t k : {0u, 2u}) {
        std::size_t bytes = 0;
        const auto d_s = device_copy(scores, d_scores);
        const auto d_i = device_copy(ids, d_ids);
        select_lowest<Score>({}, bytes, d_s, d_i, d_out.view(4), k, d_status.view(1), stream, algo);
        temp.reserve(bytes);
        select_lowest<Score>(temp.view(bytes), bytes, d_s, d_i, d_out.view(4), k, d_status.view(1), stream, algo);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto status = host_copy(d_status.view(1))[0];
        KVPOLICY_EXPECT(status.nan_count == 2);
        KVPOLICY_EXPECT(status.nan_index == 1);
        KVPOLICY_EXPECT(status.nan_id == 11);
        KVPOLICY_EXPECT(status.selected == 0);
        const auto out = host_copy(d_out.view(4));
        KVPOLICY_EXPECT(std::all_of(out.begin(), out.end(), [](std::uint32_t x) { return x == 0xffffffffu; }));
    }
}

template <class Selector>
void check_retention_value_on(const char* label) {
    using on_host = retention_value<pensieve_linear, pipelined_depth, session_relative, nth_element_selector>;
    using on_device = retention_value<pensieve_linear, pipelined_depth, session_relative, Selector>;
    static_assert(eviction_policy<on_device>);
    std::mt19937_64 rng(77);
    constexpr std::size_t capacity = 2000;
    on_host a(capacity);
    on_device b(capacity);
    std::vector<int> state(capacity, 0);
    timestamp now = 1;
    int mismatches = 0;
    for (int step = 0; step < 6000; ++step) {
        now += rng() % 3;
        const auto id = static_cast<std::uint32_t>(rng() % capacity);
        const auto op = rng() % 10;
        access_context c;
        c.now = now;
        c.num_layers = 16;
        c.layer = layer_index{id % 16};
        c.session_total_chunks = 1 + static_cast<std::uint32_t>(rng() % 50);
        c.chunk = chunk_index{static_cast<std::uint32_t>(rng() % c.session_total_chunks)};
        c.context_length = rng() % 8192;
        if (state[id] == 0 && op < 7) {
            a.on_insert(item_id{id}, c);
            b.on_insert(item_id{id}, c);
            state[id] = 1;
        } else if (state[id] == 1 && op < 3) {
            a.on_access(item_id{id}, c);
            b.on_access(item_id{id}, c);
        } else if (op == 9) {
            std::vector<item_id> va(1 + rng() % 40), vb(va.size());
            const std::size_t na = a.pop_victims(va, now), nb = b.pop_victims(vb, now);
            va.resize(na);
            vb.resize(nb);
            if (va != vb) ++mismatches;
            for (item_id v : va) state[v.index()] = 0;
        }
    }
    KVPOLICY_EXPECT(mismatches == 0);
    std::printf("  retention_value on %s: %d mismatching pops\n", label, mismatches);
}

struct host_items {
    std::vector<std::uint32_t> layer, chunk, total, ids;
    std::vector<std::uint64_t> context;
    std::vector<timestamp> last_use;
};

host_items random_items(std::mt19937_64& rng, std::size_t n, std::uint32_t num_layers, timestamp now) {
    host_items h;
    for (std::size_t i = 0; i < n; ++i) {
        h.layer.push_back(static_cast<std::uint32_t>(rng() % num_layers));
        h.total.push_back(1 + static_cast<std::uint32_t>(rng() % 200));
        h.chunk.push_back(static_cast<std::uint32_t>(rng() % h.total.back()));
        h.context.push_back(rng() % 131072);
        h.last_use.push_back(rng() % 10 == 0 ? now : rng() % now);  // some just used: +inf
        h.ids.push_back(static_cast<std::uint32_t>(i * 7 + 3));
    }
    return h;
}

void check_retention_scores(cudaStream_t stream) {
    std::mt19937_64 rng(5);
    const std::size_t n = 200000 / kvpolicy::cuda::testing::large_input_divisor();
    const retention_params params{
        .cost = {.alpha = 0.0013, .beta = 0.021, .const_non_attention = 0.0047}, .num_layers = 40, .now = 1'000'000};
    const host_items h = random_items(rng, n, params.num_layers, params.now);
    device_buffer<std::uint32_t> d_layer, d_chunk, d_total, d_ids, d_out;
    device_buffer<std::uint64_t> d_context;
    device_buffer<timestamp> d_last;
    device_buffer<double> d_scores(n);
    device_buffer<float> d_scores_f(n);
    device_buffer<select_status> d_status(1);
    const retention_items_view items{.layer = device_copy(h.layer, d_layer),
                                     .chunk = device_copy(h.chunk, d_chunk),
                                     .session_total_chunks = device_copy(h.total, d_total),
                                     .context_length = device_copy(h.context, d_context),
                                     .last_use = device_copy(h.last_use, d_last),
                                     .ids = device_copy(h.ids, d_ids)};
    KVPOLICY_CUDA_CHECK(cudaMemset(d_scores.get(), 0xff, n * sizeof(double)));
    settle();
    KVPOLICY_CUDA_CHECK(cudaMemset(d_scores_f.get(), 0xff, n * sizeof(float)));
    settle();
    compute_retention<double>(items, params, d_scores.view(n), stream);
    compute_retention<float>(items, params, d_scores_f.view(n), stream);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = host_copy(d_scores.view(n));
    const auto got_f = host_copy(d_scores_f.view(n));

    // The host policy is the reference: its retention() of each item.
    seed000_retention_value policy(n, {.cost = pensieve_linear(params.cost)});
    for (std::uint32_t i = 0; i < n; ++i) {
        access_context c;
        c.now = h.last_use[i];
        c.layer = layer_index{h.layer[i]};
        c.num_layers = params.num_layers;
        c.chunk = chunk_index{h.chunk[i]};
        c.session_total_chunks = h.total[i];
        c.context_length = h.context[i];
        policy.on_insert(item_id{i}, c);
    }
    std::vector<double> want(n);
    std::size_t bit_mismatch = 0, float_out = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
        want[i] = *policy.retention(item_id{i}, params.now);
        if (std::memcmp(&want[i], &got[i], sizeof(double)) != 0) ++bit_mismatch;
        const double rel =
            std::isinf(want[i]) ? (std::isinf(got_f[i]) ? 0.0 : 1.0) : std::abs(double{got_f[i]} - want[i]) / want[i];
        if (rel > std::ldexp(1.0, -24)) ++float_out;
    }
    std::printf("  compute_retention: %zu of %zu double scores differ in any bit, %zu float scores off by > 2^-24\n",
                bit_mismatch, n, float_out);
    KVPOLICY_EXPECT(bit_mismatch == 0);
    KVPOLICY_EXPECT(float_out == 0);

    // Fused scoring + selection == host selection over the host scores.
    for (auto algo : {select_algorithm::radix_select, select_algorithm::radix_sort}) {
        const std::uint32_t k = 2000;
        d_out.reserve(k);
        KVPOLICY_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, k * sizeof(std::uint32_t)));
        settle();
        device_buffer<std::byte> temp;
        std::size_t bytes = 0;
        select_lowest_retention<double>({}, bytes, items, params, d_out.view(k), k, d_status.view(1), stream, algo);
        temp.reserve(bytes);
        select_lowest_retention<double>(temp.view(bytes), bytes, items, params, d_out.view(k), k, d_status.view(1),
                                        stream, algo);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        KVPOLICY_EXPECT(host_copy(d_status.view(1))[0].nan_count == 0);
        const auto fused = host_copy(d_out.view(k));
        const auto expected = host_select(want, h.ids, k);
        KVPOLICY_EXPECT(fused == expected);
    }

    // A broken precondition (layer >= num_layers) scores NaN: reported, named.
    auto broken = h.layer;
    broken[12345] = params.num_layers;
    device_buffer<std::uint32_t> d_broken;
    auto items_broken = items;
    items_broken.layer = device_copy(broken, d_broken);
    device_buffer<std::byte> temp;
    std::size_t bytes = 0;
    select_lowest_retention<float>({}, bytes, items_broken, params, d_out.view(10), 10, d_status.view(1), stream);
    temp.reserve(bytes);
    select_lowest_retention<float>(temp.view(bytes), bytes, items_broken, params, d_out.view(10), 10, d_status.view(1),
                                   stream);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto status = host_copy(d_status.view(1))[0];
    KVPOLICY_EXPECT(status.nan_count == 1);
    KVPOLICY_EXPECT(status.nan_id == h.ids[12345]);

    bool threw = false;
    try {
        auto bad = params;
        bad.cost.alpha = -1.0;
        compute_retention<double>(items, bad, d_scores.view(n), stream);
    } catch (const config_error&) {
        threw = true;
    }
    KVPOLICY_EXPECT(threw);
}

}  // namespace

int run() {
    using namespace kvpolicy::cuda::testing;
    if (int rc = skip_without_device("cuda_select_score")) return rc;
    try {
        stream_handle stream;
        std::mt19937_64 rng(2024);
        for (auto algo : {select_algorithm::radix_select, select_algorithm::radix_sort, select_algorithm::automatic}) {
            for (int round = 0; round < 40; ++round) {
                const std::size_t n = rng() % 3000;
                const std::size_t k = n == 0 ? rng() % 3 : rng() % (n + 3);
                check_select<double>(rng, n, k, round % 2 == 0, round % 3 != 0, algo, stream.get());
                check_select<float>(rng, n, k, round % 2 == 1, round % 3 == 0, algo, stream.get());
            }
            const std::size_t big = 1'000'000 / large_input_divisor();
            check_select<double>(rng, big, big / 100, false, true, algo, stream.get());
            check_select<float>(rng, big, big / 100, true, false, algo, stream.get());
            check_select<double>(rng, big / 10, big / 10, true, true, algo, stream.get());
            check_nan<double>(stream.get(), algo);
            check_nan<float>(stream.get(), algo);
        }

        // Temporary storage smaller than the size query said: rejected.
        {
            device_buffer<double> s(10);
            device_buffer<std::uint32_t> out(10);
            device_buffer<select_status> st(1);
            std::size_t bytes = 0;
            select_lowest<double>({}, bytes, s.view(), {}, out.view(), 3, st.view(), stream.get());
            device_buffer<std::byte> temp(bytes);
            std::size_t small = bytes - 1;
            bool threw = false;
            try {
                select_lowest<double>(temp.view(small), small, s.view(), {}, out.view(), 3, st.view(), stream.get());
            } catch (const usage_error&) {
                threw = true;
            }
            KVPOLICY_EXPECT(threw);
        }

        // The victim_selector wrappers over host arrays, NaN as an exception.
        {
            cub_selector sel(stream.get());
            thrust_selector<thrust::cuda::tag> tsel;
            for (int round = 0; round < 30; ++round) {
                const std::size_t n = rng() % 5000;
                const auto scores = random_scores<double>(rng, n, true);
                std::vector<item_id> ids(n);
                std::vector<std::uint32_t> raw(n);
                for (std::size_t i = 0; i < n; ++i)
                    raw[i] = static_cast<std::uint32_t>(rng() % 9000), ids[i] = item_id{raw[i]};
                const std::size_t k = rng() % (n + 2);
                const auto want = host_select(scores, raw, k);
                std::vector<item_id> a(k, item_id{12345}), b(k, item_id{12345});
                a.resize(sel.select_lowest<double>(scores, ids, a));
                b.resize(tsel.select_lowest<double>(scores, ids, b));
                std::vector<std::uint32_t> ra, rb;
                for (item_id x : a) ra.push_back(x.value);
                for (item_id x : b) rb.push_back(x.value);
                KVPOLICY_EXPECT(ra == want);
                KVPOLICY_EXPECT(rb == want);
            }
            const std::vector<double> with_nan{1.0, std::nan(""), 0.5};
            const std::vector<item_id> ids{item_id{4}, item_id{5}, item_id{6}};
            std::vector<item_id> out(2, item_id{77});
            for (int which = 0; which < 2; ++which) {
                bool threw = false;
                try {
                    if (which == 0)
                        (void)sel.select_lowest<double>(with_nan, ids, out);
                    else
                        (void)tsel.select_lowest<double>(with_nan, ids, out);
                } catch (const usage_error& e) {
                    threw = std::string(e.what()).find("item 5 is NaN") != std::string::npos;
                }
                KVPOLICY_EXPECT(threw);
                KVPOLICY_EXPECT(out[0] == item_id{77} && out[1] == item_id{77});
            }
        }

        check_retention_value_on<cub_selector>("cub_selector");
        check_retention_value_on<thrust_selector<thrust::cuda::tag>>("thrust_selector<cuda>");
        check_retention_scores(stream.get());
        KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
        std::printf("cuda_select_score: exception: %s\n", e.what());
        return 1;
    }
    std::printf("cuda_select_score: %d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}

}  // namespace cuda_select_score

int main() { return cuda_select_score::run(); }
