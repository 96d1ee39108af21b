"""Checks of kvpolicy's vLLM 0.11-0.20 adapter that need vLLM's own code.

Run by test_vllm_legacy_peers.py in a pytest subprocess over an extracted
vLLM sdist (``-p vllm_stubs``, ``$VLLM_SRC``), without kvpolicy_substitute:
vLLM's real ``CPUOffloadingManager`` and kvpolicy's manager side by side.

- ``test_spec_factory_loads_kvpolicy``: vLLM's ``OffloadingSpecFactory`` finds
  ``KvpolicyOffloadingSpec`` by ``spec_name`` / ``spec_module_path`` and its
  manager is kvpolicy's, sized by vLLM's own arithmetic.
- ``test_differential``: long random valid call sequences through vLLM's
  manager (LRU and, where the release has it, ARC) and kvpolicy's
  (vllm_lru, vllm_arc): every answer, every event and the policy's lists
  compared after every call; a failure is shrunk to a shortest diverging
  sequence, printed as calls.

vLLM's managers as the release has them (read from its modules, never its
version): ``cpu/manager.py``'s ``CPUOffloadingManager`` with a
``cache_policy`` (0.19, 0.20), or ``lru_manager.py``'s
``LRUOffloadingManager`` and, from 0.11.1, ``arc_manager.py``'s
``ARCOffloadingManager`` over a ``CPUBackend`` (0.11 to 0.14).
"""

import importlib
import importlib.util
import inspect
import os
import random
from types import SimpleNamespace

import numpy as np
import pytest

from vllm.v1.kv_offload import abstract

import kvpolicy
import kvpolicy.vllm as kv

KEYED = hasattr(abstract, "ReqContext")  # 0.20's API
SEEDS = int(os.environ.get("KVPOLICY_DIFF_SEEDS", "500"))
OPS = int(os.environ.get("KVPOLICY_DIFF_OPS", "400"))
RELEASE = os.path.basename(os.environ["VLLM_SRC"])  # vllm-<version>


def _has_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


BACKEND_MANAGERS = _has_module("vllm.v1.kv_offload.lru_manager")  # 0.11 to 0.14: one manager class per policy
if BACKEND_MANAGERS:
    from vllm.v1.kv_offload.backends.cpu import CPUBackend
    from vllm.v1.kv_offload.lru_manager import LRUOffloadingManager

    ARCOffloadingManager = (importlib.import_module("vllm.v1.kv_offload.arc_manager").ARCOffloadingManager
                            if _has_module("vllm.v1.kv_offload.arc_manager") else None)
    VLLM_POLICIES = ["lru"] + (["arc"] if ARCOffloadingManager is not None else [])
else:
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    VLLM_POLICIES = ["lru", "arc"]


def _key(i):
    return abstract.make_offload_key(str(i).encode(), 0) if KEYED else str(i).encode()


def _vllm_manager(num_blocks, policy):
    if BACKEND_MANAGERS:
        cls = LRUOffloadingManager if policy == "lru" else ARCOffloadingManager
        return cls(CPUBackend(block_size=16, num_blocks=num_blocks), enable_events=True)
    if "block_size" in inspect.signature(CPUOffloadingManager.__init__).parameters:
        return CPUOffloadingManager(block_size=16, num_blocks=num_blocks, cache_policy=policy, enable_events=True)
    return CPUOffloadingManager(num_blocks=num_blocks, cache_policy=policy, enable_events=True)


def _vllm_policy(m):
    """Where vLLM's manager keeps its order: its policy (0.19, 0.20) or itself (0.11 to 0.14)."""
    return m if BACKEND_MANAGERS else m._policy


def _vllm_has(m, key):
    """Whether vLLM's manager holds the block (in any state)."""
    if not BACKEND_MANAGERS:
        return m._policy.get(key) is not None
    return key in m.blocks if isinstance(m, LRUOffloadingManager) else key in m.t1 or key in m.t2


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
        p = _vllm_policy(m)
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


def _protects_the_input():
    """Whether this release's LRU manager keeps an offloaded block that a
    store lists again (one slot: store 1, then 1 and 2)."""
    m = _vllm_side(1, "lru")
    m.call("prepare_store", [_key(1)], None)
    m.call("complete_store", [_key(1)], True)
    return m.call("prepare_store", [_key(1), _key(2)], None) is None


PROTECTS_INPUT = _protects_the_input()


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
            if not PROTECTS_INPUT:  # see test_a_stores_own_blocks_are_never_its_victims
                keys = [k for k in keys if k not in storing and k not in ready]
            op = ("prepare_store", keys, None) if keys else ("lookup", pick(1), None)
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
        if name == "complete_store" and not all(_vllm_has(a.m, k) for k in keys):
            return None  # completes a block never prepared: vLLM ignores it or fails, kvpolicy raises (a shrunk sequence)
        try:
            want = a.call(name, keys, flag)
        except (AssertionError, KeyError):
            return None  # not a valid sequence for vLLM (a shrunk one; 0.11 fails on a KeyError): nothing to compare
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
    if policy not in VLLM_POLICIES:
        pytest.skip(f"{RELEASE} has no ARC manager (vllm/v1/kv_offload/arc_manager.py came in 0.11.1): "
                    "nothing to compare vllm_arc with")
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
    """The comparison can fail: kvpolicy's own lru (not vLLM's) puts a block
    whose load completed at its most-recent end, so the next victim differs;
    the sequence is shrunk (the touch of an absent block goes)."""
    ops = [("prepare_store", [1, 2, 3], None), ("complete_store", [1, 2, 3], True),
           ("touch", [9], None), ("prepare_load", [1], None), ("complete_load", [1], None),
           ("prepare_store", [4], None)]
    d = _first_divergence(3, "lru", ops, ours="lru")
    assert d is not None and d[0] == 5 and "prepare_store([4])" in d[1], d
    assert _first_divergence(3, "lru", ops) is None  # vllm_lru agrees
    shrunk, why = _shrink(3, "lru", ops, ours="lru")
    assert ("touch", [9], None) not in shrunk and shrunk[-1] == ("prepare_store", [4], None), shrunk


