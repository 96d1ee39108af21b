// The sparse-attention path on the device against its host references, on
// fresh random inputs, outputs poisoned before every run, every CUDA call
// checked:
// - Quest: metadata == host metadata exactly (batched and single offload, a
//   non-finite key leaves a block without metadata), scores == host scores
//   to float rounding, device selection == the host rule on those scores;
// - merge kernels == host lse merge; decode attention (one pass and split)
//   == host reference attention, over fp32, bf16 and fp16 K and V;
// - ring loader, both gather methods: slots hold exactly the scattered host
//   blocks; attention streamed through the ring and merged == one-pass
//   attention (block chunks, and layer-wise one load per layer);
// - Quest-selected attention approaches full attention as the budget grows;
// - device_transfer_engine == host_memcpy_engine on random ordered plans
//   with exchanges and invalid ops, status by status and byte for byte.
// Exits 77 (CTest: skipped) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <kvpolicy/cache/host_memcpy_engine.hpp>
#include <kvpolicy/cache/swap_plan.hpp>
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

// A named namespace, not `using namespace kvpolicy` at global scope: nvcc's
// generated stubs name ::cuda::std unqualified, and kvpolicy::cuda would
// make that ambiguous.
namespace cuda_sparse_ring {
using namespace kvpolicy;
using namespace kvpolicy::cuda;
using namespace kvpolicy::cuda::testing;

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------- Quest ----

void check_quest(std::mt19937_64& rng, cudaStream_t stream) {
    const quest_config cfg{.num_layers = 2,
                           .num_blocks = 64,
                           .num_kv_heads = 2,
                           .head_dim = 64,
                           .token_budget = 16 * 8,
                           .threshold_blocks = 4,
                           .sink_blocks = 1,
                           .recent_blocks = 2};
    constexpr std::uint32_t bs = 16, q_heads = 8;
    const std::size_t row = std::size_t{cfg.num_kv_heads} * cfg.head_dim, block_floats = bs * row;
    quest host(cfg);
    device_quest dev(cfg, stream);

    auto keys = random_floats(rng, cfg.num_blocks * block_floats);
    std::vector<std::uint32_t> tokens(cfg.num_blocks), blocks(cfg.num_blocks);
    for (std::uint32_t b = 0; b < cfg.num_blocks; ++b) {
        tokens[b] = rng() % 4 == 0 ? 1 + static_cast<std::uint32_t>(rng() % bs) : bs;
        blocks[b] = (b * 37) % cfg.num_blocks;  // keys slot b holds CPU block blocks[b]
    }
    const std::uint32_t broken = 5;  // its keys slot holds an infinity
    keys[broken * block_floats + 3] = std::numeric_limits<float>::infinity();
    device_buffer<float> d_keys;
    device_buffer<std::uint32_t> d_tokens, d_blocks;
    upload(keys, d_keys);
    // Layer 0: one batched offload; layer 1: one call per block.
    const device_span<const float> all_keys = d_keys.view(keys.size());
    dev.on_offload_blocks(layer_index{0}, all_keys, block_floats, upload_span(blocks, d_blocks),
                          upload_span(tokens, d_tokens));
    for (std::uint32_t j = 0; j < cfg.num_blocks; ++j) {
        const device_key_block_view view{.keys = all_keys.subspan(j * block_floats, tokens[j] * row),
                                         .tokens = tokens[j],
                                         .num_kv_heads = cfg.num_kv_heads,
                                         .head_dim = cfg.head_dim};
        dev.on_offload(block_id{blocks[j]}, layer_index{1}, view);
        if (j == broken) continue;  // the host rejects it; the device leaves it without metadata
        const key_block_view host_view{.keys = std::span<const float>(keys).subspan(j * block_floats, tokens[j] * row),
                                       .tokens = tokens[j],
                                       .num_kv_heads = cfg.num_kv_heads,
                                       .head_dim = cfg.head_dim};
        host.on_offload(block_id{blocks[j]}, layer_index{0}, host_view);
        host.on_offload(block_id{blocks[j]}, layer_index{1}, host_view);
    }
    std::vector<float> mn(row), mx(row);
    int meta_mismatch = 0;
    for (std::uint32_t layer = 0; layer < 2; ++layer)
        for (std::uint32_t b = 0; b < cfg.num_blocks; ++b) {
            const bool has = dev.copy_metadata(block_id{b}, layer_index{layer}, mn, mx);
            if (has != host.has_metadata(block_id{b}, layer_index{layer})) ++meta_mismatch;
            if (!has) continue;
            const auto hmn = host.key_min(block_id{b}, layer_index{layer});
            const auto hmx = host.key_max(block_id{b}, layer_index{layer});
            if (!std::equal(mn.begin(), mn.end(), hmn.begin()) || !std::equal(mx.begin(), mx.end(), hmx.begin()))
                ++meta_mismatch;
        }
    KVPOLICY_EXPECT(meta_mismatch == 0);
    KVPOLICY_EXPECT(!host.has_metadata(block_id{blocks[broken]}, layer_index{0}));

    for (int round = 0; round < 20; ++round) {
        const std::uint32_t layer = static_cast<std::uint32_t>(rng() % 2);
        const auto query = random_floats(rng, q_heads * cfg.head_dim);
        device_buffer<float> d_query, d_scores(cfg.num_blocks);
        upload(query, d_query);
        std::vector<block_id> available(cfg.num_blocks);
        for (std::uint32_t i = 0; i < cfg.num_blocks; ++i) available[i] = block_id{i};
        std::shuffle(available.begin(), available.end(), rng);
        available.resize(rng() % (cfg.num_blocks + 1));
        const auto avail_raw = raw_ids(available);
        device_buffer<std::uint32_t> d_avail;
        upload(avail_raw, d_avail);

        // Scores == host scores to float rounding (tree vs sequential sums).
        poison(d_scores.view());
        dev.score_blocks(layer_index{layer}, d_avail.view(available.size()), d_query.view(query.size()), q_heads,
                         d_scores.view(available.size()));
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto scores = download(d_scores.view(available.size()));
        for (std::size_t i = 0; i < available.size(); ++i) {
            const float want = host.block_score(available[i], layer_index{layer}, query, q_heads);
            float magnitude = 0.0f;  // sum of |terms|: the scale of the rounding error
            if (host.has_metadata(available[i], layer_index{layer})) {
                const auto hmn = host.key_min(available[i], layer_index{layer});
                const auto hmx = host.key_max(available[i], layer_index{layer});
                for (std::uint32_t e = 0; e < q_heads * cfg.head_dim; ++e) {
                    const std::size_t m =
                        (e / cfg.head_dim) / (q_heads / cfg.num_kv_heads) * cfg.head_dim + e % cfg.head_dim;
                    magnitude += std::abs(std::max(query[e] * hmn[m], query[e] * hmx[m]));
                }
            }
            const float tol = 2.0f * static_cast<float>(q_heads * cfg.head_dim) * std::ldexp(1.0f, -24) * magnitude;
            KVPOLICY_EXPECT(std::isinf(want) ? scores[i] == want : std::abs(scores[i] - want) <= tol);
        }

        // Device selection == the host rule applied to the device's scores.
        const device_selection_context ctx{.layer = layer_index{layer},
                                           .is_prefill = false,
                                           .block_size = bs,
                                           .num_q_heads = q_heads,
                                           .num_kv_heads = cfg.num_kv_heads,
                                           .head_dim = cfg.head_dim,
                                           .query = d_query.view(query.size())};
        std::vector<block_id> got(available.size(), block_id{9999});
        got.resize(dev.select(available, ctx, got));
        KVPOLICY_EXPECT(got == host_quest_selection(available, scores, bs, cfg));
    }
    const std::vector<float> q(q_heads * cfg.head_dim);
    device_buffer<float> d_q;
    device_selection_context prefill{.layer = layer_index{0},
                                     .is_prefill = true,
                                     .block_size = bs,
                                     .num_q_heads = q_heads,
                                     .num_kv_heads = cfg.num_kv_heads,
                                     .head_dim = cfg.head_dim,
                                     .query = upload_span(q, d_q)};
    std::vector<block_id> out(4);
    const std::vector<block_id> some{block_id{0}, block_id{1}};
    KVPOLICY_EXPECT(throws<usage_error>([&] { (void)dev.select(some, prefill, out); }));

    // A NaN or infinite query value is found on the device and reported with
    // the host quest's wording, nothing written: both when the plan scores
    // (every block available) and when it loads all (two blocks).
    std::vector<block_id> every(cfg.num_blocks);
    for (std::uint32_t i = 0; i < cfg.num_blocks; ++i) every[i] = block_id{i};
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
        for (const std::size_t at : {std::size_t{0}, q.size() / 2, q.size() - 1}) {
            auto bad_q = random_floats(rng, q.size());
            bad_q[at] = bad;
            device_selection_context ctx = prefill;
            ctx.is_prefill = false;
            ctx.query = upload_span(bad_q, d_q);
            for (const std::vector<block_id>* avail : {&std::as_const(every), &some}) {
                std::vector<block_id> sink(avail->size(), block_id{9999});
                std::string what;
                try {
                    (void)dev.select(*avail, ctx, sink);
                } catch (const usage_error& e) {
                    what = e.what();
                }
                KVPOLICY_EXPECT(what == "device_quest::select: the query has a NaN or infinite value");
                KVPOLICY_EXPECT(std::ranges::all_of(sink, [](block_id b) { return b == block_id{9999}; }));
            }
        }
    }
    // ...and a finite query after that selects again (no sticky flag).
    const auto fine_q = random_floats(rng, q.size());
    device_selection_context fine = prefill;
    fine.is_prefill = false;
    fine.query = upload_span(fine_q, d_q);
    std::vector<block_id> all_out(every.size());
    KVPOLICY_EXPECT(dev.select(every, fine, all_out) == cfg.token_budget / bs);
}

