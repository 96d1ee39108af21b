// The ring loader's gather and the LSE merge over 16-bit K/V, on the CPU,
// through the host-device code the CUDA kernels run (STYLE.md 13):
// - the gather kernel (cuda/ring.cuh), every thread of its grid, against
//   the blocks it must copy: each destination word written exactly once;
// - the merge kernels (cuda/merge.cuh), every thread, over o stored as fp32,
//   bf16 or fp16, against sparse/lse_merge.hpp's double reference, within
//   the bound derived below;
// - the ring pipeline over bf16 / fp16 K/V: scattered CPU-tier blocks
//   gathered into slots, attention per slot (one warp, lane by lane: the
//   decode kernel's math), the per-slot (o, lse) merged into an accumulator,
//   against reference_decode_attention over all the tokens widened.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/kv_element.hpp>
#include <kvpolicy/sparse/lse_merge.hpp>
#include <kvpolicy/sparse/lse_merge_math.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>
#include <kvpolicy/sparse/ring_gather_math.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "support/warp_decode.hpp"

using namespace kvpolicy;

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr unsigned gather_threads = 256;  // cuda/ring.cuh's
constexpr unsigned merge_threads = 128;   // cuda/merge.cuh's

// A 16-byte word (the kernel's uint4) that counts the assignments made to it.
struct counted_word {
    std::uint64_t lo = 0, hi = 0;
    std::uint32_t writes = 0;
    counted_word() = default;
    counted_word(const counted_word& o) : lo(o.lo), hi(o.hi) {}
    counted_word& operator=(const counted_word& o) {
        lo = o.lo;
        hi = o.hi;
        ++writes;
        return *this;
    }
};

// The ring's gather of `ids` (arena blocks) into consecutive slot blocks:
// grid (ids, slices) x gather_threads, each thread's copy the kernel's.
template <class Word>
void simulate_gather(const std::vector<Word>& arena, const std::vector<std::uint32_t>& ids, std::size_t block_words,
                     std::size_t slice_words, std::vector<Word>& slot) {
    const std::size_t slices = (block_words + slice_words - 1) / slice_words;
    for (std::size_t j = 0; j < ids.size(); ++j)
        for (std::size_t slice = 0; slice < slices; ++slice)
            for (unsigned t = 0; t < gather_threads; ++t)
                gather_thread_copy<gather_threads, 4>(arena.data() + ids[j] * block_words,
                                                      slot.data() + j * block_words,
                                                      gather_slice_words(slice, slice_words, block_words), t);
}

}  // namespace

TEST_CASE("ring gather math: every thread of the grid, each slot word copied once from its block",
          "[ring][device_math]") {
    std::mt19937_64 rng(77);
    for (int round = 0; round < 40; ++round) {
        const std::size_t block_words = 1 + rng() % 3000;  // below and above the 4-deep unrolled rounds
        const std::size_t slice_words = round % 4 == 0 ? 4096 : 1 + rng() % 1100;
        const std::size_t capacity = 4 + rng() % 12;
        std::vector<counted_word> arena(capacity * block_words);
        for (auto& w : arena) w.lo = rng(), w.hi = rng();
        std::vector<std::uint32_t> ids(1 + rng() % capacity);
        for (auto& id : ids) id = static_cast<std::uint32_t>(rng() % capacity);
        std::vector<counted_word> slot(ids.size() * block_words);
        simulate_gather(arena, ids, block_words, slice_words, slot);
        for (std::size_t j = 0; j < ids.size(); ++j)
            for (std::size_t i = 0; i < block_words; ++i) {
                const counted_word& got = slot[j * block_words + i];
                const counted_word& want = arena[ids[j] * block_words + i];
                INFO("round " << round << " block " << j << " word " << i << " of " << block_words << ", slices of "
                              << slice_words);
                REQUIRE(got.writes == 1);
                REQUIRE(got.lo == want.lo);
                REQUIRE(got.hi == want.hi);
            }
    }
}

