#!/usr/bin/env python3
"""The site's plots, drawn from the numbers of its own tables.

Usage: scripts/docs.sh plots   (or: build/docs-venv/bin/python scripts/docs-plots.py)

The tables in docs/which-policy.md and docs/performance.md are what the study
scripts print (scripts/which-policy.sh through scripts/which-policy-tables.py,
scripts/hint-value.py, the benches of bench/); rerunning those takes hours on
a 2-core machine (which-policy.sh alone 27 minutes, with --full about two
hours), so this script reads the numbers back from the tables, keeps them in
small CSV files (docs/data/*.csv, committed) and draws from those:

  docs/which-policy.png   hit ratio against capacity per trace: LRU, Belady,
                          the online policies the study recommends, the
                          reuse oracle, and every other policy thin
  docs/hint-value.png     share of the LRU -> Belady gap closed by
                          session_aware_lru and adaptive_kv against the
                          quality of an engine's return hints
  docs/performance.png    speed-ups measured against a baseline in the same
                          run: batch victim selection, the vLLM offloading
                          manager, and the session-aware policies' cost

After the study scripts print new tables, paste them into the pages and run
this again; tests/docs/test_docs.py fails while docs/data/ differs from the
tables, so a plot cannot silently go stale.
"""
import csv
import io
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def tables_after(text, start):
    """The markdown table that follows the first line starting with `start`: header and rows as cell lists."""
    lines = text.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(start))
    while not lines[i].startswith("|"):
        i += 1
    rows = []
    while i < len(lines) and lines[i].startswith("|"):
        rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
        i += 1
    return rows[0], [r for r in rows[2:]]


def plain(cell):
    return cell.replace("**", "").replace("`", "").strip()


def pct(cell):
    m = re.match(r"\*?\*?([+-]?\d+)%", cell.strip())
    return int(m.group(1)) if m else None


def extract():
    """CSV name -> rows (lists of strings, header first), read from the pages' tables."""
    which = (DOCS / "which-policy.md").read_text(encoding="utf-8")
    study = [["trace", "capacity_blocks", "capacity_share", "policy", "hit_ratio", "gap_closed_pct"]]
    for trace in ("mooncake conversation", "mooncake synthetic", "agentic mix"):
        header, rows = tables_after(which, f"**{trace}** (")
        caps = [re.match(r"([\d,]+) \((\d+)%\)", h).groups() for h in header[1:]]
        for r in rows:
            for (blocks, share), cell in zip(caps, r[1:]):
                parts = [p.strip() for p in cell.split("/")]
                gap = pct(parts[2])
                study.append([trace, blocks.replace(",", ""), share, plain(r[0]), parts[0], "" if gap is None else str(gap)])
    hints = [["policy", "hints", "trace", "capacity_share", "gap_closed_pct"]]
    for policy, start in (("session_aware_lru", "| hints at release |"), ("adaptive_kv", "`adaptive_kv` hears the same hints")):
        sub = which.split(start, 1)[1] if not start.startswith("|") else which[which.index("## What an engine's hints are worth"):]
        header, rows = tables_after(sub, "| hints at release |")
        cells = []
        trace = None
        for h in header[1:]:
            m = re.match(r"(?:([a-z]+) )?(\d+)%", h)
            trace = m.group(1) or trace
            cells.append((trace, m.group(2)))
        for r in rows:
            label = re.match(r"`([^`]+)`", r[0]).group(1) if r[0].startswith("`") else "none"
            for (trace, share), cell in zip(cells, r[1:]):
                hints.append([policy, label, trace, share, str(pct(cell))])
    perf_text = (DOCS / "performance.md").read_text(encoding="utf-8")
    perf = [["figure", "case", "ratio"]]
    _, rows = tables_after(perf_text, "**Seed 002's batch API**")
    for r in rows:
        perf.append(["batch victim selection: speed-up over sorting everything", plain(r[0]), r[3].rstrip("x")])
    _, rows = tables_after(perf_text, "**Speed**")
    for r in rows:
        if "kvpolicy" in r[0]:
            perf.append(["vLLM offloading manager: speed-up over the OrderedDict manager", plain(r[1]), plain(r[4]).rstrip("x")])
    header, rows = tables_after(perf_text, "**Session-aware policies under the request protocol**")
    for r in rows:
        for size, k in (("1e3", 2), ("1e5", 4), ("1e6", 6)):
            perf.append([f"session-aware policies: time per block op / LRU's ({size} blocks)", plain(r[0]), r[k]])
    return {"which-policy.csv": study, "hint-value.csv": hints, "performance.csv": perf}


