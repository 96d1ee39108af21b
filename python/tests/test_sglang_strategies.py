"""kvpolicy.sglang inside SGLang's own tree caches, release by release.

Each pinned SGLang release (tests/peers/sources.py: 0.5.10.post1, the last
whose ``RadixCache`` picks the strategy by if/elif, and 0.5.23, whose
default ``UnifiedRadixCache`` builds it through ``get_eviction_strategy``)
is read from its wheel into a temporary folder and imported behind
peers/sglang_stubs.py's fence: SGLang's tree caches, strategies, factory
and eviction-policy arguments run as they are; torch is a NumPy stand-in
and the engine's GPU pools, host tier, collectives, metrics and event
sockets are named stand-ins that fail if called. No release on the index
carries SGLang's tests (its ``test/`` tree; the wheels' ``sglang/test/kits``
need a real torch), so the contract is SGLang's own code: a kvpolicy rule
SGLang also has must make SGLang's cache evict what SGLang's own strategy
makes it evict, victim for victim, over random insert / match / lock /
evict sequences; ``kvpolicy_retention_value`` what a naive model of
Pensieve's rule does.

Another release in place of a pin (the next one, in one command):
``KVPOLICY_PEER_VERSION=sglang==0.5.24 pytest python/tests/test_sglang_strategies.py``
(peers/sources.py). The fence is chosen by what the release has.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import math
import random
import sys
import time
from array import array
from pathlib import Path

import pytest

import kvpolicy
import kvpolicy.sglang as ks

from peers import sources

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import sglang_stubs  # noqa: E402

RELEASES = [sources.resolve(r) for r in (sources.SGLANG_0_5_10_POST1, sources.SGLANG_0_5_23)]


class Allocator:
    """Stands for SGLang's KV pool allocator (GPU memory): records the KV
    slots the tree cache frees, in order."""

    device = "cpu"

    def __init__(self):
        self.freed = []

    def free(self, indices):
        self.freed.extend(int(i) for i in indices)

    def free_segment(self, indices, *, start_pos=0):  # 0.5.23: a request's kv-row segment, here one page each
        self.free(indices)


class ArgumentError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse as SGLang's launch_server uses it, but an error raises instead of exiting."""

    def error(self, message):
        raise ArgumentError(message)


class Tree:
    """One SGLang tree cache, driven through its public calls."""

    def __init__(self, sglang, cache, allocator):
        self.sglang, self.cache, self.allocator, self.next_slot = sglang, cache, allocator, 0

    @property
    def strategy(self):
        return self.cache.tree_core.eviction_strategy if self.sglang.unified else self.cache.eviction_strategy

    @strategy.setter
    def strategy(self, value):  # before the first eviction (the unified tree binds it then)
        if self.sglang.unified:
            self.cache.tree_core.eviction_strategy = value
        else:
            self.cache.eviction_strategy = value

    def key(self, tokens):
        m = self.sglang.m
        return m.RadixKey(array("q", tokens)) if self.sglang.unified else m.RadixKey(list(tokens))

    def insert(self, tokens, priority=0):
        m = self.sglang.m
        slots = m.torch.tensor(range(self.next_slot, self.next_slot + len(tokens)), dtype=m.torch.int64)
        self.next_slot += len(tokens)
        self.cache.insert(m.InsertParams(key=self.key(tokens), value=slots, priority=priority))

    def match(self, tokens):
        return self.cache.match_prefix(self.sglang.m.MatchPrefixParams(key=self.key(tokens)))

    def lock(self, tokens):
        node = self.match(tokens).last_device_node
        if self.sglang.unified:
            return self.cache.lock(node)
        self.cache.inc_lock_ref(node)
        return node

    def unlock(self, handle):
        if self.sglang.unified:
            self.cache.unlock(handle)
        else:
            self.cache.dec_lock_ref(handle)

    def evict(self, num_tokens):
        before = len(self.allocator.freed)
        self.cache.evict(self.sglang.m.EvictParams(num_tokens=num_tokens))
        return self.allocator.freed[before:]


