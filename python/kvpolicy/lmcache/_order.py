"""The key bookkeeping both LMCache adapters share: Python keys over one
kvpolicy ``EvictionPolicy`` (C++), a batch of keys per C++ call.

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

from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

from .. import ConfigError, EvictionPolicy, policies
from .._kvpolicy import _uses_future

_MASK = (1 << 64) - 1
DEFAULT_MAX_KEYS = 1 << 16


def offered() -> List[str]:
    """kvpolicy policies the LMCache adapters offer: all that need no future."""
    return [n for n in policies() if not _uses_future(n)]


def check_policy(policy: str, where: str) -> None:
    if not isinstance(policy, str) or policy not in policies():
        raise ConfigError(f"{where}: unknown policy {policy!r}; choose one of {offered()}")
    if _uses_future(policy):
        raise ConfigError(f"{where}: {policy!r} reads each key's next use, which only a simulator knows; "
                          f"choose one of {offered()}")


def check_max_keys(max_keys: Any, where: str) -> int:
    if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
        raise ConfigError(f"{where}: max_keys={max_keys!r} must be a whole number >= 1 "
                          f"(the most keys kvpolicy's policy orders at once; default {DEFAULT_MAX_KEYS})")
    return max_keys


class KeyOrder:
    """Victim order over hashable keys; see the module docstring."""

    __slots__ = ("policy", "name", "_p", "_id", "_key", "_free", "front", "_seq", "_tick")

    def __init__(self, policy: str, max_keys: int, options: Dict[str, Any]):
        self.name = policy
        self._p = EvictionPolicy(policy, max_keys, **options)
        self._id: Dict[Any, int] = {}
        self._key: List[Any] = [None] * max_keys
        self._free = list(range(max_keys - 1, -1, -1))
        self.front: Dict[Any, None] = {}  # named by the policy, still held by LMCache; in order
        self._seq = np.zeros(max_keys, dtype=np.int64)  # the last event on each id (for capture)
        self._tick = 0

    def __len__(self) -> int:
        return len(self._id) + len(self.front)

    def __contains__(self, key) -> bool:
        return key in self._id or key in self.front

    # --- events: each a batch, applied in the given order -------------------
    def put(self, keys: Iterable, touch_only: bool = False) -> None:
        """Each key in turn becomes the most recently used: a tracked key is an
        access, a new one an insert (skipped when ``touch_only``). Runs of the
        same kind go to C++ as one call."""
        ids = self._id
        front = self.front
        run: List[int] = []
        hashes: List[int] = []
        inserting = False
        in_run = set()
        for key in keys:
            i = ids.get(key)
            if i is None:
                if key in front:
                    del front[key]
                elif touch_only:
                    continue
                if not inserting or key in in_run:
                    self._flush(run, hashes, inserting)
                    in_run.clear()
                    inserting = True
                if not self._free:
                    self._flush(run, hashes, inserting)
                    in_run.clear()
                    self._make_room()
                i = self._free.pop()
                ids[key] = i
                self._key[i] = key
                hashes.append(hash(key) & _MASK)
            elif inserting or i in in_run:
                self._flush(run, hashes, inserting)
                in_run.clear()
                inserting = False
            run.append(i)
            in_run.add(i)
        self._flush(run, hashes, inserting)

    def _flush(self, run: List[int], hashes: List[int], inserting: bool) -> None:
        if not run:
            return
        a = np.asarray(run, dtype=np.uint32)
        if inserting:
            h = np.asarray(hashes, dtype=np.uint64)
            self._p.miss(h)
            self._p.insert(a, keys=h)
            hashes.clear()
        else:
            self._p.access(a)
        n = len(run)
        self._seq[a] = np.arange(self._tick + 1, self._tick + n + 1)
        self._tick += n
        run.clear()

    def _make_room(self) -> None:
        got = self._p.pop_victims(1)
        self._to_front(got)

    def _to_front(self, ids_popped) -> List[Any]:
        out = []
        for i in ids_popped.tolist():
            key = self._key[i]
            self._key[i] = None
            del self._id[key]
            self._free.append(i)
            self.front[key] = None
            out.append(key)
        return out

    def remove(self, keys: Iterable) -> None:
        """The keys are gone (LMCache removed them): forgotten, no ghost."""
        ids = self._id
        gone = []
        for key in keys:
            i = ids.pop(key, None)
            if i is None:
                self.front.pop(key, None)
                continue
            self._key[i] = None
            gone.append(i)
        if gone:
            self._p.erase(np.asarray(gone, dtype=np.uint32))
            self._free.extend(gone)

    def victims(self, n: int, eligible: Optional[Callable[[Any], bool]]) -> List[Any]:
        """Up to ``n`` keys in victim order, each passing ``eligible``;
        they stay tracked (at the front) until removed or used again."""
        out: List[Any] = []
        if n <= 0:
            return out
        for key in self.front:
            if eligible is None or eligible(key):
                out.append(key)
                if len(out) == n:
                    return out
        p = self._p
        while len(out) < n and self._id:
            named = self._to_front(p.pop_victims(n - len(out)))
            if not named:
                break
            if eligible is None:
                out.extend(named)
            else:
                out.extend(k for k in named if eligible(k))
        return out

    def order(self) -> List[Any]:
        """Every tracked key, victims first: the front, then the policy's keys
        least recently used first (what capture records)."""
        rest = sorted(self._id.items(), key=lambda kv: self._seq[kv[1]])
        return list(self.front) + [k for k, _ in rest]
