// The host references of the attention path: reference_decode_attention
// against a naive softmax, and the log-sum-exp merge of partial attention
// against one pass over all keys, on random data.
#include <catch2/catch.hpp>

#include <kvpolicy/sparse/lse_merge.hpp>
#include <kvpolicy/sparse/reference_attention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "support/random_floats.hpp"

using namespace kvpolicy;

namespace {

using kvpolicy::testing::random_floats;

struct problem {
    decode_attention_shape shape;
    std::vector<float> q, k, v;
    std::vector<block_id> table;  // blocks in sequence order (a permutation: blocks are scattered)
    std::uint64_t tokens = 0;
};

problem random_problem(std::mt19937_64& rng) {
    problem p;
    const std::uint32_t kv_heads = 1 + static_cast<std::uint32_t>(rng() % 3);
    const std::uint32_t group = 1 + static_cast<std::uint32_t>(rng() % 3);
    const std::uint32_t d = 8u * (1 + static_cast<std::uint32_t>(rng() % 4));
    p.shape = {.num_q_heads = kv_heads * group,
               .num_kv_heads = kv_heads,
               .head_dim = d,
               .block_size = 1 + static_cast<std::uint32_t>(rng() % 16),
               .scale = 1.0f / std::sqrt(static_cast<float>(d))};
    const std::size_t blocks = 1 + rng() % 12;
    p.tokens = (blocks - 1) * p.shape.block_size + 1 + rng() % p.shape.block_size;  // last block partial
    const std::size_t floats = blocks * p.shape.block_size * kv_heads * d;
    p.q = random_floats(rng, std::size_t{p.shape.num_q_heads} * d, 2.0f);  // sharp softmax
    p.k = random_floats(rng, floats);
    p.v = random_floats(rng, floats);
    p.table.resize(blocks);
    for (std::size_t i = 0; i < blocks; ++i) p.table[i] = block_id{static_cast<std::uint32_t>(i)};
    std::shuffle(p.table.begin(), p.table.end(), rng);
    return p;
}

}  // namespace

TEST_CASE("reference_decode_attention equals a naive softmax over the gathered tokens", "[attention]") {
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
    for (int round = 0; round < 30; ++round) {
        const problem p = random_problem(rng);
        const auto& s = p.shape;
        std::vector<float> o(p.q.size()), lse(s.num_q_heads);
        reference_decode_attention(p.q, {.k = p.k, .v = p.v}, p.table, p.tokens, s, o, lse);
        const std::size_t d = s.head_dim, row = std::size_t{s.num_kv_heads} * d;
        for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
            const std::size_t kv = h / (s.num_q_heads / s.num_kv_heads);
            std::vector<double> w(p.tokens);
            for (std::uint64_t t = 0; t < p.tokens; ++t) {
                const std::size_t at =
                    p.table[t / s.block_size].index() * s.block_size * row + (t % s.block_size) * row + kv * d;
                double dot = 0;
                for (std::size_t c = 0; c < d; ++c) dot += double{p.q[h * d + c]} * double{p.k[at + c]};
                w[t] = std::exp(dot * s.scale);
            }
            const double sum = std::accumulate(w.begin(), w.end(), 0.0);
            REQUIRE(lse[h] == Approx(std::log(sum)).margin(1e-5));
            for (std::size_t c = 0; c < d; ++c) {
                double acc = 0;
                for (std::uint64_t t = 0; t < p.tokens; ++t) {
                    const std::size_t at =
                        p.table[t / s.block_size].index() * s.block_size * row + (t % s.block_size) * row + kv * d;
                    acc += w[t] * double{p.v[at + c]};
                }
                REQUIRE(o[h * d + c] == Approx(acc / sum).margin(1e-5));
            }
        }
    }
}

