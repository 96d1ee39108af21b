// paged_kv_indices: kvpolicy's sparse selections as the index arrays a paged
// attention kernel reads (FlashInfer's paged_kv_t: indptr, indices,
// last_page_len), so a kernel library attends over exactly what kvpolicy
// chose.
//
// Quest (decode): per request its page table, its length and the logical
// blocks Quest kept -> the kept pages in position order, the last one
// ragged only if it is the request's own last block. Attention is order
// blind, but a kernel takes the last listed page's length from
// last_page_len, so the ragged tail must come last.
//
// MInference (prefill): a vertical-slash index (sparse/minference.hpp) as two
// batched launches whose outputs merge by log-sum-exp, the split of the
// authors' kernel (key blocks for the slashes, single columns for the
// verticals). Query rows go in blocks of `query_block`; one request per
// (KV head, query block). Each row of a block attends, causally, to
//   - slash part (pages of `page_size` tokens, causal): every key block
//     before the query block that a kept diagonal of any row of the block,
//     of any query head of the KV head's group, passes through, in ascending
//     order, then the query block's own diagonal pages LAST, so that the
//     kernel's causal rule (row t of a request sees entries e <= t + kv_len
//     - qo_len) is exactly causal on them;
//   - vertical part (pages of one token, no mask): the group's kept columns
//     before the query block that no slash page holds.
// So every row sees a superset of its own vertical-slash keys (the block's
// union, as MInference's kernel does, and the whole diagonal: MInference
// keeps offset 0 and its nearest diagonals); with query_block = page_size = 1
// and one query head per KV head it is exactly its own set. The host reference
// of these semantics is paged_attention_reference.hpp's
// vertical_slash_block_attention_reference.
//
// Pages address an NHD key tensor [num_tokens][num_kv_heads][head_dim]
// without a copy: the page of (KV head h, key block c) has id
// c * page_size * num_kv_heads + h, read with one head per request and
// strides page = head_dim, token = num_kv_heads * head_dim
// (vertical_slash_page_strides). Query rows are head-major: request
// (h, block [r0, r1)) reads rows h * num_tokens + r0 .. h * num_tokens + r1 - 1
// of a query [num_kv_heads][num_tokens][group][head_dim].
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/sparse/minference.hpp"

namespace kvpolicy {

/// A batch's KV pages in compressed-row form (FlashInfer's paged_kv_t, 32-bit ids).
struct paged_kv_indices {
    std::uint32_t page_size = 0;
    std::vector<std::int32_t> indptr{0};  ///< [batch + 1]: request b's pages are indices[indptr[b], indptr[b + 1])
    std::vector<std::int32_t> indices;    ///< [indptr.back()] page ids, in the order attended
    std::vector<std::int32_t>
        last_page_len;  ///< [batch] tokens of request b's last listed page, 1..page_size (0: no page)

