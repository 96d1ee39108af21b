#!/usr/bin/env python3
"""kvpolicy's policies inside LMCache 0.5.6's MP-mode eviction and SGLang 0.5.10.post1's radix eviction.

Both peers' code comes from their pinned sdists (python/tests/peers/sources.py),
as in the tests. The agentic trace (../shared/traces/agentic/agentic_mix.jsonl.gz,
read in place) is replayed one request at a time, a block per 64 tokens.

LMCache (the L1 controller's calls on its EvictionPolicy): a request's
resident prefix is touched (``on_keys_touched``), its missing blocks are
created (``on_keys_created``), and while more blocks are resident than the
capacity, ``get_eviction_actions(ratio)`` is asked for the excess and its
victims removed (``on_keys_removed``). Figures, ns per key event (a key
passed to any of the four calls), process CPU time, best of --runs:

- *policy*: the calls the replay with LMCache's LRU made, replayed against a
  fresh LMCache LRU and a fresh kvpolicy ``lru`` (their victims asserted
  equal), the loop timed less the same loop over a policy that does nothing;
- *total*: the whole replay with the policy (the harness's residency set
  included); every other policy's policy cost is its total less the
  harness's (LMCache LRU's total less its policy time).

SGLang (``RadixCache.evict``'s loop): one radix node per block; a request
walks its path, stamping hits (``last_access_time``, ``hit_count``) and
adding missing nodes; while more nodes than the capacity are cached, the
evictable leaves are heaped by ``strategy.get_priority`` and popped, a parent
pushed once it becomes a leaf. Figures, ns per block access of the whole
replay, and the eviction loop's ns per victim, with SGLang's own
``LRUStrategy`` and each kvpolicy strategy.

    python3 bench/python/lmcache_sglang_bench.py [--requests N] [--capacity-share F] [--runs R]
"""

import argparse
import gzip
import heapq
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python" / "tests" / "peers"))

from peers.sources import LMCACHE_0_5_6, SGLANG_0_5_10_POST1, extract, scratch_dir  # noqa: E402

LMCACHE_POLICIES = ["lru", "fifo", "clock", "sieve", "s3fifo", "arc", "two_q", "lfu", "slru", "w_tinylfu", "lirs",
                    "gdsf", "lrfu", "tail_aware_lru", "session_aware_lru", "superseded_lru", "adaptive_kv"]


def load_requests(path, n):
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            out.append(json.loads(line)["hash_ids"])
            if len(out) == n:
                break
    return out


# --- LMCache ---------------------------------------------------------------------

class Recorder:
    def __init__(self, inner):
        self.inner = inner
        self.log = []

    def on_keys_touched(self, keys):
        self.log.append(("on_keys_touched", list(keys)))
        self.inner.on_keys_touched(keys)

    def on_keys_created(self, keys):
        self.log.append(("on_keys_created", list(keys)))
        self.inner.on_keys_created(keys)

    def on_keys_removed(self, keys):
        self.log.append(("on_keys_removed", list(keys)))
        self.inner.on_keys_removed(keys)

    def get_eviction_actions(self, ratio, flt=None, salt=None):
        self.log.append(("get_eviction_actions", ratio))
        return self.inner.get_eviction_actions(ratio, flt, salt)


class NullPolicy:
    def on_keys_touched(self, keys): pass
    def on_keys_created(self, keys): pass
    def on_keys_removed(self, keys): pass
    def get_eviction_actions(self, ratio, flt=None, salt=None): return []


def lmcache_replay(policy, requests, capacity):
    resident = set()
    events = 0
    for keys in requests:
        hit = 0
        for k in keys:
            if k not in resident:
                break
            hit += 1
        if hit:
            policy.on_keys_touched(keys[:hit])
        new = [k for k in keys[hit:] if k not in resident]
        new = list(dict.fromkeys(new))
        if new:
            policy.on_keys_created(new)
            resident.update(new)
        events += hit + len(new)
        while len(resident) > capacity:
            actions = policy.get_eviction_actions((len(resident) - capacity) / len(resident))
            victims = [k for a in actions for k in a.keys]
            if not victims:
                break
            policy.on_keys_removed(victims)
            resident.difference_update(victims)
            events += 2 * len(victims)
    return events


def replay_log(log, policy):
    steps = [(getattr(policy, name), arg) for name, arg in log]
    evicted = []
    clock = time.process_time_ns
    t0 = clock()
    for fn, arg in steps:
        r = fn(arg)
        if r:
            evicted.append(r)
    t = clock() - t0
    return t, [k for actions in evicted for a in actions for k in a.keys]


