"""A drop-in for vLLM V1's scheduler-side OffloadingManager, on kvpolicy's C++.

vLLM's CPU offloading connector asks an ``OffloadingManager``
(``vllm/v1/kv_offload/abstract.py``) where offloaded KV blocks live. This
module gives the same methods, names and semantics, backed by kvpolicy's
C++ bookkeeping and any registered eviction policy (``policy="arc"`` is one
argument away). It imports nothing from vLLM; where vLLM is installed,
``VllmOffloadingManager`` is the same manager as a subclass of vLLM's ABC.

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
  order given; unprotected blocks are evicted in policy order to make room.
  Returns ``PrepareStoreOutput(block_hashes_to_store, store_spec,
  block_hashes_evicted)``, or ``None``, changing nothing, if too few blocks
  can be evicted. A new block listed twice raises.
- ``complete_store(hashes, success=True)``: blocks still storing become
  ready; with ``success=False`` they are removed instead (their slots are
  free again). Ready blocks are left as they are. A block never prepared
  raises.
- ``take_events()`` (with ``enable_events=True``, off by default as in
  vLLM): ``OffloadingEvent``s since the last call, oldest first:
  evictions (``removed=True``) at ``prepare_store``, completed stores
  (``removed=False``) at ``complete_store``.

Protection is the policy's *hold*: a protected block is never a victim.
When its store or last load completes the policy gets it back by kvpolicy's
hold rule: position-based policies put it back where it was, the LRU family
at the most-recent end. vLLM's LRU leaves a protected block where it was; the
two orders agree when each completion follows its prepare before other blocks
are touched (``complete_load`` releases tail first, ``complete_store`` in
order), which bench/python/offload_bench.py replays and asserts.

Hashes answered back (``block_hashes_to_store``, ``block_hashes_evicted``,
events) are the caller's own objects, or arrays for array callers. Keys are
64 bits (ints modulo 2^64, bytes folded, other objects by ``hash()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, List, Optional

import numpy as np

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

    ``policy``: any name in ``kvpolicy.policies()``; ``config``: its options
    (``kvpolicy.policy_options(policy)``). ``enable_events``: record what
    take_events returns (off by default, as in vLLM); ``block_size`` labels them.
    See the module docstring for every method's semantics.
    """

    def __init__(self, num_blocks: int, policy: str = "lru", *, block_size: int = 0,
                 enable_events: bool = False, **config: Any):
        super().__init__(num_blocks, policy, enable_events, **config)
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
    """VllmOffloadingManager where vLLM is installed, else None."""
    try:
        from vllm.v1.kv_offload import abstract  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:  # vLLM's own CPU spec, which its workers dispatch on
        from vllm.v1.kv_offload.mediums import CPULoadStoreSpec as VllmCPUSpec  # type: ignore
    except ImportError:
        VllmCPUSpec = None

    class VllmOffloadingManager(abstract.OffloadingManager):
        """kvpolicy's OffloadingManager as a subclass of vLLM's ABC (delegating)."""

        def __init__(self, num_blocks: int, policy: str = "lru", *, block_size: int = 0,
                     enable_events: bool = False, **config: Any):
            self.manager = OffloadingManager(num_blocks, policy, block_size=block_size,
                                             enable_events=enable_events, **config)

        def _spec(self, spec: CPULoadStoreSpec):
            return VllmCPUSpec(spec.block_ids) if VllmCPUSpec is not None else spec

        def lookup(self, block_hashes):
            return self.manager.lookup(block_hashes)

        def prepare_load(self, block_hashes):
            return self._spec(self.manager.prepare_load(block_hashes))

        def touch(self, block_hashes):
            self.manager.touch(block_hashes)

        def complete_load(self, block_hashes):
            self.manager.complete_load(block_hashes)

        def prepare_store(self, block_hashes):
            out = self.manager.prepare_store(block_hashes)
            if out is None:
                return None
            return abstract.PrepareStoreOutput(
                block_hashes_to_store=out.block_hashes_to_store,
                store_spec=self._spec(out.store_spec),
                block_hashes_evicted=out.block_hashes_evicted,
            )

        def complete_store(self, block_hashes, success: bool = True):
            self.manager.complete_store(block_hashes, success)

        def take_events(self):
            for e in self.manager.take_events():
                yield abstract.OffloadingEvent(
                    block_hashes=e.block_hashes, block_size=e.block_size, medium=e.medium, removed=e.removed
                )

    return VllmOffloadingManager


VllmOffloadingManager = _vllm_subclass()
if VllmOffloadingManager is not None:
    __all__.append("VllmOffloadingManager")
