"""The docs' policy tables and kvpolicy-sim's --help against the registry: every
registered name is in docs/eviction-policies.md's table, its options table is
exactly what the registry declares (regenerate it: ``python
python/tests/test_registry_docs.py --write``), and --help lists every policy
with its options."""

import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import kvpolicy

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "eviction-policies.md"
BEGIN = "<!-- options-table:"
END = "<!-- end options-table -->"
VLLM = kvpolicy._kvpolicy._vllm_orders()


def _number(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def options_table() -> str:
    """The options table the registry declares, as Markdown."""
    rows = ["| policy | option | type | default | range | what it sets |", "|---|---|---|---|---|---|"]
    for name in kvpolicy.policies():
        for o in kvpolicy.policy_options(name):
            default = str(o["default"]).lower() if o["type"] == "bool" else _number(o["default"])
            rows.append(f"| `{name}` | `{o['name']}` | {o['type']} | {default} | "
                        f"[{_number(o['min'])}, {_number(o['max'])}] | {o['help']} |")
    return "\n".join(rows) + "\n"


def _section(text: str):
    start = text.index(BEGIN)
    start = text.index("\n", start) + 1
    return start, text.index(END, start)


def test_every_registered_name_is_in_the_policy_table():
    text = DOC.read_text()
    table = text[text.index("## Every policy"):text.index("## Options")]
    named = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            named.update(re.findall(r"`([a-z0-9_]+)`", row.split("|")[1]))
    registered = kvpolicy.policies() + VLLM["cache_policies"] + VLLM["offloading_manager"]
    assert [n for n in registered if n not in named] == []


def test_the_options_table_is_the_registrys():
    text = DOC.read_text()
    start, end = _section(text)
    assert text[start:end] == options_table(), \
        "docs/eviction-policies.md's options table differs from the registry: run " \
        "python python/tests/test_registry_docs.py --write"


def test_the_simulators_help_lists_every_policy_with_its_options():
    env = os.environ.get("KVPOLICY_SIM")
    sim = next((p for p in ([env] if env else []) + [str(DOC.parents[1] / "build/release/tools/kvpolicy-sim"),
                                                      shutil.which("kvpolicy-sim")] if p and os.path.isfile(p)), None)
    if sim is None:
        pytest.skip("no kvpolicy-sim binary (build the release preset, or set KVPOLICY_SIM)")
    text = subprocess.run([sim, "--help"], capture_output=True, text=True, check=True).stdout
    # "  policy" lines, each followed by "      option  type, default D, in [MIN, MAX]: help" lines.
    listed = [("option" if line.startswith("      ") else "policy", line.split()[0])
              for line in text[text.index("Policies and their options"):].splitlines()[2:] if line.strip()]
    expected = []
    for name in kvpolicy.policies():
        expected += [("policy", name)] + [("option", o["name"]) for o in kvpolicy.policy_options(name)]
    assert listed == expected


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    text = DOC.read_text()
    start, end = _section(text)
    DOC.write_text(text[:start] + options_table() + text[end:])
