"""pytest plugin, beside ``vllm_stubs``, for vLLM 0.11-0.20's CPU offloading spec and manager.

``-p vllm_stubs -p vllm_legacy_stubs`` over an extracted vLLM 0.11.0, 0.19.1
or 0.20.2 (test_vllm_legacy_peers.py). What it adds to ``vllm_stubs``:

- ``vllm.v1.core.kv_cache_utils`` (0.11 to 0.19): the offloading modules and
  test_cpu_manager.py import one name from it, ``BlockHash``, a ``NewType``
  of ``bytes``. The real module imports the scheduler's request, multimodal
  inputs and their dependencies (psutil, Pillow, ...), none of which the
  managers run. The stub holds only that type, defined as 0.11.0 and 0.19.1
  define it (``NewType("BlockHash", bytes)``: at run time the identity on
  bytes), so the block hashes the tests build are the plain bytes they would
  be. 0.20's offloading code no longer imports it.
- ``vllm.platforms``, ``vllm.v1.kv_cache_interface`` and
  ``vllm.v1.kv_offload.worker.cpu_gpu``: imported by the CPU offloading spec
  (``kv_offload/cpu/spec.py``, which ``KvpolicyOffloadingSpec`` extends) for
  its GPU side: the platform probe (``current_platform``, asked only by
  ``get_handlers``), the KV cache config classes (annotations; the test
  passes its own config object) and the CUDA copy handlers (which import
  vLLM's compiled kernels). The spec's ``__init__`` and ``get_manager``,
  what the scheduler runs, reach none of them; these stubs are
  ``vllm_stubs``'s inert placeholders.
- ``vllm.model_executor`` (0.11's ``kv_offload/cpu.py``, where the CPU spec
  lives before ``cpu/spec.py``) and ``vllm.v1.attention`` (the same in 0.16
  to 0.18, and their ``spec.py``): the attention layer and backend classes,
  imported to find the model's attention layers for the GPU handlers
  (``get_handlers``) and for annotations; the real packages import the
  model executor, torch's kernels and the model zoo. Also inert
  placeholders: the spec's ``__init__`` and ``get_manager`` never reach them.
"""

import importlib.machinery
import sys
import types
from typing import NewType

import vllm_stubs

_STUBBED = ("vllm.platforms", "vllm.v1.kv_cache_interface", "vllm.v1.kv_offload.worker.cpu_gpu", "vllm.model_executor",
            "vllm.v1.attention")


class _Finder(vllm_stubs._StubFinder):
    """vllm_stubs's placeholder modules, for this plugin's names."""

    def find_spec(self, name, path=None, target=None):
        if any(name == s or name.startswith(s + ".") for s in _STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None


def pytest_configure(config):
    sys.meta_path.insert(0, _Finder())
    m = types.ModuleType("vllm.v1.core.kv_cache_utils")
    m.BlockHash = NewType("BlockHash", bytes)
    sys.modules["vllm.v1.core.kv_cache_utils"] = m