    [[nodiscard]] std::size_t batch_size() const noexcept { return last_page_len.size(); }
    [[nodiscard]] std::span<const std::int32_t> pages(std::size_t b) const noexcept {
        return std::span(indices).subspan(static_cast<std::size_t>(indptr[b]),
                                          static_cast<std::size_t>(indptr[b + 1] - indptr[b]));
    }
    /// Tokens of request b, as the kernel counts them.
    [[nodiscard]] std::uint64_t kv_len(std::size_t b) const noexcept {
        const std::size_t n = pages(b).size();
        return n == 0 ? 0 : (n - 1) * std::uint64_t{page_size} + static_cast<std::uint64_t>(last_page_len[b]);
    }
};

/// One request of a Quest decode batch.
struct quest_request_pages {
    std::span<const std::int32_t> page_table;  ///< [blocks] page id of each logical block, position order
    std::uint64_t kv_len = 0;                  ///< tokens; the last block holds kv_len - (blocks - 1) * page_size
    std::span<const std::uint32_t> chosen;     ///< logical blocks kept (indexes into page_table), any order
};

namespace detail {
[[noreturn]] inline void throw_paged_kv(const std::string& who, const std::string& what) {
    throw usage_error(who + ": " + what);
}
inline void check_int32_total(const char* who, std::size_t total, const char* what) {
    if (total > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw_paged_kv(who,
                       std::to_string(total) + " " + what + " do not fit the kernels' 32-bit ids; split the batch");
}
}  // namespace detail

/// The pages of each request's chosen blocks, in position order.
/// Throws: usage_error naming the request, and builds nothing, for a
/// page_size of 0, a kv_len that is not page_table's blocks, a negative page
/// id, a chosen block out of range or chosen twice, or an empty choice
/// (attention over no key has no value; Quest keeps its sink and recent
/// blocks, so a real selection is never empty).
[[nodiscard]] inline paged_kv_indices quest_paged_kv_indices(std::span<const quest_request_pages> requests,
                                                             std::uint32_t page_size) {
    const char* who = "quest_paged_kv_indices";
    if (page_size == 0) detail::throw_paged_kv(who, "page_size is 0; give the engine's tokens per KV page");
    std::size_t total = 0;
    std::uint32_t widest = 0;
    for (std::size_t b = 0; b < requests.size(); ++b) {
        const quest_request_pages& r = requests[b];
        const std::string at = "request " + std::to_string(b) + ": ";
        const std::uint64_t blocks = (r.kv_len + page_size - 1) / page_size;
        if (r.kv_len == 0 || blocks != r.page_table.size())
            detail::throw_paged_kv(who, at + "kv_len " + std::to_string(r.kv_len) + " needs " + std::to_string(blocks) +
                                            " pages of " + std::to_string(page_size) +
                                            " tokens but its page table has " + std::to_string(r.page_table.size()));
        if (r.chosen.empty())
            detail::throw_paged_kv(who, at + "no block chosen; keep at least one (attention over no key has no value)");
        for (std::int32_t p : r.page_table)
            if (p < 0) detail::throw_paged_kv(who, at + "page id " + std::to_string(p) + " is negative");
        for (std::uint32_t c : r.chosen)
            if (c >= blocks)
                detail::throw_paged_kv(who, at + "chosen block " + std::to_string(c) + " is outside its " +
                                                std::to_string(blocks) + " blocks");
        widest = std::max(widest, static_cast<std::uint32_t>(blocks));
        total += r.chosen.size();
    }
    detail::check_int32_total(who, total, "chosen pages");
    std::vector<std::uint32_t> seen(widest, 0);  // seen[c] == b + 1: block c already chosen in request b
    paged_kv_indices out{.page_size = page_size, .indptr = {0}, .indices = {}, .last_page_len = {}};
    out.indices.reserve(total);
    out.indptr.reserve(requests.size() + 1);
    out.last_page_len.reserve(requests.size());
    std::vector<std::uint32_t> order;
    for (std::size_t b = 0; b < requests.size(); ++b) {
        const quest_request_pages& r = requests[b];
        order.assign(r.chosen.begin(), r.chosen.end());
        std::ranges::sort(order);
        for (std::uint32_t c : order) {
            if (seen[c] == b + 1)
                detail::throw_paged_kv(who, "request " + std::to_string(b) + ": block " + std::to_string(c) +
                                                " is chosen twice; give each block once");
            seen[c] = static_cast<std::uint32_t>(b + 1);
        }
        for (std::uint32_t c : order) out.indices.push_back(r.page_table[c]);
        out.indptr.push_back(static_cast<std::int32_t>(out.indices.size()));
        const std::uint64_t last_block = r.page_table.size() - 1;
        const std::uint64_t tail = r.kv_len - last_block * page_size;
        out.last_page_len.push_back(static_cast<std::int32_t>(order.back() == last_block ? tail : page_size));
    }
    return out;
}

/// MInference's index as two batched prefill launches (this file's header):
/// requests h-major, r = h * num_query_blocks + block.
struct sparse_prefill_indices {
    std::uint32_t num_tokens = 0;
    std::uint32_t num_kv_heads = 0;
    std::uint32_t query_block = 0;
    std::vector<std::int32_t> qo_indptr{0};  ///< [requests + 1] rows of the head-major query
    paged_kv_indices slashes;                ///< page_size tokens a page, causal, diagonal pages last
    paged_kv_indices verticals;              ///< one token a page, no mask, may be empty

