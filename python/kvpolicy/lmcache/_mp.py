"""kvpolicy's policies as LMCache's multiprocess-mode ``EvictionPolicy``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Dict, List, Optional

from .. import ConfigError, EvictionPolicy as _CorePolicy
from ._order import DEFAULT_MAX_KEYS, KeyOrder, check_max_keys, check_policy

_CLASS = None


def _lmcache():
    try:
        from lmcache.v1.distributed import eviction, internal_api  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("kvpolicy.lmcache.eviction_policy subclasses LMCache's EvictionPolicy "
                          "(lmcache.v1.distributed.eviction, LMCache >= 0.5); install LMCache") from e
    return eviction, internal_api


def _encoding():
    from lmcache.v1.mp_coordinator.utils.encoding import decode_key, encode_key  # type: ignore[import-not-found]

    return encode_key, decode_key


def _policy_class():
    global _CLASS
    eviction, internal_api = _lmcache()
    if _CLASS is not None and issubclass(_CLASS, eviction.EvictionPolicy):
        return _CLASS  # (a reloaded LMCache gets a class of its own)
    EvictionAction = internal_api.EvictionAction

    class KvpolicyEvictionPolicy(eviction.EvictionPolicy):
        """LMCache MP-mode eviction by a kvpolicy policy (kvpolicy.lmcache)."""

        def __init__(self, policy: str = "lru", *, isolation: bool = False, max_keys: int = DEFAULT_MAX_KEYS,
                     default_destination=None, section_name: Optional[str] = None, **options: Any):
            where = "kvpolicy.lmcache.eviction_policy"
            policy = check_policy(policy, where)
            check_max_keys(max_keys, where)
            if not isinstance(isolation, bool):
                raise ConfigError(f"{where}: isolation={isolation!r} must be True or False")
            _CorePolicy(policy, 1, **options)  # checks the options now, naming a bad one
            self.kvpolicy_name = policy
            self._options = dict(options)
            self._max_keys = max_keys
            self._isolation = isolation
            self._section = section_name or f"kvpolicy_{policy}_order"
            self._lock = threading.Lock()
            self._orders: Dict[Any, KeyOrder] = {}  # cache_salt (isolation) or None -> order
            self._destinations: List[Any] = []
            self._default_destination = (default_destination if default_destination is not None
                                         else internal_api.EvictionDestination.DISCARD)

        # --- EvictionPolicy ---------------------------------------------------
        @property
        def support_isolation(self) -> bool:
            return self._isolation

        @property
        def name(self) -> str:
            return self._section

        def register_eviction_destination(self, destination) -> None:
            with self._lock:
                if destination not in self._destinations:
                    self._destinations.append(destination)

        def _order_of(self, salt) -> KeyOrder:
            o = self._orders.get(salt)
            if o is None:
                o = self._orders[salt] = KeyOrder(self.kvpolicy_name, self._max_keys, self._options)
            return o

        def _by_salt(self, keys) -> Dict[Any, list]:
            if not self._isolation:
                return {None: keys}
            groups: Dict[Any, list] = {}
            for k in keys:
                groups.setdefault(k.cache_salt, []).append(k)
            return groups

        def on_keys_created(self, keys) -> None:
            # Later keys of a request go first (LMCache's rule): a prefix's
            # tail is worth less than its head.
            if not keys:
                return
            with self._lock:
                for salt, group in self._by_salt(keys).items():
                    self._order_of(salt).put(group, True)

        def on_keys_touched(self, keys) -> None:
            if not keys:
                return
            with self._lock:
                for salt, group in self._by_salt(keys).items():
                    o = self._orders.get(salt)
                    if o is not None:
                        o.put(group, True, True)

        def on_keys_removed(self, keys) -> None:
            if not keys:
                return
            with self._lock:
                for salt, group in self._by_salt(keys).items():
                    o = self._orders.get(salt)
                    if o is None:
                        continue
                    o.remove(group)
                    if self._isolation and not len(o):
                        del self._orders[salt]

        def get_eviction_actions(self, expected_ratio: float,
                                 key_eligible_filter: Optional[Callable[[Any], bool]] = None,
                                 cache_salt: Optional[str] = None) -> list:
            if self._isolation and cache_salt is None:
                raise ValueError("kvpolicy.lmcache: an isolated policy evicts within one cache_salt; "
                                 "get_eviction_actions needs cache_salt (LMCache's eviction controller passes it "
                                 "when support_isolation is True)")
            with self._lock:
                o = self._orders.get(cache_salt if self._isolation else None)
                if o is None or not len(o):
                    return []
                ratio = max(0.0, min(1.0, float(expected_ratio)))
                target = int(len(o) * ratio)
                if ratio > 0 and target == 0:
                    target = 1
                if target == 0:
                    return []
                keys = o.victims(target, key_eligible_filter)
                if not keys:
                    return []
                dest = self._destinations[0] if self._destinations else self._default_destination
                return [EvictionAction(keys=keys, destination=dest)]

        # --- checkpoint ---------------------------------------------------------
        def capture(self) -> Mapping[str, object]:
            """LMCache's IsolatedLRU format: ``{"buckets": {cache_salt: [key, ...]}}``,
            each list victims first, keys in LMCache's encoding; one bucket,
            ``""``, when not isolated."""
            encode_key, _ = _encoding()
            with self._lock:
                return {"buckets": {("" if salt is None else salt): [encode_key(k) for k in o.order()]
                                    for salt, o in self._orders.items()}}

        def restore(self, state: Mapping[str, object]) -> None:
            """Rebuilds each order by creating its keys least recently used
            first: the LRU family's order comes back exactly; frequency and
            ghost history start afresh. Replaces the orders (call it at start)."""
            _, decode_key = _encoding()
            buckets = state.get("buckets") if isinstance(state, Mapping) else None
            if not isinstance(buckets, Mapping) or not all(isinstance(v, list) for v in buckets.values()):
                raise ValueError("kvpolicy.lmcache: restore needs a capture() value, "
                                 f"{{'buckets': {{cache_salt: [encoded key, ...]}}}}; got {state!r:.200}")
            orders: Dict[Any, KeyOrder] = {}
            for salt, encoded in buckets.items():
                keys = [decode_key(e) for e in encoded]
                if self._isolation:
                    o = orders[salt] = KeyOrder(self.kvpolicy_name, self._max_keys, self._options)
                else:
                    o = orders.get(None)
                    if o is None:
                        o = orders[None] = KeyOrder(self.kvpolicy_name, self._max_keys, self._options)
                o.put(keys)
            with self._lock:
                self._orders = orders

        # --- not LMCache's interface: for tests and debugging (LMCache's LRU has them)
        def get_num_tracked_keys(self, cache_salt: Optional[str] = None) -> int:
            with self._lock:
                if cache_salt is not None:
                    o = self._orders.get(cache_salt)
                    return len(o) if o is not None else 0
                return sum(len(o) for o in self._orders.values())

        def get_tracked_salts(self) -> list:
            with self._lock:
                return [s for s in self._orders if s is not None]

        def get_eviction_candidates(self, count: int) -> list:
            """The next ``count`` victims (all salts' orders in turn when
            isolated); like get_eviction_actions, they stay tracked."""
            with self._lock:
                out: list = []
                for o in self._orders.values():
                    out += o.victims(count - len(out), None)
                return out

    _CLASS = KvpolicyEvictionPolicy
    return _CLASS


def eviction_policy(policy: str = "lru", **kwargs: Any):
    """An LMCache multiprocess-mode ``EvictionPolicy`` ordered by kvpolicy's ``policy``.

    ``isolation=True``: one order per ``cache_salt`` (LMCache's IsolatedLRU
    contract: ``support_isolation`` is True and eviction is scoped to the
    salt it is asked for). ``max_keys``: keys the C++ policy orders at once
    (per salt). Other keyword arguments are the policy's options
    (``kvpolicy.policy_options(policy)``), checked now: a bad name or option
    raises ``kvpolicy.ConfigError`` naming it.
    """
    return _policy_class()(policy, **kwargs)
