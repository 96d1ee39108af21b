"""EvictionPolicy: every registered policy, batch calls, references, bad input."""

import random
from collections import OrderedDict

import numpy as np
import pytest

import kvpolicy

ALL = kvpolicy.policies()


def test_policies_lists_the_registry():
    assert len(ALL) == len(set(ALL)) == 29
    for name in ("lru", "fifo", "arc", "s3fifo", "sieve", "belady", "retention_value", "w_tinylfu",
                 "tail_aware_lru", "session_aware_lru", "reuse_oracle_lru", "lrfu", "superseded_lru", "adaptive_kv",
                 "queue_aware_lru", "queue_aware_adaptive_kv", "predicted_return", "queue_aware_predicted_return"):
        assert name in ALL

    def names(policy):
        return [o["name"] for o in kvpolicy.policy_options(policy)]

    assert kvpolicy.policy_options("lru") == []
    assert "small_fraction" in names("s3fifo")
    assert names("session_aware_lru") == [
        "far_factor",
        "gap_weight",
        "max_sessions",
        "tune_margin",
        "predict_gaps",
        "gap_min_samples",
    ]
    assert names("lrfu") == ["half_life", "ghost_factor"]
    assert names("adaptive_kv") == ["shadow_items", "window", "switch_sigmas", "switch_gain", "large_capacity",
                                    "large_shadow_items"]
    assert names("retention_value") == ["alpha", "beta", "const_non_attention"]
    assert kvpolicy.policy_options("queue_aware_adaptive_kv") == kvpolicy.policy_options("adaptive_kv")


def test_policy_options_describe_each_option():
    """Name, type, default (the C++ config_type{}'s), inclusive range and help, for every registered name."""
    assert kvpolicy.policy_options("s3fifo")[0] == {
        "name": "small_fraction", "type": "float", "default": 0.1, "min": 0.0, "max": 1.0,
        "help": "share of the capacity for the small FIFO S"}
    s3 = {o["name"]: o for o in kvpolicy.policy_options("s3fifo")}
    assert (s3["move_to_main_threshold"]["type"], s3["move_to_main_threshold"]["default"]) == ("int", 2)
    assert (s3["move_to_main_threshold"]["min"], s3["move_to_main_threshold"]["max"]) == (1, 3)
    assert s3["fill_main_before_first_eviction"]["default"] is False
    retention = {o["name"]: o["default"] for o in kvpolicy.policy_options("retention_value")}
    assert retention == {"alpha": 0.001, "beta": 0.01, "const_non_attention": 0.005}
    assert kvpolicy.policy_options("adaptive_kv_fast")[0]["default"] == 1024  # the preset's own
    for name in ALL + ["vllm_lru", "vllm_arc", "vllm_0_11_lru", "vllm_0_11_arc"]:
        for o in kvpolicy.policy_options(name):
            assert set(o) == {"name", "type", "default", "min", "max", "help"}
            assert o["type"] in ("float", "int", "bool") and o["help"]
            assert o["min"] <= o["default"] <= o["max"], (name, o)
            if name in ALL:  # each default is accepted as given
                kvpolicy.EvictionPolicy(name, 64, **{o["name"]: o["default"]})
    assert kvpolicy.policy_options("vllm_lru") == []
    with pytest.raises(kvpolicy.UnknownNameError, match=r"^unknown eviction policy 'nope'; accepted: fifo, .*, "
                                                         r"vllm_lru, vllm_arc, vllm_0_11_lru, vllm_0_11_arc$"):
        kvpolicy.policy_options("nope")


