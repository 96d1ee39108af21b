// paged_attention_reference: what a paged attention kernel computes over
// paged_kv_indices, in double on the host, one naive loop per row: the
// reference a kernel library's output (FlashInfer's batch decode and
// prefill) is checked against, and the model that ties kvpolicy's index
// conversions (sparse/paged_kv_indices.hpp) to the attention they stand for.
//
// Request r's query rows are qo_indptr[r] .. qo_indptr[r + 1] - 1; its KV
// entries e = 0 .. kv_len - 1 are token e % page_size of page
// indices[indptr[r] + e / page_size]. With `causal`, row t of a request sees
// entries e <= t + kv_len - qo_len (the kernels' rule: the query rows are the
// request's last tokens); a decode row (qo_len 1) sees them all. Query head
// j reads KV head j / (num_q_heads / num_kv_heads). lse is the natural log
// of the softmax denominator (-inf, with o = 0, for a row that sees nothing).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/sparse_context.hpp"
#include "kvpolicy/sparse/minference.hpp"
#include "kvpolicy/sparse/paged_kv_indices.hpp"

namespace kvpolicy {

/// Keys and values as a paged kernel addresses them (FlashInfer's
/// paged_kv_t with kv_strides), fp32 host memory; strides in elements.
struct strided_kv_view {
    std::span<const float> k, v;
    std::uint32_t num_kv_heads = 1;
    std::uint32_t head_dim = 0;
    std::int64_t stride_page = 0, stride_token = 0, stride_head = 0;