namespace {

template <class T>
std::vector<T> narrow(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
    return out;
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
}

// Unit roundoff of T (round to nearest: 2^-p for p significand bits).
template <class T>
double unit_roundoff() {
    if constexpr (std::is_same_v<T, bf16>) return std::ldexp(1.0, -8);
    else if constexpr (std::is_same_v<T, fp16>) return std::ldexp(1.0, -11);
    else return std::ldexp(1.0, -24);
}

// Merge error bound, per merge step. The merged channel is a convex
// combination of the inputs (weights wa/s, wb/s), so errors already in the
// inputs pass through with weights summing to 1 and do not grow. Each step
// adds (a) the fp32 arithmetic: exp to within 2 ulps (glibc's expf, CUDA's
// expf), the weights' quotient and the two products and sum, together under
// 16 u32 relative to max |o|; (b) one narrowing to T, u_T |value| <= u_T max
// |o| (absolute error 2^-25 at most for an fp16 subnormal, far below that).
// So after P steps |o - o_ref| <= P (u_T + 16 u32) max|o|. The lse is fp32
// throughout: m + log(s) with s in [1, P], under 8 u32 (1 + |lse|) per step.
template <class T>
void check_merge_math(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    const double u32 = std::ldexp(1.0, -24), uT = unit_roundoff<T>();
    for (int round = 0; round < 30; ++round) {
        const std::uint32_t rows = 1 + static_cast<std::uint32_t>(rng() % 40);
        const std::uint32_t d = 1 + static_cast<std::uint32_t>(rng() % 300);  // below and above 128 threads
        const std::uint32_t parts = 1 + static_cast<std::uint32_t>(rng() % 9);
        std::vector<float> o_parts_f(std::size_t{parts} * rows * d), lse_parts(std::size_t{parts} * rows);
        for (float& x : o_parts_f) x = g(rng);
        for (float& x : lse_parts) x = 4.0f * g(rng);
        for (std::size_t i = 0; i < lse_parts.size(); ++i)
            if (rng() % 5 == 0) lse_parts[i] = neg_inf;  // empty parts, some rows empty everywhere
        for (std::size_t i = 0; i < lse_parts.size(); ++i)
            if (lse_parts[i] == neg_inf)
                for (std::uint32_t c = 0; c < d; ++c) o_parts_f[i * d + c] = std::numeric_limits<float>::quiet_NaN();
        const auto o_parts = narrow<T>(o_parts_f);
        const auto o_parts_w = widen(o_parts);  // the reference sees the stored values
        double max_o = 0.0;
        for (std::size_t i = 0; i < o_parts_w.size(); ++i)
            if (lse_parts[i / d] != neg_inf) max_o = std::max(max_o, std::abs(double{o_parts_w[i]}));

        // Reference: fold the parts in order in double (sparse/lse_merge.hpp).
        std::vector<float> o_ref(std::size_t{rows} * d, 0.0f), lse_ref(rows, neg_inf);
        for (std::uint32_t p = 0; p < parts; ++p)
            merge_attention_state(o_ref, lse_ref, std::span<const float>(o_parts_w).subspan(std::size_t{p} * rows * d, std::size_t{rows} * d),
                                  std::span<const float>(lse_parts).subspan(std::size_t{p} * rows, rows), d);

        // merge_states_kernel: grid.x = rows, thread t takes channels t, t + 128, ...
        std::vector<T> o(std::size_t{rows} * d);
        std::vector<float> lse(rows);
        for (std::uint32_t r = 0; r < rows; ++r)
            for (unsigned t = 0; t < merge_threads; ++t) {
                const lse_parts_merge w = lse_merge_parts_row(lse_parts.data(), parts, rows, r);
                for (std::uint32_t i = t; i < d; i += merge_threads)
                    o[std::size_t{r} * d + i] = lse_merge_parts_channel(w, o_parts.data(), lse_parts.data(), parts, rows, d, r, i);
                if (t == 0) lse[r] = w.lse();
            }
        // merge_state_inplace_kernel, part by part into an empty accumulator
        // (its o holds NaN: an empty accumulator's o must not be read).
        std::vector<T> acc(std::size_t{rows} * d, from_float<T>(std::numeric_limits<float>::quiet_NaN()));
        std::vector<float> acc_lse(rows, neg_inf);
        for (std::uint32_t p = 0; p < parts; ++p)
            for (std::uint32_t r = 0; r < rows; ++r) {
                // Every thread computes the row's weights before any writes lse (the kernel's __syncthreads).
                const lse_pair_merge w = lse_merge_pair(acc_lse[r], lse_parts[std::size_t{p} * rows + r]);
                for (unsigned t = 0; t < merge_threads; ++t)
                    for (std::uint32_t i = t; i < d; i += merge_threads)
                        acc[std::size_t{r} * d + i] = lse_merge_channel(w, acc[std::size_t{r} * d + i],
                                                                        o_parts[(std::size_t{p} * rows + r) * d + i]);
                if (w.how != lse_pair_merge::kind::keep_a) acc_lse[r] = w.lse;
            }
        const double o_tol = parts * (uT + 16.0 * u32) * max_o;
        for (std::uint32_t r = 0; r < rows; ++r) {
            INFO("round " << round << " row " << r << " of " << rows << ", " << parts << " parts, head_dim " << d);
            if (lse_ref[r] == neg_inf) {
                REQUIRE(lse[r] == neg_inf);
                REQUIRE(acc_lse[r] == neg_inf);
                for (std::uint32_t i = 0; i < d; ++i) REQUIRE(to_float(o[std::size_t{r} * d + i]) == 0.0f);
                continue;
            }
            const double lse_tol = parts * 8.0 * u32 * (1.0 + std::abs(double{lse_ref[r]}));
            REQUIRE(std::abs(double{lse[r]} - lse_ref[r]) <= lse_tol);
            REQUIRE(std::abs(double{acc_lse[r]} - lse_ref[r]) <= lse_tol);
            for (std::uint32_t i = 0; i < d; ++i) {
                const double want = o_ref[std::size_t{r} * d + i];
                REQUIRE(std::abs(double{to_float(o[std::size_t{r} * d + i])} - want) <= o_tol);
                REQUIRE(std::abs(double{to_float(acc[std::size_t{r} * d + i])} - want) <= o_tol);
            }
        }
    }
}

}  // namespace

