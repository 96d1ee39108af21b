// Trace parsing: good input, every kind of bad input with its message, gzip,
// and skip-bad-lines accounting.
#include <catch2/catch.hpp>

#include <kvpolicy/sim/trace.hpp>
#include <kvpolicy/sim/workload.hpp>

#include <zlib.h>

#include "support/scratch_dir.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>

using namespace kvpolicy;
using namespace kvpolicy::sim;

namespace {

// Writes `content` to `name` in the test's own scratch directory.
std::string temp_file(const testing::scratch_dir& dir, const std::string& name, const std::string& content,
                      bool gzip = false) {
    if (!gzip) return dir.write(name, content);
    const std::string path = dir.file(name);
    {
        gzFile f = gzopen(path.c_str(), "wb");
        REQUIRE(f != nullptr);
        REQUIRE(gzwrite(f, content.data(), static_cast<unsigned>(content.size())) == static_cast<int>(content.size()));
        gzclose(f);
    }
    return path;
}

std::string parse_error_of(std::string_view line) {
    request_record r;
    return parse_mooncake_line(line, r);
}

}  // namespace

TEST_CASE("mooncake lines: the schema, extra keys, whitespace", "[sim][trace]") {
    request_record r;
    REQUIRE(
        parse_mooncake_line(R"({"timestamp": 27, "input_length": 1024, "output_length": 7, "hash_ids": [4, 5, 6]})", r)
            .empty());
    REQUIRE(r.timestamp_ms == 27);
    REQUIRE(r.input_length == 1024);
    REQUIRE(r.output_length == 7);
    REQUIRE(r.hash_ids == std::vector<std::uint64_t>{4, 5, 6});
    REQUIRE_FALSE(r.has_session);
    REQUIRE(
        parse_mooncake_line(
            R"(  { "session":3,"hash_ids":[] , "note": {"a": [1, "x"]}, "timestamp":0,"input_length":0,"output_length":0 } )",
            r)
            .empty());
    REQUIRE(r.has_session);
    REQUIRE(r.session == 3);
    REQUIRE(r.hash_ids.empty());
}

TEST_CASE("mooncake lines: each malformation names itself", "[sim][trace][errors]") {
    const std::map<std::string, std::string> cases{
        {R"([1, 2])", "expected a JSON object starting with '{'"},
        {R"({"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": []})",
         "\"timestamp\" must be a non-negative integer"},
        {R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, "2"]})",
         "hash_ids must be an array of integers"},
        {R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": 5})",
         "hash_ids must be an array of integers"},
        {R"({"timestamp": 1, "input_length": 1, "output_length": 1})", "missing field \"hash_ids\""},
        {R"({"input_length": 1, "output_length": 1, "hash_ids": []})", "missing field \"timestamp\""},
        {R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": []} x)",
         "unexpected characters after the object"},
        {R"({"timestamp": 1 "input_length": 1})", "expected ',' or '}' after \"timestamp\""},
        {R"({timestamp: 1})", "expected a quoted key"},
        // A key is quoted printable: control bytes as \xHH (a NUL would cut
        // the message short, an escape sequence would reach the terminal),
        // at most 40 bytes of it.
        {std::string("{\"a\0b\x1b[31m\" 1}", 14), R"(expected ':' after "a\x00b\x1b[31m")"},
        {"{\"" + std::string(50, 'k') + "\": 1 2}", "expected ',' or '}' after \"" + std::string(40, 'k') + "...\""},
    };
    for (const auto& [line, message] : cases) {
        INFO(line);
        REQUIRE(parse_error_of(line) == message);
    }
    // A key whose escape is cut off by the end of the line is no key.
    REQUIRE(parse_error_of(R"({"abc\)") == "expected a quoted key");
    // A repeated key: the last one counts, for the id array as for the numbers.
    request_record r;
    REQUIRE(
        parse_mooncake_line(
            R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1], "timestamp": 2, "hash_ids": [2, 3]})",
            r)
            .empty());
    REQUIRE(r.timestamp_ms == 2);
    REQUIRE(r.hash_ids == std::vector<std::uint64_t>{2, 3});
}

