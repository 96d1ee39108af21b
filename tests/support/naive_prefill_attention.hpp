// Naive prefill attention for the tests: the textbook formula, query by
// query, over the keys a predicate admits, in double with a max-then-sum
// softmax. Shares nothing with the library's attention code (no tiles, no
// key sources, no index structures), so it can judge them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kvpolicy::testing {

struct naive_prefill_shape {
    std::uint32_t num_tokens = 0;
    std::uint32_t num_q_heads = 1;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    float scale = 1.0f;
};

/// o [tokens][q_heads][head_dim] and lse [tokens][q_heads] of attention where
/// query i of head h reads key j iff admits(h, i, j); q [tokens][q_heads][d],
/// k and v [tokens][kv_heads][d]; head h reads KV head h * kv_heads / q_heads.
template <class Admits>
void naive_prefill_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             const naive_prefill_shape& s, Admits&& admits, std::vector<float>& o,
                             std::vector<float>& lse) {
    const std::size_t d = s.head_dim;
    o.assign(std::size_t{s.num_tokens} * s.num_q_heads * d, 0.0f);
    lse.assign(std::size_t{s.num_tokens} * s.num_q_heads, 0.0f);
    std::vector<double> logit(s.num_tokens);
    for (std::uint32_t h = 0; h < s.num_q_heads; ++h) {
        const std::size_t kvh = std::size_t{h} * s.num_kv_heads / s.num_q_heads;
        for (std::uint32_t i = 0; i < s.num_tokens; ++i) {
            double big = -std::numeric_limits<double>::infinity();
            for (std::uint32_t j = 0; j < s.num_tokens; ++j) {
                if (!admits(h, i, j)) continue;
                double dot = 0.0;
                for (std::size_t c = 0; c < d; ++c)
                    dot += double{q[(std::size_t{i} * s.num_q_heads + h) * d + c]} *
                           double{k[(std::size_t{j} * s.num_kv_heads + kvh) * d + c]};
                logit[j] = dot * double{s.scale};
                if (logit[j] > big) big = logit[j];
            }
            double sum = 0.0;
            std::vector<double> acc(d, 0.0);
            for (std::uint32_t j = 0; j < s.num_tokens; ++j) {
                if (!admits(h, i, j)) continue;
                const double p = std::exp(logit[j] - big);
                sum += p;
                for (std::size_t c = 0; c < d; ++c)
                    acc[c] += p * double{v[(std::size_t{j} * s.num_kv_heads + kvh) * d + c]};
            }
            const std::size_t row = std::size_t{i} * s.num_q_heads + h;
            for (std::size_t c = 0; c < d; ++c) o[row * d + c] = sum == 0.0 ? 0.0f : static_cast<float>(acc[c] / sum);
            lse[row] = sum == 0.0 ? -std::numeric_limits<float>::infinity() : static_cast<float>(big + std::log(sum));
        }
    }
}

}  // namespace kvpolicy::testing
