"""kvpolicy's eviction policies inside LMCache (0.5.6 tested).

Two seams, one bookkeeping (``_order.KeyOrder``: Python keys over one C++
``kvpolicy.EvictionPolicy``, a batch of keys per C++ call):

- **Multiprocess mode** (``lmcache/v1/distributed/eviction.py``): LMCache's
  L1 and L2 eviction controllers build their ``EvictionPolicy`` with
  ``CreateEvictionPolicy``, an if/elif over the names ``LRU``, ``ARC``,
  ``IsolatedLRU``, ``noop`` that LMCache's config also checks, so a
  third-party name cannot be configured. ``install(policy, **options)``
  replaces the factory where the controllers look it up: the configured name
  still picks global eviction (``LRU``, ``ARC``) or per-``cache_salt``
  eviction (``IsolatedLRU``, with LMCache's quota manager), ``noop`` stays
  LMCache's; the order is kvpolicy's ``policy``. Call it in the process that
  runs LMCache's server, before the server starts::

      import kvpolicy.lmcache
      kvpolicy.lmcache.install("s3fifo", small_fraction=0.2)
      # ... then start LMCache's MP server in this process, --eviction-policy LRU

  ``eviction_policy(policy, isolation=False, **options)`` builds one directly.
  Honoured: ``key_eligible_filter`` (a refused key is never a victim and
  keeps its place at the head of the line), asynchronous removal (a victim
  stays tracked, and may be used again, until ``on_keys_removed``; offered
  again first), ``cache_salt`` isolation, ``capture``/``restore`` (the keys
  in victim order; a restore rebuilds them oldest first, so the LRU family's
  order comes back exactly and frequency/ghost history starts afresh), and
  LMCache's batch rule (a batch's later keys are evicted first).
  ``lru`` decides exactly as LMCache's ``LRUEvictionPolicy`` (LMCache's own
  tests, and a randomized differential, check it); ``arc`` is the paper's
  ARC, not LMCache's variant (which ghosts a key at removal, not at choice).

- **Local CPU/disk backends** (``lmcache/v1/storage_backend/cache_policy/``):
  ``POLICY_MAPPING`` is a dict; ``register_cache_policies()`` adds
  ``KVPOLICY_<NAME>`` for every offered policy, chosen by
  ``cache_policy: kvpolicy_s3fifo`` in LMCache's config or
  ``LMCACHE_CACHE_POLICY=kvpolicy_s3fifo``. ``cache_policy(policy, **options)``
  makes one class. Pinned entries (``can_evict`` False) are skipped; the
  backend's mapping is the policy's own dict, so a dropped key is forgotten
  however the backend drops it.

Offered: every kvpolicy policy that needs no future (``policy_names()``).
A bad name or option raises ``kvpolicy.ConfigError`` naming it, before any
key is tracked.
"""

from __future__ import annotations

import sys
from typing import Any, List

from ._local import PREFIX as CACHE_POLICY_PREFIX, cache_policy, register_cache_policies
from ._mp import eviction_policy
from ._order import DEFAULT_MAX_KEYS, check_policy, offered

__all__ = ["CACHE_POLICY_PREFIX", "DEFAULT_MAX_KEYS", "cache_policy", "eviction_policy", "install",
           "policy_names", "register_cache_policies", "uninstall"]

_FACTORY_HOMES = ("lmcache.v1.distributed.eviction_policy", "lmcache.v1.distributed.eviction_policy.factory",
                  "lmcache.v1.distributed.storage_controllers.eviction_controller")
_original = None


def policy_names() -> List[str]:
    """The kvpolicy policies both LMCache seams offer."""
    return offered()


def install(policy: str = "lru", **options: Any):
    """LMCache's MP eviction controllers build kvpolicy's ``policy`` from now
    on (see the module docstring); returns the factory installed."""
    global _original
    policy = check_policy(policy, "kvpolicy.lmcache.install")
    eviction_policy(policy, **options)  # options checked now, not at the server's first eviction
    import lmcache.v1.distributed.eviction_policy as pkg  # type: ignore[import-not-found]

    if _original is None:
        _original = pkg.CreateEvictionPolicy

    def CreateEvictionPolicy(eviction_config):
        name = eviction_config.eviction_policy
        if name in ("LRU", "ARC"):
            return eviction_policy(policy, **options)
        if name == "IsolatedLRU":
            return eviction_policy(policy, isolation=True, **options)
        return _original(eviction_config)

    CreateEvictionPolicy.kvpolicy_name = policy
    for home in _FACTORY_HOMES:
        module = sys.modules.get(home)
        if module is not None:
            module.CreateEvictionPolicy = CreateEvictionPolicy
    return CreateEvictionPolicy


def uninstall() -> None:
    """LMCache's own factory again."""
    if _original is None:
        return
    for home in _FACTORY_HOMES:
        module = sys.modules.get(home)
        if module is not None:
            module.CreateEvictionPolicy = _original
