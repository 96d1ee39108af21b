#!/usr/bin/env python3
"""The CPU tier behind vLLM's GPU prefix cache: policies compared in kvpolicy-sim --mode offload.

Per trace (the first 3000 requests of the Mooncake conversation and synthetic traces, block size
512; the first 400 of the agentic mix, block size 64) and CPU tier (1 / 5 / 10% of the distinct
blocks in those requests), with a GPU prefix cache of max(longest request + 16, 8 x median request)
blocks, vLLM's step of 2048 tokens (128 blocks of 16; `--prefill-chunk` 128 x the trace's block
size), the sessions' ends known (`--return-hints ends`) and a `--serve-rate` bisected until the LRU
run's median waiting queue is 32: each policy's CPU-tier hits and its share of the LRU -> Belady gap
closed, (p - lru) / (belady - lru), the queue-aware ones again with `--queue-past-gpu` ("past GPU":
each queued request told past the GPU hit forecast for it), predicted_return's two forms again with
`--store-admission` ("admitted": past the free room a chunk is stored only where the policy does not
rank it its own next victim), the queue-aware one also past the GPU. Prints a Markdown table
(docs/which-policy.md, "A CPU tier behind vLLM's prefix cache") and writes the rows as JSON.

    python3 bench/offload_policy_study.py --sim build/release/tools/kvpolicy-sim
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
# name: (file, tokens per trace block, requests replayed)
TRACE_SET = {
    "conversation": (TRACES / "mooncake" / "conversation_trace.jsonl", 512, 3000),
    "synthetic": (TRACES / "mooncake" / "synthetic_trace.jsonl", 512, 3000),
    "agentic": (TRACES / "agentic" / "agentic_mix.jsonl.gz", 64, 400),
}
POLICIES = ["lru", "belady", "adaptive_kv", "queue_aware_adaptive_kv", "predicted_return",
            "queue_aware_predicted_return"]
# Run again with --queue-past-gpu (each queued request told past its forecast GPU hit), as "NAME past GPU".
PAST_GPU = ["queue_aware_adaptive_kv", "queue_aware_predicted_return"]
# Run again with --store-admission (a chunk past the free room stored only where the policy does not rank
# it its own next victim), as "NAME admitted", the queue-aware one also past the GPU.
ADMITTED = ["predicted_return", "queue_aware_predicted_return"]
SHARES = [0.01, 0.05, 0.10]
TARGET_QUEUE = 32


def head(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                lines.append(line)
            if len(lines) == n:
                break
    return lines


def simulate(sim: str, trace: str, block: int, gpu: int, cpu: int, rate: float, policies: list[str],
             extra: tuple[str, ...] = ()) -> dict:
    """kvpolicy-sim's offload mode on `trace`, its JSON rows by policy: vLLM's step of 2048 tokens
    (128 vLLM blocks, one per trace block) as --prefill-chunk, the sessions' ends known; `extra`
    flags appended. bench/vllm_replay_study.py runs it beside vLLM's own scheduler."""
    cmd = [sim, "--trace", trace, "--mode", "offload", "--policy", ",".join(policies), "--capacity", str(gpu),
           "--cpu-capacity", str(cpu), "--block-size", str(block), "--serve-rate", repr(rate),
           "--prefill-chunk", str(128 * block), "--return-hints", "ends", "--output", "json", "--threads", "1",
           *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {row["policy"]: row for row in map(json.loads, out.splitlines()) if row}


def serve_rate(sim: str, trace: str, block: int, gpu: int, cpu: int, iterations: int,
               target: float = TARGET_QUEUE) -> tuple[float, int]:
    """The serve rate (tokens/s) whose LRU run has the median queue nearest `target`, and that
    median (geometric bisection: the queue shrinks as the rate grows)."""
    lo, hi = 1e3, 1e10
    best = (float("inf"), hi, -1)
    for _ in range(iterations):
        mid = (lo * hi) ** 0.5
        q = simulate(sim, trace, block, gpu, cpu, mid, ["lru"])["lru"]["queue_depth_p50"]
        best = min(best, (abs(q - target), mid, q))
        if q == target:
            break
        if q > target:
            lo = mid
        else:
            hi = mid
    return best[1], best[2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="build/release/tools/kvpolicy-sim")
    p.add_argument("--traces", default=",".join(TRACE_SET))
    p.add_argument("--iterations", type=int, default=24, help="bisection steps for the serve rate")
    p.add_argument("--json", default="build/offload-policy-study.json")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.traces.split(","):
            path, block, n = TRACE_SET[name]
            lines = head(path, n)
            trace = Path(tmp) / f"{name}.jsonl"
            trace.write_text("".join(lines))
            reqs = [json.loads(line)["hash_ids"] for line in lines]
            distinct = len({h for r in reqs for h in r})
            blocks = sorted(len(r) for r in reqs)
            gpu = int(max(blocks[-1] + 16, 8 * statistics.median(blocks)))
            for share in SHARES:
                cpu = max(1, round(share * distinct))
                rate, q = serve_rate(a.sim, str(trace), block, gpu, cpu, a.iterations)
                res = simulate(a.sim, str(trace), block, gpu, cpu, rate, POLICIES)
                past = simulate(a.sim, str(trace), block, gpu, cpu, rate, PAST_GPU, ("--queue-past-gpu",))
                res.update({f"{k} past GPU": v for k, v in past.items()})
                admitted = simulate(a.sim, str(trace), block, gpu, cpu, rate, ADMITTED, ("--store-admission",))
                res.update({f"{k} admitted": v for k, v in admitted.items()})
                both = simulate(a.sim, str(trace), block, gpu, cpu, rate, ADMITTED[1:],
                                ("--queue-past-gpu", "--store-admission"))
                res.update({f"{k} past GPU admitted": v for k, v in both.items()})
                lru, bel = res["lru"]["cpu_hits"], res["belady"]["cpu_hits"]
                row = {"trace": name, "share": share, "cpu": cpu, "gpu": gpu, "distinct": distinct,
                       "serve_rate": rate, "queue_p50_lru": q,
                       "cpu_hits": {k: v["cpu_hits"] for k, v in res.items()},
                       "gap_closed": {k: (v["cpu_hits"] - lru) / (bel - lru) if bel > lru else None
                                      for k, v in res.items()}}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(rows, indent=1))
    print(markdown(rows))
    return 0


def markdown(rows) -> str:
    shown = ([p for p in POLICIES if p not in ("lru", "belady")] + [f"{p} past GPU" for p in PAST_GPU] +
             [f"{p} admitted" for p in ADMITTED] + [f"{p} past GPU admitted" for p in ADMITTED[1:]])
    out = ["| trace | CPU tier (blocks) | serve rate: LRU's median queue | lru | belady | " +
           " | ".join(shown) + " |", "|---|---:|---:|---:|---:|" + "---:|" * len(shown)]
    for r in rows:
        h, g = r["cpu_hits"], r["gap_closed"]
        cells = [f"{h[p]} ({g[p] * 100:.0f}%)" if g[p] is not None else str(h[p]) for p in shown]
        out.append(f"| {r['trace']} | {r['share'] * 100:.0f}%: {r['cpu']} | {r['serve_rate']:.4g}: "
                   f"{r['queue_p50_lru']} | {h['lru']} | {h['belady']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
