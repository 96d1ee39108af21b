"""kvpolicy's eviction rules as SGLang radix-tree ``EvictionStrategy`` classes
(SGLang 0.5.10.post1 and 0.5.23 tested).

SGLang's tree caches heap the evictable leaves by
``strategy.get_priority(node)`` and pop the smallest, pushing a parent once
it becomes a leaf (``RadixCache.evict`` in 0.5.10; the Python TreeCore's
``FullComponent`` in 0.5.23's ``UnifiedRadixCache``). The strategy sees one
node at a time and never learns which node was popped, so a kvpolicy policy
can be offered there exactly when its victim is the minimum of a score of
one node's own fields (``last_access_time``, ``creation_time``,
``hit_count``, ``priority``, its tokens and its prefix length) and the time:

- ``kvpolicy_lru``: last access (SGLang's ``lru``);
- ``kvpolicy_fifo``: creation time (SGLang's ``fifo``);
- ``kvpolicy_lfu``: (hit count, last access): kvpolicy's LFU, LRU among equals (SGLang's ``lfu``);
- ``kvpolicy_qos_aware``: (priority, last access): the lowest priority class
  first, LRU within (SGLang's ``priority``);
- ``kvpolicy_retention_value``: Pensieve's rule, recompute cost / idle time,
  the lowest first; cost from kvpolicy's ``pensieve_linear`` model
  (``alpha`` x context length + ``beta`` + ``const_non_attention``, seconds,
  per token of the node, each token's context being its prefix length plus
  its place in the node), idle time = now - last access on the clock SGLang
  stamps the node with (seconds of ``time.monotonic()`` in ``RadixCache``;
  the unified tree's access counter in 0.5.23). The one rule SGLang lacks: a
  long shared prefix's tail is worth keeping over a short, equally idle leaf.

Not offered, and why: ``NOT_OFFERED`` (and docs/getting-started/sglang.md).

Registration, one ``install()`` for both construction paths, chosen by what
the installed SGLang has:

- ``_EVICTION_POLICY_FACTORIES`` in ``sglang.srt.mem_cache.utils`` (0.5.23):
  ``kvpolicy_<name>`` factories join it, so every tree cache that builds its
  strategy through ``get_eviction_strategy`` builds kvpolicy's, with the
  options of ``--radix-eviction-policy-config`` (over ``install()``'s);
  the unified cache builds them in its Python TreeCore (the Rust one runs
  only SGLang's own policies, by name);
- otherwise ``RadixCache.__init__``'s if/elif (0.5.10): wrapped, so it
  builds kvpolicy's strategy for a ``kvpolicy_*`` name.

Either way the names join ``--radix-eviction-policy``'s choices. It must
run in each SGLang process that parses the arguments or builds a tree
cache (SGLang spawns its schedulers): SGLang's plugin loader does that
where SGLang has one (0.5.23; kvpolicy's ``sglang.srt.plugins`` entry
point is ``install``), so there ``--radix-eviction-policy
kvpolicy_retention_value --radix-eviction-policy-config '{"alpha": 0.002}'``
is all; elsewhere (0.5.10) call it at the top level of the script that
starts the server, which each spawned process imports again::

    import kvpolicy.sglang
    kvpolicy.sglang.install(retention_value={"alpha": 0.002})
    # then, under if __name__ == "__main__": SGLang's launch_server, --radix-eviction-policy kvpolicy_retention_value
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from .. import ADAPTER_PREFIX as PREFIX, ConfigError, EvictionPolicy, policy_name as _policy_name, policy_options
NOT_OFFERED = {
    "gdsf": "its inflation value L is the last victim's score; SGLang pops victims without telling the strategy",
    "lrfu": "a node's worth sums a decayed weight per reference; a node keeps only its hit count and last access",
    "arc": "two LRU lists and two ghost lists adapted on ghost hits: global state, not a per-node score",
    "s3fifo": "small/main/ghost FIFO queues moved on every access and eviction: global state",
}
_log = logging.getLogger(__name__)


def _base():
    try:
        from sglang.srt.mem_cache import evict_policy  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("kvpolicy.sglang's strategies subclass SGLang's EvictionStrategy "
                          "(sglang.srt.mem_cache.evict_policy); install SGLang") from e
    return evict_policy.EvictionStrategy


class _Lru:
    # The C++ options this rule reads (their names, defaults and ranges are the registry's).
    options: Tuple[str, ...] = ()

    def __init__(self, **options: float):
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


_COUNTER = "_LAST_ACCESS_TIME_COUNTER_FLOAT"
_CLOCKS: Dict[type, Callable[[], float]] = {}


def _clock(node_type: type) -> Callable[[], float]:
    """The clock SGLang stamps `node_type`'s last_access_time with: the unified
    tree's access counter where the node's module takes its stamps from
    get_and_increase_time_counter (0.5.23), else time.monotonic (RadixCache)."""
    clock = _CLOCKS.get(node_type)
    if clock is None:
        tick = getattr(sys.modules.get(node_type.__module__), "get_and_increase_time_counter", None)
        if tick is None:
            clock = lambda: time.monotonic()  # noqa: E731 (looked up at each call: a test may replace it)
        else:
            counter = tick.__globals__  # components/base.py's: read, never advanced
            if _COUNTER not in counter:
                raise RuntimeError(f"kvpolicy.sglang: {node_type.__module__} stamps nodes with "
                                   f"get_and_increase_time_counter, whose module has no {_COUNTER} any more; "
                                   "kvpolicy_retention_value cannot read SGLang's time: update kvpolicy.sglang")
            clock = lambda: counter[_COUNTER]  # noqa: E731
        _CLOCKS[node_type] = clock
    return clock


class _RetentionValue(_Lru):
    options = ("alpha", "beta", "const_non_attention")

    def __init__(self, **options: float):
        # pensieve_linear's parameters, the registry's defaults under the options given (which
        # EvictionPolicy checked before this runs).
        values = {o["name"]: o["default"] for o in policy_options("retention_value")}
        values.update(options)
        self.alpha, self.beta, self.const_non_attention = (float(values[o]) for o in self.options)

    def cost(self, node) -> float:
        """Recompute seconds of the node's tokens: token i of n after a p-token
        prefix costs alpha x (p + i + 1) + beta + const_non_attention."""
        n = len(node.key)
        p = 0
        parent = node.parent
        while parent is not None and parent.parent is not None:
            p += len(parent.key)
            parent = parent.parent
        return n * (self.alpha * (p + (n + 1) / 2.0) + self.beta + self.const_non_attention)

    def get_priority(self, node, now_time: Optional[float] = None):
        now = _clock(type(node))() if now_time is None else now_time
        idle = now - node.last_access_time
        if idle <= 0:
            return (math.inf, node.last_access_time)  # used just now: last to go
        return (self.cost(node) / idle, node.last_access_time)


_RULES: Dict[str, type] = {"lru": _Lru, "fifo": _Fifo, "lfu": _Lfu, "qos_aware": _QosAware,
                           "retention_value": _RetentionValue}
_CLASSES: Dict[str, Type] = {}
# install()'s options per policy, kept until an install() names that policy again: SGLang's plugin
# loader calls install() with none in each process, after a launcher's install(...) with options.
_OPTIONS: Dict[str, Dict[str, Any]] = {}


def policy_names() -> List[str]:
    """The names ``--radix-eviction-policy`` takes after ``install()``."""
    return [PREFIX + n for n in _RULES]


def _build(policy: Any, options: Any, where: str):
    """kvpolicy's strategy for `policy` with `options`, everything checked first;
    ConfigError (a ValueError) naming `where`, the input and the fix."""
    name = _policy_name(policy) if isinstance(policy, str) else policy
    if name not in _RULES:
        why = NOT_OFFERED.get(name) if isinstance(name, str) else None
        raise ConfigError(f"{where}: unknown policy {policy!r}" + (f" ({why})" if why else "")
                          + f"; choose one of {policy_names()}")
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise ConfigError(f"{where}: the options of {PREFIX + name} must be a JSON object / dict of "
                          f"option: value, got {options!r}")
    rule = _RULES[name]
    registered = [o["name"] for o in policy_options(name)]
    for key in sorted(options):
        if key not in rule.options:
            known = f" (kvpolicy's C++ {name} takes it; SGLang's strategy scores one node at a time and does not)" \
                if key in registered else ""
            raise ConfigError(f"{where}: unknown option {key!r} of {PREFIX + name}{known}; "
                              f"its options: {list(rule.options) or 'none'}")
    missing = [o for o in rule.options if o not in registered]
    if missing:  # the registry renamed an option: fail here, not with a score that ignores it
        raise ConfigError(f"kvpolicy.sglang: the registry's {name} has no option {missing[0]!r} any more "
                          f"(it takes {registered}); update kvpolicy.sglang")
    try:
        EvictionPolicy(name, capacity=1, **options)  # the registry's checks: types, ranges, combinations
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    base = _base()
    cls = _CLASSES.get(name)
    if cls is None or not issubclass(cls, base):  # (a reloaded SGLang gets classes of its own)
        cls = _CLASSES[name] = type("Kvpolicy" + "".join(w.title() for w in name.split("_")) + "Strategy",
                                    (rule, base), {"kvpolicy_name": name})
    obj = cls.__new__(cls)
    rule.__init__(obj, **options)
    return obj


def strategy(policy: str, **options: Any):
    """An SGLang ``EvictionStrategy`` for kvpolicy's ``policy`` (with or without
    the ``kvpolicy_`` prefix); options checked now. Raises
    ``kvpolicy.ConfigError`` naming an unknown policy or option, or a bad value."""
    return _build(policy, options, f"kvpolicy.sglang: {policy!r}")


def _module_if_present(name: str):
    """SGLang's module `name`, or None where this SGLang has no such module (an
    import error inside a module that exists propagates)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name + "."):
            return None
        raise
    return importlib.import_module(name) if spec is not None else None


