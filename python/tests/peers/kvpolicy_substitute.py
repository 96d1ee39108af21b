"""pytest plugin: vLLM's own CPU offloading manager replaced by kvpolicy's.

Loaded after ``vllm_stubs`` (``-p vllm_stubs -p kvpolicy_substitute``) into
a run of vLLM's ``tests/v1/kv_offload/test_cpu_manager.py`` (0.19.1 or
0.20.2): ``vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager``, the class
those tests construct, becomes ``KvpolicyCPUOffloadingManager`` below before
the test module imports it, so every call the tests make is answered by
kvpolicy's C++ manager in its vllm_lru / vllm_arc mode. It subclasses
``kvpolicy.vllm.VllmOffloadingManager`` (the adapter users get), adding only
vLLM's constructor signature of that release and ``_policy``.

``_policy``: vLLM's ARC tests read the policy's private fields (``t1``,
``t2``, ``b1``, ``b2``, ``target_t1_size``, ``cache_capacity``) and set
``target_t1_size``. ``_policy`` is a view that answers them from kvpolicy's
own lists (``OffloadCore._order_state``) and sets the target through
``OffloadCore._set_arc_target``; it is an instance of vLLM's policy class (as
the tests check) whose constructor is never run, so no vLLM state exists
beside kvpolicy's. No test is deselected.
"""

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


def _make_manager_class():
    from kvpolicy.vllm import VllmOffloadingManager
    from vllm.v1.kv_offload.cpu import manager as vllm_manager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    class ARCView(ARCCachePolicy):
        def __init__(self, core):  # ARCCachePolicy.__init__ is not run: the state is kvpolicy's
            self._core = core

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
    return KvpolicyCPUOffloadingManager


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    _make_manager_class()


_made = []


def pytest_sessionfinish(session, exitstatus):
    """Writes how many kvpolicy managers the tests built to
    ``$KVPOLICY_SUBSTITUTE_LOG`` (the caller checks the substitution happened)."""
    import os

    path = os.environ.get("KVPOLICY_SUBSTITUTE_LOG")
    if path:
        with open(path, "w") as f:
            f.write(str(len(_made)))
