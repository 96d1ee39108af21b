#!/usr/bin/env python3
"""How much of the LRU -> Belady gap knowing each block's popularity closes.

README "Which policy" asks whether any online policy could close half of the
gap on the traces in ../shared/traces. This replays a trace in kvpolicy-sim's
prefix mode (requests one at a time, a hit up to the first miss, a request's
blocks held while it runs, released tail first; a request longer than the
capacity served uncached) with two policies that read the future, each an
upper bound for a family of online policies:

- popularity oracle: evicts the block with the fewest uses in the whole
  trace (ties: LRU). It knows, from a block's first use, how popular it is:
  what every frequency-based online policy (LFU, LRFU, TinyLFU, learned
  popularity) can only estimate from the uses seen so far.
- remaining-uses oracle: evicts the block with the fewest uses still to come
  (ties: LRU), i.e. a perfect popularity estimate that also knows when a
  block's popularity ends.

It also replays LRU and Belady and checks them against kvpolicy-sim's, so
the bounds are measured by the same rules as the README's tables.

    scripts/popularity-bounds.py [--sim build/release/tools/kvpolicy-sim] TRACE BLOCK_SIZE [TRACE BLOCK_SIZE ...]
"""
import argparse, gzip, heapq, json, re, subprocess, sys
from collections import Counter


def load(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return [json.loads(line)["hash_ids"] for line in f]


def replay(requests, capacity, priority):
    """Prefix-mode hit ratio; priority(i, pos, block) -> key, lowest evicted first, ties by release order."""
    cached, heap, seq, hits, accesses = {}, [], 0, 0, 0
    for i, h in enumerate(requests):
        accesses += len(h)
        if len(h) > capacity:
            continue
        run = 0
        while run < len(h) and h[run] in cached:
            run += 1
        hits += run
        need = sum(1 for b in h if b not in cached)
        for b in h:
            if b in cached:
                cached[b] = None  # held
        while capacity - len(cached) < need:
            p, s, b = heapq.heappop(heap)
            if cached.get(b, 0) == (p, s):
                del cached[b]
        for b in h:
            cached.setdefault(b, None)
        for pos in range(len(h) - 1, -1, -1):  # released tail first
            p = priority(i, pos, h[pos])
            cached[h[pos]] = (p, seq)
            heapq.heappush(heap, (p, seq, h[pos]))
            seq += 1
        if len(heap) > 4 * capacity + 1024:  # drop stale entries
            heap = [(v[0], v[1], b) for b, v in cached.items() if v is not None]
            heapq.heapify(heap)
    return hits / accesses


def bounds(requests, capacity):
    total = Counter(b for h in requests for b in h)
    later, seen, left = [], {}, Counter(total)
    for i in range(len(requests) - 1, -1, -1):  # next use of each access (uncached requests are no use)
        h = requests[i]
        later.append([seen.get(b, float("inf")) for b in h])
        if len(h) <= capacity:
            for b in h:
                seen[b] = i
    later.reverse()
    remaining = []
    for h in requests:  # uses still to come after each request
        for b in h:
            left[b] -= 1
        remaining.append([left[b] for b in h])
    return {
        "lru": replay(requests, capacity, lambda i, pos, b: i),
        "belady": replay(requests, capacity, lambda i, pos, b: -later[i][pos]),
        "popularity": replay(requests, capacity, lambda i, pos, b: (total[b], i)),
        "remaining": replay(requests, capacity, lambda i, pos, b: (remaining[i][pos], i)),
    }


def sim_ratios(sim, trace, block_size, capacities):
    out = subprocess.run([sim, "--trace", trace, "--mode", "prefix", "--block-size", str(block_size), "--policy",
                          "lru,belady", "--capacity", ",".join(map(str, capacities))],
                         check=True, capture_output=True, text=True).stdout
    ratios, cap = {}, None
    for line in out.splitlines():
        if m := re.match(r"capacity (\d+) blocks", line):
            cap = int(m.group(1))
        elif m := re.match(r"\s+\d+\s+(lru|belady)\s+([0-9.]+)", line):
            ratios[(m.group(1), cap)] = float(m.group(2))
    return ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="build/release/tools/kvpolicy-sim")
    ap.add_argument("args", nargs="+", help="TRACE BLOCK_SIZE pairs")
    a = ap.parse_args()
    if len(a.args) % 2:
        sys.exit("popularity-bounds.py: give TRACE BLOCK_SIZE pairs")
    print("| trace | capacity | LRU | Belady | popularity oracle | remaining-uses oracle |")
    print("|---|---:|---:|---:|---:|---:|")
    for trace, block_size in zip(a.args[::2], a.args[1::2]):
        requests = load(trace)
        distinct = len({b for h in requests for b in h})
        capacities = [distinct // 100, distinct // 20, distinct // 10]
        check = sim_ratios(a.sim, trace, int(block_size), capacities)
        for c in capacities:
            r = bounds(requests, c)
            for p in ("lru", "belady"):  # the same rules as kvpolicy-sim, to the table's 4 digits
                if abs(r[p] - check[(p, c)]) > 5e-5:
                    sys.exit(f"popularity-bounds.py: {p} at {c}: {r[p]:.4f} here, {check[(p, c)]:.4f} in kvpolicy-sim")
            gap = r["belady"] - r["lru"]
            share = lambda p: f"{r[p]:.4f} ({100 * (r[p] - r['lru']) / gap:+.0f}%)"
            print(f"| {trace.split('/')[-1]} | {c} | {r['lru']:.4f} | {r['belady']:.4f} | {share('popularity')} | "
                  f"{share('remaining')} |", flush=True)


if __name__ == "__main__":
    main()
