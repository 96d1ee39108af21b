"""kvpolicy inside vLLM.

Two seams, one per vLLM API generation:

- vLLM 0.11 to 0.20 (``vllm/v1/kv_offload/abstract.py``): ``OffloadingManager``,
  a drop-in for the scheduler-side offloading manager (``_legacy``), and
  ``VllmOffloadingManager``, the same as a subclass of vLLM's ABC where vLLM is
  installed.
- vLLM 0.21 and later (``vllm/v1/kv_offload/base.py``): cache policies that
  vLLM's own ``CPUOffloadingManager`` loads by name from this module
  (``"eviction_policy": NAME, "cache_policy_module_path": "kvpolicy.vllm"``);
  see ``policies``.

Importing this module needs no vLLM; the vLLM subclasses are built on first
use, where vLLM is importable.
"""

from ._legacy import CPULoadStoreSpec, OffloadingEvent, OffloadingManager, PrepareStoreOutput, VllmOffloadingManager
from ._legacy import KvpolicyOffloadingSpec

__all__ = ["CPULoadStoreSpec", "OffloadingEvent", "OffloadingManager", "PrepareStoreOutput"]
if VllmOffloadingManager is not None:
    __all__.append("VllmOffloadingManager")
if KvpolicyOffloadingSpec is not None:
    __all__.append("KvpolicyOffloadingSpec")