def test_a_stores_own_blocks_are_never_its_victims():
    """A block already offloaded and listed again in prepare_store's input is
    never that store's victim in kvpolicy's managers, as in vLLM's from 0.18
    on. vLLM 0.11 to 0.17 evict it when it is the oldest, and then report it
    offloaded although its slot went to another block: where this release
    does (PROTECTS_INPUT, probed), kvpolicy departs from it there on purpose,
    and the differential stores only blocks vLLM does not hold."""
    for policy in VLLM_POLICIES:
        ours, theirs = _kvpolicy_side(1, policy), _vllm_side(1, policy)
        for side in (ours, theirs):
            side.call("prepare_store", [_key(1)], None)
            side.call("complete_store", [_key(1)], True)
        assert ours.call("prepare_store", [_key(1), _key(2)], None) is None, policy
        vllm_answer = theirs.call("prepare_store", [_key(1), _key(2)], None)
        assert (vllm_answer is None) if PROTECTS_INPUT else (vllm_answer[2] == [_key(1)]), (policy, vllm_answer)


def _create_spec(extra, blocks, events=True):
    """vLLM's OffloadingSpecFactory.create_spec for a spec with `blocks` CPU slots of 16-token
    blocks, given as the release asks: ``cpu_bytes_to_use`` over the KV cache config (0.19 on:
    4 GPU blocks, 4 tensors of 4096 bytes, a 1024-byte page: 4096 bytes a block by 0.19's
    arithmetic, page x tensors, and 0.20's, bytes / blocks), or ``num_cpu_blocks`` (0.11 to 0.14)."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    config = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra),
        cache_config=SimpleNamespace(block_size=16),
        parallel_config=SimpleNamespace(world_size=1),
        kv_events_config=SimpleNamespace(enable_kv_cache_events=True) if events else None,
    )
    if "kv_cache_config" not in inspect.signature(OffloadingSpecFactory.create_spec).parameters:
        extra["num_cpu_blocks"] = blocks
        return OffloadingSpecFactory.create_spec(config)
    extra["cpu_bytes_to_use"] = blocks * 4096
    kv_cache_config = SimpleNamespace(
        num_blocks=4, kv_cache_tensors=[SimpleNamespace(size=4096)] * 4,
        kv_cache_groups=[SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=16, page_size_bytes=1024))])
    return OffloadingSpecFactory.create_spec(config, kv_cache_config)


def test_spec_factory_loads_kvpolicy():
    extra = {"spec_name": "KvpolicyOffloadingSpec", "spec_module_path": "kvpolicy.vllm", "eviction_policy": "vllm_arc"}
    spec = _create_spec(extra, blocks=8)
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
    events = list(manager.take_events())
    assert [e.removed for e in events] == [False]
    assert all(getattr(e, "block_size", 16) == 16 for e in events)  # 0.11 to 0.19's events carry the block size
    assert manager.prepare_store(keys[1:], *ctx) is not None  # block 0 goes, the input's stay
    # vLLM's default spec name still loads vLLM's own spec
    assert type(_create_spec({}, blocks=8)).__name__ == "CPUOffloadingSpec"


def test_spec_factory_kvpolicy_policy_with_options():
    extra = {"spec_name": "KvpolicyOffloadingSpec", "spec_module_path": "kvpolicy.vllm",
             "eviction_policy": "s3fifo", "policy_options": {"small_fraction": 0.25}, "store_threshold": 2}
    if not _has_module("vllm.v1.kv_offload.reuse_manager"):  # 0.11 to 0.14: no reuse filter to give it to
        with pytest.raises(kvpolicy.ConfigError, match="store_threshold 2: this vLLM has no reuse filter"):
            _create_spec(dict(extra), blocks=4, events=False)
        manager = _create_spec({k: v for k, v in extra.items() if k != "store_threshold"}, blocks=4,
                               events=False).get_manager()
        assert type(manager).__name__ == "VllmOffloadingManager"
        backing = manager
    else:
        manager = _create_spec(extra, blocks=4, events=False).get_manager()
        assert type(manager).__name__ == "FilterReusedOffloadingManager"
        backing = manager._backing  # vLLM's filter wraps kvpolicy's manager
    assert isinstance(backing, kv.VllmOffloadingManager)
    assert backing.manager.policy == "s3fifo" and backing.manager.num_blocks == 4
