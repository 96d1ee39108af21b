"""kvpolicy's EvictionStrategy classes inside SGLang 0.5.10.post1's radix-cache eviction.

SGLang's strategies (``sglang/srt/mem_cache/evict_policy.py``) come from its
pinned sdist (tests/peers/sources.py). SGLang's own strategy tests live in
its repository's ``test/`` tree, which no release on the package index
carries (the sdist is ``python/`` only), so they cannot be read at test time;
instead each kvpolicy strategy SGLang also has is run beside SGLang's own
class through SGLang's eviction loop (``RadixCache.evict``: a heap of the
evictable leaves by ``get_priority``, the smallest popped, a parent pushed
once it becomes an evictable leaf), on random radix trees, victim for victim;
``kvpolicy_retention_value`` against a naive model of Pensieve's rule.
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from pathlib import Path

import pytest

import kvpolicy
import kvpolicy.sglang as ks

from peers.sources import SGLANG_0_5_10_POST1, extract

PEERS = Path(__file__).resolve().parent / "peers"


@pytest.fixture(scope="module")
def sgl(tmp_path_factory):
    src = extract(SGLANG_0_5_10_POST1, tmp_path_factory.mktemp("sglang"), ("sglang/srt/mem_cache/evict_policy.py",))
    saved_modules, saved_path = dict(sys.modules), list(sys.path)
    sys.path.insert(0, str(PEERS))
    import sglang_stubs

    sglang_stubs.install(str(src))
    from sglang.srt.mem_cache import evict_policy

    yield evict_policy
    sys.modules.clear()
    sys.modules.update(saved_modules)
    sys.path[:] = saved_path


class Node:
    """The fields of SGLang's TreeNode a strategy reads."""

    def __init__(self, parent, key_len: int, t: float, priority: int = 0):
        self.parent = parent
        self.children = {}
        self.key = [0] * key_len
        self.last_access_time = t
        self.creation_time = t
        self.hit_count = 0
        self.priority = priority
        self.lock_ref = 0
        self.evicted = False

    def __lt__(self, other):  # SGLang's TreeNode orders by last access (heap ties)
        return self.last_access_time < other.last_access_time


