"""Checks of kvpolicy's vLLM 0.11-0.20 adapter that need vLLM's own code.

Run by test_vllm_legacy_peers.py in a pytest subprocess over an extracted
vLLM sdist (``-p vllm_stubs``, ``$VLLM_SRC``), without kvpolicy_substitute:
vLLM's real ``CPUOffloadingManager`` and kvpolicy's manager side by side.

- ``test_spec_factory_loads_kvpolicy``: vLLM's ``OffloadingSpecFactory`` finds
  ``KvpolicyOffloadingSpec`` by ``spec_name`` / ``spec_module_path`` and its
  manager is kvpolicy's, sized by vLLM's own arithmetic.
- ``test_differential``: long random valid call sequences through vLLM's
  manager (LRU and ARC) and kvpolicy's (vllm_lru, vllm_arc): every answer,
  every event and the policy's lists compared after every call; a failure is
  shrunk to a shortest diverging sequence, printed as calls.
"""

import inspect
import os
import random
from types import SimpleNamespace

import numpy as np
import pytest

from vllm.v1.kv_offload import abstract
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

import kvpolicy.vllm as kv

KEYED = hasattr(abstract, "ReqContext")  # 0.20's API
SEEDS = int(os.environ.get("KVPOLICY_DIFF_SEEDS", "500"))
OPS = int(os.environ.get("KVPOLICY_DIFF_OPS", "400"))


def _key(i):
    return abstract.make_offload_key(str(i).encode(), 0) if KEYED else str(i).encode()


def _vllm_manager(num_blocks, policy):
    if "block_size" in inspect.signature(CPUOffloadingManager.__init__).parameters:
        return CPUOffloadingManager(block_size=16, num_blocks=num_blocks, cache_policy=policy, enable_events=True)
    return CPUOffloadingManager(num_blocks=num_blocks, cache_policy=policy, enable_events=True)


class _Side:
    """One manager behind the API both releases share, answers as plain data."""

    def __init__(self, m, policy_state):
        self.m = m
        self.policy_state = policy_state

    def call(self, op, keys, flag):
        m = self.m
        ctx = (abstract.ReqContext(),) if KEYED else ()
        if op == "lookup":
            if KEYED:
                return [m.lookup(k, *ctx) for k in keys]
            return m.lookup(keys)
        if op == "prepare_load":
            return list(np.asarray(m.prepare_load(keys, *ctx).block_ids))
        if op == "touch":
            return m.touch(keys)
        if op == "complete_load":
            return m.complete_load(keys)
        if op == "complete_store":
            return m.complete_store(keys, flag)
        out = m.prepare_store(keys, *ctx)
        if out is None:
            return None
        to_store = out.keys_to_store if KEYED else out.block_hashes_to_store
        evicted = out.evicted_keys if KEYED else out.block_hashes_evicted
        return list(to_store), list(np.asarray(out.store_spec.block_ids)), list(evicted)

    def events(self):
        return [(list(e.keys if KEYED else e.block_hashes), e.removed) for e in self.m.take_events()]


def _vllm_side(num_blocks, policy):
    m = _vllm_manager(num_blocks, policy)
    key = kv.OffloadingManager._key

    def state():
        p = m._policy
        if policy == "lru":
            return [[key(k) for k in p.blocks]], None
        return [[key(k) for k in l] for l in (p.t1, p.t2, p.b1, p.b2)], float(p.target_t1_size)

    return _Side(m, state)


def _kvpolicy_side(num_blocks, policy):
    m = kv.VllmOffloadingManager(num_blocks, "vllm_" + policy, block_size=16, enable_events=True)

    def state():
        lists, target = m.manager._order_state()
        return [[int(k) for k in l] for l in lists], target

    return _Side(m, state)


