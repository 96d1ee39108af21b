#!/usr/bin/env python3
"""The waiting queue's worth (README "Which policy", docs/which-policy.md "The waiting queue").

Replays the three traces of ../shared/traces in prefix mode at 1%, 5% and 10% of
their distinct blocks with kvpolicy-sim: LRU and Belady once per cell (the gap's
ends), then each queue-aware policy with the cache hearing the next D requests
as queued (--lookahead D), and, on the conversation trace, with the queue that
load makes (--serve-rate R, R found by bisection so that the median queue is 8,
32 and 128 requests: the median, over the three capacities, of LRU's median
queue). Prints markdown tables of the share of the LRU -> Belady
gap closed and writes every row as JSON lines to OUT/queue-study.jsonl.

    scripts/queue-study.py --sim build/tools/kvpolicy-sim [--out build/queue-study] [--traces ../shared/traces]
                           [--return-hints ends]

With --return-hints MODE every replay also carries kvpolicy-sim's --return-hints MODE (`ends`: a
session's last request says, at its release, that the session will not return), so the bases and
the queue-aware policies hear the queue and the session ends together.
"""
import argparse
import json
import math
import os
import subprocess
import sys

TRACES = [  # name, path under --traces, block size
    ("conversation", "mooncake/conversation_trace.jsonl", 512),
    ("synthetic", "mooncake/synthetic_trace.jsonl", 512),
    ("agentic", "agentic/agentic_mix.jsonl.gz", 64),
]
CAPACITIES = ["1%", "5%", "10%"]
DEPTHS = [0, 8, 32, 128, 512, 1024]
POLICIES = ["queue_aware_lru", "queue_aware_adaptive_kv"]
MEDIAN_QUEUES = [8, 32, 128]


def sim(args, trace, block, policies, extra):
    cmd = [args.sim, "--trace", trace, "--block-size", str(block), "--policy", ",".join(policies),
           "--capacity", ",".join(CAPACITIES), "--output", "json", "--threads", str(args.threads)] + extra
    if args.return_hints:
        cmd += ["--return-hints", args.return_hints]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def gap(hit, lru, opt):
    return float("nan") if opt <= lru else (hit - lru) / (opt - lru)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--traces", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces"))
    ap.add_argument("--out", default="build/queue-study")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", help="one trace name (conversation, synthetic, agentic)")
    ap.add_argument("--return-hints", metavar="MODE",
                    help="kvpolicy-sim's --return-hints for every replay (ends: sessions' ends known at release)")
    ap.add_argument("--tables-from", metavar="JSONL[,JSONL]",
                    help="print the tables of earlier runs' rows; replay nothing")
    args = ap.parse_args()
    rows = []
    if args.tables_from:
        for f in args.tables_from.split(","):
            rows += [json.loads(line) for line in open(f) if line.strip()]
        print_tables(rows)
        return
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "queue-study.jsonl"), "w")

    def keep(rs, **tags):
        for r in rs:
            r.update(tags)
            rows.append(r)
            log.write(json.dumps(r) + "\n")
        log.flush()

    for name, rel, block in TRACES:
        if args.only and name != args.only:
            continue
        trace = os.path.join(args.traces, rel)
        bases = [p.removeprefix("queue_aware_") for p in POLICIES if p != "queue_aware_lru"]
        keep(sim(args, trace, block, ["lru", "belady"] + bases, []), trace=name, depth=0)
        for d in DEPTHS[1:]:
            keep(sim(args, trace, block, POLICIES, ["--lookahead", str(d)]), trace=name, depth=d)
            print(f"{name}: D = {d} done", file=sys.stderr, flush=True)
        if name == "conversation":
            for target in MEDIAN_QUEUES:
                lo, hi = 1e3, 1e8  # tokens/s: the median queue falls as the rate grows
                for _ in range(22):
                    mid = math.sqrt(lo * hi)
                    r = sim(args, trace, block, ["lru"], ["--serve-rate", f"{mid:.6g}"])
                    p50 = sorted(x["queue_depth_p50"] for x in r)[len(r) // 2]
                    if p50 > target:
                        lo = mid
                    else:
                        hi = mid
                    if hi / lo < 1.02:
                        break
                rate = f"{hi:.4g}"
                keep(sim(args, trace, block, ["lru"] + POLICIES, ["--serve-rate", rate]), trace=name,
                     serve_rate=float(rate), median_target=target)
                print(f"{name}: serve rate {rate} (median queue {target}) done", file=sys.stderr, flush=True)

    print_tables(rows)


def print_tables(rows):
    """Gap closed per (trace, capacity) against D, per policy; the conversation trace under load."""
    bounds = {}
    for r in rows:
        if r.get("depth") == 0 and r["policy"] in ("lru", "belady") and "serve_rate" not in r:
            bounds.setdefault((r["trace"], r["capacity"]), {})[r["policy"]] = r["hit_ratio"]
    for policy in POLICIES:
        print(f"\n**{policy}**: share of the LRU -> Belady gap closed with the cache hearing the next D requests "
              f"(D = 0: its base alone)\n")
        print("| trace, capacity | " + " | ".join(f"D = {d}" for d in DEPTHS) + " |")
        print("|---|" + "---:|" * len(DEPTHS))
        for (trace, cap), b in bounds.items():
            cells = []
            for d in DEPTHS:
                base = policy.removeprefix("queue_aware_")
                hit = None
                for r in rows:
                    if r["trace"] == trace and r["capacity"] == cap and "serve_rate" not in r and r.get("depth") == d:
                        if (d > 0 and r["policy"] == policy) or (d == 0 and r["policy"] == base):
                            hit = r["hit_ratio"]
                cells.append("-" if hit is None else f"{100 * gap(hit, b['lru'], b['belady']):+.0f}%")
            print(f"| {trace} {cap} | " + " | ".join(cells) + " |")
    served = [r for r in rows if "serve_rate" in r]
    if served:
        print("\n**conversation trace under load** (one instance prefilling uncached tokens at the rate shown; "
              "queue depth mean / p50 / p99 as served by each policy): share of the LRU -> Belady gap closed\n")
        print("| serve rate (tokens/s): LRU's median queue | capacity | policy | queue mean / p50 / p99 | gap closed |")
        print("|---|---:|---|---|---:|")
        for r in served:
            b = bounds[("conversation", r["capacity"])]
            closed = "-" if r["policy"] == "lru" else f"{100 * gap(r['hit_ratio'], b['lru'], b['belady']):+.0f}%"
            print(f"| {r['serve_rate']:.4g}: {r['median_target']} | {r['capacity']} | {r['policy']} | "
                  f"{r['queue_depth_mean']:.1f} / {r['queue_depth_p50']} / {r['queue_depth_p99']} | {closed} |")


if __name__ == "__main__":
    main()
