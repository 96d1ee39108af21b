"""kvpolicy's KV connector for vLLM >= 0.33: vLLM's ``OffloadingConnector``,
telling the kvpolicy cache policies behind it of the engine's waiting queue.

vLLM's scheduler hands a connector every request three ways: on arrival
(``on_new_request``, its block hashes already computed), when it is scheduled
or preempted (``build_connector_meta``: the step's new, resumed and preempted
requests) and when it ends, finished or aborted (``request_finished``). A
queue-aware kvpolicy policy (``kvpolicy_queue_aware_adaptive_kv``, ...)
keeps the chunks queued requests will read; vLLM's CPU tier alone never
hears of them. Load it with::

    --kv-transfer-config '{"kv_connector": "KvpolicyOffloadingConnector",
      "kv_connector_module_path": "kvpolicy.vllm", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 64000000000,
        "eviction_policy": "kvpolicy_queue_aware_adaptive_kv",
        "cache_policy_module_path": "kvpolicy.vllm"}}'

This class only translates. Everything vLLM's connector does, it does
unchanged (it is a subclass that adds calls after vLLM's own); the
bookkeeping of which request waits is C++ (``engine/request_lifecycle.hpp``
behind each policy's ``request_*`` calls). A request's keys are its offload
keys exactly as vLLM's offloading scheduler derives them from
``request.block_hashes`` (one per chunk per offloaded KV group), so a queued
request protects the very chunks it will look up; the policies are told the
keys' hashes, made in C++ without the keys (``offload_key_hashes``). Where no
policy behind the connector hears the queue (``vllm_lru``, vLLM's own
policies, a tiered manager without a kvpolicy tier) it makes no call at all:
vLLM's ``OffloadingConnector``, decision for decision.

With ``"kvpolicy_store_admission": true`` in the extra config and a policy
that ranks new chunks (``kvpolicy_predicted_return`` and its ``queue_aware_``
form), a store is cut at the first new chunk the policy would evict next
itself (``admit_stores``); off by default.

An event the bookkeeping cannot use (an unknown or repeated request id) is
ignored with its reason on the ``kvpolicy.vllm`` logger; nothing here raises
inside vLLM's scheduler.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, List, Optional

from .. import UsageError
from .._kvpolicy import _offload_key_hashes
from ._policies import parse_hints, policies_built

logger = logging.getLogger("kvpolicy.vllm")

CONNECTOR_NAME = "KvpolicyOffloadingConnector"


def offload_keys(block_hashes: Iterable[bytes], group_configs, make_offload_key: Callable) -> List[Any]:
    """A request's offload keys as vLLM 0.33's offloading scheduler derives
    them (``RequestOffloadState.update_offload_keys``): for each offloaded KV
    group, the hash closing each chunk (every ``hashes_per_chunk``-th block
    hash), tagged with the group. Where vLLM's ``make_offload_key`` is the
    hash with a fixed suffix per group (0.33: the group index, 4 bytes
    big-endian), checked once per group, the suffix is appended here: a
    quarter of the time per key, for a request of hundreds of chunks on each
    arrival and preemption."""
    hashes = block_hashes if isinstance(block_hashes, list) else list(block_hashes)
    keys: List[Any] = []
    for group in group_configs:
        step = group.hashes_per_chunk
        chosen = hashes[step - 1::step]
        tag = _group_suffix(make_offload_key, group.group_idx)
        if tag is None:
            keys.extend(make_offload_key(h, group.group_idx) for h in chosen)
        else:
            keys.extend([h + tag for h in chosen])
    return keys


def offload_key_hashes(block_hashes: Iterable[bytes], group_configs, make_offload_key: Callable):
    """What ``offload_keys`` gives, as each key's ``hash()`` (a uint64
    array), computed in C++ without making the keys; None where a group's
    ``make_offload_key`` is not a plain suffix or a hash is not bytes (the
    caller makes the keys). A queue-aware policy reads a queued request's
    keys only by their hashes."""
    groups = []
    for group in group_configs:
        tag = _group_suffix(make_offload_key, group.group_idx)
        if tag is None:
            return None
        groups.append((group.hashes_per_chunk, tag))
    try:
        return _offload_key_hashes(block_hashes, groups)
    except UsageError:
        return None


def request_keys(block_hashes, group_configs, make_offload_key: Callable):
    """A request's offload keys for the queue: their hashes where
    ``offload_key_hashes`` can, else the keys."""
    block_hashes = block_hashes if isinstance(block_hashes, list) else list(block_hashes)
    hashes = offload_key_hashes(block_hashes, group_configs, make_offload_key)
    return hashes if hashes is not None else offload_keys(block_hashes, group_configs, make_offload_key)


_SUFFIXES: Dict[tuple, Optional[bytes]] = {}


def _group_suffix(make_offload_key: Callable, group_idx: int) -> Optional[bytes]:
    """The bytes ``make_offload_key`` appends to any hash for ``group_idx``,
    when that is all it does (two probe hashes agree); None otherwise, and
    the caller calls it per key."""
    cache_key = (make_offload_key, group_idx)
    if cache_key not in _SUFFIXES:
        probes = (bytes(32), bytes(range(1, 33)))
        made = [make_offload_key(p, group_idx) for p in probes]
        tag = made[0][len(probes[0]):] if type(made[0]) is bytes else None
        plain = tag is not None and all(type(m) is bytes and m == p + tag for p, m in zip(probes, made))
        _SUFFIXES[cache_key] = tag if plain else None
    return _SUFFIXES[cache_key]


FORECAST_OPTION = "kvpolicy_forecast_front_cache"


def front_cache_keys(vllm_config, kv_cache_config, groups) -> int:
    """The GPU prefix cache in front of the CPU tier, in offload keys, for
    the queue's forecast (``engine/front_cache_forecast.hpp``): a queued
    request tells the policy only its chunks past the hit the GPU is
    forecast to give it, since the CPU tier is looked up only past that.
    Opt-in (``kv_connector_extra_config: {"kvpolicy_forecast_front_cache":
    true}``): in vLLM 0.33's own scheduler it moved the agentic trace's
    cells by +2, +4 and -6 points of the LRU -> Belady gap and the Mooncake
    traces' by none, for 1.3-2x the policy's time
    (docs/getting-started/vllm.md). 0 (every chunk) where it is off, where
    the GPU's size is not known, or with several offloaded KV groups (their
    keys are not one prefix)."""
    extra = getattr(getattr(vllm_config, "kv_transfer_config", None), "kv_connector_extra_config", None) or {}
    if not extra.get(FORECAST_OPTION, False):
        return 0
    num_blocks = getattr(kv_cache_config, "num_blocks", 0) or 0
    if num_blocks <= 0 or len(groups) != 1:
        if num_blocks > 0:
            logger.info("kvpolicy connector: %d offloaded KV groups; the queue hears every chunk "
                        "(no GPU prefix-cache forecast)", len(groups))
        return 0
    return num_blocks // groups[0].hashes_per_chunk


ADMISSION_OPTION = "kvpolicy_store_admission"


def admit_stores(vllm_config, manager) -> bool:
    """Where asked (``kv_connector_extra_config: {"kvpolicy_store_admission":
    true}``) and the CPU tier's policy ranks new chunks (``ranks_new``:
    ``kvpolicy_predicted_return`` and its ``queue_aware_`` form), the
    manager's ``prepare_store`` is handed each offer cut at the first new
    chunk the policy would evict next itself: past the free room a chunk is
    stored only over one the policy values less (Belady's MIN with bypass,
    on its prediction). vLLM's scheduler then moves its store index past the
    whole offer, so a declined chunk is not offered again. Whether it was
    installed; off by default (docs/getting-started/vllm.md measures it)."""
    extra = getattr(getattr(vllm_config, "kv_transfer_config", None), "kv_connector_extra_config", None) or {}
    if not extra.get(ADMISSION_OPTION, False):
        return False
    policy = getattr(manager, "_policy", None)
    free = getattr(manager, "_get_num_free_chunks", None)
    if policy is None or free is None or not getattr(policy, "ranks_new", False):
        logger.warning("kvpolicy connector: %s has no effect: the CPU tier's policy (%s) cannot decline a "
                       "store; use kvpolicy_predicted_return or kvpolicy_queue_aware_predicted_return",
                       ADMISSION_OPTION, getattr(policy, "kvpolicy_name", type(policy).__name__))
        return False
    prepare_store = manager.prepare_store

    def prepare_store_admitted(keys, req_context):
        keys = keys if isinstance(keys, list) else list(keys)
        room = free()
        if len(keys) <= room:  # room for every chunk offered, new or not: nothing to decide
            return prepare_store(keys, req_context)
        cut = policy.admitted(keys, room, req_context)
        return prepare_store(keys if cut == len(keys) else keys[:cut], req_context)

    manager.prepare_store = prepare_store_admitted
    return True


class QueueRelay:
    """The engine's request events, passed to every policy that hears the
    queue, under the manager's lock (vLLM: every caller of the manager's
    state holds it; the policy is that state)."""

    def __init__(self, policies, lock: Callable[[], Any], keys_of: Callable[[Any], List[Any]]):
        self._policies = list(policies)
        self._lock = lock
        self._keys_of = keys_of
        self._requests: dict = {}  # id -> Request, to read a preempted request's hashes

    @property
    def policies(self) -> list:
        return list(self._policies)

    def arrived(self, request) -> None:
        rid = request.request_id
        self._requests.setdefault(rid, request)  # a repeated arrival: the bookkeeping says why it is ignored
        hints = parse_hints(SimpleNamespace(req_id=rid, kv_hints=getattr(request, "kv_hints", None),
                                            kv_transfer_params=getattr(request, "kv_transfer_params", None)))
        self._send("request_arrived", rid, self._keys(request), hints.session)

    def step(self, scheduler_output) -> None:
        # Preemptions first: a request preempted and resumed in one step (a
        # cache reset can do that) ends the step running.
        for rid in getattr(scheduler_output, "preempted_req_ids", None) or ():
            request = self._requests.get(rid)
            if request is None:
                logger.warning("kvpolicy connector: preempted request %r never arrived; ignored", rid)
                continue
            self._send("request_preempted", rid, self._keys(request))
        for new in scheduler_output.scheduled_new_reqs:
            self._send("request_scheduled", new.req_id)
        cached = scheduler_output.scheduled_cached_reqs
        for rid in getattr(cached, "resumed_req_ids", None) or ():
            self._send("request_scheduled", rid)

    def finished(self, request) -> None:
        self._requests.pop(request.request_id, None)
        self._send("request_finished", request.request_id)

    def _keys(self, request) -> List[Any]:
        try:
            return self._keys_of(request)
        except Exception:  # noqa: BLE001: a request's keys never stop the scheduler
            logger.exception("kvpolicy connector: request %r: its offload keys could not be read; "
                             "it protects no chunk", request.request_id)
            return []

    def _send(self, method: str, *args) -> None:
        with self._lock():
            for policy in self._policies:
                try:
                    why = getattr(policy, method)(*args)
                except Exception:  # noqa: BLE001: bookkeeping never stops the scheduler
                    logger.exception("kvpolicy connector: %s%r failed; ignored", method, args[:1])
                    continue
                if why is not None:
                    logger.warning("kvpolicy connector: %s", why)


def _vllm_connector():
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # type: ignore
            OffloadingConnector,
        )
        from vllm.v1.kv_offload.base import make_offload_key  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError(f"kvpolicy.vllm.{CONNECTOR_NAME} subclasses vLLM's OffloadingConnector "
                          "(vLLM >= 0.33); install vLLM") from e
    return OffloadingConnector, make_offload_key


_class: Optional[type] = None


def connector_class() -> type:
    """``kvpolicy.vllm.KvpolicyOffloadingConnector``, built on first use over
    the vLLM imported now."""
    global _class
    if _class is not None:
        return _class
    base, make_offload_key = _vllm_connector()

    class KvpolicyOffloadingConnector(base):
        """vLLM's OffloadingConnector that tells kvpolicy's cache policies of
        the waiting queue (kvpolicy.vllm._connector)."""

        def __init__(self, vllm_config, role, kv_cache_config=None, *args, **kwargs):
            with policies_built() as built:
                super().__init__(vllm_config, role, kv_cache_config, *args, **kwargs)
            self._queue_relay: Optional[QueueRelay] = None
            scheduler = self.connector_scheduler
            self._admits_stores = scheduler is not None and admit_stores(vllm_config, scheduler.manager)
            listeners = [p for p in built if getattr(p, "hears_queue", False)]
            if scheduler is None or not listeners:
                return
            manager, groups = scheduler.manager, scheduler.config.kv_group_configs
            self._queue_relay = QueueRelay(
                listeners, lambda: manager.lock,
                lambda request: request_keys(request.block_hashes, groups, make_offload_key))
            front = front_cache_keys(vllm_config, kv_cache_config, groups)
            for policy in listeners:
                policy.forecast_front_cache(front)

        @property
        def admits_stores(self) -> bool:
            """Whether stores go through the policy's admission (admit_stores)."""
            return self._admits_stores

        @property
        def queue_relay(self) -> Optional[QueueRelay]:
            """What tells the policies of the queue; None where none hears it."""
            return self._queue_relay

        def on_new_request(self, request) -> None:
            super().on_new_request(request)
            if self._queue_relay is not None:
                self._queue_relay.arrived(request)

        def build_connector_meta(self, scheduler_output):
            meta = super().build_connector_meta(scheduler_output)
            if self._queue_relay is not None:
                self._queue_relay.step(scheduler_output)
            return meta

        def request_finished(self, request, block_ids):
            result = super().request_finished(request, block_ids)
            if self._queue_relay is not None:
                self._queue_relay.finished(request)
            return result

        def request_finished_all_groups(self, request, block_ids):
            result = super().request_finished_all_groups(request, block_ids)
            if self._queue_relay is not None:
                self._queue_relay.finished(request)
            return result

    KvpolicyOffloadingConnector.__module__ = "kvpolicy.vllm"
    _class = KvpolicyOffloadingConnector
    return _class