TEST_CASE("csv rows: good and bad", "[sim][trace][errors]") {
    access_record a;
    REQUIRE(parse_csv_row("12,34,1", a) == nullptr);
    REQUIRE(a.time == 12);
    REQUIRE(a.obj_id == 34);
    REQUIRE(std::string(parse_csv_row("12,x,1", a)) == "expected three non-negative integers time,obj_id,obj_size");
    REQUIRE(std::string(parse_csv_row("12,3", a)) == "expected three non-negative integers time,obj_id,obj_size");
    REQUIRE(std::string(parse_csv_row("1,2,3,4", a)) == "unexpected characters after obj_size");
}

TEST_CASE("readers stream plain and gzip files and name file:line on bad input", "[sim][trace][errors]") {
    const testing::scratch_dir dir;  // this test's files, removed at its end
    const std::string body =
        "{\"timestamp\": 1, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
        "\n"
        "{\"timestamp\": 2, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 3]}\r\n"
        "{\"timestamp\": 3, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 4, \"input_length\": 16, \"output_length\": 1, \"hash_ids\": [9]}";
    for (const bool gz : {false, true}) {
        const std::string path = temp_file(dir, gz ? "t.jsonl.gz" : "t.jsonl", body, gz);
        {
            mooncake_reader strict(path, false);
            request_record r;
            REQUIRE(strict.next(r));
            REQUIRE(r.line == 1);
            REQUIRE(strict.next(r));
            REQUIRE(r.line == 3);  // blank line skipped, \r trimmed
            REQUIRE(r.hash_ids == std::vector<std::uint64_t>{1, 3});
            REQUIRE_THROWS_WITH(strict.next(r), path + ":4: missing field \"input_length\"");
        }
        mooncake_reader lenient(path, true);
        request_record r;
        std::vector<std::size_t> lines;
        while (lenient.next(r)) lines.push_back(r.line);
        REQUIRE(lines == std::vector<std::size_t>{1, 3, 5});  // the last line has no newline
        REQUIRE(lenient.bad_lines().count == 1);
        REQUIRE(lenient.bad_lines().first_messages.at(0) == path + ":4: missing field \"input_length\"");
    }
    const std::string csv = temp_file(dir, "t.csv", "time,obj_id,obj_size\n0,5,1\n0,oops,1\n1,6,1\n");
    csv_reader strict(csv, false);
    access_record a;
    REQUIRE(strict.next(a));
    REQUIRE(a.obj_id == 5);
    REQUIRE_THROWS_WITH(strict.next(a), csv + ":3: expected three non-negative integers time,obj_id,obj_size");
    const std::string headless = temp_file(dir, "h.csv", "0,5,1\n");
    REQUIRE_THROWS_WITH(csv_reader(headless, false), headless + ":1: expected the header 'time,obj_id,obj_size'");
    REQUIRE_THROWS_WITH(mooncake_reader("/nonexistent/trace.jsonl", false),
                        Catch::StartsWith("cannot open trace '/nonexistent/trace.jsonl'"));
}