def _factory(name: str):
    """What get_eviction_strategy calls: factory(**config), config from
    --radix-eviction-policy-config, over install()'s options."""

    def factory(**config: Any):
        where = f"kvpolicy.sglang: --radix-eviction-policy {PREFIX + name}"
        if config:
            where += f" --radix-eviction-policy-config {json.dumps(config, default=repr)}"
        return _build(name, {**_OPTIONS.get(name, {}), **config}, where)

    factory.kvpolicy_name = name
    return factory


def _route_to_python_tree_core(registry) -> None:
    """The unified cache's Rust TreeCore builds SGLang's own policies by name
    (it would be handed 'kvpolicy_...' and never call get_priority): a
    kvpolicy policy resolves the 'rust' backend to the Python TreeCore, the way
    SGLang resolves its other Rust capability gaps."""
    original = getattr(registry.resolve_tree_core_backend, "kvpolicy_original", registry.resolve_tree_core_backend)

    def resolve_tree_core_backend(name: str, params):
        policy = str(getattr(params, "eviction_policy", "")).lower()
        if name == "rust" and policy.startswith(PREFIX):
            _log.info("Using the Python TreeCore: %s is kvpolicy's, which the Rust TreeCore does not run", policy)
            return "python"
        return original(name, params)

    resolve_tree_core_backend.kvpolicy_original = original
    registry.resolve_tree_core_backend = resolve_tree_core_backend