def bench_lmcache(requests_ids, share, runs, policies):
    src = extract(LMCACHE_0_5_6, scratch_dir("lmcache-"), ("lmcache/",))
    import lmcache_stubs

    lmcache_stubs.install(str(src))
    import logging

    logging.getLogger("lmcache").setLevel(logging.ERROR)
    from lmcache.v1.distributed.api import ObjectKey
    from lmcache.v1.distributed.eviction_policy import LRUEvictionPolicy

    import kvpolicy.lmcache as kl

    made = {}
    requests = [[made.setdefault(i, None) or made.__setitem__(i, ObjectKey(
        chunk_hash=ObjectKey.IntHash2Bytes(i), model_name="m", kv_rank=0)) or made[i] for i in ids]
        for ids in requests_ids]
    distinct = len(made)
    capacity = max(1, int(distinct * share))

    rec = Recorder(LRUEvictionPolicy())
    events = lmcache_replay(rec, requests, capacity)

    def policy_time(make):
        return min((replay_log(rec.log, make()) for _ in range(runs)), key=lambda r: r[0])

    null_t, _ = policy_time(NullPolicy)
    theirs_t, theirs_v = policy_time(LRUEvictionPolicy)
    ours_t, ours_v = policy_time(lambda: kl.eviction_policy("lru"))
    assert theirs_v == ours_v, "kvpolicy lru and LMCache's LRU chose different victims"

    def total(make):
        best_t = None
        for _ in range(runs):
            p = make()
            t0 = time.process_time_ns()
            lmcache_replay(p, requests, capacity)
            t = time.process_time_ns() - t0
            best_t = t if best_t is None else min(best_t, t)
        return best_t

    lru_total = total(LRUEvictionPolicy)
    harness = lru_total - (theirs_t - null_t)
    print(f"LMCache 0.5.6 MP eviction: {len(requests)} requests, {distinct} distinct blocks, capacity {capacity}, "
          f"{events} key events (LMCache LRU's replay)")
    print(f"  policy alone, ns/key event: LMCache LRU {(theirs_t - null_t) / events:.0f}, "
          f"kvpolicy lru {(ours_t - null_t) / events:.0f} (same victims)  "
          f"ratio {(theirs_t - null_t) / (ours_t - null_t):.2f}x")
    print(f"  harness (residency set, loop): {harness / events:.0f} ns/key event")
    print(f"  {'policy':<22} {'total ns/event':>15} {'policy ns/event':>16}")
    print(f"  {'LMCache LRU':<22} {lru_total / events:>15.0f} {(lru_total - harness) / events:>16.0f}")
    for name in policies:
        t = total(lambda: kl.eviction_policy(name))
        print(f"  {'kvpolicy ' + name:<22} {t / events:>15.0f} {(t - harness) / events:>16.0f}")


# --- SGLang ------------------------------------------------------------------------

class Node:
    __slots__ = ("parent", "children", "key", "last_access_time", "creation_time", "hit_count", "priority",
                 "lock_ref", "__weakref__")

    def __init__(self, parent, t):
        self.parent = parent
        self.children = {}
        self.key = (0,) * 64
        self.last_access_time = t
        self.creation_time = t
        self.hit_count = 0
        self.priority = 0
        self.lock_ref = 0

    def __lt__(self, other):
        return self.last_access_time < other.last_access_time


def sglang_replay(strategy, requests, capacity):
    root = Node(None, 0.0)
    size = 0
    leaves = set()
    evict_ns = 0
    victims = 0
    accesses = 0
    clock = time.process_time_ns
    t = 0.0
    for ids in requests:
        t += 1.0
        node = root
        for i in ids:
            accesses += 1
            child = node.children.get(i)
            if child is None:
                child = Node(node, t)
                node.children[i] = child
                leaves.discard(node)
                leaves.add(child)
                size += 1
            child.last_access_time = t
            child.hit_count += 1
            node = child
        if size > capacity:
            t0 = clock()
            need = size - capacity
            heap = [(strategy.get_priority(n), n) for n in leaves]
            heapq.heapify(heap)
            while need > 0 and heap:
                _, x = heapq.heappop(heap)
                p = x.parent
                del p.children[next(k for k, v in p.children.items() if v is x)]
                leaves.discard(x)
                size -= 1
                need -= 1
                victims += 1
                if p is not root and not p.children:
                    leaves.add(p)
                    heapq.heappush(heap, (strategy.get_priority(p), p))
            evict_ns += clock() - t0
    return accesses, victims, evict_ns


def bench_sglang(requests, share, runs):
    src = extract(SGLANG_0_5_10_POST1, scratch_dir("sglang-"),
                  ("sglang/srt/mem_cache/evict_policy.py",))
    import sglang_stubs

    sglang_stubs.install(str(src))
    from sglang.srt.mem_cache.evict_policy import LRUStrategy

    import kvpolicy.sglang as ks

    distinct = len({i for ids in requests for i in ids})
    capacity = max(1, int(distinct * share))
    rows = [("SGLang LRUStrategy", LRUStrategy)] + [(n, lambda n=n: ks.strategy(n)) for n in ks.policy_names()]
    print(f"SGLang 0.5.10.post1 radix eviction: {len(requests)} requests, capacity {capacity} nodes (blocks)")
    print(f"  {'strategy':<26} {'total ns/access':>16} {'evict ns/victim':>16} {'victims':>8}")
    base = None
    for name, make in rows:
        best_total = best_evict = None
        for _ in range(runs):
            s = make()
            t0 = time.process_time_ns()
            accesses, victims, evict_ns = sglang_replay(s, requests, capacity)
            total = time.process_time_ns() - t0
            best_total = total if best_total is None else min(best_total, total)
            best_evict = evict_ns if best_evict is None else min(best_evict, evict_ns)
        if base is None:
            base = best_evict
        print(f"  {name:<26} {best_total / accesses:>16.0f} {best_evict / max(victims, 1):>16.0f} {victims:>8}"
              f"   evict time {best_evict / base:.2f}x SGLang LRU's")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(REPO.parent / "shared/traces/agentic/agentic_mix.jsonl.gz"))
    ap.add_argument("--requests", type=int, default=400, help="first N requests of the trace")
    ap.add_argument("--capacity-share", type=float, default=0.1, help="capacity as a share of the distinct blocks")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policies", default=",".join(LMCACHE_POLICIES), help="kvpolicy policies for LMCache's table")
    ap.add_argument("--only", choices=["lmcache", "sglang"], default=None)
    a = ap.parse_args()
    requests = load_requests(a.trace, a.requests)
    if a.only != "sglang":
        bench_lmcache(requests, a.capacity_share, a.runs, [p for p in a.policies.split(",") if p])
    if a.only != "lmcache":
        bench_sglang(requests, a.capacity_share, a.runs)


if __name__ == "__main__":
    main()
