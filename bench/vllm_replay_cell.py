#!/usr/bin/env python3
"""Cells of bench/vllm_replay_study.py (vLLM's LRU, kvpolicy's connector
and policy, and the Belady bound, in vLLM's own scheduler), each replayed
once per Python string-hash seed, each in a fresh process.

Why seeds: vLLM 0.33's offloading connector tells the CPU tier's policy of
the requests that finished in one step by iterating
``scheduler_output.finished_req_ids``, a ``set`` of request-id strings, and
a set of strings iterates in an order that follows the process's string
hash seed (``PYTHONHASHSEED``, random per process unless set). The order in
which a policy hears two requests end changes what it keeps, so one run of
a cell is one draw: the agentic 5% cell gives 1,660 CPU hits with seed 0
and 2,404 with seed 1 (docs/getting-started/vllm.md, "One run is one draw
of vLLM's schedule"). Each line gives one seed's figures; at the end, a
Markdown table of each cell's mean and min-max over the seeds. Seed runs are
independent: ``--jobs`` runs that many at once (the policy's timings are then
not comparable, its decisions are).

    build/vllm-venv/bin/python bench/vllm_replay_cell.py agentic:0.05:26.727 --seeds 0,1,2,3
    build/vllm-venv/bin/python bench/vllm_replay_cell.py agentic:0.05:26.727 --seeds 0 --timing

Each cell is TRACE:FRACTION:SPEEDUP: the trace (bench/offload_policy_study.py's
TRACE_SET names), the CPU tier as a fraction of the trace's distinct blocks,
and the arrival speed-up (vllm_replay_study's calibration; 26.727, 24.542
and 32.612 give agentic, conversation and synthetic a median queue of about
32).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(trace: str, fraction: float, speedup: float, policy: str, admission: bool, timing: bool = False,
        outputs: str = "capped") -> dict:
    """The cell in this process (its hash seed): LRU (its CPU-tier accesses
    give the Belady bound) and kvpolicy's policy; with `timing`, kvpolicy's
    run alone, with where its time goes per call."""
    sys.path.insert(0, str(HERE))
    import offload_policy_study as study_set
    import vllm_replay as replay
    import vllm_replay_study as study

    study.POLICY, study.ADMISSION = policy, admission
    study.OUTPUTS = outputs
    path, trace_block, limit = study_set.TRACE_SET[trace]
    reqs = replay.read_trace(str(path), limit, derive_block=trace_block)
    cpu = max(1, int(fraction * len({h for r in reqs for h in r.hash_ids})))
    if timing:
        kv = study.run(reqs, trace_block, True, **study.shape(reqs, cpu, speedup)).result
        net = kv.net_of_timer()
        return {"hits_kvpolicy": kv.cpu_chunks_loaded, "steps": kv.steps, **net,
                "policy_share": net["policy_net_ms_per_step"] / max(net["scheduler_net_ms_per_step"], 1e-9),
                "by_call": kv.policy_ms_by_call()}
    l, kv, bound = study.replay_cell(reqs, trace_block, cpu, speedup)
    net = kv.net_of_timer()
    return {"hits_lru": l.cpu_chunks_loaded, "hits_kvpolicy": kv.cpu_chunks_loaded, "hits_belady": bound,
            "gap_closed": study.gap_closed(l.cpu_chunks_loaded, kv.cpu_chunks_loaded, bound),
            "prefill_lru": l.prefill_tokens_computed, "prefill_kvpolicy": kv.prefill_tokens_computed,
            "policy_share": net["policy_net_ms_per_step"] / max(net["scheduler_net_ms_per_step"], 1e-9)}


def run_seed(cell: str, policy: str, seed: int, admission: bool, timing: bool = False, outputs: str = "capped") -> dict:
    trace, fraction, speedup = cell.split(":")
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    flags = (["--store-admission"] if admission else []) + (["--timing"] if timing else []) + ["--outputs", outputs]
    out = subprocess.run([sys.executable, __file__, cell, "--policy", policy, "--one", *flags], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"vllm_replay_cell.py: {cell} seed {seed} failed:\n{out.stderr[-4000:]}")
    return {"trace": trace, "fraction": float(fraction), "speedup": float(speedup), "seed": seed,
            **json.loads(out.stdout.strip().splitlines()[-1])}


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def spread(xs, fmt) -> str:
    """mean (min-max), or the one value where all are equal."""
    if min(xs) == max(xs):
        return fmt(xs[0])
    return f"{fmt(statistics.mean(xs))} ({fmt(min(xs))}-{fmt(max(xs))})"


def markdown(cells: dict) -> str:
    out = ["| trace | CPU tier | seeds | CPU hits LRU | kvpolicy | Belady | gap closed | prefill tokens cut |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for rows in cells.values():
        r0 = rows[0]
        gaps = [r["gap_closed"] for r in rows if r["gap_closed"] is not None]
        cut = [1 - r["prefill_kvpolicy"] / r["prefill_lru"] for r in rows]
        out.append(f"| {r0['trace']} | {100 * r0['fraction']:.0f}% | {len(rows)} "
                   f"| {spread([r['hits_lru'] for r in rows], lambda x: f'{x:.0f}')} "
                   f"| {spread([r['hits_kvpolicy'] for r in rows], lambda x: f'{x:.0f}')} "
                   f"| {spread([r['hits_belady'] for r in rows], lambda x: f'{x:.0f}')} "
                   f"| {spread(gaps, pct) if gaps else '-'} | {spread(cut, lambda x: f'{100 * x:.1f}%')} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cells", nargs="+", help="TRACE:FRACTION:SPEEDUP, e.g. agentic:0.05:26.727")
    p.add_argument("--policy", default="queue_aware_predicted_return")
    p.add_argument("--seeds", default="0,1,2,3", help="PYTHONHASHSEED values, comma-separated, one process each")
    p.add_argument("--jobs", type=int, default=1, help="seed runs at once")
    p.add_argument("--json", default=None, help="also write every seed's row here")
    p.add_argument("--store-admission", action="store_true",
                   help="kvpolicy's connector with kv_connector_extra_config kvpolicy_store_admission")
    p.add_argument("--timing", action="store_true",
                   help="kvpolicy's replay alone (no LRU run, no bound): the policy's share of the scheduler's "
                        "time per step and where it goes, per call, net of the timer; run with --jobs 1")
    p.add_argument("--outputs", choices=("capped", "scaled"), default="capped",
                   help="each request decodes at most 16 tokens (capped: vllm_replay_study's default) or its "
                        "trace's output_length scaled as its prompt is (scaled); a cell's speed-up is "
                        "calibrated for one of them")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: this process's seed
    a = p.parse_args()
    if a.one:
        trace, fraction, speedup = a.cells[0].split(":")
        print(json.dumps(one(trace, float(fraction), float(speedup), a.policy, a.store_admission, a.timing,
                             a.outputs)))
        return 0
    seeds = [int(s) for s in a.seeds.split(",")]
    runs = [(c, s) for c in a.cells for s in seeds]
    cells: dict = {c: [] for c in a.cells}
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for (cell, _), r in zip(runs, pool.map(lambda cs: run_seed(cs[0], a.policy, cs[1], a.store_admission,
                                                                   a.timing, a.outputs), runs)):
            cells[cell].append(r)
            if a.json:
                Path(a.json).write_text(json.dumps([r for rs in cells.values() for r in rs], indent=1))
            if a.timing:
                print(f"{cell} seed {r['seed']}: CPU hits {r['hits_kvpolicy']} policy / scheduler ms per step "
                      f"{r['policy_net_ms_per_step']:.3f} / {r['scheduler_net_ms_per_step']:.3f} "
                      f"(share {r['policy_share']:.1%}) net of the timer; per call:", flush=True)
                for name, c in r["by_call"].items():
                    print(f"    {name:20s} {c['calls']:9d} calls {c['ms_per_step']:.4f} ms/step "
                          f"{c['us_per_call']:8.2f} us/call")
                continue
            print(f"{cell} seed {r['seed']}: CPU hits LRU {r['hits_lru']} kvpolicy {r['hits_kvpolicy']} Belady "
                  f"{r['hits_belady']} gap closed {pct(r['gap_closed'])} prefill tokens LRU {r['prefill_lru']} "
                  f"kvpolicy {r['prefill_kvpolicy']} policy share {r['policy_share']:.1%}", flush=True)
    if not a.timing:
        print(markdown(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
