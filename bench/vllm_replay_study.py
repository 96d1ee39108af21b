"""vLLM's LRU against kvpolicy's queue-aware policy, in vLLM's own scheduler (issue 45's table).

For each trace, CPU tier (1 / 5 / 10% of the replayed requests' distinct
blocks) and load (the arrival speed-up at which vLLM's LRU run has a median
waiting queue of 8, 32 or 128 requests), two replays through
bench/vllm_replay.py:

- vLLM's ``OffloadingConnector`` with its own ``lru``;
- ``kvpolicy.vllm.KvpolicyOffloadingConnector`` with
  ``kvpolicy_queue_aware_adaptive_kv`` (the waiting queue; each request names
  its session, the trace's or, where it names none, the conversation
  ``kvpolicy.derive_sessions`` finds, as a chat client knows it, and a
  session's last request says ``session_end``);

and the offline bound: Belady's MIN over the CPU tier's access sequence of
the LRU run (``belady_hits``). Reported per cell: CPU-tier hits (chunks
loaded), the share of the LRU -> Belady gap the policy closes, the prefill
tokens computed, the median queue, and the policy's time per step (its
calls and the connector's queue relay) against vLLM's scheduler's.

Beside each cell, the same figures from ``kvpolicy-sim --mode offload`` (the
same arrangement, requests one at a time) on the same requests, GPU and CPU
capacities and load: its ``--serve-rate`` bisected until its LRU run's median
queue is vLLM's LRU run's. The hit ratios compared are token hit ratios (the
prompt tokens not computed), each engine's own.

    build/vllm-venv/bin/python bench/vllm_replay_study.py --out build/vllm-replay --sim build/tools/kvpolicy-sim

Each run is one draw of vLLM's schedule: the order in which vLLM's connector
reports the requests that finished in one step follows Python's string hash
seed, and the study runs with ``PYTHONHASHSEED=0`` unless it is set;
bench/vllm_replay_cell.py replays cells over several seeds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from offload_policy_study import TRACE_SET, serve_rate, simulate  # noqa: E402
from vllm_replay import Replay, ReplayConfig, belady_hits, pin_hash_seed, read_trace  # noqa: E402

MAX_BATCHED_TOKENS = 2048  # 128 vLLM blocks of 16: offload_policy_study.simulate's --prefill-chunk
# What each request decodes (--outputs): at most 16 tokens (capped), or its
# trace's output_length scaled as its prompt is, one vLLM block of 16 tokens
# per trace block (scaled: the Mooncake traces' first 3,000 requests then
# decode a median of 12 and 4 tokens, the agentic trace's first 400 a median
# of 66).
OUTPUTS = "capped"


def shape(reqs, cpu_chunks: int, speedup: float, **kw) -> dict:
    blocks = sorted(len(r.hash_ids) for r in reqs)
    # A small GPU prefix cache: the longest request, or 8 median ones, whichever is more.
    gpu = max(blocks[-1] + 16, 8 * statistics.median(blocks))
    decodes = {"max_output": 16} if OUTPUTS == "capped" else {"max_output": None, "scale_outputs": True}
    return dict(gpu_blocks=int(gpu), cpu_chunks=cpu_chunks, max_num_seqs=16, max_num_batched_tokens=MAX_BATCHED_TOKENS,
                speedup=speedup, **decodes, **kw)


def run(reqs, trace_block: int, kvpolicy: bool, accesses: bool = False, **kw):
    cfg = ReplayConfig(trace_block=trace_block, **kw)
    if kvpolicy:
        cfg.policy, cfg.policy_module = "kvpolicy_" + POLICY, "kvpolicy.vllm"
        cfg.connector, cfg.connector_module = "KvpolicyOffloadingConnector", "kvpolicy.vllm"
        cfg.connector_extra = {"kvpolicy_forecast_front_cache": FORECAST, "kvpolicy_store_admission": ADMISSION}
    replay = Replay(cfg, record_accesses=accesses)
    replay.run(reqs)
    return replay


def replay_cell(reqs, trace_block: int, cpu_chunks: int, speedup: float):
    """One cell: vLLM's LRU run, kvpolicy's (POLICY) run and the Belady bound
    of the LRU run's CPU-tier accesses, as (lru result, kvpolicy result, bound)."""
    lru = run(reqs, trace_block, False, accesses=True, **shape(reqs, cpu_chunks, speedup))
    kv = run(reqs, trace_block, True, **shape(reqs, cpu_chunks, speedup))
    return lru.result, kv.result, belady_hits(lru.accesses, cpu_chunks)