TEST_CASE("merging attention over parts of the blocks equals attention over all of them", "[attention][merge]") {
    std::mt19937_64 rng(GENERATE(4u, 5u, 6u));
    for (int round = 0; round < 30; ++round) {
        const problem p = random_problem(rng);
        const auto& s = p.shape;
        const std::size_t heads = s.num_q_heads, d = s.head_dim;
        std::vector<float> o_full(p.q.size()), lse_full(heads);
        reference_decode_attention(p.q, {.k = p.k, .v = p.v}, p.table, p.tokens, s, o_full, lse_full);

        // Split the full blocks into random groups (as ring slots would hold
        // them), the partial last block alone; merge the parts in random order.
        const std::size_t full_blocks = p.tokens / s.block_size;
        std::vector<std::vector<block_id>> parts;
        for (std::size_t i = 0; i < full_blocks;) {
            const std::size_t take = std::min<std::size_t>(1 + rng() % 4, full_blocks - i);
            parts.emplace_back(p.table.begin() + static_cast<std::ptrdiff_t>(i),
                               p.table.begin() + static_cast<std::ptrdiff_t>(i + take));
            i += take;
        }
        std::shuffle(parts.begin(), parts.end(), rng);
        std::vector<float> o_acc(p.q.size(), 123.0f), lse_acc(heads, -std::numeric_limits<float>::infinity());
        std::vector<float> o(p.q.size()), lse(heads);
        for (const auto& part : parts) {
            reference_decode_attention(p.q, {.k = p.k, .v = p.v}, part, part.size() * s.block_size, s, o, lse);
            merge_attention_state(o_acc, lse_acc, o, lse, d);
        }
        const std::uint64_t tail = p.tokens - full_blocks * s.block_size;
        const std::vector<block_id> last{p.table.back()};
        reference_decode_attention(p.q, {.k = p.k, .v = p.v}, last, tail, s, o, lse);  // tail may be 0 tokens
        merge_attention_state(o_acc, lse_acc, o, lse, d);

        for (std::size_t h = 0; h < heads; ++h) {
            REQUIRE(lse_acc[h] == Approx(lse_full[h]).margin(1e-5));
            for (std::size_t c = 0; c < d; ++c) REQUIRE(o_acc[h * d + c] == Approx(o_full[h * d + c]).margin(1e-5));
        }
    }
}

TEST_CASE("merge: an empty part is the identity, and shapes must agree", "[merge]") {
    constexpr float empty = -std::numeric_limits<float>::infinity();
    std::vector<float> o{1, 2, 3, 4}, lse{0.5f, empty};
    const std::vector<float> o_empty{9, 9, 9, 9}, lse_empty{empty, empty};
    merge_attention_state(o, lse, o_empty, lse_empty, 2);
    REQUIRE(o == std::vector<float>{1, 2, 3, 4});
    REQUIRE(lse[0] == 0.5f);
    REQUIRE(lse[1] == empty);
    const std::vector<float> o_b{5, 6, 7, 8}, lse_b{0.5f, 2.0f};
    merge_attention_state(o, lse, o_b, lse_b, 2);
    REQUIRE(o[0] == Approx(3.0f));  // equal weights: the mean
    REQUIRE(o[1] == Approx(4.0f));
    REQUIRE(lse[0] == Approx(0.5 + std::log(2.0)));
    REQUIRE(o[2] == 7.0f);  // the accumulator was empty: the part is taken as is
    REQUIRE(lse[1] == 2.0f);
    const std::vector<float> short_lse{1.0f};
    REQUIRE_THROWS_AS(merge_attention_state(o, lse, o_b, short_lse, 2), usage_error);
}

TEST_CASE("reference_decode_attention: no tokens gives the merge identity, bad shapes throw", "[attention]") {
    const decode_attention_shape s{.num_q_heads = 2, .num_kv_heads = 1, .head_dim = 4, .block_size = 2, .scale = 0.5f};
    const std::vector<float> q(8, 1.0f), kv(2 * 4 * 2, 1.0f);
    std::vector<float> o(8, 7.0f), lse(2, 7.0f);
    reference_decode_attention(q, {.k = kv, .v = kv}, {}, 0, s, o, lse);
    REQUIRE(o == std::vector<float>(8, 0.0f));
    REQUIRE(lse[0] == -std::numeric_limits<float>::infinity());
    const std::vector<block_id> table{block_id{0}, block_id{1}};
    REQUIRE_THROWS_AS(reference_decode_attention(q, {.k = kv, .v = kv}, table, 5, s, o, lse), usage_error);
    const std::vector<block_id> outside{block_id{2}};
    REQUIRE_THROWS_AS(reference_decode_attention(q, {.k = kv, .v = kv}, outside, 1, s, o, lse), usage_error);
    auto bad = s;
    bad.num_q_heads = 3;
    bad.num_kv_heads = 2;
    REQUIRE_THROWS_AS(reference_decode_attention(q, {.k = kv, .v = kv}, table, 1, bad, o, lse), usage_error);
}