@pytest.mark.parametrize("policy, option, value, message", [
    ("s3fifo", "small_fraction", 1.5, "s3fifo: option small_fraction = 1.5 is outside [0, 1]"),
    ("s3fifo", "move_to_main_threshold", 0, "s3fifo: option move_to_main_threshold = 0 is outside [1, 3]"),
    ("slru", "segments", 2.5, "slru: option segments = 2.5 is not a whole number; give an integer in [1, 255]"),
    ("retention_value", "alpha", -1, "retention_value: option alpha = -1 is outside [0, inf]"),
    ("queue_aware_adaptive_kv", "switch_gain", 2,
     "queue_aware_adaptive_kv: option switch_gain = 2 is outside [0, 1]"),
    ("s3fifo", "smal_fraction", 0.1, "s3fifo: unknown option 'smal_fraction'; accepted: small_fraction, "
                                     "ghost_fraction, move_to_main_threshold, fill_main_before_first_eviction"),
    ("lru", "x", 1, "lru: takes no options, got 'x'"),
])
def test_a_bad_option_is_refused_naming_it(policy, option, value, message):
    with pytest.raises(kvpolicy.ConfigError) as e:
        kvpolicy.EvictionPolicy(policy, 10, **{option: value})
    assert str(e.value) == message


class NaiveLRU:
    """LRU with kvpolicy's hold rule: a release re-enters at the most-recent end."""

    def __init__(self):
        self.order = OrderedDict()  # evictable ids, least recent first
        self.held = set()

    def insert(self, i):
        self.order[i] = True

    def access(self, i):
        if i in self.order:
            self.order.move_to_end(i)

    def hold(self, i):
        del self.order[i]
        self.held.add(i)

    def release(self, i):
        self.held.remove(i)
        self.order[i] = True

    def erase(self, i):
        self.order.pop(i, None)
        self.held.discard(i)

    def pop(self, n):
        out = []
        while self.order and len(out) < n:
            out.append(self.order.popitem(last=False)[0])
        return out


class NaiveFIFO(NaiveLRU):
    """FIFO: insertion order; a hit and a release change nothing."""

    def __init__(self):
        super().__init__()
        self.stamp = {}
        self.clock = 0

    def insert(self, i):
        self.clock += 1
        self.stamp[i] = self.clock
        self.order[i] = True

    def access(self, i):
        pass

    def release(self, i):
        self.held.remove(i)
        self.order[i] = True
        self.order = OrderedDict(sorted(self.order.items(), key=lambda kv: self.stamp[kv[0]]))


def drive(policy, naive, capacity, steps, seed):
    """Random batches of every operation; the victims must agree."""
    rng = random.Random(seed)
    untracked, evictable, held = set(range(capacity)), set(), set()
    for _ in range(steps):
        op = rng.randrange(6)
        if op == 0 and untracked:
            ids = rng.sample(sorted(untracked), rng.randint(1, min(8, len(untracked))))
            policy.insert(np.array(ids, dtype=np.uint32))
            for i in ids:
                naive.insert(i)
            untracked -= set(ids)
            evictable |= set(ids)
        elif op == 1 and (evictable or held):
            ids = [rng.choice(sorted(evictable | held)) for _ in range(rng.randint(1, 6))]
            policy.access(ids)
            for i in ids:
                naive.access(i)
        elif op == 2 and evictable:
            ids = rng.sample(sorted(evictable), rng.randint(1, min(4, len(evictable))))
            policy.hold(ids)
            for i in ids:
                naive.hold(i)
            evictable -= set(ids)
            held |= set(ids)
        elif op == 3 and held:
            ids = rng.sample(sorted(held), rng.randint(1, min(4, len(held))))
            policy.release(ids)
            for i in ids:
                naive.release(i)
            held -= set(ids)
            evictable |= set(ids)
        elif op == 4 and (evictable or held) and rng.random() < 0.2:
            i = rng.choice(sorted(evictable | held))
            policy.erase(i)
            naive.erase(i)
            evictable.discard(i)
            held.discard(i)
            untracked.add(i)
        else:
            n = rng.randint(1, 5)
            got = policy.pop_victims(n).tolist()
            assert got == naive.pop(n)
            evictable -= set(got)
            untracked |= set(got)
        assert len(policy) == len(evictable) + len(held)
        assert policy.evictable_size == len(evictable)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lru_agrees_with_a_naive_reference(seed):
    drive(kvpolicy.EvictionPolicy("lru", 64), NaiveLRU(), 64, 20000, seed)


