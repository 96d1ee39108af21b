"""pytest plugin: vLLM's own tests with kvpolicy's policies in place of vLLM's.

Loaded after ``vllm_stubs`` (``-p vllm_stubs -p kvpolicy_in_vllm``) into a
run of vLLM >= 0.30's offloading tests. It rebinds the classes vLLM's
factory loads for ``"lru"`` and ``"arc"`` (``LRUCachePolicy`` in
``vllm.v1.kv_offload.cpu.policies.lru``, ``ARCCachePolicy`` in ``...arc``)
to ``kvpolicy.vllm.vllm_lru`` and ``kvpolicy.vllm.vllm_arc`` before any test
module imports them, so every manager a test builds, every class it names and
every factory lookup gets kvpolicy's. The tests themselves run unchanged.

``KVPOLICY_DESELECT`` (a path of node ids, one a line, ``#`` comments) names
the tests (all their parameters) left out of the substituted run: those that reach into a vLLM
policy's private state (its heap, its dicts replaced by counting ones, a
chunk's ref count written behind the manager). python/tests/test_vllm_policies.py
asserts what each of them asserts through the policy's answers.
"""


import pytest

from deselect import deselect_listed


@pytest.hookimpl(trylast=True)  # after vllm_stubs made vLLM importable
def pytest_configure(config):
    import kvpolicy.vllm as kv
    from vllm.v1.kv_offload.cpu.policies import arc, lru  # type: ignore[import-not-found]

    lru.LRUCachePolicy = kv.vllm_lru
    arc.ARCCachePolicy = kv.vllm_arc


def pytest_collection_modifyitems(config, items):
    deselect_listed(config, items)