def random_tree(rng: random.Random, n: int):
    root = Node(None, 0, 0.0)
    nodes = []
    t = 0.0
    for _ in range(n):
        t += rng.random()
        parent = rng.choice(nodes) if nodes and rng.random() < 0.7 else root
        node = Node(parent, rng.randint(1, 64), t, priority=rng.choice([0, 0, 1, 5]))
        parent.children[len(parent.children)] = node
        nodes.append(node)
    for _ in range(3 * n):  # hits: SGLang stamps the path root..node with one time
        t += rng.random()
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            node.creation_time = node.creation_time  # unchanged by hits
        while node is not root:
            node.last_access_time = t
            node.hit_count += 1
            node = node.parent
    for node in rng.sample(nodes, k=n // 10):
        node.lock_ref = 1
        p = node.parent
        while p is not root:
            p.lock_ref = 1
            p = p.parent
    return root, nodes, t


def sglang_evict(root, nodes, strategy, k: int):
    """RadixCache.evict's loop (radix_cache.py, 0.5.10.post1): leaves heaped by
    priority; pop, delete, push the parent when it becomes an unlocked leaf."""
    leaves = [n for n in nodes if not n.children and n.lock_ref == 0 and not n.evicted]
    heap = [(strategy.get_priority(n), n) for n in leaves]
    heapq.heapify(heap)
    out = []
    while len(out) < k and heap:
        _, x = heapq.heappop(heap)
        x.evicted = True
        del x.parent.children[next(c for c, v in x.parent.children.items() if v is x)]
        out.append(x)
        p = x.parent
        if p is not root and not p.children and p.lock_ref == 0:
            heapq.heappush(heap, (strategy.get_priority(p), p))
    return out


PAIRS = [("kvpolicy_lru", "LRUStrategy"), ("kvpolicy_fifo", "FIFOStrategy"),
         ("kvpolicy_lfu", "LFUStrategy"), ("kvpolicy_qos_aware", "PriorityStrategy")]


@pytest.mark.parametrize("ours, theirs", PAIRS)
@pytest.mark.parametrize("seed", range(5))
def test_strategy_evicts_as_sglangs_own_on_random_trees(sgl, ours, theirs, seed):
    rng = random.Random(seed)
    n = [20, 200, 1000, 50, 400][seed]
    tree_a = random_tree(random.Random(seed), n)
    tree_b = random_tree(random.Random(seed), n)
    mine = ks.strategy(ours)
    assert isinstance(mine, sgl.EvictionStrategy)
    a = sglang_evict(tree_a[0], tree_a[1], getattr(sgl, theirs)(), rng.randint(1, n))
    b = sglang_evict(tree_b[0], tree_b[1], mine, len(a))
    assert [tree_a[1].index(x) for x in a] == [tree_b[1].index(x) for x in b]


def test_retention_value_evicts_the_lowest_cost_per_idle_time(sgl):
    """Against a naive model: each step, among the evictable leaves, the
    lowest recompute cost / idle time (ties: older last access) goes."""
    alpha, beta, const = 0.002, 0.01, 0.003
    for seed in range(4):
        rng = random.Random(seed)
        root, nodes, now = random_tree(rng, 300)
        s = ks.strategy("retention_value", alpha=alpha, beta=beta, const=const)

        def naive(node):
            p, q = 0, node.parent
            while q.parent is not None:  # up to the root
                p += len(q.key)
                q = q.parent
            cost = sum(alpha * (p + i + 1) + beta + const for i in range(len(node.key)))
            idle = now + 1.0 - node.last_access_time
            return (cost / idle, node.last_access_time)

        class Fixed(type(s)):  # the same time for every score, as one evict call sees
            def get_priority(self, node, now_time=None):
                return super().get_priority(node, now + 1.0)

        fixed = Fixed.__new__(Fixed)
        fixed.__dict__.update(s.__dict__)
        got = sglang_evict(root, nodes, fixed, 120)
        # replay with the naive rule on a fresh copy of the same tree
        root2, nodes2, _ = random_tree(random.Random(seed), 300)
        want = []
        alive = set(range(len(nodes2)))
        for _ in range(len(got)):
            leaves = [i for i in alive if not nodes2[i].children and nodes2[i].lock_ref == 0]
            i = min(leaves, key=lambda i: naive(nodes2[i]))
            want.append(i)
            alive.discard(i)
            par = nodes2[i].parent
            del par.children[next(c for c, v in par.children.items() if v is nodes2[i])]
        assert [nodes.index(x) for x in got] == want


def test_retention_value_keeps_a_just_used_node_last(sgl):
    s = ks.strategy("kvpolicy_retention_value")
    root = Node(None, 0, 0.0)
    a, b = Node(root, 8, 5.0), Node(root, 8, 1.0)
    assert s.get_priority(a, 5.0) == (math.inf, 5.0)
    assert s.get_priority(b, 5.0) < s.get_priority(a, 5.0)


def test_offered_and_refused_names():
    assert ks.policy_names() == ["kvpolicy_lru", "kvpolicy_fifo", "kvpolicy_lfu", "kvpolicy_qos_aware",
                                 "kvpolicy_retention_value"]
    for name in ("arc", "s3fifo", "gdsf", "lrfu"):
        with pytest.raises(kvpolicy.ConfigError, match=f"unknown policy '{name}' \\("):
            ks.strategy(name)


def test_bad_names_and_options_raise_naming_them(sgl):
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'lruu'"):
        ks.strategy("lruu")
    with pytest.raises(kvpolicy.ConfigError, match="unknown option 'alpah'"):
        ks.strategy("retention_value", alpah=1.0)
    with pytest.raises(kvpolicy.ConfigError, match="alpha=-1"):
        ks.strategy("retention_value", alpha=-1)
    with pytest.raises(kvpolicy.ConfigError, match="all 0"):
        ks.strategy("retention_value", alpha=0, beta=0, const=0)
    with pytest.raises(kvpolicy.ConfigError, match="unknown option 'x'"):
        ks.strategy("lru", x=1)
    with pytest.raises(kvpolicy.ConfigError, match="must be a dict"):
        ks.install(retention_value=3)


# --- registration --------------------------------------------------------------------

@pytest.fixture
def sglang_server(sgl, monkeypatch):
    """Stand-ins for SGLang 0.5.10.post1's ``server_args`` (its choice list and
    ``add_radix_eviction_policy_choices``) and ``radix_cache`` (``RadixCache.__init__``'s
    if/elif on ``params.eviction_policy``): SGLang's own modules import the engine
    (torch, triton, transformers, IPython, device probes) on import."""
    import types

    server_args = types.ModuleType("sglang.srt.server_args")
    server_args.RADIX_EVICTION_POLICY_CHOICES = ["lru", "lfu", "slru"]
    server_args.add_radix_eviction_policy_choices = server_args.RADIX_EVICTION_POLICY_CHOICES.extend
    radix_cache = types.ModuleType("sglang.srt.mem_cache.radix_cache")

    class RadixCache:
        def __init__(self, params):
            self.eviction_policy = params.eviction_policy.lower()
            strategies = {"lru": sgl.LRUStrategy, "lfu": sgl.LFUStrategy, "slru": sgl.SLRUStrategy}
            if self.eviction_policy not in strategies:
                raise ValueError(f"Unknown eviction policy: {self.eviction_policy}.")
            self.eviction_strategy = strategies[self.eviction_policy]()

    radix_cache.RadixCache = RadixCache
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", server_args)
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.radix_cache", radix_cache)
    monkeypatch.setattr(sys.modules["sglang.srt"], "server_args", server_args, raising=False)
    sys.modules["sglang.srt.mem_cache"].radix_cache = radix_cache
    return server_args, radix_cache


def test_install_adds_the_names_and_builds_the_strategy(sglang_server):
    server_args, radix_cache = sglang_server
    # example-begin sglang-install
    import kvpolicy.sglang

    kvpolicy.sglang.install(retention_value={"alpha": 0.002})
    # then SGLang's launch_server in this process, --radix-eviction-policy kvpolicy_retention_value

    # What SGLang's radix cache then builds:
    params = CacheInitParams(eviction_policy="kvpolicy_retention_value")
    cache = RadixCache(params)
    assert cache.eviction_strategy.kvpolicy_name == "retention_value"
    # example-end
    assert cache.eviction_strategy.alpha == 0.002 and params.eviction_policy == "kvpolicy_retention_value"
    assert set(ks.policy_names()) <= set(server_args.RADIX_EVICTION_POLICY_CHOICES)
    assert type(RadixCache(CacheInitParams(eviction_policy="lfu")).eviction_strategy).__name__ == "LFUStrategy"
    with pytest.raises(kvpolicy.ConfigError, match="unknown policy 'kvpolicy_arc'"):
        RadixCache(CacheInitParams(eviction_policy="kvpolicy_arc"))


class CacheInitParams:  # the field RadixCache reads of SGLang's CacheInitParams
    def __init__(self, eviction_policy: str):
        self.eviction_policy = eviction_policy


def RadixCache(params):
    return sys.modules["sglang.srt.mem_cache.radix_cache"].RadixCache(params)