@pytest.mark.parametrize("seed", [1, 2])
def test_fifo_agrees_with_a_naive_reference(seed):
    drive(kvpolicy.EvictionPolicy("fifo", 48), NaiveFIFO(), 48, 10000, seed)


@pytest.mark.parametrize("name", ALL)
def test_a_batch_call_is_the_same_as_one_call_per_item(name):
    """One virtual call per batch must change nothing against one per id."""
    rng = random.Random(name)
    a, b = kvpolicy.EvictionPolicy(name, 200), kvpolicy.EvictionPolicy(name, 200)
    free = list(range(200))
    rng.shuffle(free)
    tracked = []
    for step in range(300):
        ids = [free.pop() for _ in range(min(len(free), rng.randint(1, 10)))]
        keys = [1000 + i for i in ids]
        nxt = [rng.randrange(1, 10**6) for _ in ids]
        if ids:
            a.insert(ids, now=step, keys=keys, next_use=nxt)
            for i, k, n in zip(ids, keys, nxt):
                b.insert(i, now=step, keys=[k], next_use=[n])
            tracked += ids
        hits = [rng.choice(tracked) for _ in range(5)] if tracked else []
        if hits:
            a.access(hits, now=step)
            for i in hits:
                b.access(i, now=step)
        n = rng.randint(0, 8)
        va, vb = a.pop_victims(n, now=step), b.pop_victims(n, now=step)
        assert va.tolist() == vb.tolist()
        for v in va.tolist():
            tracked.remove(v)
            free.append(v)
    assert a.counters() == b.counters()


def snapshot(p):
    return (len(p), p.evictable_size, p.counters(), [p.state(i) for i in range(p.capacity)])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p.insert([1]), "insert: id 1 is already tracked; erase it (or pop it as a victim) first"),
        (lambda p: p.insert([5, 6, 5]), "insert: id 5 appears twice; list each id once"),
        (lambda p: p.insert([4, 9]), "insert: id 9 is out of range; ids are 0 .. 7 (the capacity is 8)"),
        (lambda p: p.insert([-1]), "insert: ids: -1 is out of range; give values from 0 to 4294967295"),
        (lambda p: p.insert([4.5]), "insert: ids: expected integers, got dtype float64"),
        (lambda p: p.access([0, 7]), "access: id 7 is not tracked; insert it first"),
        (lambda p: p.hold([2]), "hold: id 2 is already held; hold an evictable item once"),
        (lambda p: p.release([0]), "release: id 0 is not held (released twice, or never held)"),
        (lambda p: p.erase([6]), "erase: id 6 is not tracked"),
        (lambda p: p.insert([4, 5], keys=[1]), "insert: 1 keys for 2 ids; give one per id, or none"),
    ],
)
def test_bad_input_raises_and_changes_nothing(call, message):
    p = kvpolicy.EvictionPolicy("arc", 8)
    p.insert([0, 1, 2, 3])
    p.hold([2])
    before = snapshot(p)
    with pytest.raises(kvpolicy.UsageError) as e:
        call(p)
    assert str(e.value) == message
    assert isinstance(e.value, ValueError)
    assert snapshot(p) == before


