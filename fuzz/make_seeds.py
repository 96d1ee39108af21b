#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz harnesses (fuzz/corpus/<harness>/).

The seeds are small (a few KB): libFuzzer grows its working corpus from them in
build/fuzz/. trace_parsers' seeds are slices of the real traces in
../shared/traces (a few lines each, long hash_ids arrays cut short; never whole
traces) plus hand-written bad lines; cache_ops' and select_victims' are bytes
from a fixed-seed generator behind each first byte (the composition or the
rule), so that every branch of the first choice starts covered; redis_replies'
are hand-written server replies, good and hostile.

Run from the repository root: python3 fuzz/make_seeds.py
Each harness decodes its input as its header comment says; the layouts here
must follow those comments.
"""
import gzip
import os
import random
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.path.join(ROOT, "..", "shared", "traces")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(harness, name, data):
    path = os.path.join(CORPUS, harness, name)
    with open(path, "wb") as f:
        f.write(data)


def trace_input(text, mooncake, gzipped=False, way=0, across_refill=False, batch_seed=7, small_buffer=5, shift=3):
    """trace_parsers' layout: mode byte, batch seed, small buffer size - 1, [shift], text."""
    mode = (1 if mooncake else 0) | (2 if gzipped else 0) | (12 if across_refill else 0) | (way << 4)
    head = bytes([mode, batch_seed, small_buffer - 1]) + (bytes([shift]) if across_refill else b"")
    return head + text


def cut_hash_ids(line, keep):
    """A real request line with its hash_ids array cut to `keep` entries."""
    start = line.index("[") + 1
    end = line.index("]")
    ids = line[start:end].split(",")
    return line[:start] + ",".join(ids[:keep]) + line[end:]


def trace_seeds():
    harness = "trace_parsers"
    with open(os.path.join(TRACES, "mooncake", "conversation_trace.jsonl")) as f:
        conversation = [next(f).rstrip("\n") for _ in range(40)]
    with open(os.path.join(TRACES, "mooncake", "synthetic_trace.jsonl")) as f:
        synthetic = [next(f).rstrip("\n") for _ in range(40)]
    with gzip.open(os.path.join(TRACES, "agentic", "agentic_mix.jsonl.gz"), "rt") as f:
        agentic = [cut_hash_ids(next(f).rstrip("\n"), 40) for _ in range(8)]
    with open(os.path.join(TRACES, "mooncake", "conversation_blocks.csv")) as f:
        conv_csv = [next(f).rstrip("\n") for _ in range(200)]
    with open(os.path.join(TRACES, "mooncake", "synthetic_blocks.csv")) as f:
        syn_csv = [next(f).rstrip("\n") for _ in range(200)]

    def lines(ls):
        return ("\n".join(ls) + "\n").encode()

    # Real slices, every way of reading, plain and gzip.
    for way in range(4):
        write(harness, f"mooncake_conversation_way{way}", trace_input(lines(conversation[way * 6:way * 6 + 6]), True, way=way))
        write(harness, f"mooncake_synthetic_gz_way{way}", trace_input(lines(synthetic[way * 5:way * 5 + 5]), True, True, way))
        write(harness, f"csv_conversation_way{way}", trace_input(lines(conv_csv[:1] + conv_csv[1 + way * 40:41 + way * 40]), False, way=way))
        write(harness, f"csv_synthetic_gz_way{way}", trace_input(lines(syn_csv[:1] + syn_csv[1 + way * 30:31 + way * 30]), False, True, way))
    write(harness, "mooncake_agentic_sessions", trace_input(lines(agentic[:4]), True, way=1))
    write(harness, "mooncake_agentic_gz", trace_input(lines(agentic[4:]), True, True, way=0))
    write(harness, "mooncake_crlf_no_final_newline", trace_input("\r\n".join(conversation[30:34]).encode(), True, way=0))
    write(harness, "csv_crlf_no_final_newline", trace_input("\r\n".join(conv_csv[:20]).encode(), False, way=2, batch_seed=3))
    # Across the readers' first 1 MiB refill (run by the replay build only).
    write(harness, "csv_across_refill", trace_input(lines(conv_csv[1:30]), False, way=0, across_refill=True, shift=9))
    write(harness, "csv_across_refill_batches", trace_input(lines(conv_csv[30:60]), False, way=2, across_refill=True, shift=200))
    write(harness, "mooncake_across_refill", trace_input(lines(conversation[:6]), True, way=1, across_refill=True, shift=40))

    # Hand-written bad input: each row or line a different malformation,
    # between good ones, so skipping, strict and the messages all matter.
    bad_csv = [
        "time,obj_id,obj_size",
        "1,2,3",
        "",
        " 4 ,\t5, 6 ",
        "1,2",
        "1,2,3,4",
        "-1,2,3",
        "+1,2,3",
        "18446744073709551615,0,18446744073709551615",
        "18446744073709551616,0,0",
        "000000000000000000000000000007,8,9",
        "1,,3",
        "1 2,3,4",
        "7,8,9\r",
        "\t",
        "a,b,c",
        "10,11,12",
    ]
    write(harness, "csv_bad_rows_skipping", trace_input(lines(bad_csv), False, way=0))
    write(harness, "csv_bad_rows_strict", trace_input(lines(bad_csv[:4] + bad_csv[5:]), False, way=1))
    write(harness, "csv_bad_rows_batches", trace_input(lines(bad_csv), False, way=3, batch_seed=11))
    write(harness, "csv_no_header", trace_input(lines(bad_csv[1:]), False, way=0))
    write(harness, "csv_header_with_spaces", trace_input(b"time, obj_id, obj_size\n1,2,3\n", False, way=1))
    write(harness, "csv_nul_byte", trace_input(b"time,obj_id,obj_size\n1,2\x003\n4,5,6\n", False, way=0))
    write(harness, "csv_gzip_magic_plain", trace_input(b"\x1f\x8btime,obj_id,obj_size\n", False, way=0))
    good = '{"timestamp": 5, "input_length": 1024, "output_length": 7, "hash_ids": [4, 5, 6]}'
    bad_mooncake = [
        good,
        "",
        " \t ",
        '  { "session":3,"hash_ids":[] , "note": {"a": [1, "x\\"y"]}, "timestamp":0,"input_length":0,"output_length":0 } ',
        "[1, 2]",
        '{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": []}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, "2"]}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1,]}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": 5}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551615]}',
        '{"timestamp": 18446744073709551616, "input_length": 1, "output_length": 1, "hash_ids": []}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1], "hash_ids": [2]}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1]} trailing',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1], "x": "ends in a backslash\\',
        '{"timestamp" 1}',
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1], "deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
        good + "\r",
    ]
    write(harness, "mooncake_bad_lines_skipping", trace_input(lines(bad_mooncake), True, way=0))
    write(harness, "mooncake_bad_lines_strict", trace_input(lines(bad_mooncake), True, way=1))
    write(harness, "mooncake_bad_lines_gz", trace_input(lines(bad_mooncake), True, True, way=0))
    write(harness, "mooncake_one_line_no_newline", trace_input(good.encode(), True, way=1, small_buffer=1))
    write(harness, "empty_csv", trace_input(b"", False, way=0))
    write(harness, "empty_mooncake", trace_input(b"", True, way=1))


