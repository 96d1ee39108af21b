#!/usr/bin/env python3
"""Miss counts of libCacheSim's policies on a block-access CSV.

The established simulator kvpolicy's flat mode must agree with: its numbers
are written to tests/data/libcachesim_miss_counts.csv and the simulator's
tests compare against them. Regenerate with

    pip install libcachesim==0.3.5
    scripts/reference-miss-ratios.py ../shared/traces/mooncake/synthetic_blocks.csv 1000,10000 > out.csv

Every object has size 1 (the CSVs' obj_size), so capacities count blocks.
"""
import csv
import sys

import libcachesim as lcs

POLICIES = {
    "lru": lcs.LRU, "fifo": lcs.FIFO, "lfu": lcs.LFU, "clock": lcs.Clock, "sieve": lcs.Sieve,
    "arc": lcs.ARC, "s3fifo": lcs.S3FIFO, "belady": lcs.Belady,
}


def main() -> None:
    path, capacities = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
    keys = []
    with open(path, newline="") as f:
        rows = csv.reader(f)
        next(rows)  # header time,obj_id,obj_size
        keys = [int(r[1]) for r in rows]
    # next access index (1-based logical time) for Belady, -1 = never
    nxt, seen = [-1] * len(keys), {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = seen.get(keys[i], -1)
        seen[keys[i]] = i + 1
    name = path.rsplit("/", 1)[-1]
    print("trace,policy,capacity,accesses,misses")
    for policy, make in POLICIES.items():
        for capacity in capacities:
            cache = make(capacity)
            misses = 0
            for i, k in enumerate(keys):
                r = lcs.Request()
                r.obj_id, r.obj_size, r.clock_time = k, 1, i + 1
                r.next_access_vtime = nxt[i] if nxt[i] >= 0 else 2**62
                if not cache.get(r):
                    misses += 1
            print(f"{name},{policy},{capacity},{len(keys)},{misses}", flush=True)


if __name__ == "__main__":
    main()
