// paged_kv_row: one request's row of FlashInfer's paged-KV indices
// (`indptr`, `indices`, `last_page_len`) from Quest's device top-K, entry by
// entry, so the Quest decode path needs no host round trip.
//
// Quest (sparse/quest.hpp) keeps a request's first `middle_begin` blocks and
// its blocks from `middle_end` on, and `keep` of the middle ones chosen by
// score; the device top-K (cuda/quest.cuh, `select_top_device`) writes the
// chosen middle blocks as positions into the candidates, highest score first.
// FlashInfer wants the request's pages in position order. Everything but the
// positions is known on the host when the batch's layout is (lengths, page
// tables, budget): `quest_paged_row` holds that, planned once per layout by
// `plan_quest_paged_rows`, which also gives `indptr`. Per decode step a kernel
// (cuda/quest_paged_kv.cuh) runs one thread per entry of each row:
// `quest_paged_entry` says which slot of the row the thread fills and with
// which logical block, sorting the chosen positions by rank (each thread
// counts the positions below its own: keep is a budget, a few hundred at
// most). The thread that fills the row's last slot writes `last_page_len`:
// the ragged tail's length when the request's last block is listed, else
// page_size. The same function runs here on the CPU, thread by thread, in
// tests/sparse_paged_kv_row.cpp against the host conversion
// (`quest_paged_kv_indices`, sparse/paged_kv_indices.hpp).
//
// Candidates are the request's middle blocks in order: candidate i is
// logical block middle_begin + i (what quest::select and the benches pass).
// A position outside the middle (select_top_device leaves positions unwritten
// after a NaN score, which its status reports) is clamped into it and ties in
// the rank go to the lower thread, so every slot is still written exactly
// once with a page of the request: the attention that follows reads in
// bounds, and the caller discards the step on the status.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kvpolicy/core/error.hpp"
#include "kvpolicy/core/host_device.hpp"
#include "kvpolicy/sparse/quest.hpp"

namespace kvpolicy {

/// One request's layout, planned on the host (`plan_quest_paged_rows`).
struct quest_paged_row {
    std::uint32_t table_begin = 0;   ///< its page table: pages[table_begin + logical block]
    std::uint32_t num_blocks = 0;    ///< ceil(kv_len / page_size), >= 1
    std::uint32_t last_len = 0;      ///< tokens in its last block, 1 .. page_size
    std::uint32_t middle_begin = 0;  ///< quest_plan's middle; load_all: 0, 0, 0
    std::uint32_t middle_end = 0;
    std::uint32_t keep = 0;             ///< chosen middle blocks
    std::uint32_t positions_begin = 0;  ///< its keep positions in the top-K output
    std::uint32_t out_begin = 0;        ///< indptr[r]: its first entry in `indices`