class SGLang:
    """One release of SGLang, as its server parses arguments and its scheduler builds the tree cache."""

    def __init__(self, release, layout):
        self.release, self.unified = release, layout == "unified"
        import torch  # the stand-in

        from sglang.srt.mem_cache import base_prefix_cache, cache_init_params, evict_policy, radix_cache

        m = self.m = argparse.Namespace(torch=torch, evict_policy=evict_policy, radix_cache=radix_cache,
                                        RadixKey=radix_cache.RadixKey, CacheInitParams=cache_init_params.CacheInitParams,
                                        InsertParams=base_prefix_cache.InsertParams,
                                        MatchPrefixParams=base_prefix_cache.MatchPrefixParams,
                                        EvictParams=base_prefix_cache.EvictParams)
        if self.unified:
            from sglang.srt.arg_groups import choices
            from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
            from sglang.srt.arg_groups.fields.memory import Memory
            from sglang.srt.mem_cache import unified_radix_cache, utils
            from sglang.srt.mem_cache.unified_cache import tree_core_registry
            from sglang.srt.mem_cache.unified_cache.components import ComponentType, base

            m.choices, m.add_cli_args_from_dataclass, m.Memory, m.utils = choices, add_cli_args_from_dataclass, Memory, utils
            m.UnifiedRadixCache, m.tree_core_registry, m.FULL = (unified_radix_cache.UnifiedRadixCache,
                                                                tree_core_registry, ComponentType.FULL)
            m.clock = lambda: base._LAST_ACCESS_TIME_COUNTER_FLOAT  # the access counter the tree stamps nodes with
        else:
            from sglang.srt import server_args

            m.choices = server_args
            m.clock = lambda: time.monotonic()  # RadixCache stamps nodes with it (a test clock here, see test_clock)

    def parse_args(self, argv):
        parser = Parser()
        if self.unified:  # ServerArgs.add_cli_args does this for every field group; this is the memory group
            self.m.add_cli_args_from_dataclass(parser, self.m.Memory)
        else:
            self.m.choices.add_radix_eviction_policy_argument(parser)
        return parser.parse_args(argv)

    def tree_cache(self, args) -> Tree:
        """The tree cache SGLang's scheduler builds from the parsed arguments
        (0.5.23: kv_cache_builder.py; 0.5.10: scheduler.py), on one rank, page size 1."""
        m, allocator = self.m, Allocator()
        common = dict(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator, page_size=1,
                      eviction_policy=args.radix_eviction_policy)
        if self.unified:
            params = m.CacheInitParams(**common, eviction_policy_config=args.radix_eviction_policy_config,
                                       tree_components=(m.FULL,))
            return Tree(self, m.UnifiedRadixCache(params), allocator)
        return Tree(self, m.radix_cache.RadixCache(m.CacheInitParams(**common)), allocator)

    def tree(self, policy, config=None) -> Tree:
        argv = ["--radix-eviction-policy", policy]
        if config is not None:
            argv += ["--radix-eviction-policy-config", config]
        return self.tree_cache(self.parse_args(argv))

    # What install() touches, so that each test starts from SGLang as it was loaded.
    def snapshot(self):
        m = self.m
        return (list(m.choices.RADIX_EVICTION_POLICY_CHOICES), m.radix_cache.RadixCache.__init__,
                dict(m.utils._EVICTION_POLICY_FACTORIES) if self.unified else None,
                m.tree_core_registry.resolve_tree_core_backend if self.unified else None)

    def restore(self, state):
        m = self.m
        m.choices.RADIX_EVICTION_POLICY_CHOICES[:] = state[0]
        m.radix_cache.RadixCache.__init__ = state[1]
        if self.unified:
            m.utils._EVICTION_POLICY_FACTORIES.clear()
            m.utils._EVICTION_POLICY_FACTORIES.update(state[2])
            m.tree_core_registry.resolve_tree_core_backend = state[3]


@pytest.fixture(scope="module", params=RELEASES, ids=[r.version for r in RELEASES])
def loaded(request, tmp_path_factory):
    release = request.param
    src = sources.extract(release, tmp_path_factory.mktemp("sglang-" + release.version), sglang_stubs.FILES)
    with sglang_stubs.load(src) as layout:
        yield SGLang(release, layout)


