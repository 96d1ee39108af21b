// The 16-bit KV path on the device against its host references, on fresh
// random inputs, outputs poisoned before every run, for bf16 and fp16:
// - Quest (basic_device_quest<T>): metadata, kept as T, widened == the host
//   quest's fp32 metadata of the widened keys, bit for bit (batched and
//   single offload; a key that is not finite as T, e.g. 70000 in fp16,
//   leaves the block without metadata); scores within 2 gamma_n sum|t| of
//   the host's (tests/sparse_kv_element.cpp derives it); device selection
//   == the host rule on the device's scores; select_top_device (score +
//   top-K with no host round trip) == the host rule, highest first, and its
//   device query flag;
// - LSE merge with o stored as T (merge_attention_state(s)<T>) within
//   P (u_T + 16 u32) max|o| of the double host merge of the widened o
//   (tests/sparse_kv_element.cpp derives it);
// - the ring loader over 16-bit K/V, both gather methods: decode attention
//   over each slot (slot_view<T>, basic_paged_decode_args<T>), merged slot
//   by slot on the compute stream == the host reference over all tokens.
// Exits 77 (CTest: skipped) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <kvpolicy/cuda/attention.cuh>
#include <kvpolicy/cuda/merge.cuh>
#include <kvpolicy/cuda/quest.cuh>
#include <kvpolicy/cuda/ring.cuh>
#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/lse_merge.hpp>
#include <kvpolicy/sparse/quest.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