    /// Entries of the row: kept head, chosen middle, kept tail.
    [[nodiscard]] KVPOLICY_HOST_DEVICE constexpr std::uint32_t count() const noexcept {
        return middle_begin + keep + (num_blocks - middle_end);
    }
};

/// What thread `t` (< row.count()) of a row writes: entry `slot` of the row
/// is logical block `logical`.
struct quest_paged_entry_value {
    std::uint32_t slot = 0;
    std::uint32_t logical = 0;
};

/// Thread t's entry of `row`; `positions` is the whole top-K output (the
/// row reads [positions_begin, positions_begin + keep)).
[[nodiscard]] KVPOLICY_HOST_DEVICE inline quest_paged_entry_value quest_paged_entry(const quest_paged_row& row,
                                                                                    const std::uint32_t* positions,
                                                                                    std::uint32_t t) noexcept {
    if (t < row.middle_begin) return {t, t};
    const std::uint32_t chosen_end = row.middle_begin + row.keep;
    if (t >= chosen_end) return {t, row.middle_end + (t - chosen_end)};
    const std::uint32_t middle = row.middle_end - row.middle_begin;
    const std::uint32_t* mine = positions + row.positions_begin;
    const std::uint32_t i = t - row.middle_begin;
    const auto clamp = [middle](std::uint32_t p) { return p < middle ? p : middle - 1; };
    const std::uint32_t p = clamp(mine[i]);
    std::uint32_t rank = 0;
    for (std::uint32_t j = 0; j < row.keep; ++j) {
        const std::uint32_t q = clamp(mine[j]);
        rank += (q < p || (q == p && j < i)) ? 1u : 0u;
    }
    return {row.middle_begin + rank, row.middle_begin + p};
}

/// last_page_len of the row whose last slot holds logical block `logical`.
[[nodiscard]] KVPOLICY_HOST_DEVICE constexpr std::uint32_t quest_paged_last_page_len(const quest_paged_row& row,
                                                                                     std::uint32_t logical,
                                                                                     std::uint32_t page_size) noexcept {
    return logical + 1 == row.num_blocks ? row.last_len : page_size;
}

/// A request as the planner sees it: its tokens and its page table (logical
/// block -> physical page).
struct quest_paged_request {
    std::uint64_t kv_len = 0;
    std::span<const std::int32_t> pages;  ///< [>= ceil(kv_len / page_size)] physical page ids
};

/// A batch's layout: one row per request, FlashInfer's indptr, and every
/// request's page table flattened (what the kernel reads).
struct quest_paged_layout {
    std::uint32_t page_size = 0;
    std::vector<quest_paged_row> rows;  ///< [batch]
    std::vector<std::int32_t> indptr;   ///< [batch + 1] FlashInfer's page indptr
    std::vector<std::int32_t> pages;    ///< [sum of num_blocks] page tables, row r at rows[r].table_begin
    std::uint32_t positions = 0;        ///< top-K positions the batch reads (sum of keep)
    std::uint32_t max_row = 0;          ///< the longest row's count (the kernel's block width)
};

/// Plans the rows of a batch under Quest's budget: request r's plan is
/// plan_quest_selection(num_blocks, page_size, config), its positions follow
/// request r - 1's in the top-K output.
/// Throws: usage_error for an empty batch, a request with no tokens, a page
/// table shorter than the request or holding a page outside [0, num_pages),
/// or more entries than int32 indices hold; config_error for a page_size of
/// 0 or a token budget below sink + recent blocks (nothing returned).
[[nodiscard]] inline quest_paged_layout plan_quest_paged_rows(std::span<const quest_paged_request> requests,
                                                              std::uint32_t page_size, std::uint32_t num_pages,
                                                              const quest_config& config) {
    const std::string at = "plan_quest_paged_rows: ";
    if (page_size == 0) throw config_error(at + "page_size is 0; give the tokens per page (16 in the benches)");
    if (config.token_budget / page_size < std::uint64_t{config.sink_blocks} + config.recent_blocks ||
        config.token_budget == 0)
        throw config_error(at + "token_budget " + std::to_string(config.token_budget) + " holds fewer than the " +
                           std::to_string(config.sink_blocks) + " sink + " + std::to_string(config.recent_blocks) +
                           " recent pages of " + std::to_string(page_size) + " tokens; raise the budget");
    if (requests.empty()) throw usage_error(at + "the batch is empty; give at least one request");
    quest_paged_layout out;
    out.page_size = page_size;
    out.indptr.push_back(0);
    std::uint64_t entries = 0, table = 0, positions = 0;
    for (std::size_t r = 0; r < requests.size(); ++r) {
        const quest_paged_request& q = requests[r];
        const std::string who = at + "request " + std::to_string(r) + ": ";
        if (q.kv_len == 0) throw usage_error(who + "has no tokens; leave it out of the batch");
        const std::uint64_t blocks = (q.kv_len + page_size - 1) / page_size;
        if (q.pages.size() < blocks)
            throw usage_error(who + std::to_string(q.kv_len) + " tokens need " + std::to_string(blocks) +
                              " pages but its table holds " + std::to_string(q.pages.size()));
        for (std::uint64_t b = 0; b < blocks; ++b)
            if (q.pages[b] < 0 || static_cast<std::uint64_t>(q.pages[b]) >= num_pages)
                throw usage_error(who + "page " + std::to_string(q.pages[b]) + " of logical block " +
                                  std::to_string(b) + " is outside the cache's " + std::to_string(num_pages) +
                                  " pages");
        const quest_plan plan = plan_quest_selection(blocks, page_size, config);
        quest_paged_row row{.table_begin = static_cast<std::uint32_t>(table),
                            .num_blocks = static_cast<std::uint32_t>(blocks),
                            .last_len = static_cast<std::uint32_t>(q.kv_len - (blocks - 1) * page_size),
                            .middle_begin = static_cast<std::uint32_t>(plan.middle_begin),
                            .middle_end = static_cast<std::uint32_t>(plan.middle_end),
                            .keep = static_cast<std::uint32_t>(plan.middle_keep),
                            .positions_begin = static_cast<std::uint32_t>(positions),
                            .out_begin = static_cast<std::uint32_t>(entries)};
        entries += row.count();
        table += blocks;
        positions += row.keep;
        if (entries > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()) ||
            table > std::numeric_limits<std::uint32_t>::max())
            throw usage_error(who + "the batch lists more pages than FlashInfer's int32 indices hold; split it");
        out.rows.push_back(row);
        out.indptr.push_back(static_cast<std::int32_t>(entries));
        out.max_row = std::max(out.max_row, row.count());
    }
    out.pages.reserve(table);
    for (std::size_t r = 0; r < requests.size(); ++r)
        out.pages.insert(out.pages.end(), requests[r].pages.begin(),
                         requests[r].pages.begin() + out.rows[r].num_blocks);
    out.positions = static_cast<std::uint32_t>(positions);
    return out;
}

}  // namespace kvpolicy