class Clock:
    """time.monotonic for a test: a microsecond later at every call, as a real
    clock is; the test adds a second per operation, and freezes it while a cache
    evicts (SGLang stamps nothing then; the strategies read one now per pass)."""

    def __init__(self):
        self.t, self.frozen = 1000.0, False

    def __call__(self):
        if not self.frozen:
            self.t += 1e-6
        return self.t


@pytest.fixture
def test_clock(monkeypatch):
    """RadixCache stamps nodes with time.monotonic: one clock, advanced by the
    test, makes two caches given the same operations stamp the same times."""
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    return clock


@pytest.fixture
def sglang(loaded, test_clock, monkeypatch):
    state = loaded.snapshot()
    monkeypatch.setattr(ks, "_OPTIONS", {})  # install()'s options, kept across calls
    loaded.test_clock = test_clock
    yield loaded
    loaded.restore(state)


def workload(seed: int, n: int = 240):
    """Random operations over a growing radix tree: requests that share a prefix of an
    earlier one, hits, locked paths (a running request's), unlocks and evictions."""
    rng = random.Random(seed)
    seqs, ops, locks = [], [], 0
    for _ in range(n):
        r = rng.random()
        if not seqs or r < 0.4:
            base = rng.choice(seqs) if seqs and rng.random() < 0.75 else []
            tokens = base[:rng.randint(0, len(base))] + [rng.randrange(1, 40) for _ in range(rng.randint(1, 10))]
            seqs.append(tokens)
            ops.append(("insert", tokens, rng.choice([0, 0, 1, 5])))
        elif r < 0.7:
            s = rng.choice(seqs)
            ops.append(("match", s[:rng.randint(1, len(s))]))
        elif r < 0.78:
            ops.append(("lock", rng.choice(seqs)))
            locks += 1
        elif r < 0.85 and locks:
            ops.append(("unlock", rng.randrange(locks)))
        else:
            ops.append(("evict", rng.randint(1, 30)))
    return ops + [("evict", 10 ** 6)]


def run(tree: Tree, ops, clock):
    """The KV slots each eviction freed, in order."""
    evicted, locks = [], []
    for op in ops:
        clock.t += 1.0
        if op[0] == "insert":
            tree.insert(op[1], op[2])
        elif op[0] == "match":
            tree.match(op[1])
        elif op[0] == "lock":
            locks.append(tree.lock(op[1]))
        elif op[0] == "unlock":
            if locks[op[1]] is not None:
                tree.unlock(locks[op[1]])
                locks[op[1]] = None
        else:
            clock.frozen = True
            try:
                evicted.append(tree.evict(op[1]))
            finally:
                clock.frozen = False
    return evicted


# --- registration through SGLang's own path --------------------------------------------

def test_install_registers_the_construction_path_this_release_has(sglang):
    with pytest.raises(ArgumentError, match="invalid choice: 'kvpolicy_lfu'"):
        sglang.tree("kvpolicy_lfu")  # SGLang's own choices, before install()
    assert kvpolicy.sglang.install() == ks.policy_names()
    assert set(ks.policy_names()) <= set(sglang.m.choices.RADIX_EVICTION_POLICY_CHOICES)
    tree = sglang.tree("kvpolicy_lfu")
    assert tree.strategy.kvpolicy_name == "lfu" and isinstance(tree.strategy, sglang.m.evict_policy.EvictionStrategy)
    assert type(sglang.tree("lfu").strategy) is sglang.m.evict_policy.LFUStrategy
    if sglang.unified:  # the factories, not a wrapped RadixCache; and the Python TreeCore
        assert sglang.m.radix_cache.RadixCache.__init__ is sglang.snapshot()[1]
        assert set(ks.policy_names()) <= set(sglang.m.utils._EVICTION_POLICY_FACTORIES)
        assert type(tree.cache.tree_core).__name__ == "UnifiedTreeCore"
        # RadixCache (0.5.23: FlexKV, simulation) builds it through the same factory
        plain = sglang.m.radix_cache.RadixCache(sglang.m.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=1,
            eviction_policy="kvpolicy_fifo"))
        assert plain.eviction_strategy.kvpolicy_name == "fifo"
    else:
        assert getattr(sglang.m.radix_cache.RadixCache.__init__, "kvpolicy_original", None) is not None
    kvpolicy.sglang.install(retention_value={"alpha": 0.003})
    kvpolicy.sglang.install()  # again, as SGLang's plugin loader does: one wrapper, no duplicate choices
    assert sglang.m.choices.RADIX_EVICTION_POLICY_CHOICES.count("kvpolicy_lru") == 1
    assert sglang.tree("kvpolicy_lru").strategy.kvpolicy_name == "lru"
    assert sglang.tree("kvpolicy_retention_value").strategy.alpha == 0.003  # the options stay


