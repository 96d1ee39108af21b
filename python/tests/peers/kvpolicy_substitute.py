"""pytest plugin: vLLM's own CPU offloading managers replaced by kvpolicy's.

Loaded after ``vllm_stubs`` (``-p vllm_stubs -p kvpolicy_substitute``) into
a run of vLLM's ``tests/v1/kv_offload/test_cpu_manager.py`` (0.11 to 0.20).
Every manager class of vLLM's that those tests construct becomes a subclass
of ``kvpolicy.vllm.VllmOffloadingManager`` (the adapter users get) before
the test module imports it, so every call the tests make is answered by
kvpolicy's C++ manager in its vllm_lru / vllm_arc mode. Which classes, read
from the release's modules (never its version):

- ``vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager`` (0.19, 0.20):
  ``cache_policy="lru"`` or ``"arc"``, with ``block_size`` where its
  constructor takes one (0.19); vLLM's policy as ``_policy``;
- ``vllm.v1.kv_offload.lru_manager.LRUOffloadingManager`` and, where the
  release has it, ``arc_manager.ARCOffloadingManager`` (0.11 to 0.14): built
  over a ``CPUBackend``, whose block count and size they take; ARC's fields
  on the manager itself.

The adapter adds only vLLM's constructor signature of that release and the
private fields vLLM's tests read: ``_policy`` (or the ARC manager) is a view
answering ``t1``, ``t2``, ``b1``, ``b2``, ``target_t1_size``,
``cache_capacity`` (and LRU's ``blocks``) from kvpolicy's own lists
(``OffloadCore._order_state``), setting the target through
``OffloadCore._set_arc_target``; a ``_policy`` view is an instance of
vLLM's policy class (as the tests check) whose constructor is never run, so
no vLLM state exists beside kvpolicy's. No test is deselected.
"""

import importlib.util
import inspect

import pytest


class _Keys:
    """One of kvpolicy's lists as the tests use vLLM's: ``len``, ``in``, iteration."""

    def __init__(self, keys, key_of):
        self._keys = [int(k) for k in keys]
        self._key_of = key_of

    def __len__(self):
        return len(self._keys)

    def __contains__(self, block_hash):
        return self._key_of(block_hash) in self._keys

    def __iter__(self):
        return iter(self._keys)


def _module(name):
    """vLLM's module `name`, or None where this release has no such file."""
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    return importlib.import_module(name) if found is not None else None


class _ArcFields:
    """vLLM's ARC fields (``t1``, ``t2``, ``b1``, ``b2``, ``target_t1_size``,
    ``cache_capacity``) answered from kvpolicy's manager ``self._core``."""

    def _lists(self):
        return self._core._order_state()[0]

    t1 = property(lambda self: _Keys(self._lists()[0], self._core._key))
    t2 = property(lambda self: _Keys(self._lists()[1], self._core._key))
    b1 = property(lambda self: _Keys(self._lists()[2], self._core._key))
    b2 = property(lambda self: _Keys(self._lists()[3], self._core._key))
    cache_capacity = property(lambda self: self._core.num_blocks)

    @property
    def target_t1_size(self):
        return self._core._order_state()[1]

    @target_t1_size.setter
    def target_t1_size(self, value):
        self._core._set_arc_target(float(value))


def _substitute_cpu_manager(vllm_manager):
    """0.19, 0.20: CPUOffloadingManager(cache_policy=...) with vLLM's policy as ``_policy``."""
    from kvpolicy.vllm import VllmOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    class ARCView(_ArcFields, ARCCachePolicy):
        def __init__(self, core):  # ARCCachePolicy.__init__ is not run: the state is kvpolicy's
            self._core = core

    class LRUView(LRUCachePolicy):
        def __init__(self, core):
            self._core = core

        blocks = property(lambda self: _Keys(self._core._order_state()[0][0], self._core._key))

    names = {"lru": "vllm_lru", "arc": "vllm_arc"}
    takes_block_size = "block_size" in inspect.signature(vllm_manager.CPUOffloadingManager.__init__).parameters

    class KvpolicyCPUOffloadingManager(VllmOffloadingManager):
        """vLLM's CPUOffloadingManager's constructor over kvpolicy's manager."""

        def __init__(self, *args, **kwargs):
            if takes_block_size:  # 0.19: (block_size, num_blocks, cache_policy="lru", enable_events=False)
                bound = inspect.signature(lambda block_size, num_blocks, cache_policy="lru", enable_events=False: 0)
            else:  # 0.20: (num_blocks, cache_policy="lru", enable_events=False)
                bound = inspect.signature(lambda num_blocks, cache_policy="lru", enable_events=False: 0)
            a = bound.bind(*args, **kwargs)
            a.apply_defaults()
            p = a.arguments
            if p["cache_policy"] not in names:
                raise ValueError(f"Unknown cache policy: {p['cache_policy']!r}. Supported: {list(names)}")
            super().__init__(p["num_blocks"], names[p["cache_policy"]], block_size=p.get("block_size", 0),
                             enable_events=p["enable_events"])
            self._policy = (ARCView if p["cache_policy"] == "arc" else LRUView)(self.manager)
            _made.append(p["cache_policy"])

    vllm_manager.CPUOffloadingManager = KvpolicyCPUOffloadingManager


def _substitute_backend_manager(module, class_name, policy):
    """0.11 to 0.14: ``<class_name>(backend, enable_events=False)`` over a CPUBackend."""
    from kvpolicy.vllm import VllmOffloadingManager

    class KvpolicyBackendManager(*((_ArcFields,) if policy == "vllm_arc" else ()), VllmOffloadingManager):
        def __init__(self, backend, enable_events=False):
            super().__init__(backend.num_blocks, policy, block_size=backend.block_size, enable_events=enable_events)
            self._core = self.manager
            _made.append(policy)

    KvpolicyBackendManager.__name__ = "Kvpolicy" + class_name
    setattr(module, class_name, KvpolicyBackendManager)


def _make_manager_classes():
    """Replaces each vLLM manager class this release has; returns their names."""
    replaced = []
    lru_manager = _module("vllm.v1.kv_offload.lru_manager")
    if lru_manager is not None:
        _substitute_backend_manager(lru_manager, "LRUOffloadingManager", "vllm_lru")
        replaced.append("LRUOffloadingManager")
        arc_manager = _module("vllm.v1.kv_offload.arc_manager")
        if arc_manager is not None:
            _substitute_backend_manager(arc_manager, "ARCOffloadingManager", "vllm_arc")
            replaced.append("ARCOffloadingManager")
    else:
        _substitute_cpu_manager(importlib.import_module("vllm.v1.kv_offload.cpu.manager"))
        replaced.append("CPUOffloadingManager")
    return replaced


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    _make_manager_classes()


_made = []


def pytest_sessionfinish(session, exitstatus):
    """Writes how many kvpolicy managers the tests built to
    ``$KVPOLICY_SUBSTITUTE_LOG`` (the caller checks the substitution happened)."""
    import os

    path = os.environ.get("KVPOLICY_SUBSTITUTE_LOG")
    if path:
        with open(path, "w") as f:
            f.write(str(len(_made)))
