"""pytest plugin: LMCache's own eviction tests with kvpolicy's policies in place of LMCache's.

Loaded after ``lmcache_stubs`` (``-p lmcache_stubs -p kvpolicy_in_lmcache``)
into a run of LMCache 0.5.6's ``tests/v1/distributed`` eviction tests. It
rebinds, before any test module imports them, the classes those tests and
LMCache's factory name:

- ``LRUEvictionPolicy`` -> kvpolicy's ``lru`` (``kvpolicy.lmcache.eviction_policy("lru")``);
- ``ARCEvictionPolicy`` -> kvpolicy's ``arc``;
- ``IsolatedLRUEvictionPolicy`` -> kvpolicy's ``lru`` with ``isolation=True``;
- ``CreateEvictionPolicy`` -> a factory building the three above by the
  configured name (``noop`` stays LMCache's).

each with the constructor arguments LMCache's class takes. The tests run
unchanged. ``KVPOLICY_DESELECT`` (a file of node ids, one a line, ``#``
comments) names the tests left out of the substituted run: those that read
LMCache's private state or its ARC variant's internals;
python/tests/test_lmcache_policies.py says why for each.
"""


import pytest

from deselect import deselect_listed


@pytest.hookimpl(trylast=True)  # after lmcache_stubs made LMCache importable
def pytest_configure(config):
    from kvpolicy.lmcache._mp import _policy_class
    from lmcache.v1.distributed import eviction_policy as pkg  # type: ignore[import-not-found]
    from lmcache.v1.distributed.eviction_policy import arc, factory, isolated_lru, lru  # type: ignore
    from lmcache.v1.distributed.internal_api import EvictionDestination  # type: ignore

    base = _policy_class()

    class LRU(base):
        def __init__(self, default_destination=EvictionDestination.DISCARD):
            super().__init__("lru", default_destination=default_destination)

    class ARC(base):
        def __init__(self, default_destination=EvictionDestination.DISCARD):
            super().__init__("arc", default_destination=default_destination)

    class IsolatedLRU(base):
        def __init__(self, default_destination=EvictionDestination.DISCARD, section_name="lru_order"):
            super().__init__("lru", isolation=True, default_destination=default_destination,
                             section_name=section_name)

    for module in (pkg, lru):
        module.LRUEvictionPolicy = LRU
    for module in (pkg, arc):
        module.ARCEvictionPolicy = ARC
    for module in (pkg, isolated_lru):
        module.IsolatedLRUEvictionPolicy = IsolatedLRU

    original = factory.CreateEvictionPolicy

    def CreateEvictionPolicy(eviction_config):
        return {"LRU": LRU, "ARC": ARC, "IsolatedLRU": IsolatedLRU}.get(
            eviction_config.eviction_policy, lambda: original(eviction_config))()

    for module in (pkg, factory):
        module.CreateEvictionPolicy = CreateEvictionPolicy


def pytest_collection_modifyitems(config, items):
    deselect_listed(config, items)
