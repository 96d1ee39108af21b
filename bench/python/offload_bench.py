#!/usr/bin/env python3
"""kvpolicy.vllm.OffloadingManager against a pure-Python OrderedDict manager.

Replays the agentic trace (../shared/traces/agentic/agentic_mix.jsonl.gz) the
way vLLM's offloading connector drives its scheduler-side manager, one
request at a time:

    hit = lookup(hashes); touch(hashes)
    prepare_load(hashes[:hit]); complete_load(hashes[:hit])
    out = prepare_store(hashes[hit:]); complete_store(out.block_hashes_to_store)

through (a) `OrderedDictManager` below, written the way engines write it
(vLLM's LRU offloading manager keeps an OrderedDict of block statuses with
reference counts, and never evicts a block of prepare_store's own input),
and (b) kvpolicy.vllm.OffloadingManager(policy="vllm_lru"), vLLM's LRU's
exact decisions,
called with Python lists of int hashes and then with NumPy uint64 arrays
(the batch path: read in place). Then both again with vLLM's own hash type:
each block hash a 32-byte bytes object (a sha256 digest of the trace's id,
as vLLM V1's BlockHash is), every request holding its own objects, as each
vLLM request hashes its own blocks. Every lookup result, every list of
blocks to store and every list of evicted blocks is asserted equal between
(a) and (b), so the timings compare the same decisions. Figures: ns per
block (the replay's process CPU time over the blocks of all requests), best
of --runs; NumPy's BLAS threads are kept to one, so that none spins in the
process's CPU time.

With --cache-step-bench PATH it also runs the C++ cache's own bench
(bench/cache_step_bench.cpp) and prints the ratio of our batch ns/block to
its kvpolicy ns/block.

    python3 bench/python/offload_bench.py [--requests N] [--blocks B] [--runs R]
        [--trace FILE] [--cache-step-bench build/release/bench/cache_step_bench] [--breakdown]
"""

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import time
from collections import OrderedDict
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy loads its BLAS

import numpy as np  # noqa: E402

from kvpolicy.vllm import OffloadingManager


class BlockStatus:
    __slots__ = ("slot", "ref_cnt")

    def __init__(self, slot):
        self.slot = slot
        self.ref_cnt = -1  # -1: being stored; 0: ready; > 0: loads in flight

    @property
    def is_ready(self):
        return self.ref_cnt >= 0


class OrderedDictManager:
    """The pure-Python baseline: an OrderedDict in LRU order, free slots in a list."""

    def __init__(self, num_blocks):
        self.blocks = OrderedDict()
        self.free = list(range(num_blocks - 1, -1, -1))

    def lookup(self, block_hashes):
        n = 0
        for h in block_hashes:
            b = self.blocks.get(h)
            if b is None or not b.is_ready:
                break
            n += 1
        return n

    def prepare_load(self, block_hashes):
        slots = []
        for h in block_hashes:
            b = self.blocks[h]
            assert b.is_ready
            b.ref_cnt += 1
            slots.append(b.slot)
        return slots

    def touch(self, block_hashes):
        for h in reversed(list(block_hashes)):
            if h in self.blocks:
                self.blocks.move_to_end(h)

    def complete_load(self, block_hashes):
        for h in block_hashes:
            b = self.blocks[h]
            assert b.ref_cnt > 0
            b.ref_cnt -= 1

    def prepare_store(self, block_hashes):
        to_store = [h for h in block_hashes if h not in self.blocks]
        need = len(to_store) - len(self.free)
        evicted = []
        if need > 0:
            protected = set(block_hashes)
            for h, b in self.blocks.items():
                if b.ref_cnt == 0 and h not in protected:
                    evicted.append(h)
                    if len(evicted) == need:
                        break
            else:
                return None
        for h in evicted:
            self.free.append(self.blocks.pop(h).slot)
        slots = []
        for h in to_store:
            b = BlockStatus(self.free.pop())
            self.blocks[h] = b
            slots.append(b.slot)
        return to_store, slots, evicted

    def complete_store(self, block_hashes, success=True):
        for h in block_hashes:
            b = self.blocks[h]
            if b.is_ready:
                continue
            if success:
                b.ref_cnt = 0
            else:
                self.free.append(self.blocks.pop(h).slot)