// ------------------------------------------------- merge and attention ----

void check_merge(std::mt19937_64& rng, cudaStream_t stream) {
    constexpr std::uint32_t rows = 37, d = 96, parts = 5;
    std::vector<float> o_parts = random_floats(rng, parts * rows * d),
                       lse_parts = random_floats(rng, parts * rows, 3.0f);
    for (std::uint32_t r = 0; r < rows; r += 4) lse_parts[r] = neg_inf;                        // empty in part 0
    for (std::uint32_t p = 0; p < parts; ++p) lse_parts[std::size_t{p} * rows + 7] = neg_inf;  // row 7 empty everywhere
    // Host: fold the parts in order.
    std::vector<float> o_ref(rows * d, 0.0f), lse_ref(rows, neg_inf);
    for (std::uint32_t p = 0; p < parts; ++p)
        merge_attention_state(o_ref, lse_ref,
                              std::span<const float>(o_parts).subspan(std::size_t{p} * rows * d, rows * d),
                              std::span<const float>(lse_parts).subspan(std::size_t{p} * rows, rows), d);
    device_buffer<float> d_o_parts, d_lse_parts, d_o(rows * d), d_lse(rows), d_acc_o, d_acc_lse;
    upload(o_parts, d_o_parts);
    upload(lse_parts, d_lse_parts);
    poison(d_o.get(), rows * d * sizeof(float));
    poison(d_lse.get(), rows * sizeof(float));
    merge_attention_states(d_o_parts.view(parts * rows * d), d_lse_parts.view(parts * rows), parts, d, d_o.view(),
                           d_lse.view(), stream);
    // In place, part by part, from an empty accumulator.
    upload(std::vector<float>(rows * d, 0.0f), d_acc_o);
    upload(std::vector<float>(rows, neg_inf), d_acc_lse);
    for (std::uint32_t p = 0; p < parts; ++p)
        merge_attention_state(d_acc_o.view(rows * d), d_acc_lse.view(rows),
                              d_o_parts.view().subspan(std::size_t{p} * rows * d, rows * d),
                              d_lse_parts.view().subspan(std::size_t{p} * rows, rows), d, stream);
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto o = download(d_o.get(), rows * d), lse = download(d_lse.get(), rows);
    const auto acc_o = download(d_acc_o.get(), rows * d), acc_lse = download(d_acc_lse.get(), rows);
    int bad = 0;
    for (std::uint32_t r = 0; r < rows; ++r) {
        bad += !close(lse[r], lse_ref[r], 2e-5f) + !close(acc_lse[r], lse_ref[r], 2e-5f);
        for (std::uint32_t c = 0; c < d; ++c)
            bad += !close(o[r * d + c], o_ref[r * d + c], 2e-5f) + !close(acc_o[r * d + c], o_ref[r * d + c], 2e-5f);
    }
    KVPOLICY_EXPECT(bad == 0);
    KVPOLICY_EXPECT(lse[7] == neg_inf && o[7 * d] == 0.0f);
}