    [[nodiscard]] std::uint32_t num_query_blocks() const noexcept {
        return query_block == 0 ? 0 : (num_tokens + query_block - 1) / query_block;
    }
};

/// FlashInfer's kv_strides (page, token, head) in elements for the pages of
/// sparse_prefill_indices over an NHD [num_tokens][num_kv_heads][head_dim]
/// tensor read one head per request.
struct vertical_slash_page_strides {
    std::int64_t page = 0, token = 0, head = 0;
};
[[nodiscard]] constexpr vertical_slash_page_strides vertical_slash_strides(std::uint32_t num_kv_heads,
                                                                           std::uint32_t head_dim) noexcept {
    return {.page = head_dim, .token = std::int64_t{num_kv_heads} * head_dim, .head = head_dim};
}

/// The two launches of `index` (see this file's header) for a KV head count,
/// query rows per block and slash page size.
/// Throws: usage_error, and builds nothing, for a query_block or page_size of
/// 0, a query_block that is not a multiple of page_size, query heads that
/// are not a multiple of num_kv_heads, an index whose arrays disagree with its
/// counts, a column or offset beyond the prompt, or ids beyond 32 bits.
[[nodiscard]] inline sparse_prefill_indices minference_sparse_prefill_indices(const vertical_slash_index& index,
                                                                              std::uint32_t num_kv_heads,
                                                                              std::uint32_t query_block,
                                                                              std::uint32_t page_size) {
    const char* who = "minference_sparse_prefill_indices";
    const std::uint32_t n = index.num_tokens;
    if (query_block == 0 || page_size == 0 || query_block % page_size != 0)
        detail::throw_paged_kv(who, "query_block " + std::to_string(query_block) + " and page_size " +
                                        std::to_string(page_size) +
                                        ": both must be positive and query_block a multiple of page_size (64 and 16)");
    if (num_kv_heads == 0 || index.num_heads == 0 || index.num_heads % num_kv_heads != 0)
        detail::throw_paged_kv(who, std::to_string(index.num_heads) + " query heads do not group over " +
                                        std::to_string(num_kv_heads) + " KV heads; give the model's KV head count");
    if (index.verticals.size() != std::size_t{index.num_heads} * index.vertical_count ||
        index.slashes.size() != std::size_t{index.num_heads} * index.slash_count)
        detail::throw_paged_kv(who, "the index holds " + std::to_string(index.verticals.size()) + " columns and " +
                                        std::to_string(index.slashes.size()) + " offsets for " +
                                        std::to_string(index.num_heads) + " heads x (" +
                                        std::to_string(index.vertical_count) + ", " +
                                        std::to_string(index.slash_count) + ")");
    for (std::uint32_t j : index.verticals)
        if (j >= n)
            detail::throw_paged_kv(
                who, "column " + std::to_string(j) + " is beyond the prompt's " + std::to_string(n) + " tokens");
    for (std::uint32_t o : index.slashes)
        if (o >= n)
            detail::throw_paged_kv(
                who, "offset " + std::to_string(o) + " is beyond the prompt's " + std::to_string(n) + " tokens");
    detail::check_int32_total(who, std::size_t{n} * num_kv_heads, "key rows (tokens x KV heads)");

    sparse_prefill_indices out;
    out.num_tokens = n;
    out.num_kv_heads = num_kv_heads;
    out.query_block = query_block;
    out.slashes.page_size = page_size;
    out.verticals.page_size = 1;
    const std::uint32_t group = index.num_heads / num_kv_heads;
    const std::uint32_t key_blocks = (n + page_size - 1) / page_size;
    const std::uint64_t page_stride =
        std::uint64_t{page_size} * num_kv_heads;  // page id of (h, c): c * page_stride + h
    std::vector<std::uint64_t> block_mark(key_blocks, 0), column_mark(n, 0);
    std::vector<std::uint32_t> blocks, columns;
    std::uint64_t request = 0;
    for (std::uint32_t h = 0; h < num_kv_heads; ++h) {
        for (std::uint32_t r0 = 0; r0 < n; r0 += query_block) {
            const std::uint32_t r1 = std::min(n, r0 + query_block);
            ++request;
            blocks.clear();
            columns.clear();
            // A kept offset o >= 1 brings keys [r0 - o, r1 - 1 - o] to the
            // block's rows; the part before r0 is held by whole key blocks.
            for (std::uint32_t q = h * group; q < (h + 1) * group; ++q) {
                for (std::uint32_t o : index.slash(q)) {
                    if (o == 0 || o > r1 - 1) continue;
                    const std::uint32_t lo = r0 > o ? r0 - o : 0, hi = std::min(r0 - 1, r1 - 1 - o);
                    if (r0 == 0 || lo > hi) continue;
                    for (std::uint32_t c = lo / page_size; c <= hi / page_size; ++c)
                        if (block_mark[c] != request) {
                            block_mark[c] = request;
                            blocks.push_back(c);
                        }
                }
            }
            for (std::uint32_t q = h * group; q < (h + 1) * group; ++q)
                for (std::uint32_t j : index.vertical(q))
                    if (j < r0 && block_mark[j / page_size] != request && column_mark[j] != request) {
                        column_mark[j] = request;
                        columns.push_back(j);
                    }
            std::ranges::sort(blocks);
            std::ranges::sort(columns);
            for (std::uint32_t c : blocks)
                out.slashes.indices.push_back(static_cast<std::int32_t>(c * page_stride + h));
            for (std::uint32_t c = r0 / page_size; c * page_size < r1; ++c)
                out.slashes.indices.push_back(static_cast<std::int32_t>(c * page_stride + h));
            const std::uint32_t diagonal_pages = (r1 - r0 + page_size - 1) / page_size;
            out.slashes.last_page_len.push_back(static_cast<std::int32_t>(r1 - r0 - (diagonal_pages - 1) * page_size));
            detail::check_int32_total(who, out.slashes.indices.size(), "slash pages");
            out.slashes.indptr.push_back(static_cast<std::int32_t>(out.slashes.indices.size()));
            for (std::uint32_t j : columns)
                out.verticals.indices.push_back(static_cast<std::int32_t>(std::uint64_t{j} * num_kv_heads + h));
            out.verticals.last_page_len.push_back(columns.empty() ? 0 : 1);
            detail::check_int32_total(who, out.verticals.indices.size(), "vertical columns");
            out.verticals.indptr.push_back(static_cast<std::int32_t>(out.verticals.indices.size()));
            out.qo_indptr.push_back(static_cast<std::int32_t>(std::uint64_t{h} * n + r1));
        }
    }
    return out;
}

}  // namespace kvpolicy