def test_install_example(sglang):
    # example-begin sglang-install
    import kvpolicy.sglang

    kvpolicy.sglang.install(retention_value={"alpha": 0.002})
    # then SGLang's launch_server in this process, --radix-eviction-policy kvpolicy_retention_value

    # What SGLang's scheduler then builds:
    args = sglang.parse_args(["--radix-eviction-policy", "kvpolicy_retention_value"])
    cache = sglang.tree_cache(args)
    assert cache.strategy.kvpolicy_name == "retention_value" and cache.strategy.alpha == 0.002
    # example-end
    assert cache.strategy.beta == 0.01 and args.radix_eviction_policy == "kvpolicy_retention_value"


def test_options_from_radix_eviction_policy_config(sglang):
    if not sglang.unified:
        pytest.skip(f"SGLang {sglang.release.version} has no --radix-eviction-policy-config; options come from install()")
    # example-begin sglang-config
    kvpolicy.sglang.install(retention_value={"alpha": 0.002, "beta": 0.02})

    args = sglang.parse_args(["--radix-eviction-policy", "kvpolicy_retention_value",
                              "--radix-eviction-policy-config", '{"alpha": 0.004}'])
    cache = sglang.tree_cache(args)
    assert (cache.strategy.alpha, cache.strategy.beta) == (0.004, 0.02)  # the flag's, over install()'s
    # example-end


def test_unified_cache_runs_kvpolicy_in_the_python_tree_core_where_sglang_would_pick_rust(sglang, monkeypatch):
    if not sglang.unified:
        pytest.skip(f"SGLang {sglang.release.version} has one tree core")
    registry = sglang.m.tree_core_registry
    # As on a Linux machine with a supported torch and the bundled Rust extension:
    monkeypatch.setattr(registry, "_rust_fallback_reason", lambda params: None)
    params = sglang.m.CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None,
                                      page_size=1, eviction_policy="lfu", tree_components=(sglang.m.FULL,))
    assert registry.select_tree_core_backend(params) == "rust"
    kvpolicy.sglang.install()
    assert registry.select_tree_core_backend(params) == "rust"  # SGLang's own policies: unchanged
    params.eviction_policy = "kvpolicy_lfu"
    assert registry.select_tree_core_backend(params) == "python"
    assert registry.resolve_tree_core_backend("python", params) == "python"


def test_sglangs_plugin_loader_installs_kvpolicy(sglang, monkeypatch):
    """SGLang's plugin framework runs kvpolicy's entry point (pyproject.toml) at the
    start of each of its processes: the server's, before it parses arguments, and
    each spawned scheduler's, where the tree cache is built."""
    try:
        plugins = importlib.import_module("sglang.srt.plugins")  # SGLang's own loader
    except ModuleNotFoundError:
        pytest.skip(f"SGLang {sglang.release.version} has no plugin framework: a launcher calls install()")

    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    found = [ep for ep in importlib.metadata.entry_points(group=plugins.GENERAL_PLUGINS_GROUP) if ep.name == "kvpolicy"]
    assert [ep.value for ep in found] == ["kvpolicy.sglang:install"], "kvpolicy's package declares no SGLang plugin"
    plugins.load_plugins()
    assert sglang.tree("kvpolicy_lfu").strategy.kvpolicy_name == "lfu"