def gap_closed(lru_hits: int, hits: int, bound: int):
    """The share of the LRU -> Belady gap that `hits` closes; None without a gap."""
    return None if bound <= lru_hits else (hits - lru_hits) / (bound - lru_hits)


def calibrate(reqs, trace_block: int, cpu_chunks: int, target: float, iterations: int) -> float:
    """The speed-up whose LRU run has the median queue nearest ``target``
    (geometric bisection: the queue grows with the arrival rate)."""
    lo, hi = 0.25, 4096.0
    best = (float("inf"), 1.0)
    for _ in range(iterations):
        mid = (lo * hi) ** 0.5
        q = statistics.median(run(reqs, trace_block, False, **shape(reqs, cpu_chunks, mid)).result.queue_depths)
        best = min(best, (abs(q - target), mid))
        if q < target:
            lo = mid
        else:
            hi = mid
    return best[1]


POLICY = "queue_aware_adaptive_kv"  # --policy
FORECAST = False  # --forecast: the queue hears only the chunks past the GPU prefix cache's forecast hit
ADMISSION = False  # --store-admission: a store is cut at the first chunk the policy would evict next itself


def main(argv=None) -> int:
    global POLICY, FORECAST, ADMISSION, OUTPUTS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/vllm-replay")
    p.add_argument("--traces", default=",".join(TRACE_SET))
    p.add_argument("--queues", default="8,32,128")
    p.add_argument("--fractions", default="0.01,0.05,0.10")
    p.add_argument("--requests", type=int, default=None, help="requests replayed per trace (default: per trace)")
    p.add_argument("--iterations", type=int, default=10, help="calibration runs per load")
    p.add_argument("--sim", default="build/tools/kvpolicy-sim",
                   help="kvpolicy-sim, for its offload mode beside vLLM; '' leaves the simulator out")
    p.add_argument("--policy", default=POLICY, help="the kvpolicy policy behind kvpolicy's connector")
    p.add_argument("--forecast", action="store_true",
                   help="kvpolicy's connector tells the queue only the chunks of a request past the GPU prefix "
                        "cache's forecast hit (kv_connector_extra_config kvpolicy_forecast_front_cache)")
    p.add_argument("--store-admission", action="store_true",
                   help="kvpolicy's connector stores past the CPU tier's free room only what the policy does not "
                        "rank its own next victim (kv_connector_extra_config kvpolicy_store_admission)")
    p.add_argument("--outputs", choices=("capped", "scaled"), default="capped",
                   help="each request decodes at most 16 tokens (capped), or its trace's output_length scaled as "
                        "its prompt is, one vLLM block per trace block (scaled)")
    a = p.parse_args(argv)
    POLICY, FORECAST, ADMISSION = a.policy, a.forecast, a.store_admission
    OUTPUTS = a.outputs
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.traces.split(","):
        path, trace_block, limit = TRACE_SET[name]
        reqs = read_trace(str(path), a.requests or limit, derive_block=trace_block)
        distinct = len({h for r in reqs for h in r.hash_ids})
        head = tempfile.NamedTemporaryFile("w", suffix=".jsonl", prefix=f"kvpolicy-{name}-", delete=False)
        with head, (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
            for _, line in zip(range(len(reqs)), f):
                head.write(line)
        for target in (float(q) for q in a.queues.split(",")):
            speedup = calibrate(reqs, trace_block, max(1, int(0.05 * distinct)), target, a.iterations)
            for fraction in (float(f) for f in a.fractions.split(",")):
                cpu = max(1, int(fraction * distinct))
                t0 = time.time()
                l, q, bound = replay_cell(reqs, trace_block, cpu, speedup)
                row = {
                    "trace": name, "policy": POLICY, "front_cache_forecast": FORECAST, "outputs": a.outputs,
                    "requests": len(reqs), "distinct_blocks": distinct, "cpu_fraction": fraction,
                    "cpu_chunks": cpu, "queue_target": target, "speedup": round(speedup, 3),
                    "queue_median_lru": statistics.median(l.queue_depths),
                    "queue_median_kvpolicy": statistics.median(q.queue_depths),
                    "hits_lru": l.cpu_chunks_loaded, "hits_kvpolicy": q.cpu_chunks_loaded, "hits_belady": bound,
                    "lookups_lru": l.cpu_lookups, "lookups_kvpolicy": q.cpu_lookups,
                    "gap_closed": gap_closed(l.cpu_chunks_loaded, q.cpu_chunks_loaded, bound),
                    "prefill_lru": l.prefill_tokens_computed, "prefill_kvpolicy": q.prefill_tokens_computed,
                    "rejected": l.rejected,
                    "hit_ratio_lru": 1 - l.prefill_tokens_computed / l.prompt_tokens,
                    "hit_ratio_kvpolicy": 1 - q.prefill_tokens_computed / q.prompt_tokens,
                    "scheduler_ms_per_step": 1e3 * q.scheduler_s / max(q.steps, 1),
                    "policy_ms_per_step": 1e3 * q.policy_s / max(q.steps, 1),
                    "lru_policy_ms_per_step": 1e3 * l.policy_s / max(l.steps, 1),
                    **q.net_of_timer(),
                    **{"lru_" + k: v for k, v in l.net_of_timer().items()},
                    "seconds": round(time.time() - t0, 1),
                }
                if a.sim:  # the simulator beside (--sim '': none)
                    gpu = shape(reqs, cpu, speedup)["gpu_blocks"]
                    rate, _ = serve_rate(a.sim, head.name, trace_block, gpu, cpu, 30, row["queue_median_lru"])
                    sim = simulate(a.sim, head.name, trace_block, gpu, cpu, rate, ["lru", POLICY, "belady"])
                    s_lru, s_q, s_opt = sim["lru"], sim[POLICY], sim["belady"]
                    row.update({
                        "sim_serve_rate": rate, "sim_queue_median": s_lru["queue_depth_p50"],
                        "sim_hits_lru": s_lru["cpu_hits"], "sim_hits_kvpolicy": s_q["cpu_hits"],
                        "sim_hits_belady": s_opt["cpu_hits"],
                        "sim_gap_closed": gap_closed(s_lru["cpu_hits"], s_q["cpu_hits"], s_opt["cpu_hits"]),
                        "sim_hit_ratio_lru": s_lru["token_hit_ratio"], "sim_hit_ratio_kvpolicy": s_q["token_hit_ratio"],
                        "sim_gpu_hits": s_lru["gpu_hits"], "sim_requests_refused": s_lru["bypassed_requests"],
                    })
                rows.append(row)
                print(json.dumps(row), flush=True)
                (out / "cells.json").write_text(json.dumps(rows, indent=1))
        os.unlink(head.name)
    (out / "table.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


def markdown(rows) -> str:
    head = ("| trace | CPU tier | queue (LRU / kvpolicy) | CPU hits LRU | kvpolicy | Belady | gap closed "
            "| prefill tokens LRU | kvpolicy | cut | policy / scheduler ms per step | net of the timer |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    sim_head = ("| trace | CPU tier | median queue | token hit ratio LRU: vLLM / sim | kvpolicy: vLLM / sim "
                "| CPU hits LRU: vLLM / sim | kvpolicy: vLLM / sim | Belady: vLLM / sim | gap closed: vLLM / sim |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines, sim_lines = [], []

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    for r in rows:
        cell = f"| {r['trace']} | {100 * r['cpu_fraction']:.0f}% ({r['cpu_chunks']}) "
        cut = 1 - r["prefill_kvpolicy"] / r["prefill_lru"]
        lines.append(
            cell + f"| {r['queue_median_lru']:g} / {r['queue_median_kvpolicy']:g} | {r['hits_lru']} "
            f"| {r['hits_kvpolicy']} | {r['hits_belady']} | {pct(r['gap_closed'])} | {r['prefill_lru']} "
            f"| {r['prefill_kvpolicy']} | {100 * cut:.1f}% "
            f"| {r['policy_ms_per_step']:.3f} / {r['scheduler_ms_per_step']:.3f} "
            f"| {r['policy_net_ms_per_step']:.3f} / {r['scheduler_net_ms_per_step']:.3f} |")
        if "sim_hits_lru" not in r:  # --sim '': no simulator beside
            continue
        sim_lines.append(
            cell + f"| {r['queue_median_lru']:g} | {r['hit_ratio_lru']:.4f} / {r['sim_hit_ratio_lru']:.4f} "
            f"| {r['hit_ratio_kvpolicy']:.4f} / {r['sim_hit_ratio_kvpolicy']:.4f} "
            f"| {r['hits_lru']} / {r['sim_hits_lru']} | {r['hits_kvpolicy']} / {r['sim_hits_kvpolicy']} "
            f"| {r['hits_belady']} / {r['sim_hits_belady']} | {pct(r['gap_closed'])} / {pct(r['sim_gap_closed'])} |")
    sims = "\n\n" + sim_head + "\n".join(sim_lines) if sim_lines else ""
    return head + "\n".join(lines) + sims + "\n"


if __name__ == "__main__":
    pin_hash_seed()  # one draw, the same each time: bench/vllm_replay_cell.py gives the spread over seeds
    sys.exit(main())
