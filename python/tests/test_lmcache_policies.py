"""kvpolicy's policies inside LMCache 0.5.6 (multiprocess mode and the local backends).

LMCache's code and tests come from its pinned sdist (tests/peers/sources.py),
never from this repository. Layers:

1. LMCache's own eviction-policy tests (tests/v1/distributed/test_lru_*,
   test_arc_*, test_isolated_lru_*), run as they are against LMCache's
   policies (the harness works) and again with kvpolicy's ``lru``, ``arc``
   and isolated ``lru`` substituted (tests/peers/kvpolicy_in_lmcache.py).
   Left out of the second run only (DESELECTED): tests of LMCache's ARC
   variant's internals (``get_debug_state``: its T1/T2/B1/B2 and target,
   ghosts made at removal) and the ARC tie rule copied from vLLM; kvpolicy's
   ``arc`` is the paper's ARC, with state of its own.
2. Randomized differentials: kvpolicy's ``lru`` against LMCache's
   ``LRUEvictionPolicy`` and isolated ``lru`` against
   ``IsolatedLRUEvictionPolicy`` (every answer, after every call, including
   filters, victims used again before their removal, capture/restore and a
   small ``max_keys``); the local backend's ``lru`` against LMCache's
   ``LRUCachePolicy`` with pinned entries.
3. A contract every offered policy keeps (what LMCache's tests do not cover).
4. Bad input: a clear error naming it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import kvpolicy
import kvpolicy.lmcache as kl

from peers.sources import LMCACHE_0_5_6, extract

PEERS = Path(__file__).resolve().parent / "peers"
LMCACHE_TESTS = ["tests/v1/distributed/test_lru_eviction_policy.py",
                 "tests/v1/distributed/test_arc_eviction_policy.py",
                 "tests/v1/distributed/test_isolated_lru_eviction_policy.py"]

# Left out of both runs: they build LMCache's CLI parsers, which import LMCache's
# GPU connectors and every L2 adapter (torch dtypes, network clients; not policy code).
NOT_RUN = {"tests/v1/distributed/test_arc_eviction_policy.py::TestARCConfiguration::test_l1_cli_accepts_arc",
           "tests/v1/distributed/test_arc_eviction_policy.py::TestARCConfiguration::test_l2_adapter_config_accepts_arc"}

# Left out of the substituted run only: they read LMCache's ARC variant's
# private state through get_debug_state (its lists, its target, and ghosts
# made when a removal completes, where the paper's ARC makes them when the
# victim is chosen).
ARC = "tests/v1/distributed/test_arc_eviction_policy.py::TestARCGhostFeedback::"
DESELECTED = {
    ARC + "test_adaptation_uses_fractional_ghost_ratio": "LMCache's target arithmetic (get_debug_state)",
    ARC + "test_recent_and_frequent_ghosts_adjust_the_next_victim": "LMCache's ghost lists (get_debug_state)",
    ARC + "test_equal_t1_target_selects_recent_list_like_vllm": "vLLM's ARC tie rule (get_debug_state)",
    ARC + "test_explicit_removal_does_not_create_ghost_feedback": "LMCache's ghost lists (get_debug_state)",
    ARC + "test_selecting_without_completed_removal_keeps_key_resident": "LMCache's ghost lists (get_debug_state)",
    "tests/v1/distributed/test_arc_eviction_policy.py::TestARCMPListeners::test_l1_listener_drives_arc_lifecycle":
        "LMCache's ghost lists (get_debug_state)",
    "tests/v1/distributed/test_arc_eviction_policy.py::TestARCMPListeners::test_l2_listener_drives_arc_lifecycle":
        "LMCache's ghost lists (get_debug_state)",
}


@pytest.fixture(scope="module")
def lmcache_src(tmp_path_factory) -> Path:
    return extract(LMCACHE_0_5_6, tmp_path_factory.mktemp("lmcache-0.5.6"),
                   ("lmcache/", "tests/__init__.py", "tests/v1/__init__.py", "tests/v1/distributed/"))


def run_lmcache_tests(src: Path, substitute: bool, tmp_path: Path) -> str:
    env = dict(os.environ, LMCACHE_SRC=str(src), PYTHONPATH=os.pathsep.join(
        [str(PEERS), str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-p", "lmcache_stubs"]
    args += [f"--deselect={n}" for n in sorted(NOT_RUN)]
    if substitute:
        deselect = tmp_path / "deselect.txt"
        deselect.write_text("".join(f"{n}  # {why}\n" for n, why in DESELECTED.items()))
        env["KVPOLICY_DESELECT"] = str(deselect)
        args += ["-p", "kvpolicy_in_lmcache"]
    r = subprocess.run(args + LMCACHE_TESTS, cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def counts(summary: str) -> dict:
    out = {}
    for part in summary.split(" in ")[0].split(","):
        n, what = part.split()
        out[what] = int(n)
    return out


def test_lmcache_own_tests_pass_with_lmcache_policies_and_with_kvpolicys(lmcache_src, tmp_path):
    as_is = counts(run_lmcache_tests(lmcache_src, substitute=False, tmp_path=tmp_path))
    substituted = counts(run_lmcache_tests(lmcache_src, substitute=True, tmp_path=tmp_path))
    assert as_is == {"passed": 57, "deselected": len(NOT_RUN)}, as_is
    assert substituted == {"passed": 57 - len(DESELECTED), "deselected": len(NOT_RUN) + len(DESELECTED)}, substituted


# --- LMCache in this process (for the tests below) ---------------------------

@pytest.fixture(scope="module")
def lmc(lmcache_src):
    """LMCache 0.5.6's eviction modules imported in this process; undone after."""
    saved_modules, saved_path, saved_meta = dict(sys.modules), list(sys.path), list(sys.meta_path)
    sys.path.insert(0, str(PEERS))
    import lmcache_stubs

    lmcache_stubs.install(str(lmcache_src))
    from lmcache.v1.distributed.api import ObjectKey
    from lmcache.v1.distributed.config import EvictionConfig
    from lmcache.v1.distributed.eviction_policy import (ARCEvictionPolicy, IsolatedLRUEvictionPolicy,
                                                         LRUEvictionPolicy)
    from lmcache.v1.distributed.internal_api import EvictionDestination
    from lmcache.v1.storage_backend import cache_policy

    yield type("lmc", (), dict(ObjectKey=ObjectKey, EvictionConfig=EvictionConfig, LRU=LRUEvictionPolicy,
                               ARC=ARCEvictionPolicy, IsolatedLRU=IsolatedLRUEvictionPolicy,
                               Destination=EvictionDestination, cache_policy=cache_policy))
    kl.uninstall()
    sys.modules.clear()
    sys.modules.update(saved_modules)
    sys.path[:] = saved_path
    sys.meta_path[:] = saved_meta