struct paged_problem {
    decode_attention_shape shape;
    std::size_t block_floats = 0;  // K then V: 2 x [block_size][kv_heads][head_dim]
    std::vector<float> q;
    std::vector<float> cache;     // [blocks][block_floats]
    std::vector<block_id> table;  // sequence order, scattered ids
    std::uint64_t tokens = 0;

    [[nodiscard]] std::size_t half() const { return block_floats / 2; }
    [[nodiscard]] paged_kv_view host_view() const {
        return {.k = cache, .v = std::span<const float>(cache).subspan(half()), .block_stride = block_floats};
    }
};

paged_problem make_problem(std::mt19937_64& rng, std::uint32_t num_blocks, std::uint32_t used_blocks,
                           std::uint32_t kv_heads, std::uint32_t group, std::uint32_t d, std::uint32_t bs) {
    paged_problem p;
    p.shape = {.num_q_heads = kv_heads * group,
               .num_kv_heads = kv_heads,
               .head_dim = d,
               .block_size = bs,
               .scale = 1.0f / std::sqrt(static_cast<float>(d))};
    p.block_floats = 2 * std::size_t{bs} * kv_heads * d;
    p.q = random_floats(rng, std::size_t{p.shape.num_q_heads} * d, 1.5f);
    p.cache = random_floats(rng, num_blocks * p.block_floats);
    std::vector<block_id> ids(num_blocks);
    for (std::uint32_t i = 0; i < num_blocks; ++i) ids[i] = block_id{i};
    std::shuffle(ids.begin(), ids.end(), rng);
    p.table.assign(ids.begin(), ids.begin() + used_blocks);
    p.tokens = std::uint64_t{used_blocks - 1} * bs + 1 + rng() % bs;
    return p;
}

