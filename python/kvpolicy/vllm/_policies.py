"""kvpolicy's cache policies for vLLM >= 0.30's CPU offloading tier.

vLLM's ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``) keeps
ref counts, slots and events, and asks a ``CachePolicy``
(``vllm/v1/kv_offload/cpu/policies/base.py``) for order and victims. vLLM
loads one out of tree by class name and module path; with the offloading
connector::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 64000000000,
        "eviction_policy": "kvpolicy_s3fifo", "cache_policy_module_path": "kvpolicy.vllm"}}'

The names (attributes of ``kvpolicy.vllm``):

- ``vllm_lru``, ``vllm_arc``: vLLM's own ``LRUCachePolicy`` and
  ``ARCCachePolicy``, decision for decision (vLLM's manager tests pass with
  them substituted, and a randomized differential test compares every
  answer), the bookkeeping in C++. Switch to these first: nothing changes but
  the cost. ``vllm_arc`` is vLLM's variant of ARC, not the paper's.
- ``kvpolicy_<name>`` for every kvpolicy policy that needs no future
  (``kvpolicy.policies()``): ``kvpolicy_s3fifo``, ``kvpolicy_adaptive_kv``,
  ``kvpolicy_session_aware_lru``, ``kvpolicy_arc`` (the paper's ARC), ...
  A chunk a store or load holds is not a candidate; a chunk in the current
  store's input is never a victim; a failed eviction changes nothing. A
  completed store or load is released by kvpolicy's hold rule: in place for
  position-based policies, at the most-recent end for the LRU family
  (include/kvpolicy/engine/cache_policy_core.hpp says why).

Hints: a request can say which session it belongs to, when that session
will send its next request, and that the session ends, so that
``kvpolicy_session_aware_lru`` and ``kvpolicy_adaptive_kv`` keep what comes
back soon and drop what never will (the study's "What an engine's hints
are worth": with exact hints session_aware_lru closes 61-96% of the LRU ->
Belady gap in 6 of 9 cells). Either as vLLM's orchestrator hints
(``ReqContext.kv_hints``, a ``KvHintsEnvelope``), one action each, version
``"1"``::

    {"action_type": "kvpolicy.session", "action_version": "1", "payload": {"id": "chat-42"}}
    {"action_type": "kvpolicy.expected_return", "action_version": "1", "payload": {"seconds": 30}}
    {"action_type": "kvpolicy.session_end", "action_version": "1", "payload": {}}

or in the request's ``kv_transfer_params``: ``{"kvpolicy": {"session": "chat-42",
"expected_return_s": 30, "session_end": false}}``. They reach the policy as
``TieredCache.release(..., expected_return=)`` does: at the request's end its
chunks are released with the session's expected return (``session_end``:
never). Actions of other types are someone else's and are skipped; a
malformed kvpolicy action is ignored with a warning on the
``kvpolicy.vllm`` logger naming it and why, never an exception in vLLM's
scheduler. ``vllm_lru`` and ``vllm_arc`` read no hints (vLLM's do not).

vLLM releases: what the seam offers is read from the vLLM found, never from
its version (``_Seam``). vLLM loads out-of-tree policies by module path since
0.27; kvpolicy follows 0.30 and later, whose ARC takes a victim from T1 when
T2 has none left (0.27 to 0.29 refuse the store there; ``vllm_arc`` does
not). Where the CachePolicy has no ``on_request_finished`` (0.30) vLLM never
reports a request's end to it, and vLLM's LRU counts a completed store or
load as a use, which ``vllm_lru`` then does too. Hints are read where
``insert`` is given the request (0.33): before, a stored chunk's session is
unknown, and no policy reads hints.

Options: vLLM constructs a policy with its capacity only, so options come
from ``KVPOLICY_VLLM_POLICY_OPTIONS`` (JSON: ``{"kvpolicy_s3fifo":
{"small_fraction": 0.2}}``), read when the policy is built, or from a class
made in your own module, ``S3fifoSmall = kvpolicy.vllm.cache_policy("s3fifo",
small_fraction=0.2)``, named with ``"eviction_policy": "S3fifoSmall",
"cache_policy_module_path": "your.module"``. A bad option or policy name
raises ``kvpolicy.ConfigError`` (a ``ValueError``) naming it when the
manager is built, before any request.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import math
import os
import threading
from typing import Any, Dict, Optional, Tuple, Type

from .. import ADAPTER_PREFIX as _PREFIX, ConfigError, policies, policy_name as _kvpolicy_name
from .._kvpolicy import CachePolicyCore, _uses_future, _vllm_orders

_order_keys = CachePolicyCore.order_keys

# vLLM's own CachePolicy orders, by the registry's names (engine/vllm_orders.hpp).
_IDENTICAL = tuple(_vllm_orders()["cache_policies"])
logger = logging.getLogger("kvpolicy.vllm")
HINT_VERSION = "1"
OPTIONS_ENV = "KVPOLICY_VLLM_POLICY_OPTIONS"


def policy_names() -> list:
    """Every name ``kvpolicy.vllm`` offers as an ``eviction_policy`` (each
    ``kvpolicy_<name>`` is also offered as ``<name>``: ``kvpolicy.policy_name``)."""
    return list(_IDENTICAL) + [_PREFIX + n for n in policies() if not _uses_future(n)]


def offered_name(name: str) -> Optional[str]:
    """The name in ``policy_names()`` that ``name`` stands for (``s3fifo``
    and ``kvpolicy_s3fifo``: ``kvpolicy_s3fifo``), or None if none."""
    kv_name = _kvpolicy_name(name)
    if kv_name in _IDENTICAL:
        return kv_name
    return _PREFIX + kv_name if kv_name in policies() and not _uses_future(kv_name) else None


class UnknownCachePolicyError(ConfigError, AttributeError):
    """What vLLM's loader (``getattr(kvpolicy.vllm, name)``) meets for a name
    kvpolicy.vllm does not offer: a ``ConfigError`` with the reason, and an
    ``AttributeError`` still, so ``hasattr`` and ``getattr(..., default)`` on
    the module keep their meaning."""


def unknown_policy_error(name: str) -> UnknownCachePolicyError:
    """The error for ``eviction_policy`` = ``name`` loaded from this module."""
    offered = policy_names()
    kv_name = _kvpolicy_name(name)
    if kv_name in policies() and _uses_future(kv_name):
        why = (f"kvpolicy's {kv_name!r} reads each block's next use, which only a simulator knows, "
               "so vLLM cannot run it")
    else:
        why = "no such cache policy"
    return UnknownCachePolicyError(f"module 'kvpolicy.vllm' has no attribute {name!r}: {why}; "
                                   f"its cache policies: {offered}")


def _env_options(name: str) -> Dict[str, Any]:
    text = os.environ.get(OPTIONS_ENV)
    if not text:
        return {}
    try:
        table = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{OPTIONS_ENV}: not JSON ({e}); give an object such as "
                          f'{{"kvpolicy_s3fifo": {{"small_fraction": 0.2}}}}') from None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise ConfigError(f"{OPTIONS_ENV}: must map policy names to objects of options, "
                          f'such as {{"kvpolicy_s3fifo": {{"small_fraction": 0.2}}}}')
    # Keyed by either name form (s3fifo or kvpolicy_s3fifo).
    return dict(next((v for k, v in table.items() if _kvpolicy_name(k) == _kvpolicy_name(name)), {}))


def _vllm():
    try:
        from vllm.v1.kv_offload.cpu.policies import base  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("kvpolicy.vllm's cache policies subclass vLLM's CachePolicy (vLLM >= 0.30); "
                          "install vLLM, or use kvpolicy.vllm.OffloadingManager for vLLM 0.11 to 0.20") from e
    return base


class _Seam:
    """What the vLLM found offers a CachePolicy, read from its classes.

    - ``request_end``: ``CachePolicy.on_request_finished`` and
      ``order_request_keys`` (vLLM 0.31 and later): the manager reports each
      request's end with its keys in prefix order. Without them (0.30) vLLM's
      LRU moves a chunk to its most-recent end whenever the chunk becomes
      evictable again (its store or its last load completed).
    - ``insert_request``: ``insert`` is given the inserting request's
      ``ReqContext`` (0.33 and later: its token positions and hints); before,
      a chunk is ranked by its insertion alone, as vLLM's LRU ranks it there,
      and no hint is read (a chunk's session is unknown when it is stored).
    """

    def __init__(self, base):
        self.order_request_keys = getattr(base, "order_request_keys", None)
        self.request_end = hasattr(base.CachePolicy, "on_request_finished") and self.order_request_keys is not None
        self.insert_request = "req_context" in inspect.signature(base.CachePolicy.insert).parameters


def cache_policy(policy: str, *, class_name: Optional[str] = None, **options: Any) -> Type:
    """A vLLM ``CachePolicy`` class backed by kvpolicy's ``policy``.

    ``policy``: ``"vllm_lru"``, ``"vllm_arc"`` or any name in
    ``kvpolicy.policies()`` (with or without the ``kvpolicy_`` prefix);
    ``options``: the policy's (``kvpolicy.policy_options(policy)``), checked
    now. Raises ``kvpolicy.UnknownNameError`` / ``ConfigError`` naming what
    is wrong.
    """
    kv_name = _kvpolicy_name(policy)
    if kv_name not in _IDENTICAL:
        if kv_name not in policies():
            raise ConfigError(f"kvpolicy.vllm: unknown policy {policy!r}; choose one of {policy_names()}")
        if _uses_future(kv_name):
            raise ConfigError(f"kvpolicy.vllm: {kv_name!r} reads each block's next use, which only a simulator "
                              f"knows; choose one of {policy_names()}")
    CachePolicyCore(kv_name, 1, dict(options))  # checks the options now, not at the first request
    base = _vllm()
    seam = _Seam(base)
    order_request_keys = seam.order_request_keys
    # vLLM's LRU without request ends (0.30): a chunk that becomes evictable is used.
    use_on_release = kv_name == "vllm_lru" and not seam.request_end

    fixed = dict(options)
    name = class_name or (kv_name if kv_name in _IDENTICAL else _PREFIX + kv_name)

    class KvpolicyCachePolicy(base.CachePolicy):
        __doc__ = f"vLLM CachePolicy over kvpolicy's {kv_name!r} (kvpolicy.vllm)."
        kvpolicy_name = kv_name

        def __init__(self, cache_capacity: int):
            super().__init__(cache_capacity)
            opts = dict(fixed) if fixed or class_name else _env_options(name)
            self._core = core = CachePolicyCore(kv_name, cache_capacity, opts)
            _announce(self)
            self._by_request = core.orders_by_request
            self._hears_hints = kv_name not in _IDENTICAL and seam.insert_request
            self._generation = 0
            if self._hears_hints:
                # vLLM inserts a request's chunks one call each, a step's (128
                # on the agentic trace) with one context: straight to C++,
                # which asks the context's session once.
                core.hear_sessions(self._session)
                self.insert = core.insert_hinted
            # The manager calls these per chunk: straight to the dict or C++.
            self.get = core.chunks.get
            self.mark_evictable = core.mark_evictable
            if use_on_release:
                touch, release = core.touch, core.mark_evictable

                def mark_evictable(key) -> None:
                    touch((key,))
                    release(key)

                self.mark_evictable = mark_evictable
            self.mark_non_evictable = core.mark_non_evictable
            self.remove = core.remove
            # The engine's requests as a connector hears them (C++:
            # engine/request_lifecycle.hpp): a queue-aware policy keeps what
            # queued requests read; each call returns None, or why the event
            # was ignored (an unknown or repeated id), for the caller to log.
            self.request_arrived = core.request_arrived
            self.request_scheduled = core.request_scheduled
            self.request_preempted = core.request_preempted
            self.request_finished = core.request_finished
            self.hears_queue = core.hears_queue
            self.ranks_new = core.ranks_new
            self.request_state = core.request_state
            self.forecast_front_cache = core.forecast_front_cache

        # vLLM's request rank lives in the request's own scratch state, one per
        # (policy, reset generation), as vLLM's LRUCachePolicy keeps it.
        def _request_rank(self, req_context) -> int:
            state = req_context.get_state(_RequestRank)
            if state is None or state.owner is not self or state.generation != self._generation:
                state = _RequestRank(self, self._generation, self._core.new_request_rank())
                req_context.set_state(state)
            return state.rank

        @property
        def queued_requests(self) -> int:
            """Requests waiting in the engine's queue, as this policy heard them
            (0 for a policy that does not hear the queue)."""
            return self._core.queued_requests

        @property
        def front_cache_blocks(self) -> int:
            """The GPU prefix cache, in offload keys, that queued requests are
            told past (kvpolicy's connector sets it; 0: every key)."""
            return self._core.front_cache_blocks

        def admitted(self, keys, free: int, req_context) -> int:
            """How many of a store's offered ``keys`` (head first) to store
            with ``free`` chunks free: up to the first new key the policy
            ranks its own next victim (all of them unless ``ranks_new``).
            kvpolicy's connector asks it with ``kvpolicy_store_admission``."""
            session = self._hints(req_context).session if self._hears_hints and req_context is not None else 0
            return self._core.admitted(keys, free, session)

        def get(self, key):  # replaced per instance by the dict's own get
            return self._core.chunks.get(key)

        # A request's hints, parsed once per request (kvpolicy_* policies only).
        def _hints(self, req_context) -> RequestHints:
            hints = req_context.get_state(RequestHints)
            if hints is None or hints.owner is not self:
                hints = parse_hints(req_context)
                hints.owner = self
                req_context.set_state(hints)
            return hints

        def _session(self, req_context) -> int:
            return self._hints(req_context).session

        if seam.insert_request:
            def insert(self, key, chunk, req_context) -> None:  # a hint-hearing policy's is C++'s (__init__)
                position = req_context.get_offload_key_position(key) if self._by_request else None
                rank = self._request_rank(req_context) if position is not None else 0
                self._core.insert(key, chunk, position, rank, chunk.ref_cnt)
        else:
            def insert(self, key, chunk) -> None:
                self._core.insert(key, chunk, None, 0, chunk.ref_cnt)

        def remove(self, key) -> None:  # replaced per instance
            self._core.remove(key)

        def touch(self, keys, req_context) -> None:
            keys = keys if isinstance(keys, (list, tuple)) else list(keys)
            if self._hears_hints and req_context is not None:
                self._core.touch(keys, self._hints(req_context).session)
                return
            self._core.touch(keys)

        def on_store_miss(self, keys, req_context) -> None:
            self._core.store_miss(keys if isinstance(keys, (list, tuple)) else list(keys))

        def on_request_access(self, keys, req_context) -> None:
            if not self._by_request:
                return
            rank = self._request_rank(req_context)
            positions = getattr(req_context, "_offload_key_positions", None)
            keys = keys if isinstance(keys, (list, tuple)) else list(keys)
            if not isinstance(positions, dict):
                positions = {k: p for k in keys if (p := req_context.get_offload_key_position(k)) is not None}
            self._core.request_access(keys, positions, rank)

        if seam.request_end:
            def on_request_finished(self, key_groups, insertion_only_keys, reused_keys, req_context) -> None:
                # vLLM's order_request_keys, in C++ over the context's positions
                # (it asks the context per key: most of a request's end here).
                positions = getattr(req_context, "_offload_key_positions", None)
                ordered = _order_keys(key_groups, positions) if type(positions) is dict else None
                if ordered is None:
                    ordered = order_request_keys(key_groups, req_context)
                if not self._hears_hints:
                    self._core.finish(ordered, insertion_only_keys, reused_keys)
                    return
                h = self._hints(req_context)
                self._core.finish(ordered, insertion_only_keys, reused_keys, h.session, h.expected_return_s,
                                  h.session_end)

        def evict(self, n, protected):
            return self._core.evict(n, protected)

        def clear(self) -> None:
            self._core.clear()
            self._generation += 1

        def mark_evictable(self, key) -> None:  # replaced per instance
            self._core.mark_evictable(key)

        def mark_non_evictable(self, key) -> None:  # replaced per instance
            self._core.mark_non_evictable(key)

        # vllm_arc's state under vLLM's public attribute names (tests and
        # inspection): T1 and T2 as ordered key -> chunk dicts (copies), B1
        # and B2 as views answering `in` and len(), the target read-write.
        @property
        def t1(self) -> dict:
            chunks = self._core.chunks
            return {k: chunks[k] for k in self._core.arc_list(1)}

        @property
        def t2(self) -> dict:
            chunks = self._core.chunks
            return {k: chunks[k] for k in self._core.arc_list(2)}

        @property
        def b1(self) -> "_GhostView":
            return _GhostView(self._core, 1)

        @property
        def b2(self) -> "_GhostView":
            return _GhostView(self._core, 2)

        @property
        def target_t1_size(self) -> float:
            return self._core.target_t1_size

        @target_t1_size.setter
        def target_t1_size(self, value: float) -> None:
            self._core.target_t1_size = value

    KvpolicyCachePolicy.__name__ = KvpolicyCachePolicy.__qualname__ = name
    return KvpolicyCachePolicy


_built = threading.local()


@contextlib.contextmanager
def policies_built():
    """The kvpolicy cache policies vLLM builds inside this block, on this
    thread: a connector learns its manager's policies as they are made,
    without reaching into vLLM's manager (``_connector``)."""
    outer = getattr(_built, "policies", None)
    _built.policies = built = []
    try:
        yield built
    finally:
        _built.policies = outer
        if outer is not None:
            outer.extend(built)


def _announce(policy) -> None:
    built = getattr(_built, "policies", None)
    if built is not None:
        built.append(policy)


class RequestHints:
    """What a request said about its session (see the module's docstring)."""

    __slots__ = ("owner", "session", "expected_return_s", "session_end")

    def __init__(self, owner=None, session: int = 0, expected_return_s: Optional[float] = None,
                 session_end: bool = False):
        self.owner = owner
        self.session = session
        self.expected_return_s = expected_return_s
        self.session_end = session_end


def session_key(session: Any) -> int:
    """A session id (int or str) as kvpolicy's 64-bit session id, never 0
    (0 is "no session"); the same in every process."""
    if isinstance(session, bool) or not isinstance(session, (int, str)):
        raise ValueError(f"a session id is an int or a str, not {type(session).__name__}")
    if isinstance(session, int) and 0 < session < 2**64:
        return session
    digest = hashlib.blake2b(repr(session).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") | 1


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {value!r}")
    return float(value)


def _apply(hints: RequestHints, kind: str, payload: Any) -> None:
    if not isinstance(payload, dict):
        raise ValueError(f"payload must be an object, got {type(payload).__name__}")
    if kind == "kvpolicy.session":
        if "id" not in payload:
            raise ValueError('payload needs "id" (the session id, an int or a str)')
        hints.session = session_key(payload["id"])
    elif kind == "kvpolicy.expected_return":
        if "seconds" not in payload:
            raise ValueError('payload needs "seconds" (until the session\'s next request)')
        hints.expected_return_s = _seconds(payload["seconds"])
    elif kind == "kvpolicy.session_end":
        if "id" in payload:
            hints.session = session_key(payload["id"])
        hints.session_end = True
    else:
        raise ValueError(f"unknown kvpolicy action {kind!r}; known: kvpolicy.session, "
                         "kvpolicy.expected_return, kvpolicy.session_end")


def parse_hints(req_context) -> RequestHints:
    """The request's hints from ``kv_hints`` and ``kv_transfer_params``.

    Never raises: a malformed kvpolicy action or parameter is skipped with a
    warning naming the request, the action and the reason."""
    hints = RequestHints()
    req_id = getattr(req_context, "req_id", "?")
    envelope = getattr(req_context, "kv_hints", None)
    for action in getattr(envelope, "actions", None) or ():
        kind = getattr(action, "action_type", None)
        if not isinstance(kind, str) or not kind.startswith("kvpolicy."):
            continue  # another component's action
        try:
            version = getattr(action, "action_version", None)
            if version != HINT_VERSION:
                raise ValueError(f"action_version {version!r} is not {HINT_VERSION!r}")
            _apply(hints, kind, getattr(action, "payload", None))
        except Exception as e:  # noqa: BLE001: a hint must never fail the scheduler
            logger.warning("request %s: kv_hints action %s (%s) ignored: %s", req_id,
                           getattr(action, "action_id", "?"), kind, e)
    params = getattr(req_context, "kv_transfer_params", None)
    ours = params.get("kvpolicy") if isinstance(params, dict) else None
    if ours is not None:
        try:
            if not isinstance(ours, dict):
                raise ValueError(f"must be an object, got {type(ours).__name__}")
            unknown = set(ours) - {"session", "expected_return_s", "session_end"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}; known: session, expected_return_s, session_end")
            if "session" in ours:
                hints.session = session_key(ours["session"])
            if "expected_return_s" in ours:
                hints.expected_return_s = _seconds(ours["expected_return_s"])
            if "session_end" in ours:
                if not isinstance(ours["session_end"], bool):
                    raise ValueError(f"session_end must be true or false, got {ours['session_end']!r}")
                hints.session_end = ours["session_end"]
        except Exception as e:  # noqa: BLE001
            logger.warning("request %s: kv_transfer_params['kvpolicy'] ignored: %s", req_id, e)
    return hints


class _GhostView:
    """vllm_arc's B1 or B2: which keys it remembers (``in``) and how many."""

    __slots__ = ("_core", "_which")

    def __init__(self, core, which: int):
        self._core = core
        self._which = which

    def __contains__(self, key) -> bool:
        return self._core.in_ghost(key, self._which)

    def __len__(self) -> int:
        return self._core.ghost_size(self._which)

    def __bool__(self) -> bool:
        return len(self) > 0


class _RequestRank:
    __slots__ = ("owner", "generation", "rank")

    def __init__(self, owner, generation: int, rank: int):
        self.owner = owner
        self.generation = generation
        self.rank = rank


_classes: Dict[Tuple[str, type], Type] = {}


def policy_class(name: str) -> Type:
    """The CachePolicy class ``kvpolicy.vllm.<name>``, built once per vLLM
    CachePolicy class it subclasses (the vLLM imported now)."""
    key = (offered_name(name) or name, _vllm().CachePolicy)
    if key not in _classes:
        _classes[key] = cache_policy(name)
    return _classes[key]
