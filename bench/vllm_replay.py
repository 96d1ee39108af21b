"""Replays a KV-cache trace through vLLM's own scheduler with its CPU offloading tier.

What runs is vLLM 0.33's (installed from PyPI, scripts/vllm-venv.sh): its
``Scheduler`` and ``KVCacheManager`` (the GPU prefix cache), the
``OffloadingConnector``'s scheduler side (or kvpolicy's subclass) and
``CPUOffloadingManager`` with the cache policy under test. What is made up,
each the smallest stand-in that lets vLLM's scheduler run without a GPU:

- the model step (``fake_model_output``): every request scheduled this step
  samples one token (``sampled_token_ids``) once its prompt is computed, none
  during a chunked prefill, as vLLM's GPU runner reports;
- the offloading worker (``FakeOffloadingWorker``): every transfer job
  completes at once, stores one step after they are issued (vLLM's worker
  submits a step's stores at the next step's start), loads in the step that
  issues them (``finished_recving`` for an asynchronous load), a flushed store
  at the flush, as ``OffloadingConnectorWorker`` reports them;
- the model's configuration (``MODEL_CONFIG``): OPT-125m's shape, which
  vLLM's ``ModelConfig`` reads and nothing here depends on; no weights;
- the clock: a step takes ``step_ms`` plus ``ms_per_token`` per scheduled
  token, and a request arrives at its trace timestamp divided by ``speedup``;
  kvpolicy's policies read this clock (``kvpolicy.vllm.set_time_ms``), as
  they read the wall clock beside a real model.

Prompts are made from the trace's block hashes: block ``i`` of a request is
``hash_ids[i] + 1`` followed by zeros, so vLLM's chained block hashes are
equal exactly where the trace's prefix hashes are.

Run ``python bench/vllm_replay.py --help``; the test suite drives it
(python/engine_tests/).
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
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, Iterable, List, Optional

# OPT-125m's configuration, what vLLM's ModelConfig reads (no weights are loaded).
MODEL_CONFIG = {
    "architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768, "num_attention_heads": 12,
    "num_hidden_layers": 12, "ffn_dim": 3072, "max_position_embeddings": 2048, "vocab_size": 50272,
    "word_embed_proj_dim": 768, "torch_dtype": "float16", "do_layer_norm_before": True, "bos_token_id": 2,
    "eos_token_id": 2, "pad_token_id": 1, "activation_function": "relu", "enable_bias": True,
}
HF_REPO = "facebook/opt-125m"
MAX_MODEL_LEN = 1 << 20


_MODEL_ROOT: Optional[tempfile.TemporaryDirectory] = None  # one per process, removed when it exits


def default_model_dir() -> str:
    """The process's model folder (write_model_dir), made at first use."""
    global _MODEL_ROOT
    if _MODEL_ROOT is None:
        _MODEL_ROOT = tempfile.TemporaryDirectory(prefix="kvpolicy-model-")
        write_model_dir(_MODEL_ROOT.name)
    return os.path.join(_MODEL_ROOT.name, "opt-125m-config")


def write_model_dir(root: str) -> str:
    """A local model folder holding only ``config.json`` (what ModelConfig
    reads), its positions widened to the longest trace prompt."""
    path = os.path.join(root, "opt-125m-config")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(MODEL_CONFIG, max_position_embeddings=MAX_MODEL_LEN), f)
    return path


