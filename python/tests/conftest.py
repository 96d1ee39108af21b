"""Shared paths: the repository root and the traces (../shared/traces beside it)."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("KVPOLICY_TRACES", REPO.parent / "shared" / "traces"))


@pytest.fixture
def traces() -> Path:
    if not (TRACES / "mooncake").is_dir():
        pytest.skip(f"no traces at {TRACES}; set KVPOLICY_TRACES to the traces folder")
    return TRACES
