"""kvpolicy inside a real vLLM: tests that import vLLM 0.33 and torch as
installed from PyPI (scripts/vllm-venv.sh makes the environment;
scripts/test.sh runs these there). python/tests runs without them.

vLLM's configuration reads a model's ``config.json`` from the Hugging Face
hub; here no hub is reached: ``HF_HOME`` points at a cache made for the
session whose ``facebook/opt-125m`` is its configuration only
(bench/vllm_replay.py, MODEL_CONFIG), and ``HF_HUB_OFFLINE=1``. Both are set
before vLLM (or huggingface_hub) is imported."""

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

import vllm_replay  # noqa: E402

# Removed when the session's interpreter exits (the object's finalizer).
_hf_home = tempfile.TemporaryDirectory(prefix="kvpolicy-hf-")
vllm_replay.write_hf_cache(_hf_home.name)
os.environ["HF_HOME"] = _hf_home.name
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
