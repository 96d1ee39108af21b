"""SGLang's own tree caches, imported from a release's wheel without its engine.

``load(src)`` imports SGLang's modules from an extracted wheel (``src``: the
folder holding ``sglang/``) behind an import fence: the modules the tree
caches and the eviction-policy arguments are made of run as they are
(``REAL``); every other module of SGLang they import is refused, naming it,
unless it is one of the stand-ins below, each for a reason: it needs torch,
a GPU, a compiled extension, or starts a part of the engine these tests do
not run (HiCache's host tier, tensor-parallel collectives, the KV-event
publisher's sockets, metrics). A stand-in from ``_unavailable`` raises,
naming itself and its reason, the moment SGLang's code calls or builds
anything of it, so none of them can stand in silently for a code path
under test. Packages whose ``__init__`` starts the engine are hollow (their
folder, without the ``__init__``).

The one stand-in that runs is torch's (``_torch``): the tree caches keep a
node's KV slot indices in int64 tensors and do no arithmetic on them beyond
slicing, concatenating, copying and counting; a NumPy array does the same.

The layout is chosen by what the release has (``layout(src)``), not by its
version: ``unified`` where the unified tree core builds its strategy through
``get_eviction_strategy``'s ``_EVICTION_POLICY_FACTORIES`` (0.5.23:
``UnifiedRadixCache``, ``--radix-eviction-policy-config``, the choices in
``arg_groups``), ``radix`` where ``RadixCache`` picks it by if/elif (0.5.10,
0.5.11: the choices in ``server_args.py``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator

import numpy as np

S = "sglang.srt."
MC = S + "mem_cache."


# --- stand-ins ------------------------------------------------------------------------

class _Unavailable:
    """A function of a stand-in module: calling it fails, naming it and why."""

    def __init__(self, where: str, why: str):
        self.where, self.why = where, why

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.where} is a test stand-in ({self.why}); SGLang's tree cache called it")

    def __repr__(self):
        return f"<stand-in {self.where}>"


def _unavailable(why: str) -> Callable[[types.ModuleType], None]:
    """A module whose every public name is a stand-in: a function that fails when
    called, or (CamelCase names) a class that fails when built and can be
    subclassed. Private names are absent, as in a module that lacks them."""

    def build(module: types.ModuleType) -> None:
        def __getattr__(name: str):
            if name.startswith("_"):
                raise AttributeError(name)
            where = f"{module.__name__}.{name}"
            if name[:1].isupper():
                def __init__(self, *args, **kwargs):
                    raise RuntimeError(f"{where} is a test stand-in ({why}); SGLang's tree cache built one")

                value = type(name, (), {"__init__": __init__, "__module__": module.__name__})
            else:
                value = _Unavailable(where, why)
            setattr(module, name, value)
            return value

        module.__getattr__ = __getattr__
        module.__path__ = []  # a package: its submodules are stand-ins for the same reason

    build.why = why
    return build


def _torch(module: types.ModuleType) -> None:
    """torch, as much as the tree caches use: int64 index tensors (NumPy arrays)."""

    class device:
        def __init__(self, type: str, index=None):
            self.type, self.index = str(type).split(":")[0], index

        def __str__(self):
            return self.type

    class Tensor(np.ndarray):
        def clone(self):
            return self.copy()

        def to(self, dtype=None, *args, **kwargs):
            return self.astype(dtype) if isinstance(dtype, type) else self

        def numel(self):
            return self.size

        @property
        def device(self):
            return device("cpu")

    module.__version__ = "0.0+numpy-stand-in"  # outside every range SGLang builds its Rust extensions for
    module.__path__ = []
    module.device = device
    module.Tensor = Tensor
    module.int64 = np.int64
    module.int32 = np.int32
    module.empty = lambda shape, dtype=None, device=None, **kw: np.empty(shape, dtype=dtype).view(Tensor)
    module.tensor = lambda data, dtype=None, device=None, **kw: np.asarray(data, dtype=dtype).view(Tensor)
    module.cat = lambda tensors, dim=0: np.concatenate(list(tensors)).view(Tensor)


def _plain_base_model(module: types.ModuleType) -> None:
    """pydantic: kv_events declares its publisher's configuration as a BaseModel,
    never built here (KV events are off)."""
    module.BaseModel = type("BaseModel", (), {})


def _excerpt(path: Path, names: Iterable[str], module: types.ModuleType) -> None:
    """Runs the top-level definitions `names` of SGLang's file `path` (as they
    are, under their own file name) in `module`: for a file whose other
    definitions import the whole engine. Raises KeyError naming a definition
    the file no longer has."""
    tree = ast.parse(path.read_text(), str(path))
    want = set(names)
    picked = []
    for node in tree.body:
        targets = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                   else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
        if want & set(targets):
            picked.append(node)
            want -= set(targets)
    if want:
        raise KeyError(f"{path}: no top-level {sorted(want)}; SGLang moved them: update peers/sglang_stubs.py")
    exec(compile(ast.Module(picked, type_ignores=[]), str(path), "exec"), module.__dict__)


def _utils_common(src: Path) -> Callable[[types.ModuleType], None]:
    def build(module: types.ModuleType) -> None:
        """sglang.srt.utils.common imports the whole engine (torch, PIL, starlette, ...):
        the helpers the tree caches call, taken from the file by name."""
        module.torch = sys.modules["torch"]
        module.lru_cache = functools.lru_cache
        _excerpt(src / "sglang/srt/utils/common.py", ["ceil_div", "ceil_align", "is_npu"], module)

    return build


def _utils_package(src: Path) -> Callable[[types.ModuleType], None]:
    def build(module: types.ModuleType) -> None:
        """sglang.srt.utils: its __init__ star-imports utils/common.py (the engine).
        get_device_module gives torch.cuda on a GPU platform (for the external-cache
        linker, off here): a stand-in torch.cuda."""
        module.__path__ = [str(src / "sglang/srt/utils")]
        cuda = types.ModuleType("torch.cuda")
        _unavailable("torch.cuda: a GPU")(cuda)
        module.get_device_module = lambda: cuda

    return build


def _server_args_0_5_10(src: Path) -> Callable[[types.ModuleType], None]:
    def build(module: types.ModuleType) -> None:
        """sglang/srt/server_args.py (0.5.10) is one 6,700-line module importing the
        engine; its three definitions of --radix-eviction-policy, taken from it by
        name: RADIX_EVICTION_POLICY_CHOICES, add_radix_eviction_policy_choices, and
        ServerArgs.add_cli_args' add_argument("--radix-eviction-policy", ...) call,
        run here as add_radix_eviction_policy_argument(parser)."""
        path = src / "sglang/srt/server_args.py"
        _excerpt(path, ["RADIX_EVICTION_POLICY_CHOICES", "add_radix_eviction_policy_choices"], module)
        tree = ast.parse(path.read_text(), str(path))
        server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
        default = next(n for n in server_args.body if isinstance(n, ast.AnnAssign)
                       and getattr(n.target, "id", None) == "radix_eviction_policy")
        call = next(n for n in ast.walk(server_args) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                    and n.value.args and isinstance(n.value.args[0], ast.Constant)
                    and n.value.args[0].value == "--radix-eviction-policy")
        module.ServerArgs = type("ServerArgs", (), {"radix_eviction_policy": ast.literal_eval(default.value)})
        fn = ast.FunctionDef("add_radix_eviction_policy_argument",
                             ast.arguments([], [ast.arg("parser")], None, [], [], None, []), [call], [], None)
        exec(compile(ast.fix_missing_locations(ast.Module([fn], type_ignores=[])), str(path), "exec"), module.__dict__)

    return build


# --- the layouts ----------------------------------------------------------------------

class Layout:
    def __init__(self, real: Iterable[str], hollow: Iterable[str], standins: Dict[str, Callable]):
        self.real, self.hollow, self.standins = set(real), set(hollow), standins


def _unified(src: Path) -> Layout:
    gpu_pools = _unavailable("GPU KV pools and their allocators; the tests pass a recording allocator")
    hicache = _unavailable("HiCache's host tier and GPU<->host transfers: off")
    return Layout(
        real=[MC + m for m in ("evict_policy", "utils", "cache_init_params", "base_prefix_cache", "events",
                               "hicache_storage", "radix_cache", "unified_radix_cache", "storage_prefetch",
                               "cpp_utils.native_hash", "allocator.page_interleave", "unified_cache.*",
                               "buffer_mode.*")]
        + [S + m for m in ("arg_groups.*", "environ", "runtime_context", "disaggregation.kv_events",
                           "distributed.communication_tags", "utils.rank_consensus_checker", "utils.poll_timer",
                           "session.streaming_session", "rust_extensions.torch_build", "plugins.*")],
        hollow=["sglang", "sglang.srt", MC[:-1], MC + "cpp_utils", S + "disaggregation", S + "distributed",
                S + "managers", S + "session", S + "rust_extensions", S + "observability", "sglang.kernels",
                "sglang.kernels.ops", "sglang.kernels.ops.kvcache"],
        standins={
            "torch": _torch,
            "torch.distributed": _unavailable("collectives across tensor-parallel ranks; one rank here"),
            "zmq": _unavailable("ZeroMQ sockets of the KV-event publisher: events off"),
            "pydantic": _plain_base_model,
            "sglang.kernels.ops.kvcache.mla_buffer": _unavailable("Triton kernels of the MLA KV buffer: a GPU"),
            S + "utils": _utils_package(src),
            S + "utils.common": _utils_common(src),
            S + "utils.network": _unavailable("the KV-event publisher's addresses (psutil, zmq): events off"),
            S + "observability.metrics_collector": _unavailable("Prometheus metrics: off"),
            S + "managers.cache_controller": hicache,
            S + "managers.schedule_batch": _unavailable("the scheduler's requests and batches: the engine"),
            MC + "allocator": gpu_pools,
            MC + "memory_pool": gpu_pools,
            MC + "swa_memory_pool": gpu_pools,
            MC + "pool_host": hicache,
            MC + "hybrid_cache": hicache,
            MC + "common": _unavailable("sliding-window (SWA) helpers over GPU pools: no SWA component here"),
        })


def _radix(src: Path) -> Layout:
    gpu_pools = _unavailable("GPU KV pools and their allocators; the tests pass a recording allocator")
    return Layout(
        real=[MC + m for m in ("evict_policy", "cache_init_params", "base_prefix_cache", "radix_cache",
                               "hicache_storage")]
        + [S + m for m in ("environ", "disaggregation.kv_events", "plugins.*")],
        hollow=["sglang", "sglang.srt", MC[:-1], S + "disaggregation", S + "observability", S + "debug_utils"],
        standins={
            "torch": _torch,
            "torch.distributed": _unavailable("collectives across tensor-parallel ranks; one rank here"),
            "zmq": _unavailable("ZeroMQ sockets of the KV-event publisher: events off"),
            "pydantic": _plain_base_model,
            S + "server_args": _server_args_0_5_10(src),
            S + "debug_utils.cuda_coredump": _unavailable("CUDA core dumps: a GPU"),
            S + "observability.metrics_collector": _unavailable("Prometheus metrics: off"),
            MC + "utils": _unavailable("Triton kernels (and the EAGLE bigram key): a GPU"),
            MC + "allocator": gpu_pools,
            MC + "memory_pool": gpu_pools,
            MC + "memory_pool_host": _unavailable("HiCache's host tier: off"),
        })


def layout(src: Path) -> str:
    """How this release builds a tree cache's strategy, read from its files (as
    kvpolicy.sglang.install() reads it from the modules): ``unified`` where
    get_eviction_strategy's factories exist and the unified tree core builds its
    strategy with them, ``radix`` where RadixCache picks it by if/elif."""
    mem = src / "sglang/srt/mem_cache"
    factories = (mem / "utils.py").exists() and "_EVICTION_POLICY_FACTORIES" in (mem / "utils.py").read_text()
    core = mem / "unified_cache/unified_tree_core.py"
    if factories and core.exists() and "get_eviction_strategy" in core.read_text():
        return "unified"
    if not factories and "Unknown eviction policy" in (mem / "radix_cache.py").read_text():
        return "radix"
    raise RuntimeError(f"{src}: SGLang builds tree-cache strategies in a way peers/sglang_stubs.py has no layout "
                       "for (get_eviction_strategy's factories without the unified tree core?); add one")


# The wheel's files the layouts read (sources.extract's prefixes).
FILES = ("sglang/srt/mem_cache/", "sglang/srt/arg_groups/", "sglang/srt/environ.py", "sglang/srt/runtime_context.py",
         "sglang/srt/disaggregation/kv_events.py", "sglang/srt/distributed/communication_tags.py",
         "sglang/srt/utils/", "sglang/srt/session/streaming_session.py", "sglang/srt/rust_extensions/torch_build.py",
         "sglang/srt/server_args.py", "sglang/srt/plugins/")


# --- the fence ------------------------------------------------------------------------

class _Loader(importlib.abc.Loader):
    def __init__(self, build=None):
        self.build = build

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if self.build is not None:
            self.build(module)


class Fence(importlib.abc.MetaPathFinder):
    """Finds SGLang's modules in `src` for `layout`; refuses the rest of SGLang."""

    def __init__(self, src: Path, lay: Layout):
        self.src, self.layout = src, lay

    def _real(self, name: str) -> bool:
        return name in self.layout.real or any(
            p.endswith(".*") and (name == p[:-2] or name.startswith(p[:-1])) for p in self.layout.real)

    def _standin(self, name: str):
        if name in self.layout.standins:
            return self.layout.standins[name]
        if self._real(name):
            return None
        parent = name.rpartition(".")[0]
        while parent:  # a module inside an unavailable package is unavailable for the same reason
            why = getattr(self.layout.standins.get(parent), "why", None)
            if why is not None:
                return _unavailable(why)
            parent = parent.rpartition(".")[0]
        return None

    def find_spec(self, name, path=None, target=None):
        build = self._standin(name)
        if build is not None:
            spec = importlib.machinery.ModuleSpec(name, _Loader(build), is_package=True)
            spec.submodule_search_locations = []
            return spec
        if name.split(".")[0] != "sglang":
            return None
        base = self.src.joinpath(*name.split("."))
        if name in self.layout.hollow:
            spec = importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)
            spec.submodule_search_locations = [str(base)]
            return spec
        exists = base.is_dir() or base.with_suffix(".py").exists()
        if not exists:
            return None  # not in this release (or not extracted): ModuleNotFoundError, as SGLang would raise
        if not self._real(name):
            raise ImportError(f"{name}: SGLang imports it, and it is neither run as is nor a named stand-in "
                              "in peers/sglang_stubs.py; add it to the layout (REAL if it runs without the "
                              "engine, else a stand-in with its reason)", name=name)
        if base.is_dir():
            return importlib.util.spec_from_file_location(name, base / "__init__.py",
                                                          submodule_search_locations=[str(base)])
        return importlib.util.spec_from_file_location(name, base.with_suffix(".py"))


def _ours(name: str) -> bool:
    return name.split(".")[0] in ("sglang", "torch", "zmq", "pydantic")


@contextmanager
def load(src: Path) -> Iterator[str]:
    """SGLang from `src` importable behind the fence; yields the layout's name.
    On exit SGLang's modules (and the stand-ins) leave sys.modules, and those
    there before come back."""
    src = Path(src)
    name = layout(src)
    lay = _unified(src) if name == "unified" else _radix(src)
    saved = {m: mod for m, mod in sys.modules.items() if _ours(m)}
    for m in saved:
        del sys.modules[m]
    fence = Fence(src, lay)
    sys.meta_path.insert(0, fence)
    try:
        yield name
    finally:
        sys.meta_path.remove(fence)
        for m in [m for m in sys.modules if _ours(m)]:
            del sys.modules[m]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def install(src: str) -> None:
    """SGLang's strategies alone (``sglang/srt/mem_cache/evict_policy.py``, which
    imports only abc and typing), for bench/python/lmcache_sglang_bench.py:
    ``sglang``, ``sglang.srt`` and ``sglang.srt.mem_cache`` made hollow packages
    over ``src``'s folders, for the rest of the process."""
    if src not in sys.path:
        sys.path.insert(0, src)
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = pkg