def test_install_refuses_a_unified_tree_whose_clock_it_cannot_read(sglang, monkeypatch):
    if not sglang.unified:
        pytest.skip(f"SGLang {sglang.release.version}'s RadixCache stamps nodes with time.monotonic")
    base = sys.modules["sglang.srt.mem_cache.unified_cache.components.base"]
    monkeypatch.delattr(base, "_LAST_ACCESS_TIME_COUNTER_FLOAT")
    state = sglang.snapshot()
    with pytest.raises(ImportError, match="_LAST_ACCESS_TIME_COUNTER_FLOAT"):
        kvpolicy.sglang.install()
    assert sglang.snapshot() == state  # nothing registered


# --- the differentials ---------------------------------------------------------------

PAIRS = [("kvpolicy_lru", "lru"), ("kvpolicy_fifo", "fifo"), ("kvpolicy_lfu", "lfu"), ("kvpolicy_qos_aware", "priority")]


@pytest.mark.parametrize("ours, theirs", PAIRS)
@pytest.mark.parametrize("seed", range(3))
def test_sglangs_cache_evicts_as_with_sglangs_own_strategy(sglang, ours, theirs, seed):
    kvpolicy.sglang.install()
    if theirs not in sglang.m.choices.RADIX_EVICTION_POLICY_CHOICES:  # 0.5.10's flag offers lru, lfu, slru only
        sglang.m.choices.add_radix_eviction_policy_choices([theirs])
    ops = workload(seed)
    a, b = sglang.tree(theirs), sglang.tree(ours)
    assert b.strategy.kvpolicy_name == ours[len(ks.PREFIX):] and not hasattr(a.strategy, "kvpolicy_name")
    want = run(a, ops, sglang.test_clock)
    got = run(b, ops, sglang.test_clock)
    assert sum(map(len, want)) > 100 and sum(1 for e in want[:-1] if e) > 5  # the workload evicts
    assert got == want


def naive_retention_value(sglang, alpha, beta, const):
    """Pensieve's rule from its definition: each of the node's n tokens after a
    p-token prefix costs alpha x (its context length) + beta + const, summed;
    divided by the time since the node's last access on SGLang's clock; the
    lowest goes first, older last access first among equals."""

    class NaiveRetentionValue(sglang.m.evict_policy.EvictionStrategy):
        def get_priority(self, node):
            prefix, up = 0, node.parent
            while up is not None and up.parent is not None:
                prefix += len(up.key)
                up = up.parent
            cost = sum(alpha * (prefix + i + 1) + beta + const for i in range(len(node.key)))
            idle = sglang.m.clock() - node.last_access_time
            return (cost / idle if idle > 0 else math.inf, node.last_access_time)

    return NaiveRetentionValue()


@pytest.mark.parametrize("seed", range(3))
def test_retention_value_evicts_as_the_naive_rule(sglang, seed):
    # (parameters of no simple ratio: an exact tie of two scores would be ordered by rounding)
    alpha, beta, const = [(0.002, 0.0107, 0.0031), (0.00137, 0.0, 0.0101), (0.00051, 0.0493, 0.01)][seed]
    options = {"alpha": alpha, "beta": beta, "const_non_attention": const}
    if sglang.unified:
        kvpolicy.sglang.install()
        ours = sglang.tree("kvpolicy_retention_value", '{"alpha": %r, "beta": %r, "const_non_attention": %r}'
                           % (alpha, beta, const))
    else:
        kvpolicy.sglang.install(retention_value=options)
        ours = sglang.tree("kvpolicy_retention_value")
    assert (ours.strategy.alpha, ours.strategy.beta, ours.strategy.const_non_attention) == (alpha, beta, const)
    reference = sglang.tree("lru")
    reference.strategy = naive_retention_value(sglang, alpha, beta, const)
    ops = workload(100 + seed)
    want = run(reference, ops, sglang.test_clock)
    assert run(ours, ops, sglang.test_clock) == want
    assert want != run(sglang.tree("lru"), ops, sglang.test_clock)  # not LRU in disguise