def replay(manager, requests, record):
    """The connector's calls per request; `record` collects the decisions."""
    for hashes in requests:
        hit = manager.lookup(hashes)
        manager.touch(hashes)
        if hit:
            manager.prepare_load(hashes[:hit])
            manager.complete_load(hashes[:hit])
        out = manager.prepare_store(hashes[hit:])
        if out is None:
            record.append((hit, None, None))
            continue
        if isinstance(out, tuple):
            to_store, _, evicted = out
        else:
            to_store, evicted = out.block_hashes_to_store, out.block_hashes_evicted
        manager.complete_store(to_store)
        record.append((hit, to_store, evicted))


PRIMITIVES = ("lookup", "touch", "slices", "prepare_load", "complete_load", "prepare_store", "complete_store")


def replay_breakdown(manager, requests):
    """replay() with each primitive timed apart (thread CPU time), in ns."""
    t = dict.fromkeys(PRIMITIVES, 0)
    clock = time.thread_time_ns
    for hashes in requests:
        t0 = clock()
        hit = manager.lookup(hashes)
        t1 = clock()
        manager.touch(hashes)
        t2 = clock()
        t["lookup"] += t1 - t0
        t["touch"] += t2 - t1
        if hit:
            t0 = clock()
            prefix = hashes[:hit]
            t1 = clock()
            manager.prepare_load(prefix)
            t2 = clock()
            manager.complete_load(prefix)
            t3 = clock()
            t["slices"] += t1 - t0
            t["prepare_load"] += t2 - t1
            t["complete_load"] += t3 - t2
        t0 = clock()
        tail = hashes[hit:]
        t1 = clock()
        out = manager.prepare_store(tail)
        t2 = clock()
        t["slices"] += t1 - t0
        t["prepare_store"] += t2 - t1
        if out is not None:
            to_store = out[0] if isinstance(out, tuple) else out.block_hashes_to_store
            t0 = clock()
            manager.complete_store(to_store)
            t["complete_store"] += clock() - t0
    return t


def decisions(record, key=int):
    return [(h, None if s is None else list(map(key, s)), None if e is None else list(map(key, e))) for h, s, e in record]


def as_bytes_hashes(requests):
    """Each request's hashes as 32-byte sha256 digests, its own objects."""
    digest = {}
    out = []
    for r in requests:
        hashes = []
        for h in r:
            d = digest.get(h)
            if d is None:
                d = digest[h] = hashlib.sha256(h.to_bytes(8, "little")).digest()
            hashes.append(d[:16] + d[16:])  # a new object with the same value
        out.append(hashes)
    return out


def timed(make, requests, runs):
    best, record = None, None
    for _ in range(runs):
        m = make()
        rec = []
        t0 = time.process_time_ns()
        replay(m, requests, rec)
        dt = time.process_time_ns() - t0
        if best is None or dt < best:
            best, record = dt, rec
    return best, record