def write_hf_cache(hf_home: str) -> None:
    """An offline Hugging Face cache where ``facebook/opt-125m`` resolves to
    MODEL_CONFIG (vLLM's own tests name that model): set ``HF_HOME`` to
    ``hf_home`` and ``HF_HUB_OFFLINE=1``."""
    revision = "0" * 40
    repo = os.path.join(hf_home, "hub", "models--" + HF_REPO.replace("/", "--"))
    os.makedirs(os.path.join(repo, "snapshots", revision), exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(revision)
    with open(os.path.join(repo, "snapshots", revision, "config.json"), "w") as f:
        json.dump(MODEL_CONFIG, f)


@dataclass
class TraceRequest:
    arrival_ms: float
    hash_ids: List[int]
    input_length: int
    output_length: int
    session: Optional[str] = None
    session_end: bool = False  # the session's last request (what a client's session_end hint says)


def read_trace(path: str, limit: Optional[int] = None, derive_block: int = 0) -> List[TraceRequest]:
    """Mooncake-format JSONL (``.gz`` too): ``timestamp`` (ms), ``input_length``,
    ``output_length``, ``hash_ids`` and an optional ``session``. With
    ``derive_block`` (the trace's tokens per block), a trace that names no
    sessions gets the conversations kvpolicy-sim derives
    (``kvpolicy.derive_sessions``): what a chat client knows and sends."""
    opener = gzip.open if path.endswith(".gz") else open
    out: List[TraceRequest] = []
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                out.append(TraceRequest(float(r["timestamp"]), [int(h) for h in r["hash_ids"]],
                                        int(r["input_length"]), int(r["output_length"]),
                                        None if r.get("session") is None else str(r["session"])))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a trace request ({e}); each line is a JSON object with "
                                 "timestamp, input_length, output_length and hash_ids") from None
    if derive_block and all(r.session is None for r in out):
        from kvpolicy import derive_sessions

        ids = derive_sessions([r.hash_ids for r in out], [r.input_length for r in out], derive_block)
        for r, s in zip(out, ids):
            r.session = f"c{s}"
    last = {r.session: r for r in out if r.session is not None}
    for r in last.values():
        r.session_end = True
    return out


def belady_hits(accesses: List[tuple], capacity: int) -> int:
    """Lookup hits of the offline optimum (Belady's MIN, bypass allowed) over
    a CPU tier's access sequence: (0, key) a lookup, a hit if the key is
    held; (1, key) a store offer. The simulator's own bound
    (``kvpolicy/sim/offload_min.hpp``, which kvpolicy-sim reports for policy
    ``belady`` in offload mode), so vLLM's runs and the simulator's are held
    to one definition. A key not held may be admitted at any of its
    references: at a store offer as vLLM's tier does, and at a lookup miss
    too (in vLLM the missed block is computed and offered for storing right
    after, so this only loosens the bound, never tightens it)."""
    import numpy as np

    from kvpolicy._kvpolicy import _offload_min_hits

    ids: Dict[bytes, int] = {}  # each key its own 64-bit id: no two keys share one
    keys = np.fromiter((ids.setdefault(key, len(ids)) for _, key in accesses), dtype=np.uint64, count=len(accesses))
    lookups = np.fromiter((op == 0 for op, _ in accesses), dtype=np.uint8, count=len(accesses))
    return int(_offload_min_hits(lookups, keys, capacity))


