#!/usr/bin/env python3
"""kvpolicy's cache policies inside vLLM 0.33's own CPUOffloadingManager.

Replays the agentic trace (../shared/traces/agentic/agentic_mix.jsonl.gz)
through vLLM's scheduler-side ``CPUOffloadingManager`` the way vLLM 0.33's
offloading connector drives it, one request at a time:

    ctx = ReqContext(req_id); ctx.set_offload_key_position(key, end_token) for each block
    on_new_request(ctx); lookup(key, ctx) per block until the first miss
    prepare_load(hit prefix) / complete_load; prepare_store(the rest) / complete_store
    on_request_finished(ctx)

with keys as vLLM makes them (a 32-byte SHA-256 block hash and a 4-byte
group index), once with vLLM's own ``LRUCachePolicy`` and ``ARCCachePolicy``
and once with each kvpolicy policy loaded by module path
(``cache_policy_module_path="kvpolicy.vllm"``). vLLM's code comes from its
pinned sdist (python/tests/peers/sources.py), as in the tests.

Two figures per policy, ns per block access (process CPU time, best of
--runs):

- *total*: the whole replay, vLLM's manager and the policy;
- *policy*: the policy alone. The replay with vLLM's LRU (and ARC) records
  every call the manager makes on its policy; the recorded calls are then
  replayed against a fresh vLLM policy and a fresh kvpolicy one, the loop
  timed whole less the same loop over a policy that does nothing (vllm_lru
  and vllm_arc answer exactly as vLLM's, asserted here on every eviction). vLLM's manager's own cost is vLLM LRU's total minus its
  policy time; the policy cost of every other policy is its total minus that.

    python3 bench/python/vllm_policy_bench.py [--requests N] [--capacity-share F] [--runs R]
"""

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python" / "tests" / "peers"))

from peers.sources import VLLM_0_33_0, extract, scratch_dir  # noqa: E402

POLICIES = ["vllm_lru", "vllm_arc", "kvpolicy_lru", "kvpolicy_s3fifo", "kvpolicy_arc", "kvpolicy_adaptive_kv",
            "kvpolicy_session_aware_lru"]


def load_requests(path, n):
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            out.append(r["hash_ids"])
            if len(out) == n:
                break
    return out


def vllm_keys(requests, make_offload_key):
    cache = {}
    out = []
    for ids in requests:
        ks = []
        for i in ids:
            k = cache.get(i)
            if k is None:
                k = cache[i] = make_offload_key(hashlib.sha256(i.to_bytes(8, "little")).digest(), 0)
            ks.append(k)
        out.append(ks)
    return out


def replay(vllm, manager, requests, block_tokens=64):
    ReqContext, HIT = vllm.base.ReqContext, vllm.base.LookupResult.HIT
    evicted = []
    for n, keys in enumerate(requests):
        ctx = ReqContext(req_id=f"r{n}")
        for i, k in enumerate(keys):
            ctx.set_offload_key_position(k, (i + 1) * block_tokens)
        manager.on_new_request(ctx)
        hit = 0
        for k in keys:
            if manager.lookup(k, ctx) is not HIT:
                break
            hit += 1
        if hit:
            manager.prepare_load(keys[:hit], ctx)
            manager.complete_load(keys[:hit], ctx)
        out = manager.prepare_store(keys[hit:], ctx)
        if out is not None:
            manager.complete_store(out.keys_to_store, ctx)
            evicted.extend(out.evicted_keys)
        manager.on_request_finished(ctx)
    return evicted


class Recorder:
    """Wraps a policy and records every call the manager makes on it."""

    METHODS = ("get", "insert", "remove", "touch", "on_store_miss", "on_request_access", "on_request_finished",
               "evict", "clear", "mark_evictable", "mark_non_evictable")

    def __init__(self, inner):
        self.inner = inner
        self.log = []
        for name in self.METHODS:
            setattr(self, name, self._wrap(name, getattr(inner, name)))

    def _wrap(self, name, fn):
        log = self.log

        def call(*args):
            if name == "insert":  # the chunk's state at insertion (the manager mutates it later)
                log.append((name, args, args[1].chunk_id, args[1].ref_cnt))
            elif name in ("touch", "on_store_miss", "on_request_access"):
                log.append((name, (list(args[0]), args[1])))
            else:
                log.append((name, args))
            return fn(*args)
        return call


class NullPolicy:
    """Answers without work: the replay loop's own cost, subtracted."""

    def __init__(self):
        self.get = {}.get

    def insert(self, *a): pass
    def remove(self, *a): pass
    def touch(self, *a): pass
    def on_store_miss(self, *a): pass
    def on_request_access(self, *a): pass
    def on_request_finished(self, *a): pass
    def evict(self, *a): return None
    def clear(self, *a): pass
    def mark_evictable(self, *a): pass
    def mark_non_evictable(self, *a): pass


def replay_log(log, policy, ChunkStatus):
    """The recorded calls on `policy`, the chunks' ref counts following the
    manager's transitions; returns (ns of the whole loop, evicted keys). Fresh
    chunks each time: the loop mutates them."""
    chunks = {}
    steps = []
    for entry in log:
        name, args = entry[0], entry[1]
        chunk, ref = None, None
        if name == "insert":
            key, _, ctx = args
            chunk = chunks[key] = ChunkStatus(entry[2])
            ref = entry[3]
            args = (key, chunk, ctx)
        elif name == "mark_evictable":
            chunk, ref = chunks[args[0]], 0
        elif name == "mark_non_evictable":
            chunk, ref = chunks[args[0]], 1
        steps.append((getattr(policy, name), args, chunk, ref, name == "evict"))
    evicted = []
    clock = time.process_time_ns
    t0 = clock()
    for fn, args, chunk, ref, is_evict in steps:
        if chunk is not None:
            chunk.ref_cnt = ref
        r = fn(*args)
        if is_evict and r is not None:
            evicted.append(r)
    t = clock() - t0
    return t, [k for batch in evicted for k, _ in batch]


