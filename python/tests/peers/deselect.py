"""What the substituting plugins share: ``KVPOLICY_DESELECT``, a file of
node ids (one a line, ``#`` comments) naming the peer's tests left out of a
run. A name that matches no collected test is an error: a renamed or removed
peer test must not leave a stale exclusion behind."""

import os


def deselect_listed(config, items) -> None:
    """pytest_collection_modifyitems' body: drop the listed tests, every
    parametrization of each."""
    path = os.environ.get("KVPOLICY_DESELECT")
    if not path:
        return
    with open(path) as f:
        names = {line.split("#")[0].strip() for line in f} - {""}

    def base(item):  # a parametrized test's id without its parameters
        return item.nodeid.split("[")[0]

    kept = [i for i in items if base(i) not in names]
    deselected = [i for i in items if base(i) in names]
    missing = names - {base(i) for i in items}
    if missing:
        raise RuntimeError(f"KVPOLICY_DESELECT names tests that do not exist: {sorted(missing)}")
    config.hook.pytest_deselected(items=deselected)
    items[:] = kept