#include "cuda_test.cuh"
#include "cuda_test_data.cuh"
#include "support/kv_element_vectors.hpp"

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace cuda_16bit {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
using namespace kvpolicy::cuda::testing;

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

using kvpolicy::testing::narrow;
using kvpolicy::testing::widen;

template <class T>
double unit_roundoff() {
    return std::ldexp(1.0, std::is_same_v<T, bf16> ? -8 : std::is_same_v<T, fp16> ? -11 : -24);
}

// ---------------------------------------------------------------- Quest ----

template <class T>
void check_quest(std::mt19937_64& rng, cudaStream_t stream) {
    const quest_config cfg{.num_layers = 2,
                           .num_blocks = 96,
                           .num_kv_heads = 4,
                           .head_dim = 128,
                           .token_budget = 16 * 12,
                           .threshold_blocks = 4,
                           .sink_blocks = 1,
                           .recent_blocks = 2};
    constexpr std::uint32_t bs = 16, q_heads = 16;
    const std::size_t row = std::size_t{cfg.num_kv_heads} * cfg.head_dim, block_values = bs * row;
    quest host(cfg);
    basic_device_quest<T> dev(cfg, stream);

    auto keys_f = random_floats(rng, cfg.num_blocks * block_values, 3.0f);
    const std::uint32_t broken = 7;  // not finite as T: 70000 overflows fp16; inf for bf16
    keys_f[broken * block_values + 5] = std::is_same_v<T, fp16> ? 70000.0f : std::numeric_limits<float>::infinity();
    const auto keys = narrow<T>(keys_f);
    const auto keys_w = widen(keys);
    std::vector<std::uint32_t> tokens(cfg.num_blocks), blocks(cfg.num_blocks);
    for (std::uint32_t b = 0; b < cfg.num_blocks; ++b) {
        tokens[b] = rng() % 4 == 0 ? 1 + static_cast<std::uint32_t>(rng() % bs) : bs;
        blocks[b] = (b * 41) % cfg.num_blocks;
    }
    device_buffer<T> d_keys;
    device_buffer<std::uint32_t> d_tokens, d_blocks;
    const device_span<const T> all_keys = upload_span(keys, d_keys);
    dev.on_offload_blocks(layer_index{0}, all_keys, block_values, upload_span(blocks, d_blocks),
                          upload_span(tokens, d_tokens));
    for (std::uint32_t j = 0; j < cfg.num_blocks; ++j) {
        dev.on_offload(block_id{blocks[j]}, layer_index{1},
                       basic_device_key_block_view<T>{.keys = all_keys.subspan(j * block_values, tokens[j] * row),
                                                      .tokens = tokens[j],
                                                      .num_kv_heads = cfg.num_kv_heads,
                                                      .head_dim = cfg.head_dim});
        if (j == broken) continue;  // the host rejects it; the device leaves it without metadata
        const key_block_view v{.keys = std::span<const float>(keys_w).subspan(j * block_values, tokens[j] * row),
                               .tokens = tokens[j],
                               .num_kv_heads = cfg.num_kv_heads,
                               .head_dim = cfg.head_dim};
        host.on_offload(block_id{blocks[j]}, layer_index{0}, v);
        host.on_offload(block_id{blocks[j]}, layer_index{1}, v);
    }
    std::vector<T> mn(row), mx(row);
    int meta_mismatch = 0;
    for (std::uint32_t layer = 0; layer < 2; ++layer)
        for (std::uint32_t b = 0; b < cfg.num_blocks; ++b) {
            const bool has = dev.copy_metadata(block_id{b}, layer_index{layer}, mn, mx);
            if (has != host.has_metadata(block_id{b}, layer_index{layer})) ++meta_mismatch;
            if (!has) continue;
            const auto hmn = host.key_min(block_id{b}, layer_index{layer});
            const auto hmx = host.key_max(block_id{b}, layer_index{layer});
            for (std::size_t e = 0; e < row; ++e)
                if (std::bit_cast<std::uint32_t>(to_float(mn[e])) != std::bit_cast<std::uint32_t>(hmn[e]) ||
                    std::bit_cast<std::uint32_t>(to_float(mx[e])) != std::bit_cast<std::uint32_t>(hmx[e]))
                    ++meta_mismatch;
        }
    KVPOLICY_EXPECT(meta_mismatch == 0);
    KVPOLICY_EXPECT(!host.has_metadata(block_id{blocks[broken]}, layer_index{0}));

    const std::size_t n = std::size_t{q_heads} * cfg.head_dim;
    const double gamma_n =
        static_cast<double>(n) * std::ldexp(1.0, -24) / (1.0 - static_cast<double>(n) * std::ldexp(1.0, -24));
    for (int round = 0; round < 12; ++round) {
        const std::uint32_t layer = static_cast<std::uint32_t>(rng() % 2);
        const auto query = random_floats(rng, n);
        device_buffer<float> d_query, d_scores(cfg.num_blocks);
        upload(query, d_query);
        std::vector<block_id> available(cfg.num_blocks);
        for (std::uint32_t i = 0; i < cfg.num_blocks; ++i) available[i] = block_id{i};
        std::shuffle(available.begin(), available.end(), rng);
        available.resize(rng() % (cfg.num_blocks + 1));
        device_buffer<std::uint32_t> d_avail;
        upload(raw_ids(available), d_avail);
        poison(d_scores.view());
        dev.score_blocks(layer_index{layer}, d_avail.view(available.size()), d_query.view(n), q_heads,
                         d_scores.view(available.size()));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto scores = download(d_scores.view(available.size()));
        int bad = 0;
        for (std::size_t i = 0; i < available.size(); ++i) {
            const float want = host.block_score(available[i], layer_index{layer}, query, q_heads);
            if (std::isinf(want)) {
                bad += scores[i] != want;
                continue;
            }
            const auto hmn = host.key_min(available[i], layer_index{layer});
            const auto hmx = host.key_max(available[i], layer_index{layer});
            double magnitude = 0.0;
            for (std::size_t e = 0; e < n; ++e) {
                const std::size_t m =
                    (e / cfg.head_dim) / (q_heads / cfg.num_kv_heads) * cfg.head_dim + e % cfg.head_dim;
                magnitude += std::abs(std::max(double{query[e]} * hmn[m], double{query[e]} * hmx[m]));
            }
            bad += std::abs(double{scores[i]} - double{want}) > 2.0 * gamma_n * magnitude;
        }
        KVPOLICY_EXPECT(bad == 0);

        const device_selection_context ctx{.layer = layer_index{layer},
                                           .block_size = bs,
                                           .num_q_heads = q_heads,
                                           .num_kv_heads = cfg.num_kv_heads,
                                           .head_dim = cfg.head_dim,
                                           .query = d_query.view(n)};
        std::vector<block_id> got(available.size(), block_id{9999});
        got.resize(dev.select(available, ctx, got));
        KVPOLICY_EXPECT(got == host_quest_selection(available, scores, bs, cfg));
        const quest_plan plan = plan_quest_selection(available.size(), bs, cfg);

        // Score + top-K on the device, no host round trip: the positions of
        // the middle blocks, highest first, are the host rule's on the
        // device's own scores (which the select above checked).
        if (!plan.load_all) {
            const std::size_t middle = plan.middle_end - plan.middle_begin;
            const auto keep = static_cast<std::uint32_t>(plan.middle_keep);
            std::size_t bytes = 0;
            device_buffer<std::uint32_t> d_positions(std::max<std::size_t>(keep, 1)), d_flag(1);
            device_buffer<select_status> d_status(1);
            const auto candidates = d_avail.view(available.size()).subspan(plan.middle_begin, middle);
            dev.select_top_device({}, bytes, layer_index{layer}, candidates, d_query.view(n), q_heads, keep,
                                  d_positions.view(), d_status.view(), d_flag.view());
            device_buffer<std::byte> temp(bytes);
            poison(d_positions.view());
            poison(d_flag.view());
            dev.select_top_device(temp.view(), bytes, layer_index{layer}, candidates, d_query.view(n), q_heads, keep,
                                  d_positions.view(), d_status.view(), d_flag.view());
            KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
            auto positions = download(d_positions.view(keep));
            const select_status status = download(d_status.view())[0];
            KVPOLICY_EXPECT(download(d_flag.view())[0] == 0u);
            KVPOLICY_EXPECT(status.nan_count == 0 && status.selected == keep);
            // Highest first (scores read back from the select_lowest input are negated).
            std::vector<float> middle_scores(scores.begin() + static_cast<std::ptrdiff_t>(plan.middle_begin),
                                             scores.begin() + static_cast<std::ptrdiff_t>(plan.middle_end));
            bool ordered = true;
            for (std::size_t i = 1; i < positions.size(); ++i) {
                const float a = middle_scores[positions[i - 1]], b = middle_scores[positions[i]];
                ordered = ordered && (a > b || (a == b && positions[i - 1] < positions[i]));
            }
            KVPOLICY_EXPECT(ordered);
            std::vector<std::uint32_t> scratch, chosen(middle);
            chosen.resize(quest_top_positions(middle_scores, keep, scratch, chosen));
            std::sort(positions.begin(), positions.end());
            KVPOLICY_EXPECT(positions == chosen);
            // A NaN query raises the flag, on the device, with no host check.
            auto nan_query = query;
            nan_query[n / 3] = std::numeric_limits<float>::quiet_NaN();
            device_buffer<float> d_nan_query;
            dev.select_top_device(temp.view(), bytes, layer_index{layer}, candidates,
                                  upload_span(nan_query, d_nan_query), q_heads, keep, d_positions.view(),
                                  d_status.view(), d_flag.view());
            KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
            KVPOLICY_EXPECT(download(d_flag.view())[0] == 1u);
            // Bad input: checked before anything is enqueued (the flag keeps its poison).
            poison(d_flag.view());
            KVPOLICY_EXPECT(throws<usage_error>([&] {
                dev.select_top_device(temp.view(), bytes, layer_index{layer}, candidates, d_query.view(n), q_heads,
                                      keep, d_positions.view(keep - 1), d_status.view(), d_flag.view());
            }));
            KVPOLICY_EXPECT(throws<usage_error>([&] {
                dev.select_top_device(temp.view(bytes - 1), bytes, layer_index{layer}, candidates, d_query.view(n),
                                      q_heads, keep, d_positions.view(), d_status.view(), d_flag.view());
            }));
            KVPOLICY_EXPECT(throws<usage_error>([&] {
                dev.select_top_device(temp.view(), bytes, layer_index{layer}, candidates, d_query.view(n - 1), q_heads,
                                      keep, d_positions.view(), d_status.view(), d_flag.view());
            }));
            KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
            KVPOLICY_EXPECT(download(d_flag.view())[0] == 0xffffffffu);
        }
    }
    std::printf("  quest %s: metadata exact, scores within 2 gamma_n, selection as the host rule\n",
                std::string(basic_device_quest<T>::name).c_str());
}

// ---------------------------------------------------------------- merge ----

template <class T>
void check_merge(std::mt19937_64& rng, cudaStream_t stream) {
    constexpr std::uint32_t rows = 37, d = 200, parts = 6;
    const auto o_parts = narrow<T>(random_floats(rng, parts * rows * d));
    auto lse_parts = random_floats(rng, parts * rows, 3.0f);
    for (std::uint32_t r = 0; r < rows; r += 4) lse_parts[r] = neg_inf;                        // empty in part 0
    for (std::uint32_t p = 0; p < parts; ++p) lse_parts[std::size_t{p} * rows + 7] = neg_inf;  // row 7 empty everywhere
    const auto o_w = widen(o_parts);
    double max_o = 0.0;
    for (float x : o_w) max_o = std::max(max_o, std::abs(double{x}));
    std::vector<float> o_ref(rows * d, 0.0f), lse_ref(rows, neg_inf);
    for (std::uint32_t p = 0; p < parts; ++p)
        merge_attention_state(o_ref, lse_ref, std::span<const float>(o_w).subspan(std::size_t{p} * rows * d, rows * d),
                              std::span<const float>(lse_parts).subspan(std::size_t{p} * rows, rows), d);
    device_buffer<T> d_o_parts, d_o(rows * d), d_acc_o;
    device_buffer<float> d_lse_parts, d_lse(rows), d_acc_lse;
    upload(o_parts, d_o_parts);
    upload(lse_parts, d_lse_parts);
    poison(d_o.view());
    poison(d_lse.view());
    merge_attention_states<T>(d_o_parts.view(parts * rows * d), d_lse_parts.view(parts * rows), parts, d, d_o.view(),
                              d_lse.view(), stream);
    upload(std::vector<T>(rows * d, from_float<T>(std::numeric_limits<float>::quiet_NaN())), d_acc_o);  // never read
    upload(std::vector<float>(rows, neg_inf), d_acc_lse);
    for (std::uint32_t p = 0; p < parts; ++p)
        merge_attention_state<T>(d_acc_o.view(rows * d), d_acc_lse.view(rows),
                                 d_o_parts.view().subspan(std::size_t{p} * rows * d, rows * d),
                                 d_lse_parts.view().subspan(std::size_t{p} * rows, rows), d, stream);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto o = widen(download(d_o.view())), acc_o = widen(download(d_acc_o.view(rows * d)));
    const auto lse = download(d_lse.view()), acc_lse = download(d_acc_lse.view(rows));
    const double u32 = std::ldexp(1.0, -24), o_tol = parts * (unit_roundoff<T>() + 16.0 * u32) * max_o;
    int bad = 0;
    for (std::uint32_t r = 0; r < rows; ++r) {
        if (lse_ref[r] == neg_inf) {
            bad += lse[r] != neg_inf || acc_lse[r] != neg_inf || o[r * d] != 0.0f;
            continue;
        }
        const double lse_tol = parts * 8.0 * u32 * (1.0 + std::abs(double{lse_ref[r]}));
        bad += std::abs(double{lse[r]} - lse_ref[r]) > lse_tol;
        bad += std::abs(double{acc_lse[r]} - lse_ref[r]) > lse_tol;
        for (std::uint32_t c = 0; c < d; ++c) {
            bad += std::abs(double{o[r * d + c]} - o_ref[r * d + c]) > o_tol;
            bad += std::abs(double{acc_o[r * d + c]} - o_ref[r * d + c]) > o_tol;
        }
    }
    KVPOLICY_EXPECT(bad == 0);
}

// ----------------------------------------------------------------- ring ----

// One sequence of 16-bit [K | V] blocks scattered over the pinned CPU tier,
// streamed through the ring in loads of slot_blocks; attention over each
// slot merged into fp32 (o, lse) on the compute stream.
template <class T>
void check_ring_attention(std::mt19937_64& rng) {
    constexpr std::uint32_t blocks = 160, used = 53, bs = 16, kv_heads = 2, group = 4, d = 128, slot_blocks = 8;
    const decode_attention_shape shape{.num_q_heads = kv_heads * group,
                                       .num_kv_heads = kv_heads,
                                       .head_dim = d,
                                       .block_size = bs,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(d))};
    const std::size_t half = std::size_t{bs} * kv_heads * d, block_values = 2 * half, heads = shape.num_q_heads;
    const auto cache = narrow<T>(random_floats(rng, blocks * block_values));
    const auto cache_w = widen(cache);
    std::vector<block_id> ids(blocks);
    for (std::uint32_t i = 0; i < blocks; ++i) ids[i] = block_id{i};
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::vector<block_id> table(ids.begin(), ids.begin() + used);
    const std::uint64_t tokens = std::uint64_t{used - 1} * bs + 1 + rng() % bs;
    const auto q = random_floats(rng, heads * d, 1.5f);
    std::vector<float> o_ref(heads * d), lse_ref(heads);
    reference_decode_attention(
        q, {.k = cache_w, .v = std::span<const float>(cache_w).subspan(half), .block_stride = block_values}, table,
        tokens, shape, o_ref, lse_ref);
    std::vector<slot_load> loads;
    std::vector<std::uint64_t> load_tokens;
    for (std::size_t first = 0; first < table.size(); first += slot_blocks) {
        const std::size_t count = std::min<std::size_t>(slot_blocks, table.size() - first);
        loads.push_back({layer_index{0}, std::span<const block_id>(table).subspan(first, count)});
        load_tokens.push_back(std::min<std::uint64_t>(count * bs, tokens - first * bs));
    }
    for (gather_method method : {gather_method::batch_memcpy, gather_method::gather_kernel}) {
        pinned_block_arena host(blocks, block_values * sizeof(T));
        std::memcpy(host.host_view().data(), static_cast<const void*>(cache.data()), cache.size() * sizeof(T));
        ring_loader ring(host, {.num_layers = 1,
                                .blocks_per_layer = blocks,
                                .num_slots = 2,
                                .slot_blocks = slot_blocks,
                                .method = method});
        std::vector<std::uint32_t> local(slot_blocks);
        std::iota(local.begin(), local.end(), 0u);
        device_buffer<std::uint32_t> d_local;
        device_buffer<float> d_q, d_part_o(heads * d), d_part_lse(heads), d_acc_o, d_acc_lse;
        upload(local, d_local);
        upload(q, d_q);
        upload(std::vector<float>(heads * d, 0.0f), d_acc_o);
        upload(std::vector<float>(heads, neg_inf), d_acc_lse);
        const cudaStream_t compute = ring.compute_stream();
        run_ring_pipeline(ring, loads, [&](std::uint32_t slot, std::size_t i) {
            const device_span<const T> base = ring.slot_view<T>(slot);
            const basic_paged_decode_args<T> a{.q = d_q.view(heads * d),
                                               .k_cache = base,
                                               .v_cache = base.subspan(half),
                                               .block_stride = block_values,
                                               .block_table = d_local.view(),
                                               .num_tokens = load_tokens[i],
                                               .shape = shape,
                                               .o = d_part_o.view(heads * d),
                                               .lse = d_part_lse.view(heads)};
            paged_decode_attention(a, compute);
            merge_attention_state<float>(d_acc_o.view(heads * d), d_acc_lse.view(heads), d_part_o.view(heads * d),
                                         d_part_lse.view(heads), d, compute);
        });
        ring.synchronize();
        const auto o = download(d_acc_o.view(heads * d)), lse = download(d_acc_lse.view(heads));
        int bad = 0;
        for (std::size_t h = 0; h < heads; ++h) {
            bad += !close(lse[h], lse_ref[h], 5e-5f);
            for (std::size_t c = 0; c < d; ++c) bad += !close(o[h * d + c], o_ref[h * d + c], 5e-5f);
        }
        KVPOLICY_EXPECT(bad == 0);
    }
    KVPOLICY_EXPECT(throws<usage_error>([&] {
        pinned_block_arena odd(4, 6);  // 6-byte blocks: not a whole number of floats
        ring_loader r(odd, {.num_layers = 1, .blocks_per_layer = 4, .num_slots = 1, .slot_blocks = 1});
        (void)r.slot_view<float>(0);
    }));
}

}  // namespace

int run() {
    if (int rc = skip_without_device("cuda_16bit")) return rc;
    try {
        stream_handle stream;
        std::mt19937_64 rng(1616);
        check_quest<bf16>(rng, stream.get());
        check_quest<fp16>(rng, stream.get());
        check_merge<float>(rng, stream.get());
        check_merge<bf16>(rng, stream.get());
        check_merge<fp16>(rng, stream.get());
        check_ring_attention<bf16>(rng);
        check_ring_attention<fp16>(rng);
        KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
        std::printf("cuda_16bit: exception: %s\n", e.what());
        return 1;
    }
    std::printf("cuda_16bit: %d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}

}  // namespace cuda_16bit

int main() { return cuda_16bit::run(); }