def test_configuration_errors():
    with pytest.raises(kvpolicy.UnknownNameError) as e:
        kvpolicy.EvictionPolicy("lru2", 10)
    assert str(e.value) == "unknown eviction policy 'lru2'; accepted: " + ", ".join(ALL)
    assert isinstance(e.value, kvpolicy.ConfigError) and isinstance(e.value, LookupError)
    with pytest.raises(kvpolicy.ConfigError, match=r"^lru: capacity 0 cannot hold any item; give at least 1$"):
        kvpolicy.EvictionPolicy("lru", 0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^s3fifo: unknown option 'smal_fraction'; accepted: small_fraction"):
        kvpolicy.EvictionPolicy("s3fifo", 10, smal_fraction=0.1)
    with pytest.raises(kvpolicy.ConfigError, match=r"^lru: takes no options, got 'x'"):
        kvpolicy.EvictionPolicy("lru", 10, x=1)
    with pytest.raises(kvpolicy.ConfigError, match=r"^retention_value: option alpha = nan is outside \[0, inf\]$"):
        kvpolicy.EvictionPolicy("retention_value", 10, alpha=float("nan"))
    with pytest.raises(kvpolicy.ConfigError, match=r"^pensieve_linear: alpha = inf is not a cost"):
        kvpolicy.EvictionPolicy("retention_value", 10, alpha=float("inf"))
    with pytest.raises(kvpolicy.ConfigError, match=r"^slru: option segments = 2.5 is not a whole number"):
        kvpolicy.EvictionPolicy("slru", 10, segments=2.5)


def test_options_reach_the_policy():
    # The option reaches the C++ config: a value it refuses is refused there,
    # with its message; one it accepts builds a working policy.
    with pytest.raises(kvpolicy.ConfigError, match=r"^s3fifo"):
        kvpolicy.EvictionPolicy("s3fifo", 20, small_fraction=1.5)
    p = kvpolicy.EvictionPolicy("s3fifo", 20, small_fraction=0.5)
    p.insert(list(range(20)), keys=list(range(20)))
    assert sorted(p.pop_victims(20).tolist()) == list(range(20))
    with pytest.raises(kvpolicy.ConfigError, match=r"^session_aware_lru: far_factor inf"):
        kvpolicy.EvictionPolicy("session_aware_lru", 20, far_factor=float("inf"))
    with pytest.raises(kvpolicy.ConfigError, match=r"^session_aware_lru: option max_sessions = 1.5 is not a whole"):
        kvpolicy.EvictionPolicy("session_aware_lru", 20, max_sessions=1.5)
    fixed = kvpolicy.EvictionPolicy("session_aware_lru", 20, far_factor=4, tune_margin=0)
    fixed.insert(list(range(20)), keys=list(range(20)))
    assert sorted(fixed.pop_victims(20).tolist()) == list(range(20))
    with pytest.raises(kvpolicy.ConfigError, match=r"^lrfu: option half_life = -1 is outside \[0, inf\]$"):
        kvpolicy.EvictionPolicy("lrfu", 20, half_life=-1)
    with pytest.raises(kvpolicy.ConfigError, match=r"^lrfu: half_life 0"):  # in the range, refused by lrfu
        kvpolicy.EvictionPolicy("lrfu", 20, half_life=0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^best_of_shadows: window 0"):
        kvpolicy.EvictionPolicy("adaptive_kv", 20, window=0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^best_of_shadows: switch_gain 1.000000 must be in \[0, 1\)"):
        kvpolicy.EvictionPolicy("adaptive_kv", 20, switch_gain=1)
    with pytest.raises(kvpolicy.ConfigError, match=r"^adaptive_kv: option shadow_items = 0.5 is not a whole"):
        kvpolicy.EvictionPolicy("adaptive_kv", 20, shadow_items=0.5)


def test_lrfu_half_life_runs_from_recency_to_frequency():
    # Key 0 is used three times, then keys 1..3 once each, in four calls (one
    # time each). A half-life of 32 capacities keeps the frequent key 0 past
    # the newer ones; 0.25 capacities forgets its uses, as LRU would.
    def first_victim(half_life):
        p = kvpolicy.EvictionPolicy("lrfu", 4, half_life=half_life)
        p.insert([0], keys=[100])
        p.access([0])
        p.access([0])
        p.insert([1, 2, 3], keys=[101, 102, 103])
        return p.pop_victims(1).tolist()[0]
    assert first_victim(32) != 0
    assert first_victim(0.25) == 0


def test_uint32_arrays_are_read_in_place_and_other_inputs_converted():
    p = kvpolicy.EvictionPolicy("lru", 10)
    p.insert(np.arange(3, dtype=np.uint32))
    p.insert(np.arange(3, 6, dtype=np.int64))
    p.insert(6)
    p.insert((7, 8))
    assert len(p) == 9
    assert p.pop_victims(3).dtype == np.uint32
