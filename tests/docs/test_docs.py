"""The site's code is the tested code (scripts/docs.sh check runs this; scripts/test.sh runs that).

A fenced block in README.md or a page under docs/ is tied to what the tests
build or run by the HTML comment on the line before it:

  <!-- example: PATH NAME -->   the block is, verbatim, the example NAME of
                                PATH (the lines between `example-begin NAME`
                                and `example-end`, dedented): PATH compiles
                                and runs it (tests/readme_examples.cpp in
                                CTest, python/tests/test_readme_example.py in
                                pytest, test_package/ and check-packaging.sh
                                in scripts/check-packaging.sh)
  <!-- excerpt: PATH NAME -->   the block is a run of whole consecutive lines
                                of that example
  <!-- run: kvpolicy-sim ARGS -->  the block is what `kvpolicy-sim ARGS`
                                prints, but for the accesses/s column (a
                                timing); a line `  ...` stands for any lines

Every C++, Python, CMake and Conan-profile block of the hand-written pages
must carry one (a code block that claims to compile has to be compiled), and
every example of those files must be quoted somewhere. The simulator page's
flag table must name exactly the flags of `kvpolicy-sim --help`, and the plot
data under docs/data/ must equal the tables they are drawn from.
"""
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
docs_plots = __import__("docs-plots")

SOURCES = ["tests/readme_examples.cpp", "python/tests/test_readme_example.py", "python/tests/test_vllm_policies.py",
           "python/tests/test_lmcache_policies.py", "python/tests/test_sglang_strategies.py",
           "python/tests/test_remote.py", "test_package/CMakeLists.txt", "scripts/check-packaging.sh"]
CHECKED_LANGUAGES = {"cpp", "c++", "python", "cmake", "ini"}
MARKER = re.compile(r"^<!-- (example|excerpt|run): (.+?) -->$")
FENCE = re.compile(r"^(```+)(\S*)\s*$")


def pages():
    """Hand-written pages: README.md and docs/ but the generated C++ API."""
    found = [REPO / "README.md"]
    found += sorted(p for p in (REPO / "docs").rglob("*.md") if "api/cpp" not in p.relative_to(REPO / "docs").as_posix())
    return found


