"""kvpolicy's cache policies inside vLLM's own CPUOffloadingManager, 0.30 to 0.33.

vLLM's code and tests come from its pinned sdists (tests/peers/sources.py),
never from this repository: 0.30.0 and 0.33.0, the oldest and the newest
release of the row in docs/supported-versions.md, each running every test
below. What a release lacks is read from its code, never its version: a test
that needs it is skipped naming what is missing (0.30: no request ends, no
token positions, no hints). Three layers:

1. vLLM's own tests (tests/v1/kv_offload/cpu/test_manager.py and
   policies/test_factory.py), run as they are against vLLM's policies (the
   harness works) and again with kvpolicy's ``vllm_lru`` and ``vllm_arc``
   substituted through vLLM's factory (tests/peers/kvpolicy_in_vllm.py). The
   few tests that reach into vLLM's private policy state are left out of the
   second run only, each with a test below asserting the same thing through
   the policy's answers (DESELECTED).
2. A randomized differential test: long random valid call sequences through
   two vLLM managers, one with vLLM's policy and one with kvpolicy's, every
   answer compared after every call, shrunk to the shortest diverging history.
3. A contract every other kvpolicy policy keeps inside vLLM's manager.
"""

from __future__ import annotations

import importlib
import inspect
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import kvpolicy
import kvpolicy.vllm as kv

from peers.sources import VLLM_0_30_0, VLLM_0_33_0, extract

PEERS = Path(__file__).resolve().parent / "peers"
RELEASES = {"0.30.0": VLLM_0_30_0, "0.33.0": VLLM_0_33_0}
VLLM_TESTS = ["tests/v1/kv_offload/cpu/test_manager.py", "tests/v1/kv_offload/cpu/policies/test_factory.py"]
# vLLM's own items in VLLM_TESTS, per pinned release (a release named by
# KVPOLICY_PEER_VERSION is held to "all pass" instead).
VLLM_TEST_ITEMS = {"0.30.0": 42, "0.33.0": 76}

# Left out of the substituted run only (where the release has the test); the
# test named after each asserts the same thing through public answers.
DESELECTED = {
    # reads LRUCachePolicy._heap (vLLM's lazy heap; kvpolicy keeps an ordered set)
    "tests/v1/kv_offload/cpu/test_manager.py::test_lru_repeated_pin_cycles_compact_lazy_heap_entries":
        "test_repeated_pin_cycles_keep_one_candidate",
    # replace t1/t2 by counting OrderedDicts to count the scan's steps
    "tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_scans_t1_and_t2_once":
        "test_arc_batch_eviction_passes_pinned_chunks_in_one_scan",
    "tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_falls_back_after_t1_iterator_exhausted":
        "test_arc_batch_eviction_falls_back_after_t1_exhausted",
    "tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction":
        "test_arc_store_falls_back_to_t1",
}


@pytest.fixture(scope="module", params=sorted(RELEASES))
def vllm_src(request, tmp_path_factory) -> Path:
    """The release's sources and tests, extracted (its root, ``vllm-<version>``)."""
    return extract(RELEASES[request.param], tmp_path_factory.mktemp("vllm-" + request.param),
                   ("vllm/", "tests/__init__.py", "tests/v1/__init__.py", "tests/v1/kv_offload/"))


def deselected_in(src: Path) -> dict:
    """DESELECTED's tests that this release has (a test is found by its function in its file)."""
    def has(node_id):
        path, *names = node_id.split("::")
        return f"def {names[-1]}(" in (src / path).read_text()

    return {n: why for n, why in DESELECTED.items() if has(n)}