// 16-bit K and V (bf16 or fp16, fp32 arithmetic): the kernel, one pass and
// split, == the host reference over the stored values widened to float.
template <class T>
void check_attention_16bit(const paged_problem& p, cudaStream_t stream) {
    const std::size_t heads = p.shape.num_q_heads, d = p.shape.head_dim;
    std::vector<T> stored(p.cache.size());
    std::vector<float> widened(p.cache.size());
    for (std::size_t i = 0; i < stored.size(); ++i) {
        stored[i] = from_float<T>(p.cache[i]);
        widened[i] = to_float(stored[i]);
    }
    std::vector<float> o_ref(heads * d), lse_ref(heads);
    reference_decode_attention(
        p.q, {.k = widened, .v = std::span<const float>(widened).subspan(p.half()), .block_stride = p.block_floats},
        p.table, p.tokens, p.shape, o_ref, lse_ref);
    device_buffer<float> d_q, d_o(heads * d), d_lse(heads);
    device_buffer<T> d_cache;
    device_buffer<std::uint32_t> d_table;
    const device_span<const T> cache = upload_span(stored, d_cache);
    const basic_paged_decode_args<T> args{.q = upload_span(p.q, d_q),
                                          .k_cache = cache,
                                          .v_cache = cache.subspan(p.half()),
                                          .block_stride = p.block_floats,
                                          .block_table = upload_span(raw_ids(p.table), d_table),
                                          .num_tokens = p.tokens,
                                          .shape = p.shape,
                                          .o = d_o.view(),
                                          .lse = d_lse.view()};
    for (std::uint32_t splits : {1u, 7u}) {
        poison(d_o.view());
        poison(d_lse.view());
        device_buffer<std::byte> temp;
        if (splits == 1) {
            paged_decode_attention(args, stream);
        } else {
            std::size_t bytes = 0;
            paged_decode_attention_split({}, bytes, args, splits, stream);
            temp.reserve(bytes);
            paged_decode_attention_split(temp.view(bytes), bytes, args, splits, stream);
        }
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto o = download(d_o.view()), lse = download(d_lse.view());
        int bad = 0;
        for (std::size_t h = 0; h < heads; ++h) {
            bad += !close(lse[h], lse_ref[h], 2e-5f);
            for (std::size_t c = 0; c < d; ++c) bad += !close(o[h * d + c], o_ref[h * d + c], 2e-5f);
        }
        KVPOLICY_EXPECT(bad == 0);
    }
}

void check_attention(std::mt19937_64& rng, cudaStream_t stream) {
    // Both kernels: the grouped one (head_dim 64, 128, 256; 4 or 8 query
    // heads per CTA, groups that fill a CTA, leave heads unused or need
    // several CTAs) and the warp-per-token one (head_dim 32, 96, 160).
    struct shape_case {
        std::uint32_t d, group;
    };
    for (const shape_case c : {shape_case{32, 3},
                               {64, 1},
                               {64, 6},
                               {96, 2},
                               {128, 4},
                               {128, 5},
                               {128, 8},
                               {128, 12},
                               {160, 1},
                               {256, 4},
                               {256, 3},
                               {256, 9}}) {
        const std::uint32_t d = c.d;
        const paged_problem p = make_problem(rng, 300, 1 + static_cast<std::uint32_t>(rng() % 250),
                                             1 + static_cast<std::uint32_t>(rng() % 4), c.group, d, 16);
        const std::size_t heads = p.shape.num_q_heads;
        check_attention_16bit<bf16>(p, stream);
        check_attention_16bit<fp16>(p, stream);
        std::vector<float> o_ref(heads * d), lse_ref(heads);
        reference_decode_attention(p.q, p.host_view(), p.table, p.tokens, p.shape, o_ref, lse_ref);
        device_buffer<float> d_q, d_cache, d_o(heads * d), d_lse(heads);
        device_buffer<std::uint32_t> d_table;
        const paged_decode_args args{.q = upload_span(p.q, d_q),
                                     .k_cache = upload_span(p.cache, d_cache),
                                     .v_cache = d_cache.view(p.cache.size()).subspan(p.half()),
                                     .block_stride = p.block_floats,
                                     .block_table = upload_span(raw_ids(p.table), d_table),
                                     .num_tokens = p.tokens,
                                     .shape = p.shape,
                                     .o = d_o.view(),
                                     .lse = d_lse.view()};
        for (std::uint32_t splits : {1u, 7u, 64u}) {
            poison(d_o.get(), heads * d * sizeof(float));
            poison(d_lse.get(), heads * sizeof(float));
            device_buffer<std::byte> temp;
            if (splits == 1) {
                paged_decode_attention(args, stream);
            } else {
                std::size_t bytes = 0;
                paged_decode_attention_split({}, bytes, args, splits, stream);
                temp.reserve(bytes);
                paged_decode_attention_split(temp.view(bytes), bytes, args, splits, stream);
            }
            KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
            const auto o = download(d_o.get(), heads * d), lse = download(d_lse.get(), heads);
            int bad = 0;
            for (std::size_t h = 0; h < heads; ++h) {
                bad += !close(lse[h], lse_ref[h], 2e-5f);
                for (std::size_t c = 0; c < d; ++c) bad += !close(o[h * d + c], o_ref[h * d + c], 2e-5f);
            }
            KVPOLICY_EXPECT(bad == 0);
        }
    }
}

