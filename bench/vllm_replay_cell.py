#!/usr/bin/env python3
"""One cell of bench/vllm_replay_study.py, kvpolicy's connector and policy in
vLLM's own scheduler, replayed once per memory layout: before each replay
the process allocates N Python objects (``--layouts``), nothing else
changed. vLLM's scheduler orders something by object address, so a cell's
CPU hits can differ between layouts (docs/getting-started/vllm.md, "One run
is one draw of vLLM's schedule"); each line gives one layout's figures, the
policy's time net of the timer beside the scheduler's.

    build/vllm-venv/bin/python bench/vllm_replay_cell.py agentic 0.05 26.727 --layouts 0,1000,20000

Arguments: the trace (bench/offload_policy_study.py's TRACE_SET names), the
CPU tier as a fraction of the trace's distinct blocks, and the arrival
speed-up (vllm_replay_study's calibration; 26.727, 24.542 and 32.612 give
agentic, conversation and synthetic a median queue of about 32).
"""

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(trace: str, fraction: float, speedup: float, policy: str, allocate: int) -> str:
    sys.path.insert(0, str(HERE))
    import offload_policy_study as study_set
    import vllm_replay as replay
    import vllm_replay_study as study

    study.POLICY = policy
    path, trace_block, limit = study_set.TRACE_SET[trace]
    reqs = replay.read_trace(str(path), limit, derive_block=trace_block)
    cpu = max(1, int(fraction * len({h for r in reqs for h in r.hash_ids})))
    layout = [object() for _ in range(allocate)]  # noqa: F841: held for the replay, moving what it allocates
    r = study.run(reqs, trace_block, True, **study.shape(reqs, cpu, speedup)).result
    net = r.net_of_timer()
    return (f"{trace} {fraction:g} layout {allocate}: steps {r.steps} cpu_hits {r.cpu_chunks_loaded} "
            f"policy_net_ms {net['policy_net_ms_per_step']:.3f} scheduler_net_ms {net['scheduler_net_ms_per_step']:.3f} "
            f"share {net['policy_net_ms_per_step'] / max(net['scheduler_net_ms_per_step'], 1e-9):.1%}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("fraction", type=float)
    p.add_argument("speedup", type=float)
    p.add_argument("--policy", default="queue_aware_predicted_return")
    p.add_argument("--layouts", default="0,1000", help="objects allocated before each replay, comma-separated")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a child process: one layout
    a = p.parse_args()
    if a.one is not None:
        print(one(a.trace, a.fraction, a.speedup, a.policy, a.one))
        return 0
    for n in (int(x) for x in a.layouts.split(",")):  # each in a fresh process, as a real run is
        out = subprocess.run([sys.executable, __file__, a.trace, str(a.fraction), str(a.speedup), "--policy",
                              a.policy, "--one", str(n)], capture_output=True, text=True, check=True)
        print(out.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
