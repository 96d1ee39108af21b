"""Peers' pinned releases (vLLM, LMCache, SGLang), read at test time, never committed.

A peer's own tests are the contract kvpolicy's adapters are held to
(STYLE.md 14). vLLM's and LMCache's code and tests are read from the
release's source distribution on the package index: the sdist carries both
the package's Python sources and its ``tests/`` (the wheel carries only the
sources, and a few hundred MiB of compiled kernels we do not need). SGLang
publishes wheels only since 0.5.11 and no release carries its tests, so its
sources come from a wheel (any platform's: only the ``.py`` files are read).
pip cannot fetch an sdist without building it (``pip download`` of vLLM's
sdist runs its CMake build to read metadata), so this reads the index the
way pip does, through its JSON simple API (PEP 691), takes the one file
whose name and SHA-256 are pinned below, and checks the digest before a
byte of it is used.

Another release in place of a pin, for one run (the next release, checked
in one command)::

    KVPOLICY_PEER_VERSION=sglang==0.5.24 pytest python/tests/test_sglang_strategies.py
    KVPOLICY_PEER_VERSION=vllm==0.14.0@0.19.1 pytest python/tests/test_vllm_legacy_peers.py

``<project>==<version>`` replaces the newest pin of that project;
``@<pinned version>`` names the pin to replace instead. The file is the
same kind as the pin's (sdist or wheel), taken from the index with the
digest the index publishes (printed as a warning, to pin it).

Downloads are cached by name and digest (``$KVPOLICY_PEER_CACHE``, default
``~/.cache/kvpolicy/peers``); each test session extracts what it needs into
a fresh temporary directory, so no test sees another's edits.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

INDEX = os.environ.get("KVPOLICY_PEER_INDEX", "https://pypi.org/simple")
OVERRIDE = "KVPOLICY_PEER_VERSION"


@dataclass(frozen=True)
class Release:
    project: str
    version: str
    sha256: Optional[str]  # of the file, as the index published it when pinned; None: not pinned (KVPOLICY_PEER_VERSION)
    wheel: str = ""  # the pinned wheel's file name where the sources come from a wheel; "" for the sdist
    replaces: str = ""  # the pinned version this release stands in for (KVPOLICY_PEER_VERSION)

    @property
    def sdist(self) -> str:
        return f"{self.project}-{self.version}.tar.gz"

    @property
    def is_wheel(self) -> bool:
        return bool(self.wheel)


# The releases the adapters are tested against. A new pin: the file's digest
# from the index (`hashes.sha256` of the file in the PEP 691 JSON page).
# vLLM: the oldest and newest release of each row of docs/supported-versions.md (the CachePolicy
# seam, 0.30 to 0.33; the offloading manager, 0.11 to 0.20), and 0.19.1, the last manager with
# 0.11's unkeyed calls in the cpu/ package layout that 0.20 keeps.
VLLM_0_33_0 = Release("vllm", "0.33.0", "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112")
VLLM_0_30_0 = Release("vllm", "0.30.0", "5f8f4e890c042ffa1c3e103f81c35e2d96f60a0a175ac43a4adbae7006bef62b")
VLLM_0_20_2 = Release("vllm", "0.20.2", "58809377798c5335c6e2fe30092abda54d9200b5b8a717b3735a63f5daa0e383")
VLLM_0_19_1 = Release("vllm", "0.19.1", "9fb88ce6b50991eba41d183584f65f51d7f6015d86a42cdabf79c1c8bd5d66fa")
VLLM_0_11_0 = Release("vllm", "0.11.0", "f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae")
LMCACHE_0_5_6 = Release("lmcache", "0.5.6", "d6951e60ce8818a76aa42d0866a4ba85f1c95cd919355fff30ff24dcc3243f1e")
# SGLang: the last release whose radix cache picks the strategy by if/elif (RadixCache), and the
# newest on the index (the unified tree cache, strategies from a factories dictionary).
SGLANG_0_5_10_POST1 = Release("sglang", "0.5.10.post1", "a854a68b11caf6b4b55c241a44378a7cdede7ede325db85c955f131506703bc6",
                              wheel="sglang-0.5.10.post1-py3-none-any.whl")
SGLANG_0_5_23 = Release("sglang", "0.5.23", "8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6",
                        wheel="sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl")
PINS = (VLLM_0_33_0, VLLM_0_30_0, VLLM_0_20_2, VLLM_0_19_1, VLLM_0_11_0, LMCACHE_0_5_6, SGLANG_0_5_10_POST1,
        SGLANG_0_5_23)


_SCRATCH: list = []  # kept until the process exits, then removed


def scratch_dir(prefix: str) -> Path:
    """A temporary directory that lives as long as the process (sources
    extracted into it are imported from it) and is removed when it exits."""
    d = tempfile.TemporaryDirectory(prefix=prefix)
    _SCRATCH.append(d)
    return Path(d.name)


def _version_key(version: str):
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]|(?<=\d)(?=[a-z])", version))


def resolve(release: Release) -> Release:
    """`release`, or the release ``$KVPOLICY_PEER_VERSION`` names in its place.

    Raises ValueError naming the variable when it is malformed, names a
    project with no pin, or a pin that does not exist.
    """
    spec = os.environ.get(OVERRIDE, "").strip()
    if not spec or release.replaces:
        return release
    for item in spec.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+!-]+?)(?:@([A-Za-z0-9_.+!-]+))?\s*", item)
        if not m:
            raise ValueError(f"{OVERRIDE}={spec!r}: write <project>==<version>[@<pinned version>], "
                             "e.g. sglang==0.5.24 or vllm==0.31.0@0.30.0")
        project, version, pinned = m.group(1).lower(), m.group(2), m.group(3)
        pins = [p for p in PINS if p.project == project]
        if not pins:
            raise ValueError(f"{OVERRIDE}={spec!r}: no pinned release of {project!r}; "
                             f"pinned projects: {sorted({p.project for p in PINS})}")
        if pinned is None:
            target = max(pins, key=lambda p: _version_key(p.version))
        else:
            matching = [p for p in pins if p.version == pinned]
            if not matching:
                raise ValueError(f"{OVERRIDE}={spec!r}: {project} {pinned} is not pinned; "
                                 f"pinned: {[p.version for p in pins]}")
            target = matching[0]
        if target == release:
            return Release(project, version, None, wheel="*" if release.is_wheel else "", replaces=release.version)
    return release


def _cache_dir() -> Path:
    return Path(os.environ.get("KVPOLICY_PEER_CACHE", Path.home() / ".cache" / "kvpolicy" / "peers"))


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pick(release: Release, files: list) -> Optional[dict]:
    """The index entry of the release's file: the pinned name, the sdist, or
    (an unpinned wheel) the pure-Python wheel, else a manylinux x86-64 one."""
    if not release.is_wheel:
        named = [f for f in files if f["filename"] == release.sdist]
    elif release.wheel != "*":
        named = [f for f in files if f["filename"] == release.wheel]
    else:
        prefix = f"{release.project}-{release.version}-"
        wheels = [f for f in files if f["filename"].startswith(prefix) and f["filename"].endswith(".whl")]
        named = ([f for f in wheels if f["filename"].endswith("-py3-none-any.whl")]
                 or sorted((f for f in wheels if "manylinux" in f["filename"] and "x86_64" in f["filename"]),
                           key=lambda f: f["filename"]))
    return named[0] if named else None


def fetch(release: Release) -> Path:
    """The release's file on disk, downloaded once and checked against its pin
    (or, for a release named by ``$KVPOLICY_PEER_VERSION``, against the digest
    the index publishes).

    Raises RuntimeError naming the file when the index does not list it or its
    digest differs (a re-uploaded or tampered file is not used).
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    name = release.wheel if release.is_wheel else release.sdist
    if release.sha256 is not None and (cache / name).exists() and _digest(cache / name) == release.sha256:
        return cache / name
    req = urllib.request.Request(f"{INDEX}/{release.project}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        page = json.load(r)
    entry = _pick(release, page["files"])
    if entry is None:
        kind = "wheel" if release.is_wheel else "sdist"
        raise RuntimeError(f"{release.project} {release.version}: no {kind} ({name}) listed on "
                           f"{INDEX}/{release.project}/; is the version right?")
    want = release.sha256 or entry["hashes"]["sha256"]
    path = cache / entry["filename"]
    if release.sha256 is None:
        warnings.warn(f"{OVERRIDE}: {release.project} {release.version} ({entry['filename']}, sha256 {want}) "
                      f"in place of the pinned {release.replaces}")
    if path.exists() and _digest(path) == want:
        return path
    partial = path.with_suffix(".part")
    with urllib.request.urlopen(entry["url"], timeout=300) as r, open(partial, "wb") as out:
        shutil.copyfileobj(r, out)
    got = _digest(partial)
    if got != want:
        partial.unlink()
        raise RuntimeError(f"{entry['filename']}: SHA-256 {got} is not the expected {want}; not used")
    partial.replace(path)
    return path


def fetch_sdist(release: Release) -> Path:
    """The release's sdist on disk (see fetch)."""
    return fetch(resolve(release))


def extract(release: Release, dest: Path, prefixes: tuple[str, ...]) -> Path:
    """Extracts the release's files under `prefixes` (e.g. ``("vllm/", "tests/v1/")``)
    into `dest`; returns the source root (``dest/<project>-<version>``), where
    ``vllm/`` or ``sglang/`` is. A wheel gives only its ``.py`` files.
    ``$KVPOLICY_PEER_VERSION`` may name another release (see resolve)."""
    release = resolve(release)
    path = fetch(release)
    root = dest / f"{release.project}-{release.version}"
    if release.is_wheel:
        with zipfile.ZipFile(path) as whl:
            names = [n for n in whl.namelist() if n.endswith(".py") and n.startswith(prefixes)]
            whl.extractall(root, members=names)
        return root
    with tarfile.open(path) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name[len(root.name) + 1:] if m.name.startswith(root.name + "/") else None
            if rel is not None and (m.isfile() or m.isdir()) and rel.startswith(prefixes):
                members.append(m)
        tar.extractall(dest, members=members, filter="data")
    return root


if __name__ == "__main__":
    # `python3 python/tests/peers/sources.py`: every pinned release (or the one
    # $KVPOLICY_PEER_VERSION puts in its place) into the cache, so the tests
    # find them there; scripts/test.sh runs it in the background while it
    # compiles. Needs only the standard library.
    for pin in PINS:
        print(fetch(resolve(pin)))