def _ops(seed, policy):
    """A random valid call sequence: (num_blocks, [(op, key ints, flag)]), made
    against vLLM's manager with `policy` so that every call is one it accepts."""
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    universe = 3 * n + 2
    ref = _vllm_side(n, policy)
    storing, ready, loading = set(), set(), {}
    ops = []
    for _ in range(OPS):
        r = rng.random()
        pick = lambda k: [rng.randint(1, universe) for _ in range(k)]  # noqa: E731
        if storing and r < 0.25:
            keys = rng.sample(sorted(storing), rng.randint(1, len(storing)))
            if ready and rng.random() < 0.3:
                keys += rng.sample(sorted(ready), 1)
            op = ("complete_store", keys, rng.random() < 0.8)
        elif loading and r < 0.45:
            op = ("complete_load", rng.sample(sorted(loading), rng.randint(1, len(loading))), None)
        elif r < 0.55:
            op = ("lookup", pick(rng.randint(1, 4)), None)
        elif r < 0.65 and ready:
            op = ("prepare_load", rng.sample(sorted(ready), rng.randint(1, min(3, len(ready)))), None)
        elif r < 0.8:
            op = ("touch", pick(rng.randint(1, 4)), None)
        else:
            keys = list(dict.fromkeys(pick(rng.randint(1, n + 2))))  # a new block listed once
            op = ("prepare_store", keys, None)
        name, ints, flag = op
        out = ref.call(name, [_key(i) for i in ints], flag)
        ref.events()
        if name == "prepare_load":
            for i in ints:
                loading[i] = loading.get(i, 0) + 1
        elif name == "complete_load":
            for i in ints:
                loading[i] -= 1
                if loading[i] == 0:
                    del loading[i]
        elif name == "prepare_store" and out is not None:
            storing |= {int(k.decode()) if not KEYED else int(abstract.get_offload_block_hash(k).decode())
                        for k in out[0]}
            for k in out[2]:
                ready.discard(int((abstract.get_offload_block_hash(k) if KEYED else k).decode()))
        elif name == "complete_store":
            for i in ints:
                if i in storing:
                    storing.discard(i)
                    if flag:
                        ready.add(i)
        ops.append(op)
    return n, ops


def _first_divergence(n, policy, ops, ours=None):
    """The index of the first call whose answer, events or lists differ
    (with a description), or None. A call vLLM rejects ends the replay.
    `ours`: kvpolicy's policy name (default vllm_<policy>, lists compared too)."""
    a = _vllm_side(n, policy)
    b = _kvpolicy_side(n, policy) if ours is None else _Side(
        kv.VllmOffloadingManager(n, ours, block_size=16, enable_events=True), None)
    for i, (name, ints, flag) in enumerate(ops):
        keys = [_key(k) for k in ints]
        if name == "complete_store" and any(a.m._policy.get(k) is None for k in keys):
            return None  # completes a block never prepared: vLLM ignores it, kvpolicy raises (a shrunk sequence)
        try:
            want = a.call(name, keys, flag)
        except AssertionError:
            return None  # not a valid sequence for vLLM (a shrunk one): nothing to compare
        try:
            got = b.call(name, keys, flag)
        except Exception as e:  # noqa: BLE001
            return i, f"{name}({ints}) raised {e!r}; vLLM answered {want!r}"
        if got != want:
            return i, f"{name}({ints}): kvpolicy {got!r}, vLLM {want!r}"
        ea, eb = a.events(), b.events()
        if ea != eb:
            return i, f"after {name}({ints}): events kvpolicy {eb!r}, vLLM {ea!r}"
        if b.policy_state is None:
            continue
        sa, sb = a.policy_state(), b.policy_state()
        if sa != sb:
            return i, f"after {name}({ints}): lists kvpolicy {sb!r}, vLLM {sa!r}"
    return None


def _shrink(n, policy, ops, ours=None):
    """A shortest-found diverging sequence: cut after the first divergence,
    then drop calls one at a time while it still diverges."""
    d = _first_divergence(n, policy, ops, ours)
    ops = ops[: d[0] + 1]
    changed = True
    while changed:
        changed = False
        for j in range(len(ops) - 1, -1, -1):
            trial = ops[:j] + ops[j + 1:]
            t = _first_divergence(n, policy, trial, ours)
            if t is not None:
                ops, changed = trial[: t[0] + 1], True
                break
    return ops, _first_divergence(n, policy, ops, ours)


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_differential(policy):
    calls = 0
    for seed in range(SEEDS):
        n, ops = _ops(seed, policy)
        calls += len(ops)
        d = _first_divergence(n, policy, ops)
        if d is not None:
            shrunk, why = _shrink(n, policy, ops)
            lines = "\n".join(f"  {name}({ints}{'' if flag is None else f', {flag}'})" for name, ints, flag in shrunk)
            pytest.fail(f"seed {seed}, num_blocks {n}, policy {policy}: {why[1]}\nshortest diverging calls:\n{lines}")
    print(f"differential {policy}: {SEEDS} seeds, {calls} calls, all answers equal")


