// Victim selection on cub::DeviceTopK (flashinfer/top_k.cuh) against the
// host selector (std::nth_element, then sorted: ascending (score, id)) and
// select.cuh's radix select on the same scores: 10^6 scores (10^5 under the
// sanitizers), k = 1%, spread and heavily tied scores, with and without
// ids; k >= n, n = 0; a NaN reported with its lowest position and id and
// `out` untouched; bad input refused before any launch (checked first, so
// it runs without a GPU too).
#include <kvpolicy/cuda/flashinfer/top_k.cuh>
#include <kvpolicy/cuda/select.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test.cuh"
#include "cuda_test_data.cuh"

namespace flashinfer_top_k_test {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
using namespace kvpolicy::cuda::testing;
namespace fi = kvpolicy::cuda::flashinfer;

std::vector<std::uint32_t> host_lowest(const std::vector<float>& s, const std::vector<std::uint32_t>& ids,
                                       std::uint32_t k) {
    std::vector<std::pair<float, std::uint32_t>> all(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        all[i] = {s[i] == 0.0f ? 0.0f : s[i], ids.empty() ? std::uint32_t(i) : ids[i]};
    k = std::min<std::uint32_t>(k, static_cast<std::uint32_t>(s.size()));
    std::nth_element(all.begin(), all.begin() + k, all.end());
    std::sort(all.begin(), all.begin() + k);
    std::vector<std::uint32_t> out(k);
    for (std::uint32_t i = 0; i < k; ++i) out[i] = all[i].second;
    return out;
}

struct result {
    std::vector<std::uint32_t> ids;
    select_status status;
};

template <class Select>
result run(Select&& select, const std::vector<float>& s, const std::vector<std::uint32_t>& ids, std::uint32_t k) {
    device_buffer<float> ds;
    device_buffer<std::uint32_t> dids, dout(std::max<std::uint32_t>(k, 1));
    device_buffer<select_status> dst(1);
    const auto scores = upload_span(s, ds);
    const auto id_span =
        ids.empty() ? device_span<const std::uint32_t>{} : device_span<const std::uint32_t>(upload_span(ids, dids));
    const std::uint32_t kk = std::min<std::uint32_t>(k, static_cast<std::uint32_t>(s.size()));
    poison(dout.view());
    std::size_t bytes = 0;
    select(device_span<std::byte>{}, bytes, scores, id_span, dout.view(kk), k, dst.view());
    device_buffer<std::byte> temp(std::max<std::size_t>(bytes, 1));
    select(temp.view(bytes), bytes, scores, id_span, dout.view(kk), k, dst.view());
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    return {download(dout.get(), kk), download(dst.get(), 1)[0]};
}

const auto top_k = [](device_span<std::byte> temp, std::size_t& bytes, device_span<const float> s,
                      device_span<const std::uint32_t> ids, device_span<std::uint32_t> out, std::uint32_t k,
                      device_span<select_status> st) {
    fi::device_top_k_lowest(temp, bytes, s, ids, out, k, st, cudaStreamPerThread);
};
const auto radix = [](device_span<std::byte> temp, std::size_t& bytes, device_span<const float> s,
                      device_span<const std::uint32_t> ids, device_span<std::uint32_t> out, std::uint32_t k,
                      device_span<select_status> st) {
    select_lowest<float>(temp, bytes, s, ids, out, k, st, cudaStreamPerThread, select_algorithm::radix_select);
};

void bad_input() {
    std::printf("bad input, refused before any launch\n");
    std::size_t bytes = 0;
    device_span<const std::uint32_t> three_ids{reinterpret_cast<const std::uint32_t*>(16), 3};
    device_span<const float> four{reinterpret_cast<const float*>(16), 4};
    KVPOLICY_EXPECT(throws<usage_error>([&] {  // ids of another length
        fi::device_top_k_lowest({}, bytes, four, three_ids, {}, 2, {}, cudaStreamPerThread);
    }));
}

void check_case(const char* what, const std::vector<float>& s, const std::vector<std::uint32_t>& ids, std::uint32_t k) {
    const std::vector<std::uint32_t> want = host_lowest(s, ids, k);
    const result got = run(top_k, s, ids, k);
    const result r = run(radix, s, ids, k);
    const bool same = got.ids == want && got.status.nan_count == 0 && got.status.selected == want.size();
    std::printf("  %-44s n %8zu k %7u: DeviceTopK %s host, radix select %s\n", what, s.size(), k,
                same ? "==" : "!=", r.ids == want ? "==" : "!=");
    KVPOLICY_EXPECT(same);
    KVPOLICY_EXPECT(r.ids == got.ids);
}

}  // namespace flashinfer_top_k_test

int main() {
    using namespace flashinfer_top_k_test;
    bad_input();
    if (kvpolicy::cuda::testing::failures != 0) return 1;
    if (const int skip = kvpolicy::cuda::testing::skip_without_device("cuda_flashinfer_top_k")) return skip;
    std::mt19937_64 rng(46);
    const std::size_t n = 1000000 / large_input_divisor();
    const auto k = static_cast<std::uint32_t>(n / 100);
    std::vector<float> spread = random_floats(rng, n);
    std::vector<float> tied(n);
    for (float& x : tied) x = static_cast<float>(rng() % 50) * 0.25f - 3.0f;  // 50 distinct values
    tied[5] = -0.0f;
    std::vector<std::uint32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng);
    check_case("spread scores", spread, {}, k);
    check_case("spread scores, shuffled ids", spread, ids, k);
    check_case("50 distinct scores (ties by id)", tied, {}, k);
    check_case("50 distinct scores, shuffled ids", tied, ids, k);
    check_case("k = n", std::vector<float>(spread.begin(), spread.begin() + 1000), {}, 1000);
    check_case("k > n", std::vector<float>(spread.begin(), spread.begin() + 100), {}, 500);
    check_case("n = 0", {}, {}, 10);

    std::vector<float> with_nan = spread;
    with_nan[n / 3] = std::numeric_limits<float>::quiet_NaN();
    with_nan[n / 2] = std::numeric_limits<float>::quiet_NaN();
    const result got = run(top_k, with_nan, ids, k);
    const bool reported = got.status.nan_count == 1 && got.status.nan_index == n / 3 &&
                          got.status.nan_id == ids[n / 3] && got.status.selected == 0 &&
                          std::ranges::all_of(got.ids, [](std::uint32_t x) { return x == 0xffffffffu; });
    std::printf("  NaN: reported at %u (id %u), out untouched: %s\n", got.status.nan_index, got.status.nan_id,
                reported ? "yes" : "NO");
    KVPOLICY_EXPECT(reported);
    std::printf("cuda_flashinfer_top_k: %d failure(s)\n", kvpolicy::cuda::testing::failures);
    return kvpolicy::cuda::testing::failures == 0 ? 0 : 1;
}
