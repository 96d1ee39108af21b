#!/usr/bin/env python3
"""The C++ API pages of the site, from the headers' own comments.

Usage: scripts/docs-api.py OUT_DIR [XML_DIR]

Doxygen (Debian's package; scripts/install-deps.sh installs it) reads every
public header (include/, cuda/include/, redis/include/) into XML; this script
turns that XML into one Markdown page per header folder under OUT_DIR
(docs/api/cpp/ when scripts/docs.sh runs it, git-ignored): per header, the
paragraph it opens with (what it does, when to use it, the paper), then each
class, struct, function and alias that carries a `///` comment, with its
declaration and that comment (Effects / Complexity / Throws where the header
gives them). Undocumented members are left out; a documented member of an
undocumented class is kept. Pages are regenerated on every docs build, so the
reference cannot drift from the headers.
"""
import html
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = [REPO / "include", REPO / "cuda" / "include", REPO / "redis" / "include"]

DOXYFILE = """
PROJECT_NAME = kvpolicy
INPUT = {inputs}
FILE_PATTERNS = *.hpp *.cuh
EXTENSION_MAPPING = cuh=C++
RECURSIVE = YES
GENERATE_HTML = NO
GENERATE_LATEX = NO
GENERATE_XML = YES
XML_OUTPUT = {xml}
OUTPUT_DIRECTORY = {xml}
EXTRACT_ALL = YES
EXTRACT_PRIVATE = NO
EXTRACT_STATIC = YES
HAVE_DOT = NO
QUIET = YES
WARNINGS = NO
WARN_IF_UNDOCUMENTED = NO
WARN_LOGFILE = {xml}/warnings.log
ENABLE_PREPROCESSING = YES
MACRO_EXPANSION = YES
PREDEFINED = KVPOLICY_HOST_DEVICE= __host__= __device__= __global__= __forceinline__=
"""


def run_doxygen(xml_dir: pathlib.Path) -> None:
    inputs = " ".join(str(r / "kvpolicy") for r in ROOTS if (r / "kvpolicy").is_dir())
    config = DOXYFILE.format(inputs=inputs, xml=xml_dir)
    xml_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["doxygen", "-"], input=config, text=True, check=True, stdout=subprocess.DEVNULL, cwd=REPO)


def text_of(node) -> str:
    """A description's text as Markdown: paragraphs, code spans, lists."""
    if node is None:
        return ""
    parts = []

    def walk(n):
        tag = n.tag
        if tag == "computeroutput":
            parts.append("`" + "".join(n.itertext()) + "`")
            parts.append(escape(n.tail or ""))
            return
        if tag == "para":
            parts.append("\n\n")
        if tag == "listitem":
            parts.append("\n- ")
        if tag == "parameterlist":
            return
        if tag == "simplesect" and n.get("kind") == "return":
            parts.append("\n\nReturns: ")
        parts.append(escape(n.text or ""))
        for c in n:
            walk(c)
            if c.tag not in ("computeroutput",):
                parts.append(escape(c.tail or ""))
        if tag == "para":
            parts.append("\n")

    walk(node)
    text = "".join(parts)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def escape(s: str) -> str:
    return html.escape(s, quote=False).replace("*", r"\*").replace("[", r"\[").replace("]", r"\]")