def test_differential_catches_a_difference():
    """The comparison can fail: kvpolicy's own lru (not vLLM's) puts a
    protected block at its most-recent end, so a later victim differs; the
    sequence is shrunk (the touch of an absent block goes)."""
    ops = [("prepare_store", [1, 2, 3], None), ("complete_store", [1, 2, 3], True),
           ("touch", [9], None), ("prepare_store", [1, 4], None), ("complete_store", [4], True),
           ("prepare_store", [5], None)]
    d = _first_divergence(3, "lru", ops, ours="lru")
    assert d is not None and d[0] == 5 and "prepare_store([5])" in d[1], d
    assert _first_divergence(3, "lru", ops) is None  # vllm_lru agrees
    shrunk, why = _shrink(3, "lru", ops, ours="lru")
    assert ("touch", [9], None) not in shrunk and shrunk[-1] == ("prepare_store", [5], None), shrunk


def test_spec_factory_loads_kvpolicy():
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    extra = {"spec_name": "KvpolicyOffloadingSpec", "spec_module_path": "kvpolicy.vllm",
             "cpu_bytes_to_use": 8 * 4096, "eviction_policy": "vllm_arc"}
    config = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra),
        cache_config=SimpleNamespace(block_size=16),
        parallel_config=SimpleNamespace(world_size=1),
        kv_events_config=SimpleNamespace(enable_kv_cache_events=True),
    )
    # 4 GPU blocks, 4 tensors of 4096 bytes (1024 a page): 4096 bytes a block
    # by 0.19's arithmetic (page x tensors) and 0.20's (bytes / blocks), so 8 CPU blocks.
    kv_cache_config = SimpleNamespace(
        num_blocks=4, kv_cache_tensors=[SimpleNamespace(size=4096)] * 4,
        kv_cache_groups=[SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=16, page_size_bytes=1024))])
    spec = OffloadingSpecFactory.create_spec(config, kv_cache_config)
    assert type(spec).__name__ == "KvpolicyOffloadingSpec" and spec is not None
    assert isinstance(spec, kv.KvpolicyOffloadingSpec)
    manager = spec.get_manager()
    assert manager is spec.get_manager()
    assert isinstance(manager, abstract.OffloadingManager) and isinstance(manager, kv.VllmOffloadingManager)
    assert manager.manager.num_blocks == 8 and manager.manager.policy == "vllm_arc"
    ctx = (abstract.ReqContext(),) if KEYED else ()
    keys = [_key(i) for i in range(9)]
    out = manager.prepare_store(keys[:8], *ctx)
    assert list(np.asarray(out.store_spec.block_ids)) == list(range(8))
    manager.complete_store(keys[:8])
    assert [e.removed for e in manager.take_events()] == [False]
    assert manager.prepare_store(keys[1:], *ctx) is not None  # block 0 goes, the input's stay
    # vLLM's default spec name still loads vLLM's own spec
    extra2 = dict(extra, spec_name="CPUOffloadingSpec")
    del extra2["spec_module_path"]
    config.kv_transfer_config.kv_connector_extra_config = extra2
    assert type(OffloadingSpecFactory.create_spec(config, kv_cache_config)).__name__ == "CPUOffloadingSpec"


def test_spec_factory_kvpolicy_policy_with_options():
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    extra = {"spec_name": "KvpolicyOffloadingSpec", "spec_module_path": "kvpolicy.vllm",
             "cpu_bytes_to_use": 4 * 4096, "eviction_policy": "s3fifo", "policy_options": {"small_fraction": 0.25},
             "store_threshold": 2}
    config = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra),
        cache_config=SimpleNamespace(block_size=16), parallel_config=SimpleNamespace(world_size=1),
        kv_events_config=None)
    kv_cache_config = SimpleNamespace(
        num_blocks=1, kv_cache_tensors=[SimpleNamespace(size=4096)],
        kv_cache_groups=[SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=16, page_size_bytes=4096))])
    manager = OffloadingSpecFactory.create_spec(config, kv_cache_config).get_manager()
    assert type(manager).__name__ == "FilterReusedOffloadingManager"
    backing = manager._backing  # vLLM's filter wraps kvpolicy's manager
    assert isinstance(backing, kv.VllmOffloadingManager)
    assert backing.manager.policy == "s3fifo" and backing.manager.num_blocks == 4