def prompt_tokens(req: TraceRequest, block_size: int, trace_block: int) -> List[int]:
    """The prompt whose i-th block stands for ``hash_ids[i]``: one vLLM block
    of ``block_size`` tokens per trace block of ``trace_block`` tokens, the
    last one as full as the trace's is (its input length past the others)."""
    tokens: List[int] = []
    for h in req.hash_ids:
        tokens.append(h + 1)
        tokens.extend([0] * (block_size - 1))
    if req.hash_ids:
        rest = req.input_length - (len(req.hash_ids) - 1) * trace_block
        last = -(-min(max(rest, 1), trace_block) * block_size // trace_block)
        del tokens[len(tokens) - block_size + last:]
    return tokens or [1]


def decode_tokens(req: TraceRequest, cfg: "ReplayConfig") -> int:
    """The tokens ``req`` decodes: its ``output_length``, scaled as its
    prompt is (``block_size / trace_block``, rounded up) where
    ``cfg.scale_outputs``, capped by ``cfg.max_output`` where set; at least 1."""
    out = req.output_length
    if cfg.scale_outputs:
        out = -(-out * cfg.block_size // cfg.trace_block)
    return max(1, out if cfg.max_output is None else min(out, cfg.max_output))


class FakeOffloadingWorker:
    """The worker side, reduced to when transfer jobs complete (see the
    module's docstring). ``step(meta)`` returns the worker's report for the
    step: (completed job ids, requests whose asynchronous loads completed)."""

    def __init__(self):
        self._stores_next: List[int] = []

    def step(self, meta) -> tuple:
        completed = list(self._stores_next)
        self._stores_next = []
        flush = set(meta.jobs_to_flush or ())
        recving = set()
        for job_id, job in meta.load_jobs.items():
            completed.append(job_id)
            if not job.sync:
                recving.add(job.req_id)
        for job_id in meta.store_jobs:
            (completed if job_id in flush else self._stores_next).append(job_id)
        return completed, recving


@dataclass
class ReplayConfig:
    policy: str = "lru"  # vLLM's eviction_policy name
    policy_module: Optional[str] = None  # cache_policy_module_path ("kvpolicy.vllm" for kvpolicy's)
    connector: str = "OffloadingConnector"
    connector_module: Optional[str] = None  # "kvpolicy.vllm" for KvpolicyOffloadingConnector
    block_size: int = 16
    trace_block: int = 512  # tokens per block of the trace (Mooncake: 512; agentic: 64)
    gpu_blocks: int = 1024
    cpu_chunks: int = 256
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    max_output: Optional[int] = None  # cap on each request's decode tokens
    # Each request decodes its output_length scaled as its prompt is (one
    # vLLM block of block_size tokens per trace block of trace_block), then
    # capped by max_output if set; False: output_length as the trace gives it.
    scale_outputs: bool = False
    step_ms: float = 5.0
    ms_per_token: float = 0.01
    speedup: float = 1.0
    model_dir: Optional[str] = None
    connector_extra: Dict[str, Any] = field(default_factory=dict)  # more kv_connector_extra_config


@dataclass
class ReplayResult:
    requests: int = 0
    rejected: int = 0  # longer than the GPU's KV cache (max_model_len): refused, as vLLM's front end does
    steps: int = 0
    prompt_tokens: int = 0
    prefill_tokens_computed: int = 0
    cpu_chunks_loaded: int = 0
    cpu_lookups: int = 0
    preemptions: int = 0
    queue_depths: List[int] = field(default_factory=list)
    scheduler_s: float = 0.0
    policy_s: float = 0.0
    policy_calls: int = 0  # the timed calls (_time_policy)
    policy_by_call: Dict[str, List[float]] = field(default_factory=dict)  # name -> [seconds, calls]
    step_log: List[Any] = field(default_factory=list)

    def summary(self) -> Dict[str, Any]:
        q = sorted(self.queue_depths) or [0]
        return {
            "requests": self.requests, "rejected": self.rejected, "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens_computed": self.prefill_tokens_computed, "cpu_chunks_loaded": self.cpu_chunks_loaded,
            "cpu_lookups": self.cpu_lookups,
            "preemptions": self.preemptions, "queue_median": statistics.median(q), "queue_max": q[-1],
            "scheduler_ms_per_step": 1e3 * self.scheduler_s / max(self.steps, 1),
            "policy_ms_per_step": 1e3 * self.policy_s / max(self.steps, 1),
            **self.net_of_timer(),
        }

    def net_of_timer(self) -> Dict[str, float]:
        """The policy's and the scheduler's time per step less what the
        timing wrapper itself costs (timer_cost: a wrapped no-op timed in
        this process), so that a policy's share is not the instrument's."""
        inside, whole = timer_cost()
        steps = max(self.steps, 1)
        return {
            "policy_net_ms_per_step": 1e3 * max(0.0, self.policy_s - self.policy_calls * inside) / steps,
            "scheduler_net_ms_per_step": 1e3 * max(0.0, self.scheduler_s - self.policy_calls * whole) / steps,
        }

    def policy_ms_by_call(self) -> Dict[str, Dict[str, float]]:
        """Where the policy's time goes: per wrapped call, its calls and its
        time per step and per call (microseconds), net of the timer, the
        costliest first."""
        inside, _ = timer_cost()
        steps = max(self.steps, 1)
        rows = {name: {"calls": int(n), "ms_per_step": 1e3 * max(0.0, s - n * inside) / steps,
                       "us_per_call": 1e6 * max(0.0, s / n - inside)}
                for name, (s, n) in self.policy_by_call.items() if n}
        return dict(sorted(rows.items(), key=lambda kv: -kv[1]["ms_per_step"]))


def _vllm() -> SimpleNamespace:
    """vLLM's classes the replay builds, imported when a replay starts
    (not at import: the Hugging Face environment must be set first)."""
    import torch
    from vllm import SamplingParams
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from vllm.v1.kv_offload.base import make_offload_key
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    return SimpleNamespace(
        torch=torch, SamplingParams=SamplingParams, CacheConfig=CacheConfig, DeviceConfig=DeviceConfig,
        KVTransferConfig=KVTransferConfig, ModelConfig=ModelConfig, SchedulerConfig=SchedulerConfig,
        VllmConfig=VllmConfig, OffloadingWorkerMetadata=OffloadingWorkerMetadata, sha256=sha256,
        get_request_block_hasher=get_request_block_hasher, init_none_hash=init_none_hash, Scheduler=Scheduler,
        FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec,
        KVCacheTensor=KVCacheTensor, CPUOffloadingSpec=CPUOffloadingSpec, make_offload_key=make_offload_key,
        KVConnectorOutput=KVConnectorOutput,
        ModelRunnerOutput=ModelRunnerOutput, Request=Request, StructuredOutputManager=StructuredOutputManager)


class Replay:
    """One scheduler, its connector and CPU tier, over one trace."""

    def __init__(self, cfg: ReplayConfig, record_steps: bool = False, record_accesses: bool = False):
        v = _vllm()
        self.v, self.cfg, self.record_steps, self.record_accesses = v, cfg, record_steps, record_accesses
        self.accesses: List[tuple] = []  # the CPU tier's (0 lookup | 1 store, key), in order
        model_dir = cfg.model_dir or default_model_dir()
        self.max_model_len = cfg.gpu_blocks * cfg.block_size
        spec = v.FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=1, dtype=v.torch.float32)
        chunk_bytes = spec.page_size_bytes
        align = v.CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
        aligned = -(-chunk_bytes // align) * align
        extra = {"cpu_bytes_to_use": cfg.cpu_chunks * aligned, "eviction_policy": cfg.policy}
        if cfg.policy_module:
            extra["cache_policy_module_path"] = cfg.policy_module
        extra.update(cfg.connector_extra)
        vllm_config = v.VllmConfig(
            model_config=v.ModelConfig(model=model_dir, dtype="float16", seed=0, skip_tokenizer_init=True,
                                          max_model_len=self.max_model_len),
            scheduler_config=v.SchedulerConfig(max_num_seqs=cfg.max_num_seqs,
                                                  max_num_batched_tokens=cfg.max_num_batched_tokens,
                                                  max_model_len=self.max_model_len, enable_chunked_prefill=True,
                                                  is_encoder_decoder=False),
            cache_config=v.CacheConfig(block_size=cfg.block_size, gpu_memory_utilization=0.9,
                                          enable_prefix_caching=True),
            kv_transfer_config=v.KVTransferConfig(kv_connector=cfg.connector,
                                                     kv_connector_module_path=cfg.connector_module,
                                                     kv_role="kv_both", kv_connector_extra_config=extra),
            device_config=v.DeviceConfig("cpu"),
        )
        vllm_config.cache_config.num_gpu_blocks = cfg.gpu_blocks
        kv_cache_config = v.KVCacheConfig(
            num_blocks=cfg.gpu_blocks,
            kv_cache_tensors=[v.KVCacheTensor(size=chunk_bytes * cfg.gpu_blocks, layers=["layer"],
                                                 layer_stride=chunk_bytes * cfg.gpu_blocks,
                                                 block_stride=chunk_bytes)],
            kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)],
        )
        self.scheduler = v.Scheduler(
            vllm_config=vllm_config, kv_cache_config=kv_cache_config, log_stats=True,
            structured_output_manager=v.StructuredOutputManager(vllm_config), block_size=cfg.block_size)
        self.connector = self.scheduler.connector
        self.manager = self.connector.connector_scheduler.manager
        self.worker = FakeOffloadingWorker()
        v.init_none_hash(v.sha256)
        self._hasher = v.get_request_block_hasher(cfg.block_size, v.sha256)
        self.result = ReplayResult()
        self._tier_log: List[tuple] = []
        _time_policy(self.manager, self.connector, self.result)
        self._watch_tier()

    def _watch_tier(self) -> None:
        """Counts the CPU tier's loads, and logs its loads, stores and
        evictions (the tier's decisions, for comparing runs)."""
        manager, res = self.manager, self.result
        prepare_load, prepare_store = manager.prepare_load, manager.prepare_store

        def load(keys, req_context):
            keys = list(keys)
            res.cpu_chunks_loaded += len(keys)
            if self.record_steps:
                self._tier_log.append(("load", req_context.req_id, tuple(bytes(k) for k in keys)))
            return prepare_load(keys, req_context)

        def store(keys, req_context):
            out = prepare_store(keys, req_context)
            if self.record_steps:
                self._tier_log.append(("store", req_context.req_id, tuple(bytes(k) for k in keys),
                            None if out is None else (tuple(bytes(k) for k in out.keys_to_store),
                                                      tuple(bytes(k) for k in out.evicted_keys))))
            return out

        lookup = manager.lookup

        # A waiting request is looked up again at every step the scheduler
        # tries it; what counts is the lookup of the attempt that got it
        # its blocks (update_state_after_alloc), once.
        pending: Dict[str, List[tuple]] = {}
        connector = self.connector
        matched, allocated = connector.get_num_new_matched_tokens, connector.update_state_after_alloc

        def match(request, *a, **k):
            pending[request.request_id] = []
            return matched(request, *a, **k)

        def alloc(request, *a, **k):
            looked = pending.pop(request.request_id, [])
            if looked:
                reads = self._cpu_reads(request, looked[0][1])
                res.cpu_lookups += len(reads)
                if self.record_accesses:
                    self.accesses.extend((0, key) for key in reads)
            return allocated(request, *a, **k)

        def look(key, req_context):
            result = lookup(key, req_context)
            pending.setdefault(req_context.req_id, []).append((0, bytes(key)))
            return result

        connector.get_num_new_matched_tokens, connector.update_state_after_alloc = match, alloc

        def store_recorded(keys, req_context):
            out = store(keys, req_context)
            if self.record_accesses and out is not None:
                self.accesses.extend((1, bytes(k)) for k in out.keys_to_store)
            return out

        manager.prepare_load, manager.prepare_store, manager.lookup = load, store_recorded, look

    def _cpu_reads(self, request, first: bytes) -> List[bytes]:
        """What a request scheduled now could read from the CPU tier: its
        prompt's chunks from the first one vLLM looked up (the end of its
        GPU hit) on, whether or not each is there. vLLM's own lookup stops
        at the first miss; this does not, so every policy's run reads the
        same sequence (the Belady bound's input)."""
        from kvpolicy.vllm._connector import offload_keys

        scheduler = self.connector.connector_scheduler
        groups = scheduler.config.kv_group_configs
        keys = [bytes(k) for k in offload_keys(request.block_hashes, groups, self.v.make_offload_key)]
        prompt_chunks = request.num_prompt_tokens // groups[0].tokens_per_chunk
        start = keys.index(first) if first in keys else len(keys)
        return keys[start:max(start, prompt_chunks)]

    def add(self, rid: str, req: TraceRequest) -> bool:
        """Adds the request to the scheduler; False where it is refused (too long)."""
        v, cfg = self.v, self.cfg
        tokens = prompt_tokens(req, cfg.block_size, cfg.trace_block)
        out = decode_tokens(req, cfg)
        if len(tokens) + out > self.max_model_len:
            # vLLM's front end refuses it (max_model_len: what the GPU's KV
            # cache holds); it never reaches the scheduler.
            self.result.rejected += 1
            return False
        params = v.SamplingParams(max_tokens=out, ignore_eos=True)
        kv_params = None
        if req.session is not None:
            kv_params = {"kvpolicy": {"session": req.session, "session_end": req.session_end}}
        request = v.Request(request_id=rid, prompt_token_ids=tokens, sampling_params=params,
                               pooling_params=None, block_hasher=self._hasher)
        if kv_params is not None:
            request.kv_transfer_params = kv_params
        self.result.requests += 1
        self.result.prompt_tokens += len(tokens)
        self.scheduler.add_request(request)
        return True

    def abort(self, rid: str) -> None:
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)

    def step(self) -> float:
        """One engine step; returns the fake model's time for it (ms)."""
        v, res = self.v, self.result
        t0 = time.perf_counter()
        out = self.scheduler.schedule()
        t1 = time.perf_counter()
        res.steps += 1
        res.preemptions += len(out.preempted_req_ids or ())
        tokens = 0
        sampled: List[List[int]] = []
        req_ids: List[str] = []
        for rid, n in out.num_scheduled_tokens.items():
            request = self.scheduler.requests[rid]
            before = request.num_computed_tokens - n
            prompt = request.num_prompt_tokens
            res.prefill_tokens_computed += max(0, min(prompt, before + n) - min(prompt, before))
            tokens += n
            req_ids.append(rid)
            sampled.append([1] if request.num_computed_tokens >= prompt else [])
        meta = out.kv_connector_metadata
        completed, recving = self.worker.step(meta)
        worker_meta = v.OffloadingWorkerMetadata(completed_jobs={j: 1 for j in completed})
        output = v.ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled,
            logprobs=None, prompt_logprobs_dict={}, pooler_output=None,
            kv_connector_output=v.KVConnectorOutput(finished_sending=set(), finished_recving=recving,
                                                       kv_connector_worker_meta=worker_meta))
        t2 = time.perf_counter()
        self.scheduler.update_from_output(out, output)
        t3 = time.perf_counter()
        res.scheduler_s += (t1 - t0) + (t3 - t2)
        res.queue_depths.append(len(self.scheduler.waiting) + len(getattr(self.scheduler, "skipped_waiting", ())))
        if self.record_steps:
            res.step_log.append(_step_record(out, meta, self._tier_log))
            self._tier_log = []
        return self.cfg.step_ms + self.cfg.ms_per_token * tokens

    def busy(self) -> bool:
        s = self.scheduler
        return bool(s.requests) or bool(s.finished_req_ids) or bool(self.connector.connector_scheduler._jobs)

    def run(self, trace: Iterable[TraceRequest]) -> ReplayResult:
        """Requests arrive at their timestamps (divided by ``speedup``) on the
        fake model's clock; runs until every request ended and every
        transfer completed."""
        reqs = list(trace)
        t0 = reqs[0].arrival_ms if reqs else 0.0
        now, i = 0.0, 0
        # kvpolicy's policies read the fake model's clock, as they would read
        # the wall clock beside a real model: how fast this replay runs is
        # no time of theirs.
        set_time = self._kvpolicy_clock()
        try:
            while i < len(reqs) or self.busy():
                set_time(int(now))
                while i < len(reqs) and (reqs[i].arrival_ms - t0) / self.cfg.speedup <= now:
                    self.add(str(i), reqs[i])
                    i += 1
                if not self.busy():
                    now = (reqs[i].arrival_ms - t0) / self.cfg.speedup
                    continue
                now += self.step()
        finally:
            set_time(None)
        return self.result

    def _kvpolicy_clock(self):
        """kvpolicy.vllm.set_time_ms where kvpolicy's module is loaded, else
        a call that does nothing."""
        if "kvpolicy.vllm" not in (self.cfg.policy_module, self.cfg.connector_module):
            return lambda ms: None
        from kvpolicy.vllm import set_time_ms

        return set_time_ms


