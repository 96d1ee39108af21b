#!/usr/bin/env python3
"""What an engine's return hints are worth to session_aware_lru and adaptive_kv: the README tables.

An engine may know when a session ends (a closed conversation) or returns (a
tool call's timeout, a workflow's next step) and say so at release
(tiered_cache::release(session, output_tokens, expected_return)).
`kvpolicy-sim --return-hints` reads such hints from the trace's future: none,
`ends` (a session's last request says it ends), `oracle:SIGMA` (every return,
off by a factor e^(SIGMA z)) and `oracle` (exact). This runs each on the three
traces at 1%, 5% and 10% of their distinct blocks and prints, per policy, the
markdown table of the share of the LRU -> Belady gap it closes (the exact
hints' hit ratios in brackets). About 12 minutes on 2 cores, most of it
adaptive_kv on the agentic trace; `--policy session_aware_lru` takes 4.

    scripts/hint-value.py [--sim build/release/tools/kvpolicy-sim] [--traces ../shared/traces]
                          [--policy session_aware_lru,adaptive_kv]
"""
import argparse, csv, io, subprocess

TRACES = [("conversation", "mooncake/conversation_trace.jsonl", 512),
          ("synthetic", "mooncake/synthetic_trace.jsonl", 512),
          ("agentic", "agentic/agentic_mix.jsonl.gz", 64)]
HINTS = [(None, "none (output tokens only)"),
         ("ends", "`ends`: a session's last request says it ends"),
         ("oracle:3", "`oracle:3`: ends, and each return off by e^(3z)"),
         ("oracle:2", "`oracle:2`"),
         ("oracle:1", "`oracle:1`"),
         ("oracle:0.5", "`oracle:0.5`"),
         ("oracle", "`oracle`: every return exact")]


def start(sim, trace, block_size, hints, policies):
    """A kvpolicy-sim run of lru and `policies` at 1%, 5%, 10%, for collect() (--bounds: belady
    too, for the share of the gap closed)."""
    cmd = [sim, "--trace", trace, "--mode", "prefix", "--block-size", str(block_size), "--policy",
           ",".join(["lru"] + policies), "--capacity", "1%,5%,10%", "--bounds", "--output", "csv"]
    if hints:
        cmd += ["--return-hints", hints]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True), policies


def collect(job):
    """{policy: [(hit ratio, gap closed)] at 1%, 5%, 10%} of a started run."""
    proc, policies = job
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"hint-value.py: {' '.join(proc.args)} failed with exit status {proc.returncode}")
    rows = sorted(csv.DictReader(io.StringIO(out)), key=lambda r: int(r["capacity"]))
    return {p: [(float(r["hit_ratio"]), float(r["gap_closed"])) for r in rows if r["policy"] == p] for p in policies}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="build/release/tools/kvpolicy-sim")
    ap.add_argument("--traces", default="../shared/traces")
    ap.add_argument("--policy", default="session_aware_lru,adaptive_kv",
                    help="comma-separated policies, one table each")
    a = ap.parse_args()
    policies = a.policy.split(",")
    # One hint level at a time, its three traces side by side.
    results = {}
    for hints, _ in HINTS:
        jobs = [start(a.sim, f"{a.traces}/{path}", block_size, hints, policies) for _, path, block_size in TRACES]
        results[hints] = [collect(job) for job in jobs]
    for policy in policies:
        print(f"\n{policy}:\n")
        print("| hints at release |" + "".join(f" {name} 1% | 5% | 10% |" for name, _, _ in TRACES))
        print("|---|" + "---:|" * 3 * len(TRACES))
        for hints, label in HINTS:
            cells = []
            for per_trace in results[hints]:
                for hit, gap in per_trace[policy]:
                    cell = f"{100 * gap:.0f}%"
                    if hints == "oracle":
                        cell = f"{'**' + cell + '**' if gap >= 0.5 else cell} ({hit:.4f})"
                    cells.append(cell)
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
