"""kvpolicy from Python: eviction policies, the tiered cache, the simulator.

Built from kvpolicy's C++ headers with nanobind: every call runs the same C++
code a C++ engine would. Errors are ``kvpolicy.Error`` subclasses carrying
the C++ message: ``ConfigError`` (also a ``ValueError``; ``UnknownNameError``
is also a ``LookupError``), ``UsageError`` (a ``ValueError``: a NaN score, a
double release, a malformed hash chain), ``CapacityError`` (a
``RuntimeError``: more blocks than are free or evictable) and ``ParseError``.

``kvpolicy.vllm.OffloadingManager`` is a drop-in for vLLM V1's
scheduler-side OffloadingManager. ``TieredCache(..., remote={...})`` adds
the remote tier (Redis) where the package was built with it (``HAS_REDIS``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Union

from ._kvpolicy import (
    HAS_REDIS,
    CapacityError,
    ConfigError,
    NEVER,
    Error,
    EvictionPolicy,
    ParseError,
    TieredCache,
    UnknownNameError,
    UsageError,
    VictimBatchSelector,
    _RunOptions,
    _simulate_json,
    block_digests,
    derive_sessions,
    digest_handles,
    policies,
    policy_options,
    select_victims,
)

__all__ = [
    "ADAPTER_PREFIX",
    "HAS_REDIS",
    "CapacityError",
    "ConfigError",
    "Error",
    "EvictionPolicy",
    "NEVER",
    "ParseError",
    "TieredCache",
    "UnknownNameError",
    "UsageError",
    "VictimBatchSelector",
    "block_digests",
    "derive_sessions",
    "digest_handles",
    "policies",
    "policy_name",
    "policy_options",
    "select_victims",
    "simulate",
]

#: What an engine adapter may put before a kvpolicy policy's name where the
#: engine has names of its own (vLLM's ``eviction_policy``, LMCache's
#: ``cache_policy``, SGLang's ``--radix-eviction-policy``).
ADAPTER_PREFIX = "kvpolicy_"


def policy_name(name: str) -> str:
    """The registered name an adapter's ``name`` stands for: every adapter
    (vLLM, LMCache, SGLang) takes a policy as ``s3fifo`` or
    ``kvpolicy_s3fifo`` alike."""
    return name[len(ADAPTER_PREFIX):] if name.startswith(ADAPTER_PREFIX) else name


def simulate(
    trace: Optional[str] = None,
    mode: Optional[str] = None,
    policies: Union[str, Sequence[str]] = ("lru",),
    capacities: Union[int, str, Sequence[Union[int, str]]] = (1000,),
    *,
    format: Optional[str] = None,
    cpu_capacity: int = 0,
    cpu_policy: str = "lru",
    block_size: int = 16,
    layers: int = 1,
    seed: int = 1,
    threads: int = 0,
    skip_bad_lines: bool = False,
    return_hints: Optional[str] = None,
    bounds: bool = False,
    lookahead: int = 0,
    serve_rate: float = 0.0,
    prefill_chunk: int = 0,
    queue_past_gpu: bool = False,
    store_admission: bool = False,
    policy_options: Optional[Dict[str, Dict[str, float]]] = None,
    match_lru: bool = False,
    instances: int = 1,
    remote_capacity: int = 0,
    as_frame: bool = False,
    **options: Any,
) -> Union[List[Dict[str, Any]], "pandas.DataFrame"]:  # noqa: F821
    """Replays a trace (or the built-in chat workload) as ``kvpolicy-sim`` does.

    Returns one dict per (policy, capacity), capacities outer, with exactly the
    fields of ``kvpolicy-sim --output json`` (the simulator's own JSON writer
    makes them); ``as_frame=True`` returns a ``pandas.DataFrame`` of the same
    rows instead (pandas is needed only then).

    capacities: blocks (the GPU tier's in tiered mode), or ``"P%"`` of the
    trace's distinct blocks, as ``--capacity`` takes them: ``1000``,
    ``[500, "5%"]`` or ``"1%,5%"``.

    trace: Mooncake JSONL (``.jsonl``, ``.jsonl.gz``) or a block CSV; None for
    the built-in workload. mode: ``flat``, ``prefix``, ``tiered`` or
    ``offload`` (vLLM's CPU offloading tier behind its GPU prefix cache, the
    policy deciding the CPU tier's victims; default: prefix, flat for a CSV).
    policies: names, or ``"all"``. options: prefill cost (``alpha``, ``beta``, ``const``, ``bandwidth`` in GB/s,
    ``remote_bandwidth`` in GB/s, ``kv_bytes_per_token``) and the built-in workload's ``sessions``,
    ``session_rate``, ``turns``, ``prompt_tokens``, ``answer_tokens``,
    ``think_time``, ``system_prompt_tokens``, ``system_prompts``.
    return_hints: ``kvpolicy-sim --return-hints``: ``"ends"``, ``"oracle"`` or
    ``"oracle:SIGMA"``, releases that say when each session comes back, read
    from the trace's future, or ``"file:PATH"``, your own predictor's, one line
    per request (what an engine's ``TieredCache.release(...,
    expected_return=...)`` hints are worth); None: no hints.
    bounds: ``kvpolicy-sim --bounds``: also run ``lru`` and ``belady`` where
    ``policies`` leaves them out, for ``gap_closed`` (their rows come back
    too); otherwise only the policies given run.
    lookahead, serve_rate: the waiting queue (``--lookahead``,
    ``--serve-rate``); prefill_chunk: offload mode's tokens per engine step
    (``--prefill-chunk``); queue_past_gpu: offload mode's queue told past the
    GPU hit forecast for each request (``--queue-past-gpu``); store_admission:
    offload mode's CPU tier storing past its free room only what the policy
    does not rank its own next victim (``--store-admission``).
    policy_options: ``{policy: {option: value}}``, options of the compared
    policies (``--option POLICY.NAME=VALUE``; ``policy_options(name)`` lists
    them); the others run at their defaults.
    match_lru: ``--match-lru``, each row's ``lru_match_capacity`` (the least
    capacity reaching LRU's hit ratio); instances, remote_capacity:
    ``--instances`` and ``--remote-capacity`` (tiered mode: serving
    instances routed by session, and the remote store they share).
    The GIL is released while the runs go, in ``threads`` threads (0: all cores).
    A bad argument raises ``ConfigError`` in the simulator's own words, which
    name its flags: argument ``cpu_capacity`` is ``--cpu-capacity``, and so on.
    """
    if isinstance(policies, str):
        policies = policies.split(",")
    if isinstance(capacities, (int, str)):
        capacities = [capacities]
    o = _RunOptions()
    fields = dict(
        trace="" if trace is None else str(trace), policies=list(policies), cpu_capacity=cpu_capacity,
        cpu_policy=cpu_policy, block_size=block_size, layers=layers, seed=seed, threads=threads,
        skip_bad_lines=skip_bad_lines, return_hints=return_hints or "", bounds=bounds, lookahead=lookahead,
        serve_rate=serve_rate, prefill_chunk=prefill_chunk, queue_past_gpu=queue_past_gpu,
        store_admission=store_admission, match_lru=match_lru, instances=instances, remote_capacity=remote_capacity,
    )
    for name, value in fields.items():
        setattr(o, name, value)
    o.set_format_and_mode(format or "", mode or "")
    if capacities:
        o.set_capacities(",".join(str(c) for c in capacities))
    for policy, opts in (policy_options or {}).items():
        for name, value in opts.items():
            o.add_policy_option(policy, str(name), float(value))
    for name, value in options.items():
        o.set(name, float(value))
    text = _simulate_json(o)
    rows = [json.loads(line) for line in text.splitlines() if line]
    if as_frame:
        try:
            import pandas
        except ImportError as e:
            raise ImportError("simulate(as_frame=True) needs pandas: pip install pandas") from e
        return pandas.DataFrame(rows)
    return rows
