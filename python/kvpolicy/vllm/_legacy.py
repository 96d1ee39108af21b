"""A drop-in for vLLM V1's scheduler-side OffloadingManager, on kvpolicy's C++.

vLLM's CPU offloading connector asks an ``OffloadingManager``
(``vllm/v1/kv_offload/abstract.py``) where offloaded KV blocks live. This
module gives the same methods, names and semantics, backed by kvpolicy's
C++ bookkeeping and any registered eviction policy (``policy="arc"`` is one
argument away). It imports nothing from vLLM; where vLLM is installed,
``VllmOffloadingManager`` is the same manager as a subclass of vLLM's ABC
(speaking the API of the vLLM found: 0.11-0.19 or 0.20), and
``KvpolicyOffloadingSpec`` the spec vLLM's ``OffloadingSpecFactory`` loads
by ``spec_name``/``spec_module_path``.

Semantics (each method takes block hashes: ints, bytes, any hashable, in a
list or any iterable such as the ``islice`` views vLLM's connector passes, or
a NumPy uint64 or int64 array, which is read in place; a list holding the
same objects as the previous call's list, or a prefix or suffix of them, as
vLLM's connector passes one request's hashes, reuses their keys; an
unhashable item, an argument that is not iterable, or one bytes hash passed
for the list raises ``kvpolicy.UsageError`` naming it, changing nothing):

- A block is *storing* from ``prepare_store`` until ``complete_store``, then
  *ready*. Only ready blocks count in ``lookup`` and may be loaded.
- ``lookup(hashes)``: the number of leading blocks that are ready.
- ``prepare_load(hashes)``: protects the blocks from eviction until
  ``complete_load`` and returns a ``CPULoadStoreSpec`` with their slots. A
  block listed twice is loaded twice. A block not offloaded, or still being
  stored, raises ``kvpolicy.UsageError`` (vLLM asserts).
- ``touch(hashes)``: marks the blocks used, the first most recently (vLLM
  touches in reverse). Unknown blocks are skipped.
- ``complete_load(hashes)``: ends one load of each; a block with no load
  left is evictable again. A block with no load in flight raises.
- ``prepare_store(hashes)``: the blocks not yet offloaded get slots, in the
  order given; blocks neither pinned (storing, loading) nor in ``hashes``
  are evicted in policy order to make room.
  Returns ``PrepareStoreOutput(block_hashes_to_store, store_spec,
  block_hashes_evicted)``, or ``None``, changing nothing, if too few blocks
  can be evicted. A new block listed twice raises.
- ``complete_store(hashes, success=True)``: blocks still storing become
  ready; with ``success=False`` they are removed instead (their slots are
  free again). Ready blocks are left as they are. A block never prepared
  raises (vLLM skips it).
- ``take_events()`` (with ``enable_events=True``, off by default as in
  vLLM): ``OffloadingEvent``s since the last call, oldest first:
  evictions (``removed=True``) at ``prepare_store``, completed stores
  (``removed=False``) at ``complete_store``.

``policy``: ``"vllm_lru"`` and ``"vllm_arc"`` (the registry's
``vllm_0_11_lru`` and ``vllm_0_11_arc``, which are accepted too) decide as
vLLM's own LRU and ARC of 0.11 to 0.20 (vLLM's ``LRUOffloadingManager`` and, from 0.11.1,
``ARCOffloadingManager``; from 0.19 its ``LRUCachePolicy`` and
``ARCCachePolicy``; vLLM's tests and a differential test against 0.11.0's
LRU, 0.19.1's and 0.20.2's run in python/tests/test_vllm_legacy_peers.py),
with one departure: a block already offloaded and listed again in
``prepare_store``'s input is never that call's victim, as in vLLM from 0.18
on (0.11 to 0.17 evict it when it is the oldest and report it offloaded
although its slot went to another block). Any other name is a kvpolicy policy
(``"lru"``, ``"arc"``: kvpolicy's own, ``arc`` being the paper's). For every
policy: a block in ``prepare_store``'s input is never that call's victim; a
``prepare_store`` answering ``None`` changed nothing; slots are handed out as
vLLM does (never-used slots first, then the most recently freed, so a
multi-block eviction's slots go to the new blocks in reverse); completing a
store or a load moves no block in the vLLM orders nor in kvpolicy's
position-based policies (fifo, clock, sieve, s3fifo, two_q, lfu,
round_robin; lirs and checkerboard as tested), while kvpolicy's other
policies (lru and its family, arc, slru, w_tinylfu, the time-varying
scores) put a block whose pin or protection ends at their most-recent end
(include/kvpolicy/engine/offload_manager.hpp says why).

Hashes answered back (``block_hashes_to_store``, ``block_hashes_evicted``,
events) are the caller's own objects, or arrays for array callers. Keys are
64 bits (ints modulo 2^64, other objects by ``hash()``), but bytes hashes
(vLLM's 32-byte ``BlockHash``) are kept whole: a bytes hash's key starts at
a 64-bit fold, and two distinct hashes with one fold stay two blocks (the
slot keeps the bytes and compares them; see
include/kvpolicy/engine/byte_hash_keys.hpp).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional

import numpy as np

from .. import ConfigError, policy_name
from .._kvpolicy import OffloadCore

__all__ = [
    "CPULoadStoreSpec",
    "OffloadingEvent",
    "OffloadingManager",
    "PrepareStoreOutput",
]


class CPULoadStoreSpec:
    """Where blocks live in the offloaded tier: their slots (uint32 array)."""

    __slots__ = ("block_ids",)

    def __init__(self, block_ids: np.ndarray):
        self.block_ids = block_ids

    @staticmethod
    def medium() -> str:
        return "CPU"

    def __repr__(self) -> str:
        return f"CPULoadStoreSpec({self.block_ids!r})"


@dataclass
class PrepareStoreOutput:
    block_hashes_to_store: Any
    store_spec: CPULoadStoreSpec
    block_hashes_evicted: Any


@dataclass
class OffloadingEvent:
    block_hashes: List[Any]
    block_size: int
    medium: str
    removed: bool


class OffloadingManager(OffloadCore):
    """vLLM's OffloadingManager over ``num_blocks`` slots and a kvpolicy policy.

    ``policy``: ``"vllm_lru"``, ``"vllm_arc"`` (vLLM's own decisions, no
    options; also ``vllm_0_11_lru``, ``vllm_0_11_arc``) or any name in
    ``kvpolicy.policies()`` (``kvpolicy_s3fifo`` or ``s3fifo``); ``config``: its options
    (``kvpolicy.policy_options(policy)``). ``enable_events``: record what
    take_events returns (off by default, as in vLLM); ``block_size`` labels them.
    See the module docstring for every method's semantics.
    """

    def __init__(self, num_blocks: int, policy: str = "lru", *, block_size: int = 0,
                 enable_events: bool = False, **config: Any):
        super().__init__(num_blocks, policy_name(policy), enable_events, **config)
        self.block_size = block_size

    def prepare_load(self, block_hashes: Iterable[Any]) -> CPULoadStoreSpec:
        return CPULoadStoreSpec(OffloadCore.prepare_load(self, block_hashes))

    def prepare_store(self, block_hashes: Iterable[Any]) -> Optional[PrepareStoreOutput]:
        plan = self._prepare_store(block_hashes)
        if plan is None:
            return None
        to_store, slots, evicted = plan
        return PrepareStoreOutput(to_store, CPULoadStoreSpec(slots), evicted)

    def take_events(self) -> Iterable[OffloadingEvent]:
        for hashes, removed in self._take_events():
            yield OffloadingEvent(hashes, self.block_size, "CPU", removed)


def _vllm_subclass():
    """VllmOffloadingManager where vLLM is installed, else None.

    Speaks the API of the vLLM it finds: 0.11 to 0.19 (``lookup(block_hashes)``
    counts a prefix; ``block_hashes_to_store``, ``block_hashes_evicted``, events
    with ``block_size``) or 0.20 (``lookup(key, req_context)`` answers one key;
    ``keys_to_store``, ``evicted_keys``, events with ``keys``).
    """
    try:
        from vllm.v1.kv_offload import abstract  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:  # vLLM's own CPU spec, which its workers dispatch on
        from vllm.v1.kv_offload.mediums import CPULoadStoreSpec as VllmCPUSpec  # type: ignore
    except ImportError:
        VllmCPUSpec = None
    keyed = hasattr(abstract, "ReqContext")  # 0.20: one key per lookup, keys not block hashes

    class VllmOffloadingManager(abstract.OffloadingManager):
        """kvpolicy's OffloadingManager as a subclass of vLLM's ABC (delegating)."""

        def __init__(self, num_blocks: int, policy: str = "vllm_lru", *, block_size: int = 0,
                     enable_events: bool = False, **config: Any):
            self.manager = OffloadingManager(num_blocks, policy, block_size=block_size,
                                             enable_events=enable_events, **config)
            self.block_size = block_size

        def _spec(self, spec: CPULoadStoreSpec):
            return VllmCPUSpec(spec.block_ids) if VllmCPUSpec is not None else spec

        if keyed:
            def lookup(self, key, req_context=None):
                return self.manager.lookup((key,)) == 1

            def prepare_load(self, keys, req_context=None):
                return self._spec(self.manager.prepare_load(keys))

            def prepare_store(self, keys, req_context=None):
                return self._store_output(self.manager.prepare_store(keys))

            def shutdown(self) -> None:
                return
        else:
            def lookup(self, block_hashes):
                return self.manager.lookup(block_hashes)

            def prepare_load(self, block_hashes):
                return self._spec(self.manager.prepare_load(block_hashes))

            def prepare_store(self, block_hashes):
                return self._store_output(self.manager.prepare_store(block_hashes))

        def _store_output(self, out):
            if out is None:
                return None
            to_store, spec, evicted = out.block_hashes_to_store, self._spec(out.store_spec), out.block_hashes_evicted
            if keyed:
                return abstract.PrepareStoreOutput(keys_to_store=to_store, store_spec=spec, evicted_keys=evicted)
            return abstract.PrepareStoreOutput(block_hashes_to_store=to_store, store_spec=spec,
                                               block_hashes_evicted=evicted)

        def touch(self, block_hashes):
            self.manager.touch(block_hashes)

        def complete_load(self, block_hashes):
            self.manager.complete_load(block_hashes)

        def complete_store(self, block_hashes, success: bool = True):
            self.manager.complete_store(block_hashes, success)

        def take_events(self):
            medium = VllmCPUSpec.medium() if VllmCPUSpec is not None else "CPU"
            for e in self.manager.take_events():
                if keyed:
                    yield abstract.OffloadingEvent(keys=e.block_hashes, medium=medium, removed=e.removed)
                else:
                    yield abstract.OffloadingEvent(block_hashes=e.block_hashes, block_size=e.block_size,
                                                   medium=medium, removed=e.removed)

    return VllmOffloadingManager


VllmOffloadingManager = _vllm_subclass()
if VllmOffloadingManager is not None:
    __all__.append("VllmOffloadingManager")


def _vllm_cpu_spec():
    """vLLM's CPU offloading spec class: ``cpu/spec.py`` (0.19, 0.20) or the
    ``cpu.py`` module (0.11 to 0.18); None where neither imports."""
    for module in ("vllm.v1.kv_offload.cpu.spec", "vllm.v1.kv_offload.cpu"):
        try:
            return getattr(importlib.import_module(module), "CPUOffloadingSpec")
        except (ImportError, AttributeError):
            continue
    return None


def _vllm_spec_subclass():
    """KvpolicyOffloadingSpec where vLLM's CPU offloading spec imports, else None."""
    if VllmOffloadingManager is None:
        return None
    VllmCPUOffloadingSpec = _vllm_cpu_spec()
    if VllmCPUOffloadingSpec is None:
        return None
    try:  # vLLM's filter of blocks seen fewer than store_threshold times (0.18 on)
        from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager  # type: ignore
    except ImportError:
        FilterReusedOffloadingManager = None

    class KvpolicyOffloadingSpec(VllmCPUOffloadingSpec):
        """vLLM's CPU offloading (0.11 to 0.20) with kvpolicy's manager deciding.

        Load it through vLLM's ``OffloadingSpecFactory``: in
        ``kv_connector_extra_config`` give ``"spec_name":
        "KvpolicyOffloadingSpec", "spec_module_path": "kvpolicy.vllm"`` beside
        vLLM's own keys (``cpu_bytes_to_use``, or ``num_cpu_blocks`` in 0.11
        to 0.13; ``block_size``; ``store_threshold`` where vLLM has its reuse
        filter, 0.18 on). Everything but the manager is vLLM's CPU spec (its
        slot count, its GPU-CPU transfer handlers). ``eviction_policy``:
        ``"vllm_lru"`` (the default) or ``"vllm_arc"`` decide as vLLM's own
        LRU and ARC; ``"lru"``, ``"arc"`` and every other name in
        ``kvpolicy.policies()`` are kvpolicy's. ``policy_options``: a dict of
        that policy's options. A ``store_threshold`` of 2 or more where this
        vLLM has no reuse filter raises ``kvpolicy.ConfigError``.
        """

        def __init__(self, vllm_config, *kv_cache_config):  # 0.19 on: (vllm_config, kv_cache_config)
            super().__init__(vllm_config, *kv_cache_config)
            self.eviction_policy = self.extra_config.get("eviction_policy", "vllm_lru")
            self.policy_options = dict(self.extra_config.get("policy_options", {}))
            self.store_threshold = int(self.extra_config.get("store_threshold", 0))
            if self.store_threshold >= 2 and FilterReusedOffloadingManager is None:
                raise ConfigError(f"store_threshold {self.store_threshold}: this vLLM has no reuse filter "
                                  "(vllm/v1/kv_offload/reuse_manager.py, vLLM 0.18 and later); leave it out")

        def _slots_and_block_size(self):
            """The CPU slot count and the offloaded block's tokens, where this vLLM's spec keeps
            them: ``num_cpu_blocks`` (0.11 to 0.13) or ``num_blocks``; ``offloaded_block_size``
            (0.11 to 0.18) or a GPU block size per KV cache group times ``block_size_factor``."""
            slots = self.num_blocks if hasattr(self, "num_blocks") else self.num_cpu_blocks
            if hasattr(self, "offloaded_block_size"):
                return slots, self.offloaded_block_size
            sizes = set(self.gpu_block_size)
            return slots, sizes.pop() * self.block_size_factor if len(sizes) == 1 else 0

        def get_manager(self):
            if not self._manager:
                events = self.vllm_config.kv_events_config
                enable_events = events is not None and bool(events.enable_kv_cache_events)
                num_blocks, block_size = self._slots_and_block_size()  # block_size: the events' (0.11-0.19 carry it)
                manager = VllmOffloadingManager(num_blocks, self.eviction_policy, block_size=block_size,
                                                enable_events=enable_events, **self.policy_options)
                if self.store_threshold >= 2:  # vLLM's own filter of blocks seen fewer times
                    manager = FilterReusedOffloadingManager(
                        backing=manager, store_threshold=self.store_threshold,
                        max_tracker_size=int(self.extra_config.get("max_tracker_size", 64_000)))
                self._manager = manager
            return self._manager

    return KvpolicyOffloadingSpec


KvpolicyOffloadingSpec = _vllm_spec_subclass()
if KvpolicyOffloadingSpec is not None:
    __all__.append("KvpolicyOffloadingSpec")