def header_paragraph(path: pathlib.Path) -> str:
    """The comment block a header opens with, as the header writes it."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if s.startswith("//"):
            lines.append(s[2:].removeprefix(" "))
        elif s == "" and not lines:
            continue
        else:
            break
    return "\n".join(lines).strip()


def declaration(m) -> str:
    kind = m.get("kind")
    name = m.findtext("name") or ""
    definition = m.findtext("definition") or name
    args = m.findtext("argsstring") or ""
    tparams = m.find("templateparamlist")
    prefix = ""
    if tparams is not None:
        ps = []
        for p in tparams.findall("param"):
            t = "".join(p.find("type").itertext()) if p.find("type") is not None else ""
            dn = p.findtext("declname") or ""
            ps.append((t + " " + dn).strip())
        prefix = "template <" + ", ".join(ps) + ">\n"
    if kind == "function":
        return prefix + definition + args
    if kind == "typedef":
        return prefix + definition
    if kind == "variable":
        init = "".join(m.find("initializer").itertext()) if m.find("initializer") is not None else ""
        return prefix + definition + (" " + init if init and len(init) < 120 else "")
    if kind == "enum":
        values = [v.findtext("name") for v in m.findall("enumvalue")]
        return f"enum {'class ' if m.get('strong') == 'yes' else ''}{name} {{ " + ", ".join(values) + " }"
    return prefix + definition


def member_docs(compound, public_only: bool):
    out = []
    for sec in compound.findall("sectiondef"):
        kind = sec.get("kind", "")
        if public_only and not (kind.startswith("public") or kind in ("func", "typedef", "var", "enum", "define")):
            continue
        for m in sec.findall("memberdef"):
            if m.get("kind") == "define":
                continue
            doc = "\n\n".join(t for t in (text_of(m.find("briefdescription")), text_of(m.find("detaileddescription"))) if t)
            if not doc:
                continue
            out.append((declaration(m), doc))
    return out


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = pathlib.Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        xml_dir = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else pathlib.Path(tmp)
        run_doxygen(xml_dir)
        compounds = {}
        index = ET.parse(xml_dir / "index.xml").getroot()
        for c in index.findall("compound"):
            compounds[c.get("refid")] = c.get("kind")

        def load(refid):
            return ET.parse(xml_dir / f"{refid}.xml").getroot().find("compounddef")

        # header path -> (classes, free members)
        by_header = {}
        for refid, kind in compounds.items():
            if kind not in ("class", "struct", "file", "namespace"):
                continue
            cd = load(refid)
            if kind in ("class", "struct"):
                if cd.get("prot") == "private":
                    continue
                loc = cd.find("location")
                if loc is None:
                    continue
                name = cd.findtext("compoundname")
                if "::detail" in name or "<" in name:
                    continue
                doc = "\n\n".join(t for t in (text_of(cd.find("briefdescription")), text_of(cd.find("detaileddescription"))) if t)
                members = member_docs(cd, public_only=True)
                if doc or members:
                    by_header.setdefault(loc.get("file"), [[], []])[0].append((kind, name, doc, members))
            elif kind == "namespace":
                for sec in cd.findall("sectiondef"):
                    for m in sec.findall("memberdef"):
                        loc = m.find("location")
                        if loc is None or "detail" in (cd.findtext("compoundname") or ""):
                            continue
                        doc = "\n\n".join(t for t in (text_of(m.find("briefdescription")), text_of(m.find("detaileddescription"))) if t)
                        if doc and m.get("kind") != "define":
                            by_header.setdefault(loc.get("file"), [[], []])[1].append((declaration(m), doc))

        headers = sorted(p for r in ROOTS for p in (r / "kvpolicy").rglob("*") if p.suffix in (".hpp", ".cuh"))
        groups = {}
        for h in headers:
            root = next(r for r in ROOTS if h.is_relative_to(r))
            rel = h.relative_to(root)
            group = rel.parts[1] if len(rel.parts) > 2 else "top"
            if root.parent != REPO:
                group = root.parent.name  # cuda/, redis/: one page each
            groups.setdefault(group, []).append((rel, h))

        out_dir.mkdir(parents=True, exist_ok=True)
        titles = {"top": "Umbrella headers", "cuda": "CUDA (device headers)", "redis": "Redis remote tier"}
        pages = []
        for group, items in sorted(groups.items()):
            title = titles.get(group, f"{group}/")
            lines = [f"# {title}\n", f"Generated from the headers by Doxygen (`scripts/docs-api.py`): each header's opening paragraph, then every declaration that carries a `///` comment.\n"]
            for rel, h in items:
                lines.append(f"## `{rel.as_posix()}`\n")
                para = header_paragraph(h)
                if para:
                    lines.append("```text\n" + para + "\n```\n")
                classes, free = by_header.get(h.relative_to(REPO).as_posix(), [[], []])
                for kind, name, doc, members in sorted(classes, key=lambda c: c[1]):
                    lines.append(f"### {kind} `{name}`\n")
                    if doc:
                        lines.append(doc + "\n")
                    for decl, mdoc in members:
                        lines.append("```cpp\n" + decl.strip() + "\n```\n")
                        lines.append(mdoc + "\n")
                if free:
                    lines.append("### Functions, aliases and constants\n")
                    for decl, mdoc in free:
                        lines.append("```cpp\n" + decl.strip() + "\n```\n")
                        lines.append(mdoc + "\n")
            name = f"{group}.md"
            (out_dir / name).write_text("\n".join(lines))
            pages.append((title, name, len(items)))
        index_lines = ["# C++ API\n",
                       "One page per header folder, generated from the headers' own comments by Doxygen "
                       "(`scripts/docs-api.py`, run by `scripts/docs.sh` on every build). Start with "
                       "[Concepts and seams](../../concepts.md) for how the pieces fit.\n",
                       "| page | headers |", "|---|---:|"]
        index_lines += [f"| [{t}]({n}) | {k} |" for t, n, k in pages]
        (out_dir / "index.md").write_text("\n".join(index_lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
