"""kvpolicy inside vLLM.

Two seams, one per vLLM API generation:

- vLLM 0.11 to 0.20 (``vllm/v1/kv_offload/abstract.py``): ``OffloadingManager``,
  a drop-in for the scheduler-side offloading manager (``_legacy``), and
  ``VllmOffloadingManager``, the same as a subclass of vLLM's ABC where vLLM is
  installed.
- vLLM 0.30 and later (``vllm/v1/kv_offload/base.py``): cache policies that
  vLLM's own ``CPUOffloadingManager`` loads by name from this module
  (``"eviction_policy": NAME, "cache_policy_module_path": "kvpolicy.vllm"``);
  see ``_policies``; and ``KvpolicyOffloadingConnector``, vLLM 0.33's
  ``OffloadingConnector`` telling those policies of the waiting queue
  (``"kv_connector": "KvpolicyOffloadingConnector", "kv_connector_module_path":
  "kvpolicy.vllm"``; see ``_connector``). (0.21 to 0.26 load no policy from outside vLLM; 0.27 to
  0.29 do, but their ARC is not the one ``vllm_arc`` copies.)

Importing this module needs no vLLM; the vLLM subclasses are built on first
use, where vLLM is importable.
"""

import importlib

from ._legacy import CPULoadStoreSpec, OffloadingEvent, OffloadingManager, PrepareStoreOutput, VllmOffloadingManager
from ._legacy import KvpolicyOffloadingSpec

__all__ = ["CPULoadStoreSpec", "OffloadingEvent", "OffloadingManager", "PrepareStoreOutput"]
if VllmOffloadingManager is not None:
    __all__.append("VllmOffloadingManager")
if KvpolicyOffloadingSpec is not None:
    __all__.append("KvpolicyOffloadingSpec")

__all__ += ["cache_policy", "policy_names", "set_time_ms"]


def __getattr__(name: str):
    """``kvpolicy.vllm.vllm_lru``, ``kvpolicy.vllm.kvpolicy_s3fifo`` (or
    ``kvpolicy.vllm.s3fifo``, the same class), ...: the
    CachePolicy classes vLLM's ``CachePolicyFactory`` loads by name
    (``"cache_policy_module_path": "kvpolicy.vllm"``), built on first use."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "KvpolicyOffloadingConnector":
        return importlib.import_module(__name__ + "._connector").connector_class()
    # import_module, not `from . import`: the latter asks this very function
    # for `_policies` before the submodule exists.
    _policies = importlib.import_module(__name__ + "._policies")
    if _policies.offered_name(name) is not None:
        return _policies.policy_class(name)
    raise _policies.unknown_policy_error(name)


def cache_policy(policy: str, *, class_name=None, **options):
    from ._policies import cache_policy as make

    return make(policy, class_name=class_name, **options)


cache_policy.__doc__ = """A vLLM CachePolicy class over kvpolicy's ``policy`` with ``options``
(see ``kvpolicy.vllm._policies``)."""


def policy_names():
    """Every name kvpolicy.vllm offers as vLLM's ``eviction_policy``."""
    from ._policies import policy_names as names

    return names()


def set_time_ms(ms):
    """The clock kvpolicy's vLLM cache policies read, for a replay whose
    model steps are made up: from now on every call reads ``ms`` (an int of
    milliseconds, never decreasing), or, with ``None``, the steady clock
    again (the default). A time-aware policy (``predicted_return``,
    ``session_aware_lru``, expected returns) then sees the replay's time, not
    how fast the replay ran. Raises ``kvpolicy.ConfigError`` for a negative
    time."""
    from .._kvpolicy import _set_time_ms

    _set_time_ms(None if ms is None else int(ms))