def okey(lmc, i: int, salt: str = ""):
    return lmc.ObjectKey(chunk_hash=lmc.ObjectKey.IntHash2Bytes(i), model_name="m", kv_rank=0, cache_salt=salt)


def victims(actions) -> list:
    assert len(actions) <= 1
    return list(actions[0].keys) if actions else []


# --- randomized differential against LMCache's LRU ---------------------------

def drive(lmc, rng: random.Random, theirs, ours, steps: int, universe: int, salts=("",), isolated=False,
          check_order=True):
    """Random valid MP-mode histories applied to both policies; every answer
    compared. Victims are removed later (or never, or used again first), as
    LMCache's controllers do asynchronously."""
    pending: list = []   # victims not yet removed
    locked: set = set()
    history: list = []
    for step in range(steps):
        op = rng.random()
        if op < 0.35:
            n = rng.randint(1, 8)
            batch = [okey(lmc, rng.randrange(universe), rng.choice(salts)) for _ in range(n)]
            if pending and rng.random() < 0.3:
                batch.append(rng.choice(pending))  # a victim written again before its removal
            call = ("on_keys_created", batch)
        elif op < 0.6:
            n = rng.randint(1, 8)
            batch = [okey(lmc, rng.randrange(universe), rng.choice(salts)) for _ in range(n)]
            if pending and rng.random() < 0.4:
                batch.append(rng.choice(pending))  # a victim read before its removal
            call = ("on_keys_touched", batch)
        elif op < 0.75:
            k = rng.randint(0, len(pending))
            rng.shuffle(pending)
            gone, pending = pending[:k], pending[k:]
            if rng.random() < 0.2:
                gone.append(okey(lmc, rng.randrange(universe), rng.choice(salts)))  # removed by someone else
            call = ("on_keys_removed", gone)
        elif op < 0.8:
            locked = {okey(lmc, rng.randrange(universe), rng.choice(salts)) for _ in range(rng.randint(0, 6))}
            continue
        elif op < 0.83 and not isolated:
            call = ("get_eviction_candidates", rng.randint(1, 6))
        elif op < 0.85:
            state = theirs.capture()
            ours_state = ours.capture()
            history.append(("capture/restore",))
            if isolated:  # LMCache's IsolatedLRU captures its order: same keys, victims first
                assert ours_state == state, history[-40:]
            ours.restore(ours_state)
            continue
        else:
            ratio = rng.choice([0.0, 0.01, 0.1, 0.3, 0.5, 1.0, 1.5, -0.2])
            flt = None if rng.random() < 0.4 else (lambda k, locked=frozenset(locked): k not in locked)
            salt = rng.choice(salts) if isolated else None
            call = ("get_eviction_actions", ratio, flt, salt)
        history.append(call)
        if call[0] == "get_eviction_actions":
            a = victims(theirs.get_eviction_actions(call[1], call[2], call[3]))
            b = victims(ours.get_eviction_actions(call[1], call[2], call[3]))
            assert a == b, (step, history[-40:])
            pending.extend(k for k in a if k not in pending)
        elif call[0] == "get_eviction_candidates":
            a = theirs.get_eviction_candidates(call[1])
            assert a == ours.get_eviction_candidates(call[1]), (step, history[-40:])
        else:
            getattr(theirs, call[0])(call[1])
            getattr(ours, call[0])(call[1])
        assert theirs.get_num_tracked_keys() == ours.get_num_tracked_keys(), (step, history[-40:])
        if isolated:
            for s in salts:
                assert theirs.get_num_tracked_keys(s) == ours.get_num_tracked_keys(s), (step, history[-40:])


