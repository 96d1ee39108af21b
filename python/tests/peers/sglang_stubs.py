"""Import SGLang's eviction strategies without its engine.

``install(src)`` (``src``: the root of an extracted SGLang sdist) makes
``sglang``, ``sglang.srt`` and ``sglang.srt.mem_cache`` hollow packages over
the sdist's folders: their ``__init__`` files import the engine, torch and
every kernel; the modules under test (``sglang/srt/mem_cache/evict_policy.py``,
which imports only ``abc`` and ``typing``) are SGLang's own and run as they
are. Nothing else is stubbed.
"""

from __future__ import annotations

import os
import sys
import types

_HOLLOW = ("sglang", "sglang.srt", "sglang.srt.mem_cache")


def install(src: str) -> None:
    if src not in sys.path:
        sys.path.insert(0, src)
    for name in _HOLLOW:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = pkg
