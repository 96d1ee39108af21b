"""pytest plugin: vLLM's own offloading-connector tests with kvpolicy's connector in place of vLLM's.

Loaded (``-p kvpolicy_connector_in_vllm``) into a run of vLLM 0.33's
``tests/v1/kv_connector/unit/offloading_connector/`` and
``tests/v1/kv_connector/unit/test_offloading_connector.py``, in a virtual
environment where vLLM and torch are installed from PyPI (scripts/vllm-venv.sh).
Before any test module imports it, it rebinds ``OffloadingConnector`` in
vLLM's ``offloading_connector`` module, where vLLM's connector factory and
the tests look it up, to ``kvpolicy.vllm.KvpolicyOffloadingConnector`` (a
subclass of vLLM's class). ``KVPOLICY_SUBSTITUTE=0`` leaves vLLM's class in
place: the same run over vLLM's own connector, the harness's control.

One stub, for the machine and not the code under test: vLLM's CPU platform
answers ``support_hybrid_kv_cache() == False`` (the CPU model runner has no
hybrid KV cache), and these tests, written for vLLM's GPU CI, enable the
hybrid KV cache manager explicitly, so ``VllmConfig`` refuses them before
the connector is built. The connector's scheduler side never reaches a GPU;
the platform is told it supports the manager.

``KVPOLICY_DESELECT`` (a file of node ids, one a line, ``#`` comments) names
the tests left out: those that need a GPU device or a model's files from the
Hugging Face hub (python/engine_tests/test_vllm_connector.py says why for each).
"""

import os

import pytest

from deselect import deselect_listed


def pytest_configure(config):
    from vllm.platforms import current_platform  # type: ignore[import-not-found]

    type(current_platform).support_hybrid_kv_cache = classmethod(lambda cls: True)
    if os.environ.get("KVPOLICY_SUBSTITUTE", "1") == "0":
        return
    import kvpolicy.vllm
    from vllm.distributed.kv_transfer.kv_connector.v1 import offloading_connector  # type: ignore

    ours = kvpolicy.vllm.KvpolicyOffloadingConnector
    assert ours.__mro__[1] is offloading_connector.OffloadingConnector
    offloading_connector.OffloadingConnector = ours


def pytest_collection_modifyitems(config, items):
    deselect_listed(config, items)


@pytest.fixture(autouse=True)
def _kvpolicy_connector_in_place():
    """Every test runs with the substitution still in place (a test that
    rebinds the module's attribute itself would escape it)."""
    import kvpolicy.vllm
    from vllm.distributed.kv_transfer.kv_connector.v1 import offloading_connector  # type: ignore

    if os.environ.get("KVPOLICY_SUBSTITUTE", "1") != "0":
        assert offloading_connector.OffloadingConnector is kvpolicy.vllm.KvpolicyOffloadingConnector
    yield
