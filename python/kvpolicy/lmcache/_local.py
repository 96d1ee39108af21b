"""kvpolicy's policies as LMCache's local CPU/disk ``BaseCachePolicy``."""

from __future__ import annotations

from typing import Any, Dict, Type

from .. import ConfigError, EvictionPolicy as _CorePolicy
from ._order import DEFAULT_MAX_KEYS, KeyOrder, check_max_keys, check_policy, offered

PREFIX = "KVPOLICY_"


def _base():
    try:
        from lmcache.v1.storage_backend.cache_policy import base_policy  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("kvpolicy.lmcache.cache_policy subclasses LMCache's BaseCachePolicy "
                          "(lmcache.v1.storage_backend.cache_policy); install LMCache") from e
    return base_policy.BaseCachePolicy


class _Resident(dict):
    """The backend's key -> memory object mapping (``init_mutable_mapping``):
    a plain dict that tells the policy when the backend drops a key, however
    it does (``pop``, ``del``, ``popitem``, ``clear``)."""

    __slots__ = ("_order",)

    def __init__(self, order: KeyOrder):
        super().__init__()
        self._order = order

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._order.remove((key,))

    _missing = object()

    def pop(self, key, default=_missing):
        if key in self:
            v = super().pop(key)
            self._order.remove((key,))
            return v
        if default is _Resident._missing:
            raise KeyError(key)
        return default

    def popitem(self):
        k, v = super().popitem()
        self._order.remove((k,))
        return k, v

    def clear(self) -> None:
        self._order.remove(list(self.keys()))
        super().clear()


def cache_policy(policy: str, *, max_keys: int = DEFAULT_MAX_KEYS, **options: Any) -> Type:
    """An LMCache ``BaseCachePolicy`` class (constructed with no arguments, as
    ``POLICY_MAPPING`` does) ordered by kvpolicy's ``policy`` with ``options``,
    checked now."""
    where = "kvpolicy.lmcache.cache_policy"
    policy = check_policy(policy, where)
    check_max_keys(max_keys, where)
    _CorePolicy(policy, 1, **options)
    fixed: Dict[str, Any] = dict(options)
    base = _base()

    class KvpolicyCachePolicy(base):
        __doc__ = f"LMCache local-backend cache policy over kvpolicy's {policy!r} (kvpolicy.lmcache)."
        kvpolicy_name = policy

        def __init__(self) -> None:
            self._order = KeyOrder(policy, max_keys, fixed)

        def init_mutable_mapping(self) -> dict:
            return _Resident(self._order)

        def update_on_hit(self, key, cache_dict) -> None:
            self._order.put((key,), False, True)

        def update_on_put(self, key) -> None:
            self._order.put((key,))

        def update_on_force_evict(self, key) -> None:
            self._order.remove((key,))

        def get_evict_candidates(self, cache_dict, num_candidates: int = 1) -> list:
            # Candidates stay resident until the backend drops them; a pinned
            # one (can_evict False) keeps its place at the head of the line.
            def evictable(key) -> bool:
                obj = cache_dict.get(key)
                return obj is not None and obj.can_evict

            return self._order.victims(num_candidates, evictable)

    KvpolicyCachePolicy.__name__ = KvpolicyCachePolicy.__qualname__ = "Kvpolicy_" + policy
    return KvpolicyCachePolicy


def register_cache_policies(**options_by_policy: Dict[str, Any]) -> list:
    """Adds ``KVPOLICY_<NAME>`` to LMCache's ``POLICY_MAPPING`` for every
    offered policy (``cache_policy: kvpolicy_s3fifo`` in LMCache's config, or
    ``LMCACHE_CACHE_POLICY=kvpolicy_s3fifo``; LMCache upper-cases the name).
    ``options_by_policy``: ``s3fifo={"small_fraction": 0.2}``. Returns the names."""
    from lmcache.v1.storage_backend.cache_policy import POLICY_MAPPING  # type: ignore[import-not-found]

    options_by_policy = {check_policy(name, "kvpolicy.lmcache.register_cache_policies"): opts
                         for name, opts in options_by_policy.items()}
    added = []
    for name in offered():
        opts = options_by_policy.get(name, {})
        if not isinstance(opts, dict):
            raise ConfigError(f"kvpolicy.lmcache.register_cache_policies: {name}={opts!r} must be a dict of options")
        POLICY_MAPPING[PREFIX + name.upper()] = cache_policy(name, **opts)
        added.append(PREFIX + name.upper())
    return added