def to_csv(rows):
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def plot(data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "savefig.dpi": 110})
    # Which policy: hit ratio against capacity, one panel per trace.
    study = data["which-policy.csv"][1:]
    traces = list(dict.fromkeys(r[0] for r in study))
    fig, axes = plt.subplots(len(traces), 1, figsize=(8, 10.5))
    styles = {"lru": dict(color="red", lw=2.5), "belady": dict(color="black", lw=2.5),
              "adaptive_kv": dict(color="tab:blue", lw=2), "session_aware_lru": dict(color="tab:green", lw=2),
              "lrfu": dict(color="tab:orange", lw=1.5), "reuse_oracle_lru": dict(color="gray", lw=1.5, ls="--")}
    for ax, trace in zip(axes, traces):
        rows = [r for r in study if r[0] == trace]
        for policy in dict.fromkeys(r[3] for r in rows):
            pts = [(int(r[2]), float(r[4])) for r in rows if r[3] == policy]
            style = styles.get(policy, dict(color="0.8", lw=0.8))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                    label=policy if policy in styles else None, zorder=3 if policy in styles else 1, **style)
        ax.set_title(trace)
        ax.set_xlabel("capacity, % of the trace's distinct blocks")
        ax.set_xticks([1, 5, 10])
        ax.grid(alpha=0.3)
        ax.set_ylabel("prefix hit ratio")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Which policy: hit ratio against capacity (thin grey: every other policy)")
    fig.tight_layout()
    fig.savefig(DOCS / "which-policy.png")
    plt.close(fig)

    # Hint value: gap closed against hint quality, one line per trace and capacity.
    hints = data["hint-value.csv"][1:]
    labels = list(dict.fromkeys(r[1] for r in hints))
    
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, policy in zip(axes, ("session_aware_lru", "adaptive_kv")):
        rows = [r for r in hints if r[0] == policy]
        for trace, color in (("conversation", "tab:blue"), ("synthetic", "tab:orange"), ("agentic", "tab:green")):
            for share, ls in (("1", "-"), ("5", "--"), ("10", ":")):
                ys = [int(next(r[4] for r in rows if r[1] == lab and r[2] == trace and r[3] == share)) for lab in labels]
                ax.plot(range(len(labels)), ys, color=color, ls=ls, marker="o", ms=3, label=f"{trace} {share}%")
        ax.axhline(50, color="black", lw=0.8)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(["exact" if lab == "oracle" else lab for lab in labels], rotation=20)
        ax.set_title(policy)
        ax.set_xlabel("hints at release (oracle:SIGMA: each return off by e^(SIGMA z))")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of the LRU -> Belady gap closed, %")
    axes[1].legend(fontsize=7, ncol=3, loc="lower right")
    fig.suptitle("What an engine's hints are worth (black line: the #15 goal, half of the gap)")
    fig.tight_layout()
    fig.savefig(DOCS / "hint-value.png")
    plt.close(fig)

    # Performance: ratios against the baseline of the same run.
    perf = data["performance.csv"][1:]
    figures = list(dict.fromkeys(r[0].split(" (")[0] for r in perf))
    fig, axes = plt.subplots(1, len(figures), figsize=(14, 4.2))
    for ax, figure in zip(axes, figures):
        rows = [r for r in perf if r[0].split(" (")[0] == figure]
        if "(" in rows[0][0]:
            sizes = list(dict.fromkeys(r[0].split(" (")[1].rstrip(")") for r in rows))
            cases = list(dict.fromkeys(r[1] for r in rows))
            width = 0.8 / len(sizes)
            for k, size in enumerate(sizes):
                vals = [float(next(r[2] for r in rows if r[1] == c and r[0].endswith(f"({size})"))) for c in cases]
                ax.barh([i + k * width for i in range(len(cases))], vals, height=width, label=size)
            ax.set_yticks([i + 0.4 - width / 2 for i in range(len(cases))])
            ax.set_yticklabels(cases, fontsize=7)
            ax.set_xscale("log")
            ax.legend(fontsize=7)
        else:
            ax.barh(range(len(rows)), [float(r[2]) for r in rows], color="tab:blue")
            ax.set_yticks(range(len(rows)))
            ax.set_yticklabels([r[1] for r in rows], fontsize=8)
            for i, r in enumerate(rows):
                ax.text(float(r[2]), i, f" {r[2]}x", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(figure.replace(": ", ":\n"), fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(DOCS / "performance.png")
    plt.close(fig)


def main():
    data = extract()
    (DOCS / "data").mkdir(exist_ok=True)
    for name, rows in data.items():
        (DOCS / "data" / name).write_text(to_csv(rows))
    plot(data)
    print("docs-plots: wrote docs/data/*.csv and docs/which-policy.png, docs/hint-value.png, docs/performance.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