def best(fn, runs):
    results = [fn() for _ in range(runs)]
    return min(results, key=lambda r: r[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(REPO.parent / "shared/traces/agentic/agentic_mix.jsonl.gz"))
    ap.add_argument("--requests", type=int, default=400, help="first N requests of the trace")
    ap.add_argument("--capacity-share", type=float, default=0.1,
                    help="offloading tier size as a share of the distinct blocks replayed")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policies", default=",".join(POLICIES))
    a = ap.parse_args()

    src = extract(VLLM_0_33_0, scratch_dir("vllm-"), ("vllm/",))
    import vllm_stubs

    vllm_stubs.install(str(src))
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    import kvpolicy
    import kvpolicy.vllm as kv

    vllm = type("vllm", (), {"base": base})
    requests = vllm_keys(load_requests(a.trace, a.requests), base.make_offload_key)
    accesses = sum(len(r) for r in requests)
    distinct = len({k for r in requests for k in r})
    capacity = max(1, int(distinct * a.capacity_share))
    print(f"vLLM 0.33.0 CPUOffloadingManager, agentic trace: {len(requests)} requests, {accesses} block accesses, "
          f"{distinct} distinct; {capacity} chunks ({a.capacity_share:.0%}); best of {a.runs} runs, ns per block access")

    def manager(policy):
        if policy in ("lru", "arc"):
            return CPUOffloadingManager(capacity, cache_policy=policy)
        return CPUOffloadingManager(capacity, cache_policy=policy, cache_policy_module_path="kvpolicy.vllm")

    def total(policy):
        def run():
            m = manager(policy)
            t0 = time.process_time_ns()
            ev = replay(vllm, m, requests)
            return time.process_time_ns() - t0, ev
        return best(run, a.runs)

    def policy_time(policy, make):
        """Records the calls of one replay with `policy`, replays them on a
        fresh one: (ns of the policy's calls, the recorded run's evictions,
        the replay's evictions)."""
        m = manager(policy)
        rec = Recorder(m._policy)
        m._policy = rec
        ev = replay(vllm, m, requests)
        t_null = best(lambda: replay_log(rec.log, NullPolicy(), ChunkStatus), a.runs)[0]
        t, ev_replay = best(lambda: replay_log(rec.log, make(), ChunkStatus), a.runs)
        return t - t_null, ev, ev_replay, rec.log

    rows = []
    for ref, cls, ours in (("lru", LRUCachePolicy, "vllm_lru"), ("arc", ARCCachePolicy, "vllm_arc")):
        t_ref, ev_ref = total(ref)
        p_ref, ev_rec, ev_rep, log = policy_time(ref, lambda cls=cls: cls(capacity))
        assert ev_rec == ev_ref == ev_rep
        # kvpolicy's on vLLM's recorded calls: the same answers, asserted
        t_null = best(lambda: replay_log(log, NullPolicy(), ChunkStatus), a.runs)[0]
        t_ours, ev_ours = best(lambda: replay_log(log, getattr(kv, ours)(capacity), ChunkStatus), a.runs)
        assert ev_ours == ev_ref, f"{ours} evicted other blocks than vLLM's {ref}"
        rows.append((f"vLLM {cls.__name__}", t_ref, p_ref))
        rows.append((f"kvpolicy {ours}", total(ours)[0], t_ours - t_null))
    manager_lru = rows[0][1] - rows[0][2]
    for p in a.policies.split(","):
        if p in ("vllm_lru", "vllm_arc"):
            continue
        t, _ = total(p)
        try:
            pt, ev_rec, ev_rep, _ = policy_time(p, lambda p=p: getattr(kv, p)(capacity))
            same = ev_rec == ev_rep
        except kvpolicy.Error:  # the replay's calls no longer fit its decisions
            same = False
        if same:
            rows.append((f"kvpolicy {p}", t, pt))
        else:
            # A policy that reads the clock decides otherwise on a replay: its
            # policy time is its total less vLLM's manager in the LRU run.
            rows.append((f"kvpolicy {p} *", t, t - manager_lru))

    base_policy = rows[0][2]
    print(f"{'policy':<36}{'total':>9}{'manager':>9}{'policy':>9}{'policy/vLLM LRU':>17}{'policy/manager':>16}")
    for name, t, pt in rows:
        mgr = t - pt
        print(f"{name:<36}{t / accesses:>9.1f}{mgr / accesses:>9.1f}{pt / accesses:>9.1f}"
              f"{pt / base_policy:>17.2f}{pt / mgr:>16.2f}")
    lru_ratio = rows[0][2] / rows[1][2]
    arc_ratio = rows[2][2] / rows[3][2]
    print("* reads the clock, so a replay of its calls decides otherwise: policy = total less the manager of vLLM LRU's run")
    print(f"kvpolicy vllm_lru's policy time is {lru_ratio:.2f}x faster than vLLM's LRUCachePolicy's, "
          f"vllm_arc {arc_ratio:.2f}x than vLLM's ARCCachePolicy's (the same recorded calls, the same answers)")


if __name__ == "__main__":
    main()
