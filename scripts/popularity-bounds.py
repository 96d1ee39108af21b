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
- session-return oracle (traces whose requests name a session): a block only
  one session has read is next used when that session makes its next
  request (the oracle knows exactly when each session comes back, the signal
  Continuum, an agent's tool-call time, and KVFlow, an agent's steps to its
  next turn, predict, but not which blocks that request reads); a block two
  sessions have read is next used when it is (Belady's knowledge: shared
  prefixes are not what this bound is about). Evicts the farthest next use
  first, ties LRU: session_aware_lru with a perfect predictor and no margin.

    scripts/popularity-bounds.py [--sim build/release/tools/kvpolicy-sim] [--oracles popularity,remaining,session]
                                 TRACE BLOCK_SIZE [TRACE BLOCK_SIZE ...]

Belady's figure is kvpolicy-sim's; LRU's is replayed here and must equal
kvpolicy-sim's to the fourth digit, so the oracles follow the same rules.
"""
import argparse, gzip, heapq, json, re, subprocess, sys
from collections import Counter, OrderedDict


def load(path):
    """The requests' block lists, and their sessions (None where the trace names none)."""
    requests, sessions = [], []
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            requests.append(r["hash_ids"])
            sessions.append(r.get("session"))
    return requests, (sessions if all(s is not None for s in sessions) else None)


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


def replay_by_session(requests, sessions, capacity, back, later):
    """Prefix-mode hit ratio when a session's own blocks (read by no other session) are all next used at the
    session's next request (back[i] after its latest request i; inf: never) and other blocks at their own
    next use (later[i][pos]). Evicts the farthest next use first: a session's own blocks, released first
    first; ties by release order. Unlike replay(), a session's blocks change key at each of its requests."""
    cached = {}  # block -> None (held), ("own", session) or ("shared", key, seq)
    own, due, owner, shared = {}, {}, {}, set()  # session -> OrderedDict(block -> release seq); session -> next request
    heap, seq, hits, accesses = [], 0, 0, 0  # heap: (key, seq, 0, session) for a session's first block, (key, seq, 1, block)

    def file_session(x):  # a fresh entry for the session's current key and first block
        if own.get(x):
            heapq.heappush(heap, (-due[x], next(iter(own[x].values())), 0, x))

    for i, h in enumerate(requests):
        accesses += len(h)
        if len(h) > capacity:
            continue
        s = sessions[i]
        run = 0
        while run < len(h) and h[run] in cached:
            run += 1
        hits += run
        need = sum(1 for b in h if b not in cached)
        touched = {s}
        for b in h:
            if b in cached:
                st = cached[b]
                if st is not None and st[0] == "own":
                    del own[st[1]][b]
                    touched.add(st[1])
                cached[b] = None  # held
        due[s] = back[i]
        for x in touched:
            file_session(x)
        while capacity - len(cached) < need:
            key, fs, kind, x = heapq.heappop(heap)
            if kind == 0:
                o = own.get(x)
                if not o or -due[x] != key or next(iter(o.values())) != fs:
                    continue  # stale: the session's key or first block changed since
                del cached[o.popitem(last=False)[0]]
                file_session(x)
            elif cached.get(x, 0) == ("shared", key, fs):
                del cached[x]
        for pos in range(len(h) - 1, -1, -1):  # released tail first
            b = h[pos]
            if owner.setdefault(b, s) != s:
                shared.add(b)
            if b in shared:
                cached[b] = ("shared", -later[i][pos], seq)
                heapq.heappush(heap, (-later[i][pos], seq, 1, b))
            else:
                cached[b] = ("own", s)
                own.setdefault(s, OrderedDict())[b] = seq
            seq += 1
        file_session(s)
        if len(heap) > 4 * capacity + 1024:  # drop stale entries
            heap = [(v[1], v[2], 1, b) for b, v in cached.items() if v is not None and v[0] == "shared"]
            heap += [(-due[x], next(iter(o.values())), 0, x) for x, o in own.items() if o]
            heapq.heapify(heap)
    return hits / accesses


def bounds(requests, sessions, capacity, oracles):
    out = {"lru": replay(requests, capacity, lambda i, pos, b: i)}
    if "popularity" in oracles:
        total = Counter(b for h in requests for b in h)
        out["popularity"] = replay(requests, capacity, lambda i, pos, b: (total[b], i))
    if "remaining" in oracles:
        left, remaining = Counter(b for h in requests for b in h), []
        for h in requests:  # uses still to come after each request
            for b in h:
                left[b] -= 1
            remaining.append([left[b] for b in h])
        out["remaining"] = replay(requests, capacity, lambda i, pos, b: (remaining[i][pos], i))
    if "session" in oracles and sessions is not None:
        back, seen = [0] * len(requests), {}
        for i in range(len(requests) - 1, -1, -1):  # each request's session's next request served cached
            back[i] = seen.get(sessions[i], float("inf"))
            if len(requests[i]) <= capacity:
                seen[sessions[i]] = i
        later, seen = [None] * len(requests), {}
        for i in range(len(requests) - 1, -1, -1):  # each access's next use (requests served uncached are none)
            h = requests[i]
            later[i] = [seen.get(b, float("inf")) for b in h]
            if len(h) <= capacity:
                for b in h:
                    seen[b] = i
        out["session"] = replay_by_session(requests, sessions, capacity, back, later)
    return out


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
    ap.add_argument("--oracles", default="popularity,remaining,session",
                    help="comma-separated: popularity, remaining, session")
    ap.add_argument("args", nargs="+", help="TRACE BLOCK_SIZE pairs")
    a = ap.parse_args()
    if len(a.args) % 2:
        sys.exit("popularity-bounds.py: give TRACE BLOCK_SIZE pairs")
    oracles = [o for o in a.oracles.split(",") if o]
    names = {"popularity": "popularity oracle", "remaining": "remaining-uses oracle", "session": "session-return oracle"}
    if not oracles or any(o not in names for o in oracles):
        sys.exit(f"popularity-bounds.py: --oracles {a.oracles!r}: name some of {', '.join(names)}")
    print("| trace | capacity | LRU | Belady | " + " | ".join(names[o] for o in oracles) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(oracles))
    for trace, block_size in zip(a.args[::2], a.args[1::2]):
        requests, sessions = load(trace)
        distinct = len({b for h in requests for b in h})
        capacities = [distinct // 100, distinct // 20, distinct // 10]
        sim = sim_ratios(a.sim, trace, int(block_size), capacities)
        for c in capacities:
            r = bounds(requests, sessions, c, oracles)
            if abs(r["lru"] - sim[("lru", c)]) > 5e-5:  # the same rules as kvpolicy-sim, to the table's 4 digits
                sys.exit(f"popularity-bounds.py: lru at {c}: {r['lru']:.4f} here, {sim[('lru', c)]:.4f} in kvpolicy-sim")
            r["belady"] = sim[("belady", c)]
            gap = r["belady"] - r["lru"]
            share = lambda p: f"{r[p]:.4f} ({100 * (r[p] - r['lru']) / gap:+.0f}%)" if p in r else "-"
            print(f"| {trace.split('/')[-1]} | {c} | {r['lru']:.4f} | {r['belady']:.4f} | " +
                  " | ".join(share(o) for o in oracles) + " |", flush=True)


if __name__ == "__main__":
    main()
