"""pytest plugin: import vLLM's scheduler-side offloading code without torch or a GPU.

Loaded with ``-p vllm_stubs`` (and ``--noconftest``: vLLM's own
``tests/conftest.py`` starts engines) into a pytest run over an extracted vLLM
sdist whose root is ``$VLLM_SRC``. The code under test (``vllm/v1/kv_offload``:
the managers, the cache policies, their factory) is vLLM's own and runs as it
is; what is stubbed is only what it imports for other work:

- ``torch`` (and every ``torch.*``): ``kv_offload/base.py`` imports torch for
  the GPU worker's tensor annotations. The stub's attributes are inert
  placeholders; nothing the managers or policies execute reaches them (a
  policy test that did would fail on the placeholder, not pass).
- ``vllm.config``: the metrics module annotates ``VllmConfig``; building the
  real one needs transformers and a model.
- ``vllm.distributed.kv_transfer.kv_connector.factory``: the connector
  registry, imported by the metrics module for the connectors' class lookup.
- ``vllm.logger``: vLLM's logger setup reads its environment module, which
  imports networking code (zmq); the stub is a plain ``logging`` logger with
  the ``*_once`` methods vLLM's code calls.
- The package ``__init__`` files of ``vllm``, ``vllm.distributed`` and the
  KV-transfer packages (they import the engine, torch.distributed and every
  connector); their modules are imported from the sources as usual.
"""

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types

_STUBBED = ("torch", "vllm.config", "vllm.distributed.kv_transfer.kv_connector.factory")
_HOLLOW = ("vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
           "vllm.distributed.kv_transfer.kv_connector", "vllm.distributed.kv_transfer.kv_connector.v1")


class _Placeholder:
    """Any attribute, call, subscript or base class: an inert placeholder."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __mro_entries__(self, bases):
        return (object,)

    def __getitem__(self, key):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder()


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


def _init_logger(name):
    logger = logging.getLogger(name)
    for level in ("debug", "info", "warning", "error"):
        setattr(logger, level + "_once", getattr(logger, level))
    return logger


def install(src: str) -> None:
    sys.meta_path.insert(0, _StubFinder())
    if src not in sys.path:
        sys.path.insert(0, src)
    for name in _HOLLOW:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = pkg
    logger_module = types.ModuleType("vllm.logger")
    logger_module.init_logger = _init_logger
    sys.modules["vllm.logger"] = logger_module


def pytest_configure(config):
    install(os.environ["VLLM_SRC"])