@pytest.mark.parametrize("seed", range(6))
def test_lru_decides_as_lmcache_lru_on_random_histories(lmc, seed):
    rng = random.Random(seed)
    max_keys = [kl.DEFAULT_MAX_KEYS, 7, 64][seed % 3]  # 7: most new keys first make room
    theirs = lmc.LRU()
    ours = kl.eviction_policy("lru", max_keys=max_keys)
    if seed % 2:
        for p in (theirs, ours):
            p.register_eviction_destination(lmc.Destination.L2_CACHE)
            p.register_eviction_destination(lmc.Destination.DISCARD)
    drive(lmc, rng, theirs, ours, steps=3000, universe=[40, 200, 1000][seed % 3])


@pytest.mark.parametrize("seed", range(4))
def test_isolated_lru_decides_as_lmcache_isolated_lru_on_random_histories(lmc, seed):
    rng = random.Random(100 + seed)
    theirs = lmc.IsolatedLRU()
    ours = kl.eviction_policy("lru", isolation=True, max_keys=[9, 1000][seed % 2])
    assert ours.support_isolation and theirs.support_isolation
    drive(lmc, rng, theirs, ours, steps=3000, universe=[60, 300][seed % 2], salts=("alice", "bob", "carol"),
          isolated=True)


@pytest.mark.parametrize("seed", range(4))
def test_arc_decides_as_lmcache_arc_without_ghost_feedback(lmc, seed):
    """LMCache's ARC is a variant (a ghost made when a removal completes, the
    vLLM tie rule); on histories without ghost feedback (every key created
    once; a victim removed before the next eviction cycle and never used
    again) its target stays 0 and both ARCs must choose exactly alike: T1's
    LRU end first, T2's after, a touch or a second creation moving T1 to T2.
    (Not covered, because the two differ there: a named victim or a key the
    filter refused waits at the head of kvpolicy's line, where LMCache's ARC
    would offer T1's newer keys before a T2 key.)"""
    rng = random.Random(200 + seed)
    theirs, ours = lmc.ARC(), kl.eviction_policy("arc")
    resident: list = []
    pending: list = []
    fresh = 0
    for step in range(2500):
        op = rng.random()
        if pending:
            call = ("on_keys_removed", pending)
            resident = [r for r in resident if r not in pending]
            pending = []
        elif op < 0.4:
            batch = [okey(lmc, fresh + i) for i in range(rng.randint(1, 6))]
            fresh += len(batch)
            batch += rng.sample(resident, k=min(len(resident), rng.randint(0, 2)))
            rng.shuffle(batch)
            call = ("on_keys_created", batch)
            resident += [k for k in dict.fromkeys(batch) if k not in resident]
        elif op < 0.75:
            call = ("on_keys_touched", rng.sample(resident, k=min(len(resident), rng.randint(1, 6))))
        else:
            ratio = rng.choice([0.01, 0.1, 0.3, 1.0])
            a = victims(theirs.get_eviction_actions(ratio))
            assert a == victims(ours.get_eviction_actions(ratio)), (seed, step)
            pending = a
            continue
        getattr(theirs, call[0])(call[1])
        getattr(ours, call[0])(call[1])
        assert theirs.get_num_tracked_keys() == ours.get_num_tracked_keys(), (seed, step)
    assert theirs.get_debug_state()["target_t1_size"] == 0  # no feedback happened