TEST_CASE("lse merge math: every thread, o as fp32 / bf16 / fp16, within the derived bound of the double reference",
          "[lse_merge][device_math][kv_element]") {
    std::mt19937_64 rng(4242);
    check_merge_math<float>(rng);
    check_merge_math<bf16>(rng);
    check_merge_math<fp16>(rng);
}

namespace {

// Element type T as 16-byte words, as the gather kernel moves it.
struct word16 {
    unsigned char bytes[16];
};

template <class T>
void check_ring_attention(std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int round = 0; round < 6; ++round) {
        const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 2);
        const std::uint32_t d = 32u * (1 + static_cast<std::uint32_t>(rng() % 4));
        const decode_attention_shape s{.num_q_heads = kv_heads * (1 + static_cast<std::uint32_t>(rng() % 3)),
                                       .num_kv_heads = kv_heads, .head_dim = d, .block_size = 16,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(d))};
        const std::size_t half = std::size_t{s.block_size} * kv_heads * d;  // K (or V) values of a block
        const std::size_t block_values = 2 * half;                          // [K | V], as the GPU test lays them out
        const std::size_t block_bytes = block_values * sizeof(T);
        REQUIRE(block_bytes % 16 == 0);
        const std::size_t block_words = block_bytes / 16;
        const std::uint32_t capacity = 24 + static_cast<std::uint32_t>(rng() % 40);
        std::vector<float> arena_f(capacity * block_values);
        for (float& x : arena_f) x = g(rng);
        const auto arena_t = narrow<T>(arena_f);
        std::vector<word16> arena(capacity * block_words);
        std::memcpy(arena.data(), arena_t.data(), arena_t.size() * sizeof(T));

        // The sequence: a random subset of the CPU tier in a random order,
        // the last block partial; loads of slot_blocks through a ring.
        std::vector<std::uint32_t> seq(capacity);
        std::iota(seq.begin(), seq.end(), 0u);
        std::shuffle(seq.begin(), seq.end(), rng);
        seq.resize(1 + rng() % capacity);
        const std::uint64_t tokens = (seq.size() - 1) * std::uint64_t{s.block_size} + 1 + rng() % s.block_size;
        const std::uint32_t slot_blocks = 1 + static_cast<std::uint32_t>(rng() % 7);
        const std::size_t slice_words = 1 + rng() % block_words;

        std::vector<float> q(std::size_t{s.num_q_heads} * d);
        for (float& x : q) x = g(rng);
        std::vector<float> acc_o(q.size(), 0.0f), acc_lse(s.num_q_heads, neg_inf), part_o(q.size()),
            part_lse(s.num_q_heads);
        std::vector<word16> slot(slot_blocks * block_words);
        std::size_t merges = 0;
        for (std::size_t first = 0; first < seq.size(); first += slot_blocks) {
            const std::vector<std::uint32_t> ids(seq.begin() + static_cast<std::ptrdiff_t>(first),
                                                 seq.begin() + static_cast<std::ptrdiff_t>(std::min(seq.size(), first + slot_blocks)));
            simulate_gather(arena, ids, block_words, slice_words, slot);
            std::vector<T> slot_t(ids.size() * block_values);  // ring_loader::slot_view<T>
            std::memcpy(static_cast<void*>(slot_t.data()), slot.data(), slot_t.size() * sizeof(T));
            std::vector<block_id> local(ids.size());
            for (std::size_t j = 0; j < ids.size(); ++j) local[j] = block_id{static_cast<std::uint32_t>(j)};
            const std::uint64_t slot_tokens = std::min<std::uint64_t>(tokens - first * s.block_size,
                                                                      ids.size() * std::uint64_t{s.block_size});
            testing::warp_decode(q.data(), slot_t.data(), slot_t.data() + half, local, slot_tokens, s, block_values,
                                 part_o, part_lse);
            for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
                const lse_pair_merge w = lse_merge_pair(acc_lse[h], part_lse[h]);
                for (std::uint32_t i = 0; i < d; ++i)
                    acc_o[std::size_t{h} * d + i] = lse_merge_channel(w, acc_o[std::size_t{h} * d + i], part_o[std::size_t{h} * d + i]);
                acc_lse[h] = w.lse;
            }
            ++merges;
        }
        // Reference: all tokens at once over the widened values, in sequence order.
        const auto arena_w = widen(arena_t);
        std::vector<block_id> table(seq.size());
        for (std::size_t j = 0; j < seq.size(); ++j) table[j] = block_id{seq[j]};
        std::vector<float> o_ref(q.size()), lse_ref(s.num_q_heads);
        reference_decode_attention(q, {.k = arena_w, .v = std::span<const float>(arena_w).subspan(half), .block_stride = block_values},
                                   table, tokens, s, o_ref, lse_ref);
        // The per-slot attention matches the reference to 2e-5 relative (as
        // tests/sparse_kv_element.cpp's one-pass check); each fp32 merge adds
        // under 16 u32 (see check_merge_math).
        const double tol = 2e-5 + static_cast<double>(merges) * 16.0 * std::ldexp(1.0, -24);
        for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
            INFO("round " << round << " head " << h << ", " << seq.size() << " blocks, " << merges << " slot loads");
            REQUIRE(std::abs(double{acc_lse[h]} - lse_ref[h]) <= tol * (1.0 + std::abs(double{lse_ref[h]})));
            for (std::uint32_t i = 0; i < d; ++i)
                REQUIRE(std::abs(double{acc_o[std::size_t{h} * d + i]} - o_ref[std::size_t{h} * d + i]) <=
                        tol * (1.0 + std::abs(double{o_ref[std::size_t{h} * d + i]})));
        }
    }
}

}  // namespace

TEST_CASE("ring pipeline over bf16 / fp16 K/V: gathered slots, per-slot attention, LSE merge equal one pass",
          "[ring][lse_merge][kv_element][device_math]") {
    std::mt19937_64 rng(1313);
    check_ring_attention<float>(rng);
    check_ring_attention<bf16>(rng);
    check_ring_attention<fp16>(rng);
}
