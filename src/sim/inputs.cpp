// What every run shares, read once (driver.hpp: load_inputs,
// count_distinct_blocks).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <kvpolicy/core/error.hpp>
#include <kvpolicy/sim/driver.hpp>
#include <kvpolicy/sim/return_hints.hpp>
#include <kvpolicy/sim/trace.hpp>
#include <kvpolicy/sim/workload.hpp>

namespace kvpolicy::sim {

run_inputs load_inputs(const run_setup& s) {
    const run_options& o = s.options;
    run_inputs in;
    // Belady and reuse_oracle_lru read each access's next use: the trace is
    // read into memory once for them.
    const bool needs_future = std::ranges::any_of(s.policies, &policy_choice::uses_future);
    if (o.trace.empty()) {
        chat_workload_config w = o.workload;
        w.block_size = o.block_size;
        w.seed = o.seed;
        in.requests = std::make_shared<const std::vector<request_record>>(generate_chat_workload(w));
    } else if ((needs_future || s.hints != hint_source::none) && o.mode != replay_mode::flat) {
        if (o.format == trace_format::csv)
            throw config_error("--mode " + std::string(to_string(o.mode)) +
                               " needs requests (mooncake JSONL or the built-in workload); a CSV holds only block accesses");
        auto reqs = std::make_shared<std::vector<request_record>>();
        mooncake_reader reader(o.trace, o.skip_bad_lines);
        request_record r;
        while (reader.next(r)) reqs->push_back(r);
        in.requests = std::move(reqs);
    }
    if (s.hints == hint_source::ends)
        in.returns = std::make_shared<const std::vector<timestamp>>(compute_session_ends(*in.requests, o.block_size));
    else if (s.hints == hint_source::oracle)
        in.returns = std::make_shared<const std::vector<timestamp>>(
                compute_expected_returns(*in.requests, o.block_size, s.return_hint_error, o.seed));
    else if (s.hints == hint_source::file) {
        std::ifstream f(s.return_hint_file);
        if (!f) throw config_error("--return-hints file:" + s.return_hint_file + ": cannot open it; check the path");
        in.returns = std::make_shared<const std::vector<timestamp>>(
                parse_expected_returns(f, s.return_hint_file, *in.requests));
    }
    if (needs_future) {
        if (o.mode == replay_mode::flat) {
            auto oracle = std::make_shared<oracle_accesses>();
            access_record a;
            auto add = [&](const access_record& x) {
                oracle->keys.push_back(x.obj_id);
                oracle->sizes.push_back(static_cast<std::uint32_t>(std::max<std::uint64_t>(x.obj_size, 1)));
            };
            if (in.requests) {
                vector_request_source rs(*in.requests);
                flattened_requests<vector_request_source> src(rs);
                while (src.next(a)) add(a);
            } else if (o.format == trace_format::csv) {
                csv_reader src(o.trace, o.skip_bad_lines);
                while (src.next(a)) add(a);
            } else {
                mooncake_reader reader(o.trace, o.skip_bad_lines);
                flattened_requests<mooncake_reader> src(reader);
                while (src.next(a)) add(a);
            }
            oracle->compute_next_use();
            in.oracle = std::move(oracle);
        } else {
            in.times = std::make_shared<const request_times>(compute_request_times(*in.requests));
        }
    }
    return in;
}

std::size_t count_distinct_blocks(const run_setup& s, const run_inputs& in) {
    const run_options& o = s.options;
    std::unordered_set<std::uint64_t> seen;
    if (in.requests) {
        for (const request_record& r : *in.requests) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    } else if (in.oracle) {
        seen.insert(in.oracle->keys.begin(), in.oracle->keys.end());
    } else if (o.format == trace_format::csv) {
        csv_reader src(o.trace, o.skip_bad_lines);
        for (access_record a; src.next(a);) seen.insert(a.obj_id);
    } else {
        mooncake_reader reader(o.trace, o.skip_bad_lines);
        for (request_record r; reader.next(r);) seen.insert(r.hash_ids.begin(), r.hash_ids.end());
    }
    return seen.size();
}

}  // namespace kvpolicy::sim