def test_retention_value_keeps_a_long_prefixs_tail_over_a_more_recent_cheap_leaf(sglang):
    kvpolicy.sglang.install()
    tree = sglang.tree("kvpolicy_retention_value")
    prefix = list(range(1, 31))
    tree.insert(prefix)  # slots 0-29
    tree.insert(prefix + [31, 32, 33, 34, 35])  # slots 30-64: a 5-token leaf (60-64) after a 30-token prefix
    tree.insert([50])  # slot 65: a 1-token leaf at the root
    sglang.test_clock.t += 1.0
    tree.match(prefix + [31, 32, 33, 34, 35])
    sglang.test_clock.t += 1.0
    tree.match([50])  # used last
    sglang.test_clock.t += 10.0
    assert tree.evict(1) == [65]  # the cheap one goes all the same
    assert tree.evict(1) == [60, 61, 62, 63, 64]


# --- bad input through SGLang's own path ---------------------------------------------

def test_an_unknown_name_fails_before_the_cache_runs(sglang):
    kvpolicy.sglang.install()
    with pytest.raises(ArgumentError, match="invalid choice: 'kvpolicy_arc'.*kvpolicy_retention_value"):
        sglang.parse_args(["--radix-eviction-policy", "kvpolicy_arc"])  # SGLang's flag lists what is offered
    params = argparse.Namespace(radix_eviction_policy="kvpolicy_arc", radix_eviction_policy_config=None)
    with pytest.raises(ValueError, match="kvpolicy_arc"):  # past the flag: the cache refuses to build
        sglang.tree_cache(params)
    with pytest.raises(kvpolicy.ConfigError, match=r"unknown policy 'kvpolicy_arc' \(two LRU lists"):
        ks.strategy("kvpolicy_arc")


@pytest.mark.parametrize("config, message", [
    ('{"alpah": 0.002}', r"unknown option 'alpah' of kvpolicy_retention_value; its options: \['alpha', 'beta', "
                         r"'const_non_attention'\]"),
    ('{"const": 0.002}', "unknown option 'const'"),
    ('{"alpha": -1}', r"retention_value: option alpha = -1 is outside \[0, inf\]"),
    ('{"alpha": "fast"}', "option alpha must be a number"),
    ('{"alpha": null}', "option alpha must be a number"),
    ('{"alpha": 0, "beta": 0, "const_non_attention": 0}', "all 0"),
])
def test_a_bad_option_in_radix_eviction_policy_config_fails_when_the_cache_is_built(sglang, config, message):
    if not sglang.unified:
        pytest.skip(f"SGLang {sglang.release.version} has no --radix-eviction-policy-config")
    kvpolicy.sglang.install()
    args = sglang.parse_args(["--radix-eviction-policy", "kvpolicy_retention_value",
                              "--radix-eviction-policy-config", config])
    with pytest.raises(ValueError, match=message) as e:  # SGLang's error type; kvpolicy's reason
        sglang.tree_cache(args)
    assert isinstance(e.value, kvpolicy.ConfigError)
    assert "--radix-eviction-policy-config" in str(e.value) and "kvpolicy_retention_value" in str(e.value)


def test_malformed_config_and_options_of_rules_without_any(sglang):
    kvpolicy.sglang.install()
    if sglang.unified:
        with pytest.raises(ArgumentError, match="--radix-eviction-policy-config: invalid loads value"):
            sglang.parse_args(["--radix-eviction-policy-config", "{alpha: 1}"])  # SGLang's json.loads
        with pytest.raises(kvpolicy.ConfigError, match="unknown option 'x' of kvpolicy_lru; its options: none"):
            sglang.tree("kvpolicy_lru", '{"x": 1}')
        with pytest.raises((TypeError, ValueError)):  # SGLang's factory(**config) of a JSON list
            sglang.tree("kvpolicy_lru", "[1]")
    with pytest.raises(kvpolicy.ConfigError, match=r"install\(retention_value=...\): retention_value: option alpha = -1"):
        kvpolicy.sglang.install(retention_value={"alpha": -1})
    with pytest.raises(kvpolicy.ConfigError, match="must be a dict"):
        kvpolicy.sglang.install(retention_value=3)
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'lruu'"):
        kvpolicy.sglang.install(lruu={})


def test_a_good_config_evicts(sglang):
    """What was checked when the cache was built holds when it evicts."""
    kvpolicy.sglang.install(retention_value={"const_non_attention": 0.0})
    tree = sglang.tree("kvpolicy_retention_value", '{"alpha": 0.0, "beta": 1.0}' if sglang.unified else None)
    for i in range(20):
        tree.insert([i, i + 1, i + 2])
        sglang.test_clock.t += 1.0
    assert len(tree.evict(30)) >= 30