def _wrap_radix_cache(radix_cache) -> None:
    cls = radix_cache.RadixCache
    original = getattr(cls.__init__, "kvpolicy_original", cls.__init__)  # installed twice: wrap SGLang's once

    def __init__(self, params):
        wanted = str(params.eviction_policy).lower()
        if not wanted.startswith(PREFIX):
            return original(self, params)
        chosen = _build(wanted, _OPTIONS.get(wanted[len(PREFIX):], {}),
                        f"kvpolicy.sglang: --radix-eviction-policy {wanted}")
        params.eviction_policy = "lru"
        try:
            original(self, params)
        finally:
            params.eviction_policy = wanted
        self.eviction_policy = wanted
        self.eviction_strategy = chosen

    __init__.kvpolicy_original = original
    cls.__init__ = __init__


def install(**options_by_policy: Dict[str, Any]) -> List[str]:
    """Makes ``kvpolicy_<name>`` a ``--radix-eviction-policy`` choice that
    SGLang's tree caches build; ``options_by_policy``:
    ``retention_value={"alpha": 0.002}``, kept until an ``install()`` names
    that policy again (where SGLang has ``--radix-eviction-policy-config``,
    its options win over these). SGLang's plugin loader calls it with none
    (pyproject.toml's ``sglang.srt.plugins`` entry point). Returns the names
    added. Raises ``kvpolicy.ConfigError`` naming a bad policy or
    option, and ImportError where SGLang has neither construction path."""
    for name, opts in options_by_policy.items():
        if not isinstance(opts, dict):
            raise ConfigError(f"kvpolicy.sglang.install: {name}={opts!r} must be a dict of options")
        _build(name, opts, f"kvpolicy.sglang.install({name}=...)")  # checked now
    options = {_policy_name(n): o for n, o in options_by_policy.items()}

    # The choices: sglang.srt.arg_groups.choices where SGLang has it (0.5.23), else server_args (0.5.10).
    choices = _module_if_present("sglang.srt.arg_groups.choices") or importlib.import_module("sglang.srt.server_args")
    mem_utils = _module_if_present("sglang.srt.mem_cache.utils")
    factories = getattr(mem_utils, "_EVICTION_POLICY_FACTORIES", None) if mem_utils is not None else None
    radix_cache = _module_if_present("sglang.srt.mem_cache.radix_cache")
    if factories is None and (radix_cache is None or not hasattr(radix_cache, "RadixCache")):
        raise ImportError("kvpolicy.sglang.install: this SGLang has neither get_eviction_strategy's "
                          "_EVICTION_POLICY_FACTORIES (sglang.srt.mem_cache.utils, 0.5.23) nor RadixCache "
                          "(sglang.srt.mem_cache.radix_cache, 0.5.10); tested: 0.5.10.post1, 0.5.23")
    registry = _module_if_present("sglang.srt.mem_cache.unified_cache.tree_core_registry") if factories is not None \
        else None
    if registry is not None:  # kvpolicy_retention_value reads the unified tree's clock: check it is there now
        stamps = _module_if_present("sglang.srt.mem_cache.unified_cache.components.base")
        if stamps is None or not hasattr(stamps, "get_and_increase_time_counter") or not hasattr(stamps, _COUNTER):
            raise ImportError("kvpolicy.sglang.install: SGLang's unified tree no longer stamps nodes from "
                              f"unified_cache/components/base.py's {_COUNTER} (get_and_increase_time_counter), the "
                              "clock kvpolicy_retention_value reads; update kvpolicy.sglang (tested: 0.5.23)")
    if factories is not None:
        for name in _RULES:
            factories[PREFIX + name] = _factory(name)
        if registry is not None and hasattr(registry, "resolve_tree_core_backend"):
            _route_to_python_tree_core(registry)
    else:
        _wrap_radix_cache(radix_cache)
    _OPTIONS.update(options)
    names = policy_names()
    choices.add_radix_eviction_policy_choices([n for n in names if n not in choices.RADIX_EVICTION_POLICY_CHOICES])
    return names