def run_vllm_tests(src: Path, substitute: bool, tmp_path: Path) -> str:
    env = dict(os.environ, VLLM_SRC=str(src), PYTHONPATH=os.pathsep.join(
        [str(PEERS), str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-p", "vllm_stubs"]
    if substitute:
        deselect = tmp_path / "deselect.txt"
        deselect.write_text("".join(f"{n}  # {why}\n" for n, why in deselected_in(src).items()))
        env["KVPOLICY_DESELECT"] = str(deselect)
        args += ["-p", "kvpolicy_in_vllm"]
    r = subprocess.run(args + VLLM_TESTS, cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def counts(summary: str) -> dict:
    out = {}
    for part in summary.split(" in ")[0].split(","):
        n, what = part.split()
        out[what] = int(n)
    return out


def test_vllm_own_tests_pass_with_vllm_policies_and_with_kvpolicys(vllm_src, tmp_path):
    as_is = counts(run_vllm_tests(vllm_src, substitute=False, tmp_path=tmp_path))
    substituted = counts(run_vllm_tests(vllm_src, substitute=True, tmp_path=tmp_path))
    version = vllm_src.name.split("-", 1)[1]  # the release extracted (KVPOLICY_PEER_VERSION's, if named)
    assert set(as_is) == {"passed"} and as_is["passed"] == VLLM_TEST_ITEMS.get(version, as_is["passed"]), as_is
    # The deselected tests: 9 items with their parameters in 0.33 (4 tests),
    # 8 in 0.30 (which has no lazy heap, so no test of it).
    n = substituted.get("deselected", 0)
    assert n == {"0.30.0": 8, "0.33.0": 9}.get(version, n) and n > 0, substituted
    assert substituted == {"passed": as_is["passed"] - n, "deselected": n}, substituted


# --- vLLM in this process (for the tests below) -----------------------------

@pytest.fixture(scope="module")
def vllm(vllm_src):
    """The release's offloading modules imported in this process; undone after.

    ``positions``: its ReqContext carries token positions
    (``set_offload_key_position``, 0.33); ``insert_request``: its
    CachePolicy's ``insert`` is given the request (0.33), where hints are read."""
    saved_modules, saved_path, saved_meta = dict(sys.modules), list(sys.path), list(sys.meta_path)
    sys.path.insert(0, str(PEERS))
    import vllm_stubs

    vllm_stubs.install(str(vllm_src))
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.cpu import manager
    from vllm.v1.kv_offload.cpu.policies import base as policies

    yield type("vllm", (), {"base": base, "manager": manager, "version": vllm_src.name.split("-", 1)[1],
                            "positions": hasattr(base.ReqContext, "set_offload_key_position"),
                            "insert_request": "req_context" in inspect.signature(policies.CachePolicy.insert).parameters})
    sys.modules.clear()
    sys.modules.update(saved_modules)
    sys.path[:] = saved_path
    sys.meta_path[:] = saved_meta


def key(i: int) -> bytes:
    return str(i).encode() + (0).to_bytes(4, "big")


def keys(ids) -> list:
    return [key(i) for i in ids]


def make_manager(vllm, policy: str, num_chunks: int, events: bool = True):
    if policy in ("lru", "arc"):  # vLLM's own
        return vllm.manager.CPUOffloadingManager(num_chunks, cache_policy=policy, enable_events=events)
    return vllm.manager.CPUOffloadingManager(num_chunks, cache_policy=policy, cache_policy_module_path="kvpolicy.vllm",
                                             enable_events=events)


def ctx(vllm, name: str = ""):
    return vllm.base.ReqContext(req_id=name)


# --- the deselected tests' assertions, through public answers ----------------

def test_repeated_pin_cycles_keep_one_candidate(vllm):
    m = make_manager(vllm, "vllm_lru", 1)
    c = ctx(vllm)
    k = key(1)
    assert m.prepare_store([k], c) is not None
    m.complete_store([k], c)
    for _ in range(128):
        m.prepare_load([k], c)
        m.complete_load([k], c)
    chunk = m._policy.get(k)
    assert m._policy.evict(1, set()) == [(k, chunk)]  # the one candidate, exactly once
    assert m._policy.get(k) is None
    assert m._policy.evict(1, set()) is None


def arc_manager(vllm, policy, n):
    m = make_manager(vllm, policy, n, events=False)
    c = ctx(vllm)
    ks = keys(range(n))
    assert m.prepare_store(ks, c) is not None
    m.complete_store(ks, c)
    return m, c, ks


@pytest.mark.parametrize("policy", ["arc", "vllm_arc"])
def test_arc_batch_eviction_passes_pinned_chunks_in_one_scan(vllm, policy):
    # vLLM's test_batch_eviction_scans_t1_and_t2_once, with the two chunks
    # pinned by loads in flight instead of ref counts written behind the
    # manager; the victims must be the same (the scan is monotonic by
    # construction in C++: engine/vllm_arc.hpp's evict keeps one cursor per list).
    m, c, ks = arc_manager(vllm, policy, 256)
    m.touch(ks[128:], c)
    m._policy.target_t1_size = 64
    protected = {ks[0], ks[2], ks[255]}
    m.prepare_load([ks[1], ks[254]], c)
    pinned = {ks[1], ks[254]}
    t1, t2 = list(m._policy.t1), list(m._policy.t2)
    n_t1 = len(t1) - 64 + 1
    expect_t1 = [k for k in t1 if k not in protected | pinned][:n_t1]
    expect_t2 = [k for k in t2 if k not in protected | pinned][: 124 - n_t1]
    assert [k for k, _ in m._policy.evict(124, protected)] == expect_t1 + expect_t2


@pytest.mark.parametrize("policy", ["arc", "vllm_arc"])
def test_arc_batch_eviction_falls_back_after_t1_exhausted(vllm, policy):
    # vLLM's test_batch_eviction_falls_back_after_t1_iterator_exhausted, pins by loads.
    m, c, ks = arc_manager(vllm, policy, 8)
    m.touch(ks[6:], c)
    m._policy.target_t1_size = 4
    t1, t2 = list(m._policy.t1), list(m._policy.t2)
    m.prepare_load(t1[3:], c)
    assert [k for k, _ in m._policy.evict(3, set(t1[1:3]))] == [t1[0], *t2]


@pytest.mark.parametrize(
    "pinned, protected, new_keys, expected_evicted",
    [
        ([], [], [7, 8, 9], [6, 5, 3]),
        ([], [], [7, 8, 9, 10], [6, 5, 3, 4]),
        ([5, 6], [], [7, 8], [3, 4]),
        ([], [5, 6], [7, 8], [3, 4]),
        ([5, 6], [3], [7], [4]),
        ([5, 6], [3], [7, 8], None),
    ],
)
@pytest.mark.parametrize("policy", ["arc", "vllm_arc"])
def test_arc_store_falls_back_to_t1(vllm, policy, pinned, protected, new_keys, expected_evicted):
    # vLLM's test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction
    # without its counting dicts: same scenario, same answers, and a refused
    # store leaves T1, T2, B1, B2 and the target as they were.
    m = make_manager(vllm, policy, 4, events=False)
    c = ctx(vllm)
    for ks in ([1, 2, 3, 4], [5, 6]):
        assert m.prepare_store(keys(ks), c) is not None
        m.complete_store(keys(ks), c)
    m.touch(keys([1, 2]), c)
    m.touch(keys([1]), c)
    m.touch(keys([5, 6]), c)
    p = m._policy
    assert p.target_t1_size == 3 and list(p.t1) == keys([3, 4]) and list(p.t2) == keys([6, 5])
    m.prepare_load(keys(pinned), c)

    def state():
        return (list(p.t1), list(p.t2), [k in p.b1 for k in keys(range(12))], [k in p.b2 for k in keys(range(12))],
                len(p.b1), len(p.b2), p.target_t1_size)

    before = state()
    out = m.prepare_store(keys(protected + new_keys), c)
    if expected_evicted is None:
        assert out is None and state() == before
    else:
        assert out.keys_to_store == keys(new_keys) and out.evicted_keys == keys(expected_evicted)
        m.complete_store(keys(new_keys), c)
        for k in new_keys:
            assert m.lookup(key(k), c) is vllm.base.LookupResult.HIT
    for k in pinned + protected:
        assert m.lookup(key(k), c) is vllm.base.LookupResult.HIT


# --- randomized differential: vLLM's policy against kvpolicy's ---------------

def random_history(rng: random.Random, n_ops: int, universe: int) -> list:
    """Ops as data; whether each is valid is decided when it is replayed."""
    ops = []
    for _ in range(n_ops):
        r = rng.random()
        req = rng.randrange(4)
        ks = rng.sample(range(universe), rng.randint(1, min(6, universe)))
        if r < 0.30:
            ops.append(("store", req, ks))
        elif r < 0.45:
            ops.append(("complete_store", req, ks, rng.random() < 0.85))
        elif r < 0.60:
            ops.append(("load", req, ks))
        elif r < 0.72:
            ops.append(("complete_load", req, ks))
        elif r < 0.80:
            ops.append(("touch", req, ks))
        elif r < 0.88:
            ops.append(("lookup", req, ks))
        elif r < 0.97:
            ops.append(("finish", req))
        else:
            ops.append(("reset",))
    return ops


class Driver:
    """One manager and the harness's view of what is valid to call on it."""

    def __init__(self, vllm, policy: str, num_chunks: int):
        self.vllm = vllm
        self.m = make_manager(vllm, policy, num_chunks)
        self.reqs = {}
        self.storing = set()
        self.loading = {}

    def req(self, i: int):
        if i not in self.reqs:
            c = self.vllm.base.ReqContext(req_id=f"r{i}")
            for pos, k in enumerate(range(i * 3, i * 3 + 40) if self.vllm.positions else ()):
                c.set_offload_key_position(key(k % 17), pos * 16 + 16)  # overlapping prefixes, some keys positioned
            self.reqs[i] = c
            self.m.on_new_request(c)
        return self.reqs[i]

    def apply(self, op) -> object:
        kind = op[0]
        if kind == "reset":
            self.m.reset_cache()
            self.storing.clear()
            self.loading.clear()
            self.reqs.clear()
            return "reset"
        c = self.req(op[1])
        if kind == "finish":
            self.m.on_request_finished(c)
            del self.reqs[op[1]]
            return "finished"
        ks = keys(op[2])
        HIT = self.vllm.base.LookupResult.HIT
        if kind == "store":
            out = self.m.prepare_store(ks, c)
            if out is None:
                return None
            self.storing.update(out.keys_to_store)
            return (out.keys_to_store, list(out.store_spec.chunk_ids), out.evicted_keys)
        if kind == "complete_store":
            ks = [k for k in ks if k in self.storing]
            self.m.complete_store(ks, c, success=op[3])
            self.storing.difference_update(ks)
            return ks
        if kind == "load":
            ks = [k for k in ks if self.m.lookup(k, c) is HIT]
            spec = self.m.prepare_load(ks, c)
            for k in ks:
                self.loading[k] = self.loading.get(k, 0) + 1
            return list(spec.chunk_ids)
        if kind == "complete_load":
            ks = [k for k in ks if self.loading.get(k, 0) > 0]
            self.m.complete_load(ks, c)
            for k in ks:
                self.loading[k] -= 1
            return ks
        if kind == "touch":
            self.m.touch(ks, c)
            return "touched"
        return [self.m.lookup(k, c) for k in ks]

    def events(self):
        return [(e.keys, e.removed, getattr(e, "metadata_only", False)) for e in self.m.take_events()]


def first_divergence(vllm, ops, reference: str, candidate: str, num_chunks: int):
    a, b = Driver(vllm, reference, num_chunks), Driver(vllm, candidate, num_chunks)
    for i, op in enumerate(ops):
        ra, rb = a.apply(op), b.apply(op)
        if ra != rb:
            return i, ra, rb
        ea, eb = a.events(), b.events()
        if ea != eb:
            return i, ea, eb
    return None


def shrink(vllm, ops, reference, candidate, num_chunks):
    """The shortest sub-history that still diverges (one op removed at a time)."""
    ops = ops[: first_divergence(vllm, ops, reference, candidate, num_chunks)[0] + 1]
    changed = True
    while changed:
        changed = False
        for i in range(len(ops)):
            trial = ops[:i] + ops[i + 1:]
            if first_divergence(vllm, trial, reference, candidate, num_chunks) is not None:
                ops, changed = trial, True
                break
    return ops


@pytest.mark.parametrize("reference,candidate", [("lru", "vllm_lru"), ("arc", "vllm_arc")])
def test_differential_against_vllms_own_policy(vllm, reference, candidate):
    seeds = int(os.environ.get("KVPOLICY_DIFF_SEEDS", "300"))
    for seed in range(seeds):
        rng = random.Random(seed)
        num_chunks = rng.randint(1, 8)
        ops = random_history(rng, 250, universe=17)
        d = first_divergence(vllm, ops, reference, candidate, num_chunks)
        if d is not None:
            short = shrink(vllm, ops, reference, candidate, num_chunks)
            pytest.fail(f"seed {seed}, {num_chunks} chunks: {candidate} differs from vLLM's {reference} at op {d[0]}: "
                        f"{d[1]!r} != {d[2]!r}; shortest diverging history ({len(short)} ops): {short}")


# --- every other kvpolicy policy: the manager's contract ---------------------

OTHERS = [n for n in kv.policy_names() if n.startswith("kvpolicy_")]


@pytest.mark.parametrize("policy", OTHERS)
def test_kvpolicy_policies_keep_the_managers_contract(vllm, policy):
    """Inside vLLM's manager: a chunk in the store's input, or pinned by a
    store or load, is never a victim; a refused store changes nothing; every
    key is resident exactly while the manager says so."""
    for seed in range(20):
        rng = random.Random(seed)
        d = Driver(vllm, policy, rng.randint(1, 8))
        for op in random_history(rng, 200, universe=17):
            if op[0] == "store":
                c = d.req(op[1])
                before = {k: d.m.lookup(k, c) for k in keys(range(17))}
                pinned = set(d.storing) | {k for k, n in d.loading.items() if n > 0}
                out = d.apply(op)
                if out is None:
                    assert {k: d.m.lookup(k, c) for k in keys(range(17))} == before
                    continue
                evicted = set(out[2])
                assert not evicted & set(keys(op[2])), (policy, seed, op)
                assert not evicted & pinned, (policy, seed, op)
                for k in evicted:
                    assert d.m._policy.get(k) is None
            else:
                d.apply(op)
            d.events()
        resident = [k for k in keys(range(17)) if d.m._policy.get(k) is not None]
        assert len(resident) == len(d.m._policy._core)


def test_module_path_loading_and_bad_names(vllm):
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    assert CachePolicyFactory.get_cache_policy_cls("kvpolicy_s3fifo", "kvpolicy.vllm") is kv.kvpolicy_s3fifo
    assert CachePolicyFactory.get_cache_policy_cls("vllm_arc", "kvpolicy.vllm").__name__ == "vllm_arc"
    # What vLLM's loader raises is kvpolicy's ConfigError with the reason (and an
    # AttributeError still: hasattr on the module keeps its meaning).
    with pytest.raises(kvpolicy.ConfigError, match="kvpolicy_nonesuch.*no such cache policy.*cache policies: \\['vllm_lru'") as e:
        CachePolicyFactory.get_cache_policy_cls("kvpolicy_nonesuch", "kvpolicy.vllm")
    assert isinstance(e.value, AttributeError)
    with pytest.raises(kvpolicy.ConfigError, match="kvpolicy_belady.*next use.*simulator"):
        CachePolicyFactory.get_cache_policy_cls("kvpolicy_belady", "kvpolicy.vllm")
    # Both name forms, one class (kvpolicy.policy_name: the rule of every adapter).
    assert CachePolicyFactory.get_cache_policy_cls("s3fifo", "kvpolicy.vllm") is kv.kvpolicy_s3fifo
    assert kv.s3fifo is kv.kvpolicy_s3fifo and kv.kvpolicy_vllm_arc is kv.vllm_arc
    assert not hasattr(kv, "kvpolicy_nonesuch") and getattr(kv, "nonesuch", None) is None
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'nonesuch'"):
        kv.cache_policy("nonesuch")
    with pytest.raises(kvpolicy.ConfigError, match="belady.*next use"):
        kv.cache_policy("belady")
    with pytest.raises(kvpolicy.ConfigError, match="small_fraction"):
        kv.cache_policy("s3fifo", small_fraction=7.0)
    with pytest.raises(kvpolicy.ConfigError, match="takes no options"):
        kv.cache_policy("vllm_lru", x=1)
    cls = kv.cache_policy("s3fifo", class_name="S3fifoSmall", small_fraction=0.2)
    assert cls.__name__ == "S3fifoSmall" and cls(8).get(key(1)) is None


def test_options_from_the_environment(vllm, monkeypatch):
    monkeypatch.setenv(kv._policies.OPTIONS_ENV, '{"kvpolicy_s3fifo": {"small_fraction": 7.0}}')
    with pytest.raises(kvpolicy.ConfigError, match="small_fraction"):
        make_manager(vllm, "kvpolicy_s3fifo", 4)
    monkeypatch.setenv(kv._policies.OPTIONS_ENV, "{not json")
    with pytest.raises(kvpolicy.ConfigError, match="not JSON"):
        make_manager(vllm, "kvpolicy_s3fifo", 4)
    monkeypatch.setenv(kv._policies.OPTIONS_ENV, '{"kvpolicy_s3fifo": {"small_fraction": 0.2}}')
    assert make_manager(vllm, "kvpolicy_s3fifo", 4)._policy._core is not None


# --- hints: a request's session, expected return and end ---------------------

@pytest.fixture
def hints(vllm):
    """Skips where the release cannot carry a hint to a policy."""
    if not vllm.insert_request:
        pytest.skip(f"vLLM {vllm.version}'s CachePolicy.insert is not given the request: a stored chunk's "
                    "session is unknown, so kvpolicy's policies read no hints there")
    try:
        import vllm.v1.kv_hints  # noqa: F401
    except ImportError:
        pytest.skip(f"vLLM {vllm.version} has no vllm.v1.kv_hints (orchestrator hints)")


def hinted_ctx(vllm, name, actions=(), params=None):
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope

    env = KvHintsEnvelope(protocol_version="1", message_id=name, actions=[
        KvHintAction(action_id=f"{name}-{i}", action_type=t, action_version=v, payload=p)
        for i, (t, v, p) in enumerate(actions)]) if actions else None
    return vllm.base.ReqContext(req_id=name, kv_transfer_params=params, kv_hints=env)


def serve(m, c, ids):
    m.on_new_request(c)
    out = m.prepare_store(keys(ids), c)
    m.complete_store(out.keys_to_store, c)
    m.on_request_finished(c)


def victim_after_two_sessions(vllm, policy, a_actions=(), b_actions=(), b_params=None):
    """Session A stores 1, 2 and says it is back soon; session B stores 3, 4
    after it; a third request needs one slot: which block goes?"""
    m = make_manager(vllm, policy, 4)
    serve(m, hinted_ctx(vllm, "a", [("kvpolicy.session", "1", {"id": "A"}), *a_actions]), [1, 2])
    serve(m, hinted_ctx(vllm, "b", [("kvpolicy.session", "1", {"id": "B"}), *b_actions], b_params), [3, 4])
    c = hinted_ctx(vllm, "c", [("kvpolicy.session", "1", {"id": "C"})])
    m.on_new_request(c)
    return m.prepare_store(keys([5]), c).evicted_keys


def test_hints_reach_session_aware_lru_through_vllms_manager(vllm, hints, caplog):
    soon = [("kvpolicy.expected_return", "1", {"seconds": 1})]
    # No hint on B: LRU order, A's tail (released first) goes.
    assert victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", soon) == keys([2])
    # B's session ends: B is never back, so B's tail goes although A is older.
    end = [("kvpolicy.session_end", "1", {})]
    assert victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", soon, end) == keys([4])
    # B expected back in an hour: farther than A, B goes.
    later = [("kvpolicy.expected_return", "1", {"seconds": 3600})]
    assert victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", soon, later) == keys([4])
    # The same through kv_transfer_params.
    assert victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", soon, (),
                                     {"kvpolicy": {"session_end": True}}) == keys([4])
    # kvpolicy's plain lru hears no hints: A's tail.
    assert victim_after_two_sessions(vllm, "kvpolicy_lru", soon, end) == keys([2])


@pytest.mark.parametrize("bad, reason", [
    (("kvpolicy.session_end", "2", {}), "action_version '2' is not '1'"),
    (("kvpolicy.expected_return", "1", {"seconds": -5}), "seconds must be a finite number >= 0"),
    (("kvpolicy.expected_return", "1", {"seconds": float("nan")}), "seconds must be a finite number >= 0"),
    (("kvpolicy.expected_return", "1", {}), 'payload needs "seconds"'),
    (("kvpolicy.session", "1", {"id": [1]}), "a session id is an int or a str"),
    (("kvpolicy.sesion_end", "1", {}), "unknown kvpolicy action 'kvpolicy.sesion_end'"),
    (("kvpolicy.session_end", "1", "end"), "payload must be an object"),
])
def test_a_malformed_hint_is_ignored_with_a_logged_reason(vllm, hints, caplog, bad, reason):
    soon = [("kvpolicy.expected_return", "1", {"seconds": 1})]
    with caplog.at_level("WARNING", logger="kvpolicy.vllm"):
        evicted = victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", soon, [bad])
    assert evicted == keys([2])  # as with no hint on B
    assert any(reason in r.getMessage() and "request b" in r.getMessage() for r in caplog.records), caplog.text


def test_other_components_actions_are_skipped_silently(vllm, hints, caplog):
    with caplog.at_level("WARNING", logger="kvpolicy.vllm"):
        evicted = victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", (),
                                            [("lmcache.pin", "7", {"anything": 1})])
    assert evicted == keys([2]) and not [r for r in caplog.records if r.name == "kvpolicy.vllm"]


def test_malformed_kv_transfer_params_are_ignored_with_a_logged_reason(vllm, hints, caplog):
    with caplog.at_level("WARNING", logger="kvpolicy.vllm"):
        evicted = victim_after_two_sessions(vllm, "kvpolicy_session_aware_lru", (), (),
                                            {"kvpolicy": {"session_end": "yes", "sesion": 1}})
    assert evicted == keys([2])
    assert "unknown keys ['sesion']" in caplog.text


@pytest.fixture
def replay_clock():
    """kvpolicy.vllm.set_time_ms, the steady clock restored after the test."""
    import kvpolicy.vllm

    yield kvpolicy.vllm.set_time_ms
    kvpolicy.vllm.set_time_ms(None)


def test_predicted_return_learns_each_sessions_gaps_on_the_replays_clock(vllm, hints, replay_clock):
    """Session A sent requests at 0 and 1000 ms (back at 2000), session B at
    1050 and 1100 (back at 1150); at 1120 a third request needs a slot.
    predicted_return evicts A's deepest block (2), LRU A's oldest (1); on a
    clock where all of it happened at once it would be the block stored
    last (6). B stores each request's blocks over two steps, 5 ms apart:
    with the request ends heard that is one request, not a gap of 5 ms."""
    def victim(policy):
        m = make_manager(vllm, policy, 6)
        for t, session, ids in ((0, "A", [1]), (1000, "A", [2]), (1050, "B", [3, 4]), (1100, "B", [5, 6])):
            c = hinted_ctx(vllm, f"{session}{t}", [("kvpolicy.session", "1", {"id": session})])
            replay_clock(t)
            m.on_new_request(c)
            for step, block in enumerate(ids):
                replay_clock(t + 5 * step)
                out = m.prepare_store(keys([block]), c)
                m.complete_store(out.keys_to_store, c)
            m.on_request_finished(c)
        replay_clock(1120)
        c = hinted_ctx(vllm, "c", [("kvpolicy.session", "1", {"id": "C"})])
        m.on_new_request(c)
        return m.prepare_store(keys([7]), c).evicted_keys

    assert victim("kvpolicy_predicted_return") == keys([2])
    assert victim("kvpolicy_lru") == keys([1])


def test_set_time_ms_refuses_a_negative_time(replay_clock):
    with pytest.raises(kvpolicy.ConfigError, match="set_time_ms: -1 is before the clock's start"):
        replay_clock(-1)


def test_session_ids_are_stable_and_never_zero():
    from kvpolicy.vllm._policies import session_key

    assert session_key(7) == 7 and session_key("chat-42") == session_key("chat-42") != session_key("chat-43")
    assert session_key(0) != 0 and session_key(-3) != 0 and session_key(2**64) != 0
    assert session_key("7") != session_key(7)


def test_docs_example(vllm):
    """docs/getting-started/vllm.md quotes this example verbatim."""
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    # example-begin vllm-policy
    import kvpolicy.vllm

    # What vLLM builds from "eviction_policy": "kvpolicy_s3fifo" and
    # "cache_policy_module_path": "kvpolicy.vllm" in kv_connector_extra_config:
    manager = CPUOffloadingManager(num_chunks=2, cache_policy="kvpolicy_s3fifo",
                                   cache_policy_module_path="kvpolicy.vllm")
    request = ReqContext(req_id="r1")
    blocks = [b"block-a", b"block-b", b"block-c"]
    out = manager.prepare_store(blocks[:2], request)
    manager.complete_store(out.keys_to_store, request)
    assert manager.prepare_store(blocks[2:], request).evicted_keys == [b"block-a"]

    # Options, in a module of your own ("eviction_policy": "S3fifoSmall",
    # "cache_policy_module_path": "your.module"):
    S3fifoSmall = kvpolicy.vllm.cache_policy("s3fifo", class_name="S3fifoSmall", small_fraction=0.2)
    # example-end
    assert isinstance(manager._policy, kvpolicy.vllm.kvpolicy_s3fifo) and S3fifoSmall.__name__ == "S3fifoSmall"
