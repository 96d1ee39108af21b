"""Import LMCache's eviction code without torch or an accelerator.

Used by python/tests/test_lmcache*.py in process (``install(src)``) and as a
pytest plugin (``-p lmcache_stubs``, with ``$LMCACHE_SRC`` the root of an
extracted LMCache sdist) for LMCache's own tests. The code under test
(``lmcache/v1/distributed/eviction*.py``, ``eviction_policy/``,
``lmcache/v1/storage_backend/cache_policy/``) is LMCache's own and runs as
it is; stubbed is only what its imports reach for other work:

- ``torch`` (and every ``torch.*``): ``lmcache/v1/distributed/api.py`` and
  the memory-management modules import torch for tensor annotations and
  dtypes. The stub's attributes are inert placeholders (vllm_stubs'), except
  that every device module's ``is_available()`` answers False, so LMCache's
  platform detection (``lmcache/v1/platform/_device_detect.py``) takes its
  own CPU path (``StubCPUDevice``) instead of finding CUDA, ROCm, ... at
  once. Nothing the eviction policies execute reaches torch; a test that did
  would fail on a placeholder, not pass.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

import vllm_stubs

_STUBBED = ("torch", "numba", "lmcache.lmcache_native", "sortedcontainers", "cachetools", "cpuinfo", "psutil",
            "aiohttp", "requests", "yaml", "cryptography")
_HOLLOW = ("lmcache.v1.storage_backend",)


class _NoDevice(vllm_stubs._Placeholder):
    """A placeholder whose ``is_available()`` is False and ``device_count()`` 0."""

    def __getattr__(self, name):
        if name == "is_available":
            return lambda *a, **k: False
        if name == "device_count":
            return lambda *a, **k: 0
        return super().__getattr__(name)


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _NoDevice()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if any(name == s or name.startswith(s + ".") for s in _STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _module_getattr
        return m

    def exec_module(self, module):
        pass


def install(src: str) -> None:
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
    if src not in sys.path:
        sys.path.insert(0, src)
    for name in _HOLLOW:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = pkg


def pytest_configure(config):
    install(os.environ["LMCACHE_SRC"])