def _step_record(out, meta, tier_log) -> tuple:
    """A step's decisions, comparable across runs: who ran how far, the
    transfer jobs, and the CPU tier's loads, stores and evictions."""
    return (
        tuple(sorted(out.num_scheduled_tokens.items())),
        tuple(sorted(out.preempted_req_ids or ())),
        tuple(sorted((j, t.req_id, t.sync) for j, t in meta.load_jobs.items())),
        tuple(sorted((j, t.req_id) for j, t in meta.store_jobs.items())),
        tuple(sorted(meta.jobs_to_flush or ())),
        tuple(tier_log),
    )


_TIMER_COST: Optional[tuple] = None


def timer_cost(calls: int = 200_000) -> tuple:
    """What _time_policy's wrapper costs per call, measured once per process
    on a no-op: (the time it adds to policy_s, the time it adds to the
    caller), in seconds. The first is what a timed interval holds beyond
    the call itself (the clock's reads, the forwarding of the arguments);
    the second the whole wrapper less a plain call.

    The no-op is a builtin (an empty dict's ``get``), as most wrapped calls
    are: vLLM's dict lookups (``get``, millions in a replay). The call
    itself stays the policy's, as vLLM pays for it unwrapped too: the first
    figure is the no-op's timed interval less a plain call of it (less the
    loop's own cost). Taking a whole Python no-op's interval off each
    ``get`` took off more than the ``get`` cost, and the agentic 1% cell's
    net went to zero."""
    global _TIMER_COST
    if _TIMER_COST is None:
        res = ReplayResult()  # the same bookkeeping as _time_policy's wrapper
        noop = {}.get

        tally = res.policy_by_call.setdefault("noop", [0.0, 0])

        def timed(*a, _fn=noop, _tally=tally, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                d = time.perf_counter() - t
                res.policy_s += d
                res.policy_calls += 1
                _tally[0] += d
                _tally[1] += 1

        t0 = time.perf_counter()
        for _ in range(calls):
            timed(1)
        wrapped = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(calls):
            noop(1)
        plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(calls):
            pass
        loop = time.perf_counter() - t0
        call = max(0.0, plain - loop) / calls
        _TIMER_COST = (max(0.0, res.policy_s / calls - call), max(0.0, (wrapped - plain) / calls))
    return _TIMER_COST


def pin_hash_seed() -> None:
    """Re-executes this program with ``PYTHONHASHSEED=0`` where the variable
    is unset, so that a replay reproduces: vLLM's offloading connector tells
    the policy of the requests that finished in one step by iterating a set
    of request-id strings (``scheduler_output.finished_req_ids``), whose
    order follows the process's string hash seed, random per process by
    default; that order changes what a policy keeps (bench/vllm_replay_cell.py
    replays a cell over several seeds)."""
    if "PYTHONHASHSEED" not in os.environ:
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})