def blocks(path):
    """(line number, language, marker kind, marker argument, body) per fenced block."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and lines[j] != fence:
            j += 1
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        body = "\n".join(lines[i + 1 : j]) + "\n"
        out.append((i + 1, lang, marker.group(1) if marker else None, marker.group(2) if marker else None, body))
        i = j + 1
    return out


def examples(rel):
    """NAME -> body of each `example-begin NAME` ... `example-end` in a source file."""
    text = (REPO / rel).read_text(encoding="utf-8")
    found = {}
    pattern = r"^[ \t]*(?://|#) example-begin ?(\S*)\n(.*?)^[ \t]*(?://|#) example-end\s*$"
    for name, body in re.findall(pattern, text, re.M | re.S):
        found[name or "example"] = textwrap.dedent(body)
    assert found, f"{rel} has no example-begin / example-end blocks"
    return found


def all_examples():
    return {(rel, name): body for rel in SOURCES for name, body in examples(rel).items()}


def marked_blocks():
    for page in pages():
        for line, lang, kind, arg, body in blocks(page):
            yield page.relative_to(REPO), line, lang, kind, arg, body


def test_every_code_block_that_claims_to_compile_is_tied_to_tested_code():
    untied = [f"{p}:{line} ```{lang}" for p, line, lang, kind, _, _ in marked_blocks()
              if lang in CHECKED_LANGUAGES and kind is None]
    assert not untied, "code blocks without <!-- example: PATH NAME --> or <!-- excerpt: ... -->:\n" + "\n".join(untied)


def test_quoted_examples_equal_their_sources():
    known = all_examples()
    checked = 0
    for page, line, _, kind, arg, body in marked_blocks():
        if kind not in ("example", "excerpt"):
            continue
        rel, _, name = arg.partition(" ")
        assert (rel, name or "example") in known, f"{page}:{line}: no example '{name}' in {rel}"
        source = known[(rel, name or "example")]
        if kind == "example":
            assert body == source, f"{page}:{line} must quote {rel} [{name}] verbatim:\n{source}"
        else:
            src_lines, ex_lines = source.split("\n"), body.rstrip("\n").split("\n")
            runs = [src_lines[k : k + len(ex_lines)] for k in range(len(src_lines) - len(ex_lines) + 1)]
            assert ex_lines in runs, f"{page}:{line} is not a run of whole lines of {rel} [{name}]"
        checked += 1
    assert checked >= len(known)


def test_every_example_is_quoted_in_full_somewhere():
    quoted = {(arg.partition(" ")[0], arg.partition(" ")[2] or "example")
              for _, _, _, kind, arg, _ in marked_blocks() if kind == "example"}
    missing = sorted(set(all_examples()) - quoted)
    assert not missing, f"examples no page quotes in full: {missing}"


def simulator():
    sim = pathlib.Path(os.environ.get("KVPOLICY_SIM", REPO / "build/tools/kvpolicy-sim"))
    if not sim.is_absolute():
        sim = REPO / sim
    if not sim.exists():
        pytest.fail(f"kvpolicy-sim not found at {sim}: build it, or point KVPOLICY_SIM at it")
    return sim


ACCESSES_PER_SECOND = re.compile(r"\s+\d(?:\.\d+)?e[+-]\d\d\s*$")  # the last column, a timing


def test_sample_runs_print_what_the_pages_show():
    sim = simulator()
    runs = [(p, line, arg, body) for p, line, _, kind, arg, body in marked_blocks() if kind == "run"]
    assert runs, "no <!-- run: kvpolicy-sim ... --> block in the site"
    for page, line, arg, body in runs:
        command = arg.split()
        assert command[0] == "kvpolicy-sim", f"{page}:{line}: only kvpolicy-sim runs are checked"
        out = subprocess.run([str(sim), *command[1:]], capture_output=True, text=True, check=True, cwd=REPO).stdout
        got = [ACCESSES_PER_SECOND.sub(" <rate>", l.rstrip()) for l in out.rstrip("\n").split("\n")]
        want = [ACCESSES_PER_SECOND.sub(" <rate>", l.rstrip()) for l in body.rstrip("\n").split("\n")]
        assert any(l.strip() != "..." for l in want)
        k = 0
        for w in want:
            if w.strip() == "...":
                k = None
                continue
            if k is None:
                assert w in got, f"{page}:{line}: `{arg}` printed no line\n{w}\n\nIt printed:\n{out}"
                k = got.index(w) + 1
                continue
            assert k < len(got) and got[k] == w, f"{page}:{line}: `{arg}` printed\n{out}\nwhere the page shows\n{body}"
            k += 1


def flags_in(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))


def test_the_simulator_page_names_every_flag_of_help_and_no_other():
    help_text = subprocess.run([str(simulator()), "--help"], capture_output=True, text=True, check=True).stdout
    page = (REPO / "docs/simulator.md").read_text(encoding="utf-8")
    table = page.split("## Every flag", 1)[1].split("\n## ", 1)[0]
    documented = {m for row in table.split("\n") if row.startswith("| `--") for m in flags_in(row.split("|")[1])}
    in_help = flags_in(help_text)
    assert documented == in_help, (f"flags in --help but not in docs/simulator.md's table: {sorted(in_help - documented)}; "
                                   f"in the table but not in --help: {sorted(documented - in_help)}")


def test_plot_data_equal_the_tables_they_are_drawn_from():
    for name, rows in docs_plots.extract().items():
        path = REPO / "docs" / "data" / name
        assert path.exists(), f"{path} missing: run scripts/docs.sh plots"
        assert path.read_text() == docs_plots.to_csv(rows), f"{path} differs from the tables: run scripts/docs.sh plots"