// ------------------------------------------------------------- ring ----

void check_ring_copies(std::mt19937_64& rng) {
    constexpr std::uint32_t layers = 3, per_layer = 50, slot_blocks = 12;
    for (gather_method method : {gather_method::batch_memcpy, gather_method::gather_kernel}) {
        for (std::size_t block_bytes : {std::size_t{16 * 1024}, std::size_t{80 * 1024 + 48}}) {
            pinned_block_arena host(layers * per_layer, block_bytes);
            for (std::size_t i = 0; i < host.capacity() * block_bytes; ++i)
                host.host_view().data()[i] = static_cast<std::byte>(rng() & 0xff);
            ring_loader ring(host, {.num_layers = layers,
                                    .blocks_per_layer = per_layer,
                                    .num_slots = 3,
                                    .slot_blocks = slot_blocks,
                                    .method = method});
            for (std::uint32_t s = 0; s < 3; ++s) poison(ring.slot_data(s));
            std::vector<std::vector<block_id>> loads;
            for (int l = 0; l < 9; ++l) {
                std::vector<block_id> b;
                const std::size_t count = rng() % (slot_blocks + 1);
                std::uint32_t next = static_cast<std::uint32_t>(rng() % per_layer);
                for (std::size_t i = 0; i < count; ++i) {
                    b.push_back(block_id{next});
                    // Runs of consecutive ids (merged into one copy) and jumps.
                    next = rng() % 2 == 0 ? (next + 1) % per_layer : static_cast<std::uint32_t>(rng() % per_layer);
                }
                loads.push_back(std::move(b));
            }
            int bad = 0;
            for (std::size_t l = 0; l < loads.size(); ++l) {
                const auto slot = static_cast<std::uint32_t>(l % 3);
                const layer_index layer{static_cast<std::uint32_t>(l % layers)};
                ring.load_to_slot(slot, layer, loads[l]);
                ring.wait_slot(slot);
                KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(ring.compute_stream()));
                const auto got = download(ring.slot_data(slot).first(loads[l].size() * block_bytes));
                for (std::size_t i = 0; i < loads[l].size(); ++i)
                    bad +=
                        std::memcmp(got.data() + i * block_bytes,
                                    host.block(layer.value * per_layer + loads[l][i].value).data(), block_bytes) != 0;
                KVPOLICY_EXPECT(ring.slot_block_count(slot) == loads[l].size());
                ring.record_compute_done(slot);
            }
            KVPOLICY_EXPECT(bad == 0);
            if (bad != 0)
                std::printf("  ring copies: method %d, %zu-byte blocks: %d bad blocks\n", static_cast<int>(method),
                            block_bytes, bad);
            const std::vector<block_id> too_many(slot_blocks + 1, block_id{0});
            const std::vector<block_id> outside{block_id{per_layer}};
            KVPOLICY_EXPECT(throws<usage_error>([&] { ring.load_to_slot(3, layer_index{0}, outside); }));
            KVPOLICY_EXPECT(throws<usage_error>([&] { ring.load_to_slot(0, layer_index{layers}, {}); }));
            KVPOLICY_EXPECT(throws<usage_error>([&] { ring.load_to_slot(0, layer_index{0}, too_many); }));
            KVPOLICY_EXPECT(throws<usage_error>([&] { ring.load_to_slot(0, layer_index{0}, outside); }));
            ring.synchronize();
        }
    }
    pinned_block_arena odd(4, 100);
    KVPOLICY_EXPECT(throws<config_error>([&] {
        ring_loader r(odd, {.num_layers = 1,
                            .blocks_per_layer = 4,
                            .num_slots = 2,
                            .slot_blocks = 2,
                            .method = gather_method::gather_kernel});
    }));
}