    [[nodiscard]] std::size_t offset(std::int32_t page, std::uint32_t token, std::uint32_t head) const noexcept {
        return static_cast<std::size_t>(page * stride_page + std::int64_t{token} * stride_token +
                                        std::int64_t{head} * stride_head);
    }
};

namespace detail {
/// Softmax attention of one query row over the keys and values `kv` points
/// at, in double: o[0, d) and the row's lse (-inf, o = 0, for no key).
/// `logits` is scratch.
inline void attend_row_double(const float* q, std::size_t d, double scale,
                              std::span<const std::pair<const float*, const float*>> kv, double* o, double& lse,
                              std::vector<double>& logits) {
    logits.resize(kv.size());
    double big = -std::numeric_limits<double>::infinity();
    for (std::size_t e = 0; e < kv.size(); ++e) {
        double dot = 0.0;
        for (std::size_t x = 0; x < d; ++x) dot += double{q[x]} * double{kv[e].first[x]};
        logits[e] = dot * scale;
        big = std::max(big, logits[e]);
    }
    std::fill(o, o + d, 0.0);
    double sum = 0.0;
    for (std::size_t e = 0; e < kv.size(); ++e) {
        const double p = std::exp(logits[e] - big);
        sum += p;
        for (std::size_t x = 0; x < d; ++x) o[x] += p * double{kv[e].second[x]};
    }
    if (kv.empty()) {
        lse = -std::numeric_limits<double>::infinity();
        return;
    }
    for (std::size_t x = 0; x < d; ++x) o[x] /= sum;
    lse = big + std::log(sum);
}
}  // namespace detail

/// Effects: o [rows][num_q_heads][head_dim] and lse [rows][num_q_heads] of
/// attention over `pages` (this file's header), softmax scale `scale`.
/// Throws: usage_error, writing nothing, for shapes that disagree (query,
/// qo_indptr against the batch, head counts, outputs) or an entry outside kv.
inline void paged_attention_reference(std::span<const float> q, std::uint32_t num_q_heads,
                                      std::span<const std::int32_t> qo_indptr, const strided_kv_view& kv,
                                      const paged_kv_indices& pages, bool causal, double scale, std::span<double> o,
                                      std::span<double> lse) {
    const std::string who = "paged_attention_reference: ";
    const std::size_t d = kv.head_dim, batch = pages.batch_size();
    if (d == 0 || kv.num_kv_heads == 0 || num_q_heads % kv.num_kv_heads != 0)
        throw usage_error(who + std::to_string(num_q_heads) + " query heads over " + std::to_string(kv.num_kv_heads) +
                          " KV heads of dim " + std::to_string(d) + "; query heads must be a multiple of KV heads");
    if (qo_indptr.size() != batch + 1 || pages.indptr.size() != batch + 1 || qo_indptr.front() != 0)
        throw usage_error(who + "qo_indptr has " + std::to_string(qo_indptr.size()) + " entries, indptr " +
                          std::to_string(pages.indptr.size()) + ", for " + std::to_string(batch) + " requests");
    const auto rows = static_cast<std::size_t>(qo_indptr.back());
    if (q.size() != rows * num_q_heads * d || o.size() != q.size() || lse.size() != rows * num_q_heads)
        throw usage_error(who + "query, o or lse does not hold " + std::to_string(rows) + " rows x " +
                          std::to_string(num_q_heads) + " heads x " + std::to_string(d));
    for (std::size_t r = 0; r < batch; ++r) {
        if (qo_indptr[r + 1] < qo_indptr[r] || pages.indptr[r + 1] < pages.indptr[r])
            throw usage_error(who + "request " + std::to_string(r) + " has a decreasing indptr");
        const std::span<const std::int32_t> list = pages.pages(r);
        for (std::size_t e = 0; e < list.size(); ++e) {
            const std::int32_t tokens = e + 1 == list.size() ? pages.last_page_len[r] : std::int32_t(pages.page_size);
            for (std::uint32_t h = 0; h < kv.num_kv_heads; ++h)
                if (list[e] < 0 || tokens < 1 || tokens > std::int32_t(pages.page_size) ||
                    kv.offset(list[e], static_cast<std::uint32_t>(tokens - 1), h) + d >
                        std::min(kv.k.size(), kv.v.size()))
                    throw usage_error(who + "request " + std::to_string(r) + ": page " + std::to_string(list[e]) +
                                      " (" + std::to_string(tokens) + " tokens) lies outside the " +
                                      std::to_string(kv.k.size()) + " keys");
        }
    }
    const std::uint32_t group = num_q_heads / kv.num_kv_heads;
    std::vector<double> logits;
    std::vector<std::pair<const float*, const float*>> seen_kv;
    for (std::size_t r = 0; r < batch; ++r) {
        const std::uint64_t kv_len = pages.kv_len(r);
        const auto q0 = static_cast<std::size_t>(qo_indptr[r]),
                   qo_len = static_cast<std::size_t>(qo_indptr[r + 1]) - q0;
        const std::span<const std::int32_t> list = pages.pages(r);
        for (std::size_t t = 0; t < qo_len; ++t) {
            // Entries visible to row t: all, or e <= t + kv_len - qo_len.
            const std::int64_t last = causal ? static_cast<std::int64_t>(t + kv_len) - static_cast<std::int64_t>(qo_len)
                                             : static_cast<std::int64_t>(kv_len) - 1;
            const std::uint64_t seen =
                last < 0 ? 0 : std::min<std::uint64_t>(kv_len, static_cast<std::uint64_t>(last) + 1);
            for (std::uint32_t j = 0; j < num_q_heads; ++j) {
                seen_kv.clear();
                for (std::uint64_t e = 0; e < seen; ++e) {
                    const std::size_t at = kv.offset(list[e / pages.page_size],
                                                     static_cast<std::uint32_t>(e % pages.page_size), j / group);
                    seen_kv.emplace_back(kv.k.data() + at, kv.v.data() + at);
                }
                const std::size_t row = (q0 + t) * num_q_heads + j;
                detail::attend_row_double(q.data() + row * d, d, scale, seen_kv, o.data() + row * d, lse[row], logits);
            }
        }
    }
}

/// The attention minference_sparse_prefill_indices stands for, from its
/// definition (paged_kv_indices.hpp's header), row by row: row i of query
/// head j, in query block [r0, r1), sees the key blocks of `page_size`
/// tokens before r0 that a kept diagonal of any row of the block of any
/// query head of j's group passes through, the group's kept columns before
/// r0, and keys r0 .. i. In double, softmax over that set; o [tokens][heads]
/// [head_dim] and lse [tokens][heads] as in.q. Preconditions: the views
/// agree (detail::check_prefill_input), the index is for this prompt and
/// head count, query_block a positive multiple of page_size.
inline void vertical_slash_block_attention_reference(const prefill_qkv_view& in, const vertical_slash_index& index,
                                                     std::uint32_t query_block, std::uint32_t page_size,
                                                     std::span<double> o, std::span<double> lse) {
    const std::size_t n = in.num_tokens, d = in.head_dim;
    const std::uint32_t group = in.num_q_heads / in.num_kv_heads;
    std::vector<char> visible(n);
    std::vector<double> logits;
    std::vector<std::pair<const float*, const float*>> seen_kv;
    for (std::uint32_t j = 0; j < in.num_q_heads; ++j) {
        const std::uint32_t h = j / group;
        for (std::size_t r0 = 0; r0 < n; r0 += query_block) {
            const std::size_t r1 = std::min(n, r0 + query_block);
            std::ranges::fill(visible, 0);
            for (std::uint32_t g = h * group; g < (h + 1) * group; ++g) {
                for (std::uint32_t col : index.vertical(g))
                    if (col < r0) visible[col] = 1;
                for (std::size_t i = r0; i < r1; ++i)
                    for (std::uint32_t off : index.slash(g))
                        if (off <= i && i - off < r0) {
                            const std::size_t c = (i - off) / page_size;
                            for (std::size_t key = c * page_size; key < (c + 1) * page_size; ++key) visible[key] = 1;
                        }
            }
            for (std::size_t i = r0; i < r1; ++i) {
                seen_kv.clear();
                for (std::size_t key = 0; key <= i; ++key)
                    if (key >= r0 || visible[key]) {
                        const std::size_t at = (key * in.num_kv_heads + h) * d;
                        seen_kv.emplace_back(in.k.data() + at, in.v.data() + at);
                    }
                const std::size_t row = i * in.num_q_heads + j;
                detail::attend_row_double(in.q.data() + row * d, d, double{in.scale}, seen_kv, o.data() + row * d,
                                          lse[row], logits);
            }
        }
    }
}

}  // namespace kvpolicy