TEST_CASE("csv reader: batches of any size over any buffer split read exactly what was written", "[sim][trace][csv]") {
    const testing::scratch_dir dir;  // this test's files, removed at its end
    // Random files of good rows (fields of 1 to 19 digits, runs of repeated
    // times and sizes that the reader's compare-with-the-last-row path takes,
    // the same text at other lengths that it must not take), CRLF rows, blank
    // lines and bad rows; read through buffers as small as 2 bytes and
    // batches of 1 to 300 rows. The expectation comes from the generator.
    std::mt19937_64 rng(20261121);
    auto number_text = [&](std::uint64_t& value) {
        const int digits = static_cast<int>(rng() % 10 == 0 ? 1 + rng() % 19 : 1 + rng() % 6);
        std::string t;
        for (int i = 0; i < digits; ++i)
            t += static_cast<char>('0' + (i == 0 && digits > 1 ? 1 + rng() % 9 : rng() % 10));
        if (rng() % 20 == 0) t = "0" + t;  // a leading zero: same value, other text
        value = std::stoull(t);
        return t;
    };
    const char* const bad_rows[] = {"x,1,1",   "1,,1",   "1,2",   "1,2,3,4",
                                    "1,2,3 x", "-1,2,3", "1;2;3", "12345678901234567890123,1,1"};
    for (int file = 0; file < 40; ++file) {
        std::string body = "time,obj_id,obj_size\n";
        std::vector<access_record> good;      // in order
        std::vector<std::size_t> good_lines;  // their 1-based lines
        std::vector<std::size_t> bad_lines;   // 1-based
        std::size_t line = 1;
        std::string time_text = "0", size_text = "1";
        std::uint64_t time = 0, size = 1;
        const int rows = 1 + static_cast<int>(rng() % 400);
        for (int r = 0; r < rows; ++r) {
            ++line;
            const unsigned kind = static_cast<unsigned>(rng() % 40);
            if (kind == 0) {
                body += rng() % 2 ? "\n" : "\r\n";  // blank
                continue;
            }
            if (kind == 1) {
                body += bad_rows[rng() % std::size(bad_rows)];
                body += "\n";
                bad_lines.push_back(line);
                continue;
            }
            if (rng() % 4 == 0) time_text = number_text(time);
            if (rng() % 8 == 0) size_text = number_text(size);
            access_record a;
            a.time = time;
            a.obj_size = size;
            body += time_text + "," + number_text(a.obj_id) + "," + size_text;
            body += kind == 2 ? "\r\n" : "\n";
            good.push_back(a);
            good_lines.push_back(line);
        }
        if (rng() % 2 && body.back() == '\n') body.pop_back();  // no newline at the end
        const std::string path = temp_file(dir, "batches.csv", body);
        for (const bool skip : {true, false}) {
            const std::size_t buffer = rng() % 3 == 0 ? 2 + rng() % 64 : 1 + rng() % 4096;
            INFO("file " << file << " skip " << skip << " buffer " << buffer);
            csv_reader reader(path, skip, buffer);
            std::vector<access_record> got;
            std::vector<access_record> batch(300);
            bool threw = false;
            try {
                for (;;) {
                    const std::size_t want = 1 + rng() % batch.size();
                    const std::size_t n = reader.next_batch({batch.data(), want});
                    REQUIRE(n <= want);
                    if (n == 0) break;
                    got.insert(got.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
                }
            } catch (const parse_error& e) {
                threw = true;
                REQUIRE_FALSE(skip);
                REQUIRE_FALSE(bad_lines.empty());
                REQUIRE(e.line() == bad_lines.front());
            }
            REQUIRE(threw == (!skip && !bad_lines.empty()));
            // Strict: every good row before the first bad one, none lost with the error.
            std::size_t expected_rows = good.size();
            if (!skip && !bad_lines.empty())
                expected_rows = static_cast<std::size_t>(std::count_if(
                    good_lines.begin(), good_lines.end(), [&](std::size_t l) { return l < bad_lines.front(); }));
            REQUIRE(got.size() == expected_rows);
            for (std::size_t i = 0; i < got.size(); ++i) {
                INFO("row " << i);
                REQUIRE(got[i].time == good[i].time);
                REQUIRE(got[i].obj_id == good[i].obj_id);
                REQUIRE(got[i].obj_size == good[i].obj_size);
            }
            if (skip) REQUIRE(reader.bad_lines().count == bad_lines.size());
        }
    }
}

TEST_CASE("mooncake reader: what parse_mooncake_line makes of each line, through any buffer split", "[sim][trace]") {
    const testing::scratch_dir dir;  // this test's files, removed at its end
    // The reader scans hash ids with no end check (the byte after a line is
    // never a digit); parse_mooncake_line checks every byte. Random lines,
    // good and truncated or corrupted at random points (often in the middle
    // of a number, at the very end of the file), must get the same verdicts
    // and records from both.
    std::mt19937_64 rng(7);
    for (int file = 0; file < 60; ++file) {
        std::vector<std::string> lines;
        for (int l = 0, n = 1 + static_cast<int>(rng() % 30); l < n; ++l) {
            std::string line = "{\"timestamp\": " + std::to_string(rng() % 100000) + ", \"input_length\": 64, " +
                               "\"output_length\": 1, \"hash_ids\": [";
            for (int i = 0, ids = static_cast<int>(rng() % 50); i < ids; ++i)
                line += (i ? (rng() % 3 ? ", " : ",") : "") + std::to_string(rng() % 4 ? rng() % 100000 : rng());
            line += "]}";
            if (rng() % 5 == 0) line.resize(rng() % line.size());                                 // truncated
            if (rng() % 8 == 0 && !line.empty()) line[rng() % line.size()] = "x9 ,]"[rng() % 5];  // corrupted
            lines.push_back(line);
        }
        std::string body;
        for (const std::string& l : lines) body += l + "\n";
        if (rng() % 2) body.pop_back();  // the last line without its newline
        const std::string path = temp_file(dir, "split.jsonl", body);
        const std::size_t buffer = 2 + rng() % 300;
        INFO("file " << file << " buffer " << buffer);
        mooncake_reader reader(path, true, buffer);
        std::vector<request_record> expected;
        std::size_t bad = 0;
        for (std::size_t i = 0; i < lines.size(); ++i) {
            if (lines[i].find_first_not_of(" \t") == std::string::npos) continue;
            request_record r;
            if (parse_mooncake_line(lines[i], r).empty()) {
                r.line = i + 1;
                expected.push_back(r);
            } else {
                ++bad;
            }
        }
        std::vector<request_record> got;
        for (request_record r; reader.next(r);) got.push_back(r);
        REQUIRE(got.size() == expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            REQUIRE(got[i].line == expected[i].line);
            REQUIRE(got[i].timestamp_ms == expected[i].timestamp_ms);
            REQUIRE(got[i].hash_ids == expected[i].hash_ids);
        }
        REQUIRE(reader.bad_lines().count == bad);
    }
}

TEST_CASE("the built-in workload: seeded, a prefix forest, the configured means", "[sim][workload]") {
    chat_workload_config cfg;
    cfg.sessions = 400;
    const auto a = generate_chat_workload(cfg);
    const auto b = generate_chat_workload(cfg);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].hash_ids == b[i].hash_ids);
    cfg.seed = 2;
    REQUIRE(generate_chat_workload(cfg).front().hash_ids != a.front().hash_ids);

    // Equal ids mean equal prefixes: every id has one predecessor everywhere.
    std::map<std::uint64_t, std::uint64_t> parent;
    double prompt_plus_answer = 0;
    std::size_t turns = 0;
    std::uint64_t prev_ts = 0;
    std::map<std::uint64_t, std::uint64_t> last_history;
    for (const request_record& r : a) {
        REQUIRE(r.timestamp_ms >= prev_ts);
        prev_ts = r.timestamp_ms;
        REQUIRE(r.hash_ids.size() == r.input_length / 16);
        for (std::size_t i = 0; i < r.hash_ids.size(); ++i) {
            const std::uint64_t p = i == 0 ? ~0ULL : r.hash_ids[i - 1];
            auto [it, fresh] = parent.emplace(r.hash_ids[i], p);
            REQUIRE(it->second == p);
        }
        // A turn's input grows from the session's previous input and answer.
        if (auto it = last_history.find(r.session); it != last_history.end()) {
            REQUIRE(r.input_length > it->second);
            prompt_plus_answer += static_cast<double>(r.input_length - it->second);
            ++turns;
        }
        last_history[r.session] = r.input_length;
    }
    // Mean prompt + answer per later turn is about 161 + 338 tokens.
    REQUIRE(turns > 500);
    REQUIRE(prompt_plus_answer / static_cast<double>(turns) == Approx(161.31 + 337.99).epsilon(0.15));
    REQUIRE_THROWS_WITH(generate_chat_workload({.sessions = 0}), "workload: sessions must be at least 1");
}