def main():
    here = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(here.parent / "shared/traces/agentic/agentic_mix.jsonl.gz"))
    ap.add_argument("--requests", type=int, default=3000, help="first N requests of the trace")
    ap.add_argument("--blocks", type=int, default=100_000, help="offloaded tier size in blocks")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cache-step-bench", default=None, help="path of build/release/bench/cache_step_bench")
    ap.add_argument("--breakdown", action="store_true", help="also time each primitive apart")
    args = ap.parse_args()

    requests = []
    with gzip.open(args.trace, "rt") if args.trace.endswith(".gz") else open(args.trace) as f:
        for line in f:
            requests.append(json.loads(line)["hash_ids"])
            if len(requests) == args.requests:
                break
    arrays = [np.array(r, dtype=np.uint64) for r in requests]
    blocks = sum(len(r) for r in requests)
    print(f"{len(requests)} requests, {blocks} blocks, offloaded tier {args.blocks} blocks, best of {args.runs}")

    t_py, rec_py = timed(lambda: OrderedDictManager(args.blocks), requests, args.runs)
    t_list, rec_list = timed(lambda: OffloadingManager(args.blocks, "vllm_lru"), requests, args.runs)
    t_arr, rec_arr = timed(lambda: OffloadingManager(args.blocks, "vllm_lru"), arrays, args.runs)
    same = decisions(rec_py) == decisions(rec_list) == decisions(rec_arr)
    stores = sum(1 for _, s, _ in rec_py if s)
    evictions = sum(len(e) for _, _, e in rec_py if e)
    print(f"  decisions: {stores} stores, {evictions} evictions, identical in all three: {same}")
    assert same, "the managers made different decisions: the comparison is void"

    # vLLM's hash type; the digests of the trace's ids collide nowhere, so
    # the decisions are those above, which is asserted too.
    byte_requests = as_bytes_hashes(requests)
    digest_to_id = {d: h for r, b in zip(requests, byte_requests) for h, d in zip(r, b)}
    t_pyb, rec_pyb = timed(lambda: OrderedDictManager(args.blocks), byte_requests, args.runs)
    t_bytes, rec_bytes = timed(lambda: OffloadingManager(args.blocks, "vllm_lru"), byte_requests, args.runs)
    same_bytes = decisions(rec_pyb, digest_to_id.__getitem__) == decisions(rec_bytes, digest_to_id.__getitem__)
    same_bytes = same_bytes and decisions(rec_pyb, digest_to_id.__getitem__) == decisions(rec_py)
    print(f"  bytes hashes (32-byte sha256 digests): decisions identical to the int replay's: {same_bytes}")
    assert same_bytes, "the managers made different decisions over bytes hashes: the comparison is void"

    print(f"  {'manager':52} {'ns/block':>10} {'us/request':>11} {'speed-up':>9}")
    rows = [
        ("OrderedDict manager (pure Python), int hashes", t_py, t_py),
        ("kvpolicy.vllm.OffloadingManager, lists of ints", t_list, t_py),
        ("kvpolicy.vllm.OffloadingManager, uint64 arrays", t_arr, t_py),
        ("OrderedDict manager (pure Python), bytes hashes", t_pyb, t_pyb),
        ("kvpolicy.vllm.OffloadingManager, lists of bytes", t_bytes, t_pyb),
    ]
    for name, t, base in rows:
        print(f"  {name:52} {t / blocks:10.1f} {t / 1e3 / len(requests):11.2f} {base / t:8.1f}x")

    if args.breakdown:
        # Where the time goes, per primitive (one run each; the clock calls
        # add a little to every figure).
        print(f"  per primitive, ns/block: {'':26}" + "".join(f"{p:>15}" for p in PRIMITIVES))
        cases = [
            ("OrderedDict manager, int hashes", OrderedDictManager, requests),
            ("OffloadingManager, lists of ints", None, requests),
            ("OffloadingManager, uint64 arrays", None, arrays),
            ("OrderedDict manager, bytes hashes", OrderedDictManager, byte_requests),
            ("OffloadingManager, lists of bytes", None, byte_requests),
        ]
        for name, make, reqs in cases:
            m = make(args.blocks) if make else OffloadingManager(args.blocks, "vllm_lru")
            t = replay_breakdown(m, reqs)
            print(f"  {name:50}" + "".join(f"{t[p] / blocks:15.1f}" for p in PRIMITIVES))

    if args.cache_step_bench:
        out = subprocess.run([args.cache_step_bench, "20", "3"], check=True, capture_output=True, text=True).stdout
        m = re.search(r"kvpolicy vllm_like_cache\s+\S+\s+(\S+)", out)
        cxx = float(m.group(1))
        print(f"  C++ cache_step_bench (vllm_like_cache): {cxx:.1f} ns/block; "
              f"our batch path is {t_arr / blocks / cxx:.2f}x that")


if __name__ == "__main__":
    main()