# --- the strategies themselves -------------------------------------------------------

def test_offered_and_refused_names(loaded):
    assert ks.policy_names() == ["kvpolicy_lru", "kvpolicy_fifo", "kvpolicy_lfu", "kvpolicy_qos_aware",
                                 "kvpolicy_retention_value"]
    for name in ("arc", "s3fifo", "gdsf", "lrfu"):
        with pytest.raises(kvpolicy.ConfigError, match=f"unknown policy '{name}' \\("):
            ks.strategy(name)


def test_options_are_the_registrys(loaded):
    """Option names, defaults and checks are kvpolicy's registry's (the C++ retention_value's)."""
    registered = {o["name"]: o["default"] for o in kvpolicy.policy_options("retention_value")}
    assert set(ks._RetentionValue.options) <= set(registered)
    s = ks.strategy("retention_value", alpha=0.003, const_non_attention=0.0)
    assert (s.alpha, s.beta, s.const_non_attention) == (0.003, registered["beta"], 0.0)
    s = ks.strategy("kvpolicy_retention_value")  # both name forms
    assert (s.alpha, s.beta, s.const_non_attention) == tuple(registered[o] for o in ks._RetentionValue.options)
    assert type(ks.strategy("kvpolicy_lru")) is type(ks.strategy("lru"))
    with pytest.raises(kvpolicy.ConfigError, match="unknown option 'x' of kvpolicy_lru; its options: none"):
        ks.strategy("lru", x=1)
    with pytest.raises(kvpolicy.ConfigError, match=r"alpha = nan is outside \[0, inf\]"):
        ks.strategy("retention_value", alpha=float("nan"))
    with pytest.raises(kvpolicy.ConfigError, match="alpha = inf is not a cost"):  # pensieve_linear's own check
        ks.strategy("retention_value", alpha=float("inf"))


def test_retention_value_keeps_a_just_used_node_last(loaded):
    s = ks.strategy("kvpolicy_retention_value")

    class Node:
        def __init__(self, parent, n, t):
            self.parent, self.key, self.last_access_time = parent, [0] * n, t

    root = Node(None, 0, 0.0)
    a, b = Node(root, 8, 5.0), Node(root, 8, 1.0)
    assert s.get_priority(a, 5.0) == (math.inf, 5.0)
    assert s.get_priority(b, 5.0) < s.get_priority(a, 5.0)


def test_peer_version_names_another_release(monkeypatch):
    """KVPOLICY_PEER_VERSION (peers/sources.py): the newest pin of the project, or the one after '@'."""
    pins = (sources.SGLANG_0_5_10_POST1, sources.SGLANG_0_5_23)
    monkeypatch.setenv("KVPOLICY_PEER_VERSION", "sglang==0.5.24")
    old, new = map(sources.resolve, pins)
    assert old == sources.SGLANG_0_5_10_POST1
    assert (new.version, new.sha256, new.is_wheel, new.replaces) == ("0.5.24", None, True, "0.5.23")
    assert sources.resolve(new) is new
    monkeypatch.setenv("KVPOLICY_PEER_VERSION", "vllm==0.34.0, sglang==0.5.11@0.5.10.post1")
    assert [r.version for r in map(sources.resolve, pins)] == ["0.5.11", "0.5.23"]
    assert sources.resolve(sources.VLLM_0_19_1) == sources.VLLM_0_19_1
    assert sources.resolve(sources.VLLM_0_33_0).version == "0.34.0" and not sources.resolve(sources.VLLM_0_33_0).is_wheel
    for bad, message in [("sglang=0.5.24", "write <project>==<version>"), ("sglangg==1", "no pinned release of 'sglangg'"),
                         ("sglang==0.5.24@0.5.9", r"sglang 0.5.9 is not pinned; pinned: \['0.5.10.post1', '0.5.23'\]")]:
        monkeypatch.setenv("KVPOLICY_PEER_VERSION", bad)
        with pytest.raises(ValueError, match=message):
            sources.resolve(sources.SGLANG_0_5_23)
