"""kvpolicy's eviction rules as SGLang radix-cache ``EvictionStrategy`` classes
(SGLang 0.5.10.post1 tested).

SGLang's ``RadixCache.evict`` (``python/sglang/srt/mem_cache/radix_cache.py``)
heaps the evictable leaves by ``strategy.get_priority(node)`` and pops the
smallest, pushing a parent once it becomes a leaf; the strategy sees one node
at a time, at eviction time, and never learns which node was popped. So a
kvpolicy policy can be offered there exactly when its victim is the minimum
of a score of one node's own fields (``last_access_time``,
``creation_time``, ``hit_count``, ``priority``, its tokens and its prefix
length) and the time:

- ``kvpolicy_lru``: last access (SGLang's ``lru``);
- ``kvpolicy_fifo``: creation time (SGLang's ``fifo``);
- ``kvpolicy_lfu``: (hit count, last access): kvpolicy's LFU, LRU among equals (SGLang's ``lfu``);
- ``kvpolicy_qos_aware``: (priority, last access): the lowest priority class
  first, LRU within (SGLang's ``priority``);
- ``kvpolicy_retention_value``: Pensieve's rule, recompute cost / idle time,
  the lowest first; cost from kvpolicy's ``pensieve_linear`` model
  (``alpha`` x context length + ``beta`` + ``const``, seconds, per token of the
  node, each token's context being its prefix length plus its place in the
  node), idle time = now - last access. The one rule SGLang lacks: a long
  shared prefix's tail is worth keeping over a short, equally idle leaf.

Not offered, and why:

- ``gdsf``: its inflation value L is the last victim's score, and SGLang pops
  victims itself without telling the strategy, so L cannot be kept;
- ``lrfu``: a node's worth sums a decayed weight for every reference, and a
  node keeps only its hit count and last access;
- ``arc``, ``s3fifo``, ``two_q``, ``slru``, ``lirs``, ``w_tinylfu``,
  ``clock``, ``sieve``, ``round_robin``: their order is global state (queues,
  ghost lists, reference bits, a hand, a sketch) that moves on every access
  and eviction, not a function of one node;
- ``tail_aware_lru``, ``session_aware_lru``, ``superseded_lru``,
  ``adaptive_kv``: sessions, learned rates and shadows across the cache;
- ``predictive``, ``checkerboard``: lifetimes and layers SGLang's nodes do not carry;
- ``belady``, ``reuse_oracle_lru``: they read the future.

Registration: SGLang 0.5.10.post1 picks the strategy with an if/elif on
``--radix-eviction-policy`` (choices ``lru``, ``lfu``, ``slru``, extendable
through ``server_args.add_radix_eviction_policy_choices``). ``install()``
adds the ``kvpolicy_*`` names to the choices and lets ``RadixCache`` build
them; call it in the process that parses SGLang's arguments and runs its
scheduler, before they start::

    import kvpolicy.sglang
    kvpolicy.sglang.install(retention_value={"alpha": 0.001})
    # then SGLang's launch_server in this process, --radix-eviction-policy kvpolicy_retention_value
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Tuple, Type

from .. import ConfigError

PREFIX = "kvpolicy_"
NOT_OFFERED = {
    "gdsf": "its inflation value L is the last victim's score; SGLang pops victims without telling the strategy",
    "lrfu": "a node's worth sums a decayed weight per reference; a node keeps only its hit count and last access",
    "arc": "two LRU lists and two ghost lists adapted on ghost hits: global state, not a per-node score",
    "s3fifo": "small/main/ghost FIFO queues moved on every access and eviction: global state",
}


def _base():
    try:
        from sglang.srt.mem_cache import evict_policy  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("kvpolicy.sglang's strategies subclass SGLang's EvictionStrategy "
                          "(sglang.srt.mem_cache.evict_policy); install SGLang") from e
    return evict_policy.EvictionStrategy


def _number(name: str, value: Any, where: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{where}: {name}={value!r} must be a finite number >= {minimum:g}")
    return float(value)


class _Lru:
    options: Tuple[str, ...] = ()

    def __init__(self, where: str):
        pass

    def get_priority(self, node, now_time: Optional[float] = None):
        return node.last_access_time


class _Fifo(_Lru):
    def get_priority(self, node, now_time: Optional[float] = None):
        return node.creation_time


class _Lfu(_Lru):
    def get_priority(self, node, now_time: Optional[float] = None):
        return (node.hit_count, node.last_access_time)


class _QosAware(_Lru):
    def get_priority(self, node, now_time: Optional[float] = None):
        return (node.priority, node.last_access_time)


class _RetentionValue(_Lru):
    options = ("alpha", "beta", "const")

    def __init__(self, where: str, alpha: float = 0.001, beta: float = 0.01, const: float = 0.005):
        # kvpolicy's pensieve_linear defaults (seed 000's illustrative numbers): calibrate.
        self.alpha = _number("alpha", alpha, where)
        self.beta = _number("beta", beta, where)
        self.const = _number("const", const, where)
        if self.alpha == 0 and self.beta == 0 and self.const == 0:
            raise ConfigError(f"{where}: alpha, beta and const are all 0, so every node costs nothing; "
                              "give at least one positive")

    def cost(self, node) -> float:
        """Recompute seconds of the node's tokens: token i of n after a p-token
        prefix costs alpha x (p + i + 1) + beta + const."""
        n = len(node.key)
        p = 0
        parent = node.parent
        while parent is not None and parent.parent is not None:
            p += len(parent.key)
            parent = parent.parent
        return n * (self.alpha * (p + (n + 1) / 2.0) + self.beta + self.const)

    def get_priority(self, node, now_time: Optional[float] = None):
        now = time.monotonic() if now_time is None else now_time
        idle = now - node.last_access_time
        if idle <= 0:
            return (math.inf, node.last_access_time)  # used just now: last to go
        return (self.cost(node) / idle, node.last_access_time)


_RULES: Dict[str, type] = {"lru": _Lru, "fifo": _Fifo, "lfu": _Lfu, "qos_aware": _QosAware,
                           "retention_value": _RetentionValue}
_CLASSES: Dict[str, Type] = {}


def policy_names() -> List[str]:
    """The names ``--radix-eviction-policy`` takes after ``install()``."""
    return [PREFIX + n for n in _RULES]


def strategy(policy: str, **options: Any):
    """An SGLang ``EvictionStrategy`` for kvpolicy's ``policy`` (with or without
    the ``kvpolicy_`` prefix); options checked now. Raises
    ``kvpolicy.ConfigError`` naming an unknown policy or option."""
    name = policy[len(PREFIX):] if isinstance(policy, str) and policy.startswith(PREFIX) else policy
    where = f"kvpolicy.sglang: {policy!r}"
    if name not in _RULES:
        why = NOT_OFFERED.get(name) if isinstance(name, str) else None
        raise ConfigError(f"kvpolicy.sglang: unknown policy {policy!r}" + (f" ({why})" if why else "")
                          + f"; choose one of {policy_names()}")
    rule = _RULES[name]
    bad = sorted(set(options) - set(rule.options))
    if bad:
        raise ConfigError(f"{where}: unknown option {bad[0]!r}; its options are {list(rule.options) or 'none'}")
    base = _base()
    cls = _CLASSES.get(name)
    if cls is None or not issubclass(cls, base):  # (a reloaded SGLang gets classes of its own)
        cls = _CLASSES[name] = type("Kvpolicy" + "".join(w.title() for w in name.split("_")) + "Strategy",
                                    (rule, base), {"kvpolicy_name": name})
    obj = cls.__new__(cls)
    rule.__init__(obj, where, **options)
    return obj


def install(**options_by_policy: Dict[str, Any]) -> List[str]:
    """Makes ``kvpolicy_<name>`` a ``--radix-eviction-policy`` choice that
    SGLang's ``RadixCache`` builds; ``options_by_policy``:
    ``retention_value={"alpha": 0.002}``. Returns the names added."""
    for name, opts in options_by_policy.items():
        if not isinstance(opts, dict):
            raise ConfigError(f"kvpolicy.sglang.install: {name}={opts!r} must be a dict of options")
        strategy(name, **opts)  # checked now
    from sglang.srt import server_args  # type: ignore[import-not-found]
    from sglang.srt.mem_cache import radix_cache  # type: ignore[import-not-found]

    names = policy_names()
    server_args.add_radix_eviction_policy_choices([n for n in names if n not in server_args.RADIX_EVICTION_POLICY_CHOICES])
    cls = radix_cache.RadixCache
    original = getattr(cls.__init__, "kvpolicy_original", cls.__init__)  # installed twice: wrap SGLang's once

    def __init__(self, params):
        wanted = str(params.eviction_policy).lower()
        if not wanted.startswith(PREFIX):
            return original(self, params)
        chosen = strategy(wanted, **options_by_policy.get(wanted[len(PREFIX):], {}))
        params.eviction_policy = "lru"
        try:
            original(self, params)
        finally:
            params.eviction_policy = wanted
        self.eviction_policy = wanted
        self.eviction_strategy = chosen

    __init__.kvpolicy_original = original
    cls.__init__ = __init__
    return names
