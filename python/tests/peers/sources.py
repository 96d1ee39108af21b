"""Peers' pinned releases (vLLM, LMCache, SGLang), read at test time, never committed.

A peer's own tests are the contract kvpolicy's adapters are held to
(STYLE.md 14). Their code is read from the release's source distribution on
the package index: the sdist carries both the package's Python sources and
its ``tests/`` (the wheel carries only the sources, and a few hundred MiB of
compiled kernels we do not need). pip cannot fetch an sdist without building
it (``pip download`` of vLLM's sdist runs its CMake build to read metadata),
so this reads the index the way pip does, through its JSON simple API
(PEP 691), takes the one file whose name and SHA-256 are pinned below, and
checks the digest before a byte of it is used.

Downloads are cached by digest (``$KVPOLICY_PEER_CACHE``, default
``~/.cache/kvpolicy/peers``); each test session extracts what it needs into
a fresh temporary directory, so no test sees another's edits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

INDEX = os.environ.get("KVPOLICY_PEER_INDEX", "https://pypi.org/simple")


@dataclass(frozen=True)
class Release:
    project: str
    version: str
    sha256: str  # of the sdist, as the index published it when pinned

    @property
    def sdist(self) -> str:
        return f"{self.project}-{self.version}.tar.gz"


# The releases the adapters are tested against. A new pin: the file's digest
# from the index (`hashes.sha256` of the file in the PEP 691 JSON page).
VLLM_0_33_0 = Release("vllm", "0.33.0", "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112")
VLLM_0_20_2 = Release("vllm", "0.20.2", "58809377798c5335c6e2fe30092abda54d9200b5b8a717b3735a63f5daa0e383")
VLLM_0_19_1 = Release("vllm", "0.19.1", "9fb88ce6b50991eba41d183584f65f51d7f6015d86a42cdabf79c1c8bd5d66fa")
LMCACHE_0_5_6 = Release("lmcache", "0.5.6", "d6951e60ce8818a76aa42d0866a4ba85f1c95cd919355fff30ff24dcc3243f1e")
# SGLang: the newest release on the index; its sdist carries python/sglang (evict_policy.py,
# radix_cache.py), not the repository's test/ tree.
SGLANG_0_5_10_POST1 = Release("sglang", "0.5.10.post1", "01f7adfe7cde85b238fb0e1bae4b31d494e19d1471cf35ff3c5489a02f9d2263")


def _cache_dir() -> Path:
    return Path(os.environ.get("KVPOLICY_PEER_CACHE", Path.home() / ".cache" / "kvpolicy" / "peers"))


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(release: Release) -> Path:
    """The release's sdist on disk, downloaded once and checked against its pin.

    Raises RuntimeError naming the file when the index does not list it or its
    digest differs from the pin (a re-uploaded or tampered file is not used).
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / release.sdist
    if path.exists() and _digest(path) == release.sha256:
        return path
    req = urllib.request.Request(f"{INDEX}/{release.project}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        page = json.load(r)
    files = [f for f in page["files"] if f["filename"] == release.sdist]
    if not files:
        raise RuntimeError(f"{release.sdist}: not listed on {INDEX}/{release.project}/; is the pin right?")
    partial = path.with_suffix(".part")
    with urllib.request.urlopen(files[0]["url"], timeout=300) as r, open(partial, "wb") as out:
        shutil.copyfileobj(r, out)
    got = _digest(partial)
    if got != release.sha256:
        partial.unlink()
        raise RuntimeError(f"{release.sdist}: SHA-256 {got} is not the pinned {release.sha256}; not used")
    partial.replace(path)
    return path


def extract(release: Release, dest: Path, prefixes: tuple[str, ...]) -> Path:
    """Extracts the sdist's files under `prefixes` (e.g. ``("vllm/", "tests/v1/")``)
    into `dest`; returns the source root (``dest/<project>-<version>``)."""
    root_name = f"{release.project}-{release.version}"
    with tarfile.open(fetch_sdist(release)) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name[len(root_name) + 1:] if m.name.startswith(root_name + "/") else None
            if rel is not None and (m.isfile() or m.isdir()) and rel.startswith(prefixes):
                members.append(m)
        tar.extractall(dest, members=members, filter="data")
    return dest / root_name