def _time_policy(manager, connector, result: ReplayResult):
    """Wraps the cache policy's methods (and the connector's queue relay) to
    add their time to ``result.policy_s``."""
    policy = getattr(manager, "_policy", None)
    targets = []
    if policy is not None:
        targets.append((policy, ("get", "insert", "remove", "touch", "on_store_miss", "on_request_access",
                                 "on_request_finished", "evict", "mark_evictable", "mark_non_evictable", "admitted")))
    relay = getattr(connector, "queue_relay", None)
    if relay is not None:
        targets.append((relay, ("arrived", "step", "finished")))
    for obj, names in targets:
        for name in names:
            fn = getattr(obj, name, None)
            if fn is None:
                continue

            tally = result.policy_by_call.setdefault(name, [0.0, 0])

            def timed(*a, _fn=fn, _tally=tally, **k):
                t = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    d = time.perf_counter() - t
                    result.policy_s += d
                    result.policy_calls += 1
                    _tally[0] += d
                    _tally[1] += 1

            setattr(obj, name, timed)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--limit", type=int, default=None, help="first N requests")
    p.add_argument("--policy", default="lru")
    p.add_argument("--kvpolicy", action="store_true", help="kvpolicy's connector and policy module")
    for f in ("block_size", "trace_block", "gpu_blocks", "cpu_chunks", "max_num_seqs", "max_num_batched_tokens",
              "max_output"):
        p.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(ReplayConfig, f))
    for f in ("step_ms", "ms_per_token", "speedup"):
        p.add_argument("--" + f.replace("_", "-"), type=float, default=getattr(ReplayConfig, f))
    a = p.parse_args(argv)
    cfg = ReplayConfig(policy=a.policy, block_size=a.block_size, trace_block=a.trace_block, gpu_blocks=a.gpu_blocks,
                       cpu_chunks=a.cpu_chunks,
                       max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_num_batched_tokens,
                       max_output=a.max_output, step_ms=a.step_ms, ms_per_token=a.ms_per_token, speedup=a.speedup)
    if a.kvpolicy:
        cfg.policy_module = cfg.connector_module = "kvpolicy.vllm"
        cfg.connector = "KvpolicyOffloadingConnector"
    res = Replay(cfg).run(read_trace(a.trace, a.limit))
    json.dump(res.summary(), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    pin_hash_seed()
    sys.exit(main())