// Attention over a sequence streamed through the ring, merged slot by slot
// on the compute stream, against one pass over the whole sequence.
void check_ring_attention(std::mt19937_64& rng) {
    constexpr std::uint32_t layers = 3, per_layer = 120, bs = 16, kv_heads = 2, group = 4, d = 64, slot_blocks = 8;
    for (gather_method method : {gather_method::batch_memcpy, gather_method::gather_kernel}) {
        std::vector<paged_problem> per(layers);
        for (std::uint32_t l = 0; l < layers; ++l) per[l] = make_problem(rng, per_layer, 45, kv_heads, group, d, bs);
        const auto& shape = per[0].shape;
        const std::size_t block_floats = per[0].block_floats, heads = shape.num_q_heads;
        pinned_block_arena host(layers * per_layer, block_floats * sizeof(float));
        for (std::uint32_t l = 0; l < layers; ++l)
            std::memcpy(host.block(l * per_layer).data(), per[l].cache.data(),
                        per_layer * block_floats * sizeof(float));
        ring_loader ring(host, {.num_layers = layers,
                                .blocks_per_layer = per_layer,
                                .num_slots = 2,
                                .slot_blocks = slot_blocks,
                                .method = method});
        const cudaStream_t compute = ring.compute_stream();
        std::vector<std::uint32_t> local(slot_blocks);
        std::iota(local.begin(), local.end(), 0u);
        device_buffer<std::uint32_t> d_local, d_table;
        upload(local, d_local);
        device_buffer<float> d_q, d_part_o(heads * d), d_part_lse(heads), d_acc_o(layers * heads * d),
            d_acc_lse(layers * heads), d_cache, d_o(heads * d), d_lse(heads);

        // Chunked: each layer's 45 blocks in loads of up to 8 (the last one
        // partial), all layers' loads in one pipeline.
        std::vector<slot_load> loads;
        std::vector<std::uint64_t> load_tokens;
        std::vector<std::uint32_t> load_layer;
        for (std::uint32_t l = 0; l < layers; ++l)
            for (std::size_t first = 0; first < per[l].table.size(); first += slot_blocks) {
                const std::size_t count = std::min<std::size_t>(slot_blocks, per[l].table.size() - first);
                loads.push_back({layer_index{l}, std::span<const block_id>(per[l].table).subspan(first, count)});
                load_tokens.push_back(std::min<std::uint64_t>(count * bs, per[l].tokens - first * bs));
                load_layer.push_back(l);
            }
        // Layer-wise: one load per layer (the first 8 blocks of each).
        std::vector<slot_load> layer_loads;
        for (std::uint32_t l = 0; l < layers; ++l)
            layer_loads.push_back({layer_index{l}, std::span<const block_id>(per[l].table).first(slot_blocks)});

        std::vector<float> queries;
        for (std::uint32_t l = 0; l < layers; ++l) queries.insert(queries.end(), per[l].q.begin(), per[l].q.end());
        upload(queries, d_q);
        for (int pass = 0; pass < 2; ++pass) {
            const bool chunked = pass == 0;
            const auto& which = chunked ? loads : layer_loads;
            upload(std::vector<float>(layers * heads * d, 0.0f), d_acc_o);
            upload(std::vector<float>(layers * heads, neg_inf), d_acc_lse);
            run_ring_pipeline(ring, which, [&](std::uint32_t slot, std::size_t i) {
                const std::uint32_t l = chunked ? load_layer[i] : static_cast<std::uint32_t>(i);
                const auto bytes = ring.slot_data(slot);
                const device_span<const float> base{reinterpret_cast<const float*>(bytes.data()),
                                                    bytes.size() / sizeof(float)};
                const paged_decode_args a{.q = d_q.view().subspan(l * heads * d, heads * d),
                                          .k_cache = base,
                                          .v_cache = base.subspan(block_floats / 2),
                                          .block_stride = block_floats,
                                          .block_table = d_local.view(),
                                          .num_tokens = chunked ? load_tokens[i] : std::uint64_t{slot_blocks} * bs,
                                          .shape = shape,
                                          .o = d_part_o.view(heads * d),
                                          .lse = d_part_lse.view(heads)};
                paged_decode_attention(a, compute);
                merge_attention_state(d_acc_o.view().subspan(l * heads * d, heads * d),
                                      d_acc_lse.view().subspan(l * heads, heads), d_part_o.view(heads * d),
                                      d_part_lse.view(heads), d, compute);
            });
            ring.synchronize();
            const auto acc_o = download(d_acc_o.get(), layers * heads * d);
            const auto acc_lse = download(d_acc_lse.get(), layers * heads);
            int bad = 0;
            for (std::uint32_t l = 0; l < layers; ++l) {
                // One pass over the same tokens, on the device and on the host.
                const std::vector<block_id> table =
                    chunked ? per[l].table
                            : std::vector<block_id>(per[l].table.begin(), per[l].table.begin() + slot_blocks);
                const std::uint64_t tokens = chunked ? per[l].tokens : std::uint64_t{slot_blocks} * bs;
                const auto cache = upload_span(per[l].cache, d_cache);
                poison(d_o.get(), heads * d * sizeof(float));
                paged_decode_attention({.q = d_q.view().subspan(l * heads * d, heads * d),
                                        .k_cache = cache,
                                        .v_cache = cache.subspan(block_floats / 2),
                                        .block_stride = block_floats,
                                        .block_table = upload_span(raw_ids(table), d_table),
                                        .num_tokens = tokens,
                                        .shape = shape,
                                        .o = d_o.view(heads * d),
                                        .lse = d_lse.view(heads)},
                                       ring.compute_stream());
                KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(ring.compute_stream()));
                const auto o = download(d_o.get(), heads * d), lse = download(d_lse.get(), heads);
                std::vector<float> o_ref(heads * d), lse_ref(heads);
                reference_decode_attention(per[l].q, per[l].host_view(), table, tokens, shape, o_ref, lse_ref);
                for (std::size_t h = 0; h < heads; ++h) {
                    bad += !close(acc_lse[l * heads + h], lse[h], 2e-5f) + !close(lse[h], lse_ref[h], 2e-5f);
                    for (std::size_t c = 0; c < d; ++c)
                        bad += !close(acc_o[(l * heads + h) * d + c], o[h * d + c], 2e-5f) +
                               !close(o[h * d + c], o_ref[h * d + c], 2e-5f);
                }
            }
            KVPOLICY_EXPECT(bad == 0);
            if (bad != 0)
                std::printf("  ring attention: method %d, %s: %d mismatches\n", static_cast<int>(method),
                            chunked ? "chunked" : "layer-wise", bad);
        }
    }
}