# --- the contract every offered policy keeps ----------------------------------

POLICIES = kl.policy_names()


def test_offered_policies_are_every_policy_without_a_future():
    assert "lru" in POLICIES and "s3fifo" in POLICIES and "arc" in POLICIES
    assert "belady" not in POLICIES and "reuse_oracle_lru" not in POLICIES
    from kvpolicy._kvpolicy import _uses_future

    assert POLICIES == [p for p in kvpolicy.policies() if not _uses_future(p)]  # the rest read the future


@pytest.mark.parametrize("policy", POLICIES)
def test_contract_on_random_histories(lmc, policy):
    """Against a model of what LMCache relies on: which keys are tracked.
    Victims are tracked keys, distinct, eligible, as many as asked while
    enough eligible keys exist (all of them otherwise); a victim stays tracked
    until removed and is offered again first; isolation never crosses salts;
    capture/restore keeps the tracked keys; max_keys never loses a key."""
    rng = random.Random(hash(policy) & 0xFFFF)
    for isolation, max_keys in ((False, 1000), (False, 5), (True, 50)):
        p = kl.eviction_policy(policy, isolation=isolation, max_keys=max_keys)
        salts = ("a", "b") if isolation else ("", "x")
        tracked: dict = {}   # key -> salt
        last: list = []
        for step in range(700):
            op = rng.random()
            ks = [okey(lmc, rng.randrange(60), rng.choice(salts)) for _ in range(rng.randint(1, 6))]
            if op < 0.35:
                p.on_keys_created(ks)
                tracked.update((k, k.cache_salt) for k in ks)
                last = []
            elif op < 0.55:
                p.on_keys_touched(ks)
                last = []
            elif op < 0.7:
                gone = ks + rng.sample(last, k=len(last) // 2) if last else ks
                p.on_keys_removed(gone)
                for k in gone:
                    tracked.pop(k, None)
                last = [k for k in last if k not in gone]
            elif op < 0.75:
                p.restore(p.capture())
                last = []
            else:
                salt = rng.choice(salts) if isolation else None
                pool = [k for k, s in tracked.items() if salt is None or s == salt]
                locked = set(rng.sample(pool, k=min(len(pool), rng.randint(0, 3))))
                asked = []
                ratio = rng.choice([0.05, 0.2, 0.5, 1.0])
                got = victims(p.get_eviction_actions(ratio, lambda k: asked.append(k) or k not in locked, salt))
                target = max(1, int(len(pool) * ratio)) if pool else 0
                assert len(got) == len(set(got)), (policy, step)
                assert set(got) <= set(pool) - locked, (policy, step)
                assert len(got) == min(target, len(pool) - len(locked)), (policy, step, len(pool))
                assert set(asked) <= set(pool), (policy, step)  # the filter sees only tracked keys
                if last and not locked and salt is None and len(got) >= len(last):
                    assert got[:len(last)] == last, (policy, step)  # unremoved victims come first, in order
                last = got if not locked and salt is None else []
            assert p.get_num_tracked_keys() == len(tracked), (policy, isolation, max_keys, step)
            if isolation:
                for s in salts:
                    assert p.get_num_tracked_keys(s) == sum(1 for v in tracked.values() if v == s)
        # Everything tracked can go, eligible or not, when asked for all of it.
        if not isolation:
            assert set(victims(p.get_eviction_actions(1.0))) == set(tracked)


@pytest.mark.parametrize("policy", ["lru", "fifo", "s3fifo", "arc", "lfu"])
def test_a_victim_used_again_before_its_removal_stays(lmc, policy):
    p = kl.eviction_policy(policy)
    ks = [okey(lmc, i) for i in range(10)]
    p.on_keys_created(ks)
    first = victims(p.get_eviction_actions(0.1))
    assert len(first) == 1 and p.get_num_tracked_keys() == 10
    assert victims(p.get_eviction_actions(0.1)) == first  # not removed yet: offered again
    p.on_keys_touched(first)
    p.on_keys_removed([])
    assert p.get_num_tracked_keys() == 10
    p.on_keys_removed(first)
    assert p.get_num_tracked_keys() == 9
    assert first[0] not in victims(p.get_eviction_actions(1.0))


def test_lru_keeps_a_requests_later_keys_as_earlier_victims(lmc):
    p = kl.eviction_policy("lru")
    ks = [okey(lmc, i) for i in range(4)]
    p.on_keys_created(ks)
    assert victims(p.get_eviction_actions(1.0)) == ks[::-1]


def test_isolated_policy_evicts_only_the_salt_asked_for(lmc):
    p = kl.eviction_policy("s3fifo", isolation=True)
    p.on_keys_created([okey(lmc, i, "alice") for i in range(5)] + [okey(lmc, i, "bob") for i in range(5)])
    got = victims(p.get_eviction_actions(1.0, cache_salt="bob"))
    assert sorted(k.cache_salt for k in got) == ["bob"] * 5
    assert p.get_num_tracked_keys("alice") == 5 and p.get_tracked_salts() == ["alice", "bob"]
    with pytest.raises(ValueError, match="needs cache_salt"):
        p.get_eviction_actions(1.0)
    assert not kl.eviction_policy("lru").support_isolation


def test_capture_restore_keeps_lru_order_across_instances(lmc):
    p = kl.eviction_policy("lru", isolation=True)
    ks = [okey(lmc, i, s) for s in ("a", "b") for i in range(6)]
    p.on_keys_created(ks)
    p.on_keys_touched([ks[0], ks[7]])
    victims(p.get_eviction_actions(0.2, cache_salt="a"))  # a victim not yet removed stays first
    q = kl.eviction_policy("lru", isolation=True)
    q.restore(p.capture())
    for s in ("a", "b"):
        assert victims(q.get_eviction_actions(1.0, cache_salt=s)) == victims(p.get_eviction_actions(1.0, cache_salt=s))
    assert p.name == q.name == "kvpolicy_lru_order"


def test_install_makes_lmcaches_factory_build_kvpolicy(lmc):
    import lmcache.v1.distributed.eviction_policy as pkg

    try:
        kl.install("s3fifo", small_fraction=0.2)
        built = pkg.CreateEvictionPolicy(lmc.EvictionConfig(eviction_policy="LRU"))
        assert built.kvpolicy_name == "s3fifo" and not built.support_isolation
        iso = pkg.CreateEvictionPolicy(lmc.EvictionConfig(eviction_policy="IsolatedLRU"))
        assert iso.kvpolicy_name == "s3fifo" and iso.support_isolation
        assert type(pkg.CreateEvictionPolicy(lmc.EvictionConfig(eviction_policy="noop"))).__name__ == "NoOpEvictionPolicy"
        from lmcache.v1.distributed.eviction import EvictionPolicy

        assert isinstance(built, EvictionPolicy)
    finally:
        kl.uninstall()
    assert isinstance(pkg.CreateEvictionPolicy(lmc.EvictionConfig(eviction_policy="LRU")), lmc.LRU)


# --- the local CPU/disk backends' BaseCachePolicy -----------------------------

class Obj:
    def __init__(self, can_evict: bool = True):
        self.can_evict = can_evict


@pytest.mark.parametrize("seed", range(4))
def test_local_lru_decides_as_lmcache_local_lru(lmc, seed):
    """LMCache's local backend's calls (lmcache/v1/storage_backend/local_cpu_backend.py):
    put (mapping write + update_on_put), hit, pin/unpin (can_evict),
    get_evict_candidates, removal by pop (+ update_on_force_evict)."""
    rng = random.Random(seed)
    theirs_p = lmc.cache_policy.get_cache_policy("LRU")
    ours_p = kl.cache_policy("lru", max_keys=[1000, 6][seed % 2])()
    theirs, ours = theirs_p.init_mutable_mapping(), ours_p.init_mutable_mapping()
    for step in range(3000):
        op = rng.random()
        k = rng.randrange(80)
        if op < 0.35:
            if k not in theirs:
                for d, p in ((theirs, theirs_p), (ours, ours_p)):
                    d[k] = Obj()
                    p.update_on_put(k)
        elif op < 0.6:
            if k in theirs:
                theirs_p.update_on_hit(k, theirs)
                ours_p.update_on_hit(k, ours)
        elif op < 0.7:
            if k in theirs:
                pin = rng.random() < 0.5
                theirs[k].can_evict = ours[k].can_evict = not pin
        else:
            n = rng.randint(1, 5)
            a = theirs_p.get_evict_candidates(theirs, num_candidates=n)
            assert a == ours_p.get_evict_candidates(ours, num_candidates=n), step
            for key in a[: rng.randint(0, len(a))]:
                for d, p in ((theirs, theirs_p), (ours, ours_p)):
                    d.pop(key)
                    p.update_on_force_evict(key)
        assert list(theirs) == [k for k in theirs if k in ours] and set(theirs) == set(ours), step


def test_register_cache_policies_adds_kvpolicy_names_to_lmcaches_mapping(lmc):
    names = kl.register_cache_policies(s3fifo={"small_fraction": 0.2})
    try:
        assert "KVPOLICY_S3FIFO" in names and "KVPOLICY_LRU" in names
        p = lmc.cache_policy.get_cache_policy("kvpolicy_s3fifo")  # LMCache upper-cases the configured name
        d = p.init_mutable_mapping()
        for i in range(5):
            d[i] = Obj(can_evict=i != 0)
            p.update_on_put(i)
        got = p.get_evict_candidates(d, num_candidates=10)
        assert sorted(got) == [1, 2, 3, 4]
        del d[1]
        d.pop(2)
        d.clear()
        assert p.get_evict_candidates(d, num_candidates=10) == []
    finally:
        for n in names:
            lmc.cache_policy.POLICY_MAPPING.pop(n, None)


def test_both_name_forms_are_one_policy(lmc):
    """kvpolicy.policy_name: s3fifo and kvpolicy_s3fifo, in every LMCache seam."""
    assert kl.eviction_policy("kvpolicy_s3fifo", small_fraction=0.2).kvpolicy_name == "s3fifo"
    assert kl.eviction_policy("s3fifo").kvpolicy_name == "s3fifo"
    assert kl.cache_policy("kvpolicy_lru").kvpolicy_name == kl.cache_policy("lru").kvpolicy_name == "lru"
    try:
        assert "KVPOLICY_S3FIFO" in kl.register_cache_policies(kvpolicy_s3fifo={"small_fraction": 0.2})
    finally:
        for n in kl.policy_names():
            lmc.cache_policy.POLICY_MAPPING.pop(kl.CACHE_POLICY_PREFIX + n.upper(), None)
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'kvpolicy_nope'"):
        kl.eviction_policy("kvpolicy_nope")


# --- bad input ------------------------------------------------------------------

def test_bad_names_and_options_raise_naming_them(lmc):
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'lruu'"):
        kl.eviction_policy("lruu")
    with pytest.raises(kvpolicy.ConfigError, match="belady"):
        kl.eviction_policy("belady")
    with pytest.raises(kvpolicy.ConfigError, match="small_fractio"):
        kl.eviction_policy("s3fifo", small_fractio=0.2)
    with pytest.raises(kvpolicy.ConfigError, match="max_keys=0"):
        kl.eviction_policy("lru", max_keys=0)
    with pytest.raises(kvpolicy.ConfigError, match="isolation='yes'"):
        kl.eviction_policy("lru", isolation="yes")
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'nope'"):
        kl.install("nope")
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'nope'"):
        kl.cache_policy("nope")
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'nope'"):
        kl.register_cache_policies(nope={})
    with pytest.raises(kvpolicy.ConfigError, match="small_fractio"):
        kl.cache_policy("s3fifo", small_fractio=0.2)
    p = kl.eviction_policy("lru")
    p.on_keys_created([okey(lmc, 1)])
    with pytest.raises(ValueError, match="restore needs a capture"):
        p.restore({"buckets": [["", []]]})
    assert p.get_num_tracked_keys() == 1  # unchanged


# --- the documentation's examples (docs/getting-started/lmcache.md) -------------

def test_documented_registrations(lmc):
    try:
        # example-begin lmcache-install
        import kvpolicy.lmcache

        kvpolicy.lmcache.install("s3fifo", small_fraction=0.2)  # before LMCache's MP server starts

        # What LMCache's eviction controllers then build for --eviction-policy LRU:
        from lmcache.v1.distributed.config import EvictionConfig
        from lmcache.v1.distributed.eviction_policy import CreateEvictionPolicy

        policy = CreateEvictionPolicy(EvictionConfig(eviction_policy="LRU"))
        assert policy.kvpolicy_name == "s3fifo"
        # example-end
    finally:
        kl.uninstall()
    names = []
    try:
        # example-begin lmcache-local
        import kvpolicy.lmcache

        names = kvpolicy.lmcache.register_cache_policies(s3fifo={"small_fraction": 0.2})

        # What LMCache's local CPU and disk backends then build for
        # cache_policy: kvpolicy_s3fifo (or LMCACHE_CACHE_POLICY=kvpolicy_s3fifo):
        from lmcache.v1.storage_backend.cache_policy import get_cache_policy

        policy = get_cache_policy("kvpolicy_s3fifo")
        assert policy.kvpolicy_name == "s3fifo"
        # example-end
    finally:
        for n in names:
            lmc.cache_policy.POLICY_MAPPING.pop(n, None)
