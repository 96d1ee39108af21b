#!/usr/bin/env python3
"""Derive the block-access CSV of a Mooncake-format trace (.jsonl or .jsonl.gz).

The same derivation as ../shared/traces/mooncake/*_blocks.csv: header
`time,obj_id,obj_size`, one row per hash id in request order, time =
timestamp_ms // 1000, obj_size = 1. Used by the simulator's benchmark to make
the agentic trace's CSV form (written under build/, never committed):

    scripts/mooncake-to-csv.py ../shared/traces/agentic/agentic_mix.jsonl.gz build/agentic_blocks.csv
"""
import gzip
import json
import sys


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f, open(dst, "w") as out:
        out.write("time,obj_id,obj_size\n")
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            t = r["timestamp"] // 1000
            out.write("".join(f"{t},{h},1\n" for h in r["hash_ids"]))


if __name__ == "__main__":
    main()