// Quest on the device choosing which blocks attention reads: the captured
// softmax mass grows with the budget and bounds the output error.
void check_quest_attention(std::mt19937_64& rng, cudaStream_t stream) {
    constexpr std::uint32_t blocks = 96, bs = 16, kv_heads = 2, group = 2, d = 64;
    paged_problem p = make_problem(rng, blocks, blocks, kv_heads, group, d, bs);
    p.tokens = std::uint64_t{blocks} * bs;
    const std::size_t heads = p.shape.num_q_heads, half = p.half();
    for (int needle = 0; needle < 3; ++needle) {  // heavy hitters for every head
        const std::size_t b = p.table[1 + rng() % (blocks - 2)].index(), t = rng() % bs;
        for (std::size_t kv = 0; kv < kv_heads; ++kv)
            for (std::size_t c = 0; c < d; ++c)
                p.cache[b * p.block_floats + (t * kv_heads + kv) * d + c] =
                    3.0f * (p.q[(kv * group) * d + c] + p.q[(kv * group + 1) * d + c]);
    }
    device_buffer<float> d_q, d_cache, d_o(heads * d), d_lse(heads), d_full_o(heads * d), d_full_lse(heads);
    device_buffer<std::uint32_t> d_table;
    const auto q_view = upload_span(p.q, d_q);
    const auto cache_view = upload_span(p.cache, d_cache);
    const auto attend = [&](const std::vector<block_id>& table, device_span<float> o, device_span<float> lse) {
        paged_decode_attention({.q = q_view,
                                .k_cache = cache_view,
                                .v_cache = cache_view.subspan(half),
                                .block_stride = p.block_floats,
                                .block_table = upload_span(raw_ids(table), d_table),
                                .num_tokens = std::uint64_t{table.size()} * bs,
                                .shape = p.shape,
                                .o = o,
                                .lse = lse},
                               stream);
        KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
    attend(p.table, d_full_o.view(), d_full_lse.view());
    const auto full_o = download(d_full_o.get(), heads * d), full_lse = download(d_full_lse.get(), heads);
    float v_max = 0.0f;
    for (std::size_t i = 0; i < p.cache.size(); ++i)
        if ((i % p.block_floats) >= half) v_max = std::max(v_max, std::abs(p.cache[i]));

    std::vector<double> last_mass(heads, 0.0);
    double error = 0.0;
    for (std::uint32_t budget : {4u, 8u, 16u, 48u, 96u}) {
        device_quest sel({.num_layers = 1,
                          .num_blocks = blocks,
                          .num_kv_heads = kv_heads,
                          .head_dim = d,
                          .token_budget = budget * bs,
                          .threshold_blocks = 2},
                         stream);
        for (std::uint32_t b = 0; b < blocks; ++b)
            sel.on_offload(block_id{b}, layer_index{0},
                           {.keys = d_cache.view().subspan(b * p.block_floats, half),
                            .tokens = bs,
                            .num_kv_heads = kv_heads,
                            .head_dim = d});
        const device_selection_context ctx{.layer = layer_index{0},
                                           .block_size = bs,
                                           .num_q_heads = static_cast<std::uint32_t>(heads),
                                           .num_kv_heads = kv_heads,
                                           .head_dim = d,
                                           .query = d_q.view(p.q.size())};
        std::vector<block_id> chosen(blocks);
        chosen.resize(sel.select(p.table, ctx, chosen));
        KVPOLICY_EXPECT(chosen.size() == budget);
        poison(d_o.get(), heads * d * sizeof(float));
        attend(chosen, d_o.view(), d_lse.view());
        const auto o = download(d_o.get(), heads * d), lse = download(d_lse.get(), heads);
        error = 0.0;
        for (std::size_t h = 0; h < heads; ++h) {
            const double mass = std::exp(double{lse[h]} - double{full_lse[h]});
            KVPOLICY_EXPECT(mass <= 1.0 + 1e-4);
            KVPOLICY_EXPECT(mass >= last_mass[h] - 1e-4);
            last_mass[h] = mass;
            for (std::size_t c = 0; c < d; ++c) {
                const double e = std::abs(double{o[h * d + c]} - double{full_o[h * d + c]});
                KVPOLICY_EXPECT(e <= 2.0 * (1.0 - mass) * v_max + 1e-4);
                error = std::max(error, e);
            }
        }
        if (budget == 8) KVPOLICY_EXPECT(*std::min_element(last_mass.begin(), last_mass.end()) > 0.9);
        std::printf("  quest attention: budget %2u of %u blocks: min mass %.4f, max error %.2e\n", budget, blocks,
                    *std::min_element(last_mass.begin(), last_mass.end()), error);
    }
    KVPOLICY_EXPECT(error == 0.0);
}

// ------------------------------------------------- transfer engine ----

void check_transfer_engine(std::mt19937_64& rng) {
    constexpr std::size_t gpu_blocks = 20, cpu_blocks = 30, bytes = 4096 + 16;
    device_block_arena d_gpu(gpu_blocks, bytes);
    pinned_block_arena d_cpu(cpu_blocks, bytes);
    block_arena h_gpu(gpu_blocks, bytes), h_cpu(cpu_blocks, bytes);
    for (std::size_t b = 0; b < gpu_blocks; ++b)
        for (std::byte& x : h_gpu.block(block_id{static_cast<std::uint32_t>(b)}))
            x = static_cast<std::byte>(rng() & 0xff);
    for (std::size_t b = 0; b < cpu_blocks; ++b) {
        auto blk = h_cpu.block(block_id{static_cast<std::uint32_t>(b)});
        for (std::byte& x : blk) x = static_cast<std::byte>(rng() & 0xff);
        std::memcpy(d_cpu.block(b).data(), blk.data(), bytes);
    }
    KVPOLICY_CUDA_CHECK(cudaMemcpy(d_gpu.device_view().data(), h_gpu.block(block_id{0}).data(), gpu_blocks * bytes,
                                   cudaMemcpyHostToDevice));
    settle();
    host_memcpy_engine host(h_gpu, h_cpu);
    device_transfer_engine dev(d_gpu, d_cpu);

    std::vector<block_transfer> ops;
    for (int i = 0; i < 300; ++i) {
        const auto pick_tier = [&] {
            const auto r = rng() % 20;
            return r == 0 ? tier::remote : (r % 2 == 0 ? tier::gpu : tier::cpu);
        };
        block_transfer op;
        op.from = pick_tier();
        op.to = pick_tier();
        const auto cap = [&](tier t) { return t == tier::gpu ? gpu_blocks : cpu_blocks; };
        op.src = block_id{static_cast<std::uint32_t>(rng() % (cap(op.from) + 2))};  // sometimes out of range
        op.dst = block_id{static_cast<std::uint32_t>(rng() % (cap(op.to) + 2))};
        op.exchange = rng() % 4 == 0;
        ops.push_back(op);
    }
    swap_plan plan;
    plan.transfers = ops;
    std::vector<transfer_status> sh, sd(ops.size(), transfer_status::done);
    const std::size_t failed_host = execute_plan(plan, host, sh);
    const std::size_t failed_dev = execute_plan(plan, dev, sd);
    KVPOLICY_EXPECT(failed_host == failed_dev);
    KVPOLICY_EXPECT(sh == sd);
    KVPOLICY_EXPECT(dev.bytes_moved() == host.bytes_moved());
    const auto gpu_after = download(d_gpu.device_view().data(), gpu_blocks * bytes);
    KVPOLICY_EXPECT(std::memcmp(gpu_after.data(), h_gpu.block(block_id{0}).data(), gpu_blocks * bytes) == 0);
    KVPOLICY_EXPECT(std::memcmp(d_cpu.host_view().data(), h_cpu.block(block_id{0}).data(), cpu_blocks * bytes) == 0);
    std::vector<transfer_status> short_status(2);
    KVPOLICY_EXPECT(throws<usage_error>([&] { (void)dev.execute(ops, short_status); }));
    std::printf("  transfer engine: %zu ops, %zu failed as on the host\n", ops.size(), failed_dev);
}

}  // namespace

int run() {
    using namespace kvpolicy::cuda::testing;
    if (int rc = skip_without_device("cuda_sparse_ring")) return rc;
    try {
        stream_handle stream;
        std::mt19937_64 rng(31337);
        check_quest(rng, stream.get());
        check_merge(rng, stream.get());
        check_attention(rng, stream.get());
        check_ring_copies(rng);
        check_ring_attention(rng);
        check_quest_attention(rng, stream.get());
        check_transfer_engine(rng);
        KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
        std::printf("cuda_sparse_ring: exception: %s\n", e.what());
        return 1;
    }
    std::printf("cuda_sparse_ring: %d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}

}  // namespace cuda_sparse_ring

int main() { return cuda_sparse_ring::run(); }