def random_seeds(harness, branches, per_branch, sizes, seed):
    rng = random.Random(seed)
    for branch in range(branches):
        for k in range(per_branch):
            size = sizes[k % len(sizes)]
            write(harness, f"branch{branch:02d}_{k}", bytes([branch]) + bytes(rng.randrange(256) for _ in range(size)))


def redis_seeds():
    """redis_replies' layout: mode byte (1: cluster, 2: twice), then what the fake
    server sends on each connection, separated by b"\n--\n"; PORT is its port."""
    harness = "redis_replies"
    ok4 = b"+OK\r\n" * 4
    nil4 = b"$-1\r\n" * 4
    slots = b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:PORT\r\n"
    value = b"$112\r\n" + b"KVPB" + bytes(108) + b"\r\n"  # the right length (48 + 64), a wrong header
    seeds = {
        "plain_sets_then_eof": (0, b"+PONG\r\n" + ok4),
        "plain_all_good_twice": (2, b"+PONG\r\n" + ok4 + nil4 + b":0\r\n" * 4 + b"\n--\n" + b"+PONG\r\n" + ok4),
        "plain_right_length_value": (0, b"+PONG\r\n" + ok4 + value * 4 + b":1\r\n" * 4),
        "plain_unclosed_value": (2, b"+PONG\r\n" + ok4 + value[:-2] + b"XY" + b"\n--\n+PONG\r\n" + ok4 + nil4),
        "plain_wrong_types": (2, b"+PONG\r\n:1\r\n$2\r\nOK\r\n\n--\n+PONG\r\n" + ok4 + b"*1\r\n:1\r\n+OK\r\n"),
        "plain_huge_counts": (0, b"+PONG\r\n*99999999999\r\n$1099511627776\r\n$-5\r\n"),
        "plain_nested": (0, b"+PONG\r\n" + b"*1\r\n" * 9 + b":1\r\n"),
        "cluster_good": (1, b"+PONG\r\n" + slots + ok4 + nil4 + b":0\r\n" * 4),
        "cluster_moved_no_host": (3, b"+PONG\r\n" + slots + b"-MOVED 10383 :PORT\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n"
                                  + b"\n--\n+PONG\r\n" + slots + ok4),
        "cluster_ask": (1, b"+PONG\r\n" + slots + b"-ASK 5 127.0.0.1:PORT\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n"),
        "cluster_bad_moved": (3, b"+PONG\r\n" + slots + b"-MOVED abc 127.0.0.1:72953\r\n" + b"\n--\n+PONG\r\n" + slots
                              + b"-MOVED 99999 1.2.3.4:7000\r\n"),
        "cluster_bad_slots": (1, b"+PONG\r\n*1\r\n*3\r\n:-1\r\n:100\r\n*2\r\n$9\r\n127.0.0.1\r\n:PORT\r\n"),
        "cluster_two_ranges_empty_host": (1, b"+PONG\r\n*2\r\n*3\r\n:0\r\n:8000\r\n*2\r\n$0\r\n\r\n:PORT\r\n"
                                          b"*3\r\n:8001\r\n:16383\r\n*2\r\n$1\r\n?\r\n:PORT\r\n" + ok4),
        "info_garbage": (0, b"$20\r\n# Memory\r\nmaxmemory:x\r\n"),
        "noauth": (0, b"-NOAUTH Authentication required.\r\n"),
    }
    for name, (mode, data) in seeds.items():
        write(harness, name, bytes([mode]) + data)


def main():
    for harness in ("trace_parsers", "cache_ops", "select_victims", "redis_replies"):
        d = os.path.join(CORPUS, harness)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    trace_seeds()
    # cache_ops: the first choice (of 16) picks the composition.
    random_seeds("cache_ops", 16, 2, [600, 2500], seed=9)
    # select_victims: the first choice (of 5) picks the rule.
    random_seeds("select_victims", 5, 6, [40, 300, 1200, 3000], seed=2)
    redis_seeds()


if __name__ == "__main__":
    main()
