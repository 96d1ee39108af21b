"""kvpolicy's manager for vLLM 0.11-0.20 against vLLM's own code and tests.

vLLM's releases 0.11.0 and 0.20.2 (the row's oldest and newest in
docs/supported-versions.md) and 0.19.1 (the last with 0.11's unkeyed calls in
0.20's ``cpu/`` layout) are read from their pinned sdists (peers/sources.py)
into a temporary directory; nothing of vLLM is committed. Each check runs
pytest in a subprocess over the extracted sources with the ``vllm_stubs``
and ``vllm_legacy_stubs`` plugins (torch and the engine's other imports
stubbed, each explained in its docstring):

- vLLM's ``tests/v1/kv_offload/test_cpu_manager.py`` as it is: all pass
  (the harness works, and is the contract);
- the same file with ``kvpolicy_substitute``: vLLM's managers
  (``CPUOffloadingManager``; 0.11's ``LRUOffloadingManager``) are kvpolicy's
  (vllm_lru / vllm_arc): all pass, none deselected;
- peers/legacy_checks.py: the spec loaded through vLLM's
  ``OffloadingSpecFactory``, and the differential test (random call
  sequences through vLLM's manager and kvpolicy's, compared after every
  call), ARC's only where the release has an ARC (0.11.0 has none: skipped,
  saying so).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from peers import sources

PEERS = Path(__file__).parent / "peers"
STUBS = ["vllm_stubs", "vllm_legacy_stubs"]
RELEASES = {"0.11.0": sources.VLLM_0_11_0, "0.19.1": sources.VLLM_0_19_1, "0.20.2": sources.VLLM_0_20_2}
# vLLM's test_cpu_manager.py cases per release (pinned with the release; a release
# named by KVPOLICY_PEER_VERSION is held to "all pass").
CPU_MANAGER_CASES = {"0.11.0": 1, "0.19.1": 13, "0.20.2": 13}
# legacy_checks.py's (passed, skipped) per release: 0.11.0 has no ARC to compare with.
LEGACY_CHECKS = {"0.11.0": (5, 1), "0.19.1": (6, 0), "0.20.2": (6, 0)}
# The differential's seeds per release (legacy_checks.py's default, 500, elsewhere):
# 0.19.1 decides as 0.20.2, which the row's newest end runs in full; fewer keep CI short.
DIFF_SEEDS = {"0.19.1": 100}


@pytest.fixture(scope="module", params=sorted(RELEASES))
def vllm_src(request, tmp_path_factory):
    dest = tmp_path_factory.mktemp("vllm-" + request.param)
    # The offloading code and its tests; vllm_stubs makes the packages above them hollow.
    root = sources.extract(RELEASES[request.param], dest, ("vllm/v1/__init__.py", "vllm/v1/core/__init__.py",
                                                           "vllm/v1/kv_offload/", "tests/v1/kv_offload/"))
    return root.name.split("-", 1)[1], root  # the release extracted (KVPOLICY_PEER_VERSION's, if it names one)


def _pytest(root: Path, tmp: Path, plugins: list[str], target: str, args=(), env_extra=None):
    """(passed, failed+errors, skipped, output) of a pytest subprocess over vLLM's tree."""
    junit = tmp / "junit.xml"
    ini = tmp / "pytest.ini"
    ini.write_text("[pytest]\n")  # not vLLM's configuration
    cmd = [sys.executable, "-m", "pytest", "-q", "-c", str(ini), "--rootdir", str(root), "--noconftest",
           "-p", "no:cacheprovider", "--junitxml", str(junit)]
    for p in plugins:
        cmd += ["-p", p]
    cmd += [*args, target]
    env = dict(os.environ, VLLM_SRC=str(root),
               PYTHONPATH=os.pathsep.join([str(PEERS), os.environ.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert junit.exists(), f"pytest wrote no report (exit {r.returncode}):\n{out[-4000:]}"
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    tests, failures, errors, skipped = (int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped"))
    return tests - failures - errors - skipped, failures + errors, skipped, out


def test_vllm_cpu_manager_tests_pass_as_is(vllm_src, tmp_path):
    version, root = vllm_src
    passed, failed, skipped, out = _pytest(root, tmp_path, STUBS, "tests/v1/kv_offload/test_cpu_manager.py")
    assert failed == skipped == 0 and passed == CPU_MANAGER_CASES.get(version, passed) > 0, out[-4000:]


def test_vllm_cpu_manager_tests_pass_with_kvpolicy(vllm_src, tmp_path):
    version, root = vllm_src
    log = tmp_path / "made"
    passed, failed, skipped, out = _pytest(root, tmp_path, STUBS + ["kvpolicy_substitute"],
                                           "tests/v1/kv_offload/test_cpu_manager.py",
                                           env_extra={"KVPOLICY_SUBSTITUTE_LOG": str(log)})
    assert failed == skipped == 0 and passed == CPU_MANAGER_CASES.get(version, passed) > 0, out[-4000:]
    assert int(log.read_text()) >= passed - 1, "the tests did not build kvpolicy's manager"


def test_legacy_checks_against_vllm(vllm_src, tmp_path):
    """Spec factory loading and the differential test (peers/legacy_checks.py)."""
    version, root = vllm_src
    seeds = {"KVPOLICY_DIFF_SEEDS": str(DIFF_SEEDS[version])} if version in DIFF_SEEDS else {}
    passed, failed, skipped, out = _pytest(root, tmp_path, STUBS, str(PEERS / "legacy_checks.py"), ["-rs"],
                                           {**seeds, **{k: v for k, v in os.environ.items() if k == "KVPOLICY_DIFF_SEEDS"}})
    assert failed == 0 and (passed, skipped) == LEGACY_CHECKS.get(version, (passed, skipped)), out[-6000:]
    if skipped:
        assert "has no ARC manager" in out, out[-3000:]
