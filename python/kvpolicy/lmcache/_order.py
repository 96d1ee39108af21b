"""The key bookkeeping both LMCache adapters share: Python keys over one
kvpolicy policy, in C++ (``_kvpolicy.KeyOrder``), a batch of keys per call.

LMCache asks for victims without removing them: a victim stays resident,
and may be read, until LMCache says it is gone (``on_keys_removed``, or the
local backend popping it from its mapping). kvpolicy's policies pop a victim
when they name it. ``KeyOrder`` reconciles the two with a *front*: a key the
C++ policy named (popped) but LMCache still holds waits there, in the order
it was named, ahead of every key the policy still orders. The front is
offered first on the next request; a front key read or written again goes
back into the policy as a new key (for the LRU family: the most-recent end,
where LMCache's own LRU moves it); a front key LMCache removes is forgotten.
So the order LMCache sees is ``front ++ policy order``, which for ``lru`` is
exactly LMCache's OrderedDict (tested against it on random schedules).

A key LMCache's eligibility filter refuses stays at the front, first in line
once it is eligible, as it stays at the head of LMCache's LRU.

Capacity: the C++ policy tracks at most ``max_keys`` keys (ids are reused).
A new key beyond that asks the policy for one victim first, which waits at
the front: the policy still decides who goes, nothing is dropped untracked.
"""

from __future__ import annotations

from typing import Any, Dict, List

from .. import ConfigError, policies, policy_name
from .._kvpolicy import KeyOrder as _KeyOrder, _uses_future

DEFAULT_MAX_KEYS = 1 << 16


def offered() -> List[str]:
    """kvpolicy policies the LMCache adapters offer: all that need no future."""
    return [n for n in policies() if not _uses_future(n)]


def check_policy(policy: str, where: str) -> str:
    """The registered name ``policy`` stands for (``s3fifo`` or
    ``kvpolicy_s3fifo``: ``s3fifo``), checked: offered by LMCache's seams."""
    name = policy_name(policy) if isinstance(policy, str) else policy
    if not isinstance(name, str) or name not in policies():
        raise ConfigError(f"{where}: unknown policy {policy!r}; choose one of {offered()}")
    if _uses_future(name):
        raise ConfigError(f"{where}: {policy!r} reads each key's next use, which only a simulator knows; "
                          f"choose one of {offered()}")
    return name


def check_max_keys(max_keys: Any, where: str) -> int:
    if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
        raise ConfigError(f"{where}: max_keys={max_keys!r} must be a whole number >= 1 "
                          f"(the most keys kvpolicy's policy orders at once; default {DEFAULT_MAX_KEYS})")
    return max_keys


def KeyOrder(policy: str, max_keys: int, options: Dict[str, Any]):
    """The C++ key order (python/src/lmcache_policy.cpp): ``put(keys,
    reversed=False, touch_only=False)``, ``remove(keys)``, ``victims(n,
    eligible)``, ``order()``, ``len()``."""
    return _KeyOrder(policy, max_keys, dict(options))
