"""kvpolicy's connector (kvpolicy.vllm.KvpolicyOffloadingConnector) in vLLM 0.33's own scheduler.

Four layers:

1. vLLM's own offloading-connector tests pass with kvpolicy's connector in
   place of vLLM's (tests/peers/kvpolicy_connector_in_vllm.py); the few that
   need a GPU or a model's weights are left out, each named in DESELECTED
   with what covers it here instead.
2. The keys a queued request protects are vLLM's own: the offloading
   scheduler's derivation (``RequestOffloadState.update_offload_keys``)
   gives the same list.
3. The policy hears exactly the waiting queue: random arrivals, aborts,
   preemptions and finishes through vLLM's real ``Scheduler``; after every
   step each request's state in kvpolicy's bookkeeping is vLLM's (waiting
   until scheduled, running, waiting again when preempted, forgotten when it
   ends), and an aborted request leaves nothing behind.
4. Where no policy hears the queue the connector is vLLM's: the same replayed
   trace through vLLM's ``OffloadingConnector`` + LRU and through kvpolicy's
   connector + ``vllm_lru`` makes the same decisions, step for step (every
   schedule, transfer job, CPU-tier store, eviction and load).

Events the bookkeeping cannot use are logged, never raised in the scheduler.
"""

from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_replay import Replay, ReplayConfig, read_trace

from peers.sources import VLLM_0_33_0, extract

PEERS = Path(__file__).resolve().parents[1] / "tests" / "peers"
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
CONVERSATION = TRACES / "mooncake" / "conversation_trace.jsonl"

VLLM_TESTS = ["tests/v1/kv_connector/unit/offloading_connector/",
              "tests/v1/kv_connector/unit/test_offloading_connector.py"]
VLLM_TEST_PASSED = 652  # vLLM 0.33.0's items there, less DESELECTED and the 6 it skips itself without CUDA
DESELECTED = {
    # torch.device("cuda:0") for the worker's packed KV caches (a GPU device).
    "tests/v1/kv_connector/unit/offloading_connector/test_worker.py::test_register_packed_kv_caches_skips_scratch_group":
        "the worker side, not kvpolicy's: the connector's worker role is vLLM's own class, unchanged",
    # vllm.LLM(model="meta-llama/Llama-3.2-1B-Instruct") end to end on a GPU, with the model's weights.
    "tests/v1/kv_connector/unit/test_offloading_connector.py::test_tiering_offloading":
        "test_kvpolicy_connector_runs_vllms_scheduler_as_vllms (the scheduler, connector and CPU tier, real)",
    "tests/v1/kv_connector/unit/test_offloading_connector.py::test_fs_tiering_offloading":
        "test_kvpolicy_connector_runs_vllms_scheduler_as_vllms",
    "tests/v1/kv_connector/unit/test_offloading_connector.py::test_tiering_cache_reset_resumes_promotions_on_idle_engine":
        "test_cache_reset_keeps_the_queue",
}


def kvpolicy_config(policy: str, **kw) -> ReplayConfig:
    return ReplayConfig(policy=policy, policy_module="kvpolicy.vllm", connector="KvpolicyOffloadingConnector",
                        connector_module="kvpolicy.vllm", **kw)


@pytest.fixture(scope="module")
def conversation() -> list:
    if not CONVERSATION.exists():
        pytest.fail(f"{CONVERSATION}: the shared traces are missing (../shared/traces beside the checkout)")
    return read_trace(str(CONVERSATION), limit=600)


# 1. vLLM's own tests ---------------------------------------------------------------------------


def test_vllms_own_connector_tests_pass_with_kvpolicys_connector(tmp_path):
    src = extract(VLLM_0_33_0, tmp_path, ("tests/__init__.py", "tests/v1/__init__.py", "tests/v1/kv_connector/"))
    deselect = tmp_path / "deselect.txt"
    deselect.write_text("".join(f"{n}  # {why}\n" for n, why in DESELECTED.items()))
    env = dict(os.environ, KVPOLICY_DESELECT=str(deselect),
               PYTHONPATH=os.pathsep.join([str(PEERS), str(src), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "kvpolicy_connector_in_vllm", *VLLM_TESTS],
                         cwd=src, env=env, capture_output=True, text=True, timeout=1200)
    tail = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed == VLLM_TEST_PASSED, summary
    assert f"{len(DESELECTED)} deselected" in summary, summary
    assert "failed" not in summary and "error" not in summary, summary


# 2. The keys ------------------------------------------------------------------------------------


def test_a_requests_keys_are_the_offloading_schedulers_own(conversation):
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import RequestOffloadState
    from vllm.v1.kv_offload.base import ReqContext, RequestOffloadingContext, make_offload_key

    from kvpolicy.vllm._connector import offload_keys, request_keys

    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_lru", cpu_chunks=64))
    scheduler = replay.connector.connector_scheduler
    for i, req in enumerate(conversation[:50]):
        replay.add(str(i), req)
        request = replay.scheduler.requests[str(i)]
        state = RequestOffloadState(config=scheduler.config, req=request, req_context=ReqContext(req_id=str(i)),
                                    offloading_context=RequestOffloadingContext())
        state.update_offload_keys()
        theirs = [k for g in state.group_states for k in g.offload_keys]
        ours = offload_keys(request.block_hashes, scheduler.config.kv_group_configs, make_offload_key)
        assert ours == theirs and len(ours) == len(request.block_hashes)
        # What the connector tells the policy: their hashes, made in C++ without the keys.
        told = request_keys(request.block_hashes, scheduler.config.kv_group_configs, make_offload_key)
        assert told.dtype.name == "uint64" and told.tolist() == [hash(k) % 2**64 for k in theirs]


# 3. The queue -----------------------------------------------------------------------------------


def check_states(replay: Replay, gone: set) -> None:
    from vllm.v1.request import RequestStatus

    (policy,) = replay.connector.queue_relay.policies
    waiting = 0
    for rid, request in replay.scheduler.requests.items():
        expect = "running" if request.status == RequestStatus.RUNNING else "waiting"
        waiting += expect == "waiting"
        assert policy.request_state(rid) == expect, (rid, request.status)
    for rid in gone:
        assert policy.request_state(rid) is None, rid
    assert policy.queued_requests == waiting


@pytest.mark.parametrize("seed", [1, 2])
def test_the_policy_hears_exactly_vllms_waiting_queue(conversation, seed):
    rng = random.Random(seed)
    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_adaptive_kv", gpu_blocks=96, cpu_chunks=128,
                                    max_num_seqs=6, max_num_batched_tokens=256, max_output=12))
    added: set = set()
    pending = list(enumerate(conversation[:160]))
    aborted_waiting = aborted_running = 0
    while pending or replay.busy():
        for _ in range(rng.randrange(4)):
            if pending:
                i, req = pending.pop(0)
                if replay.add(str(i), req):
                    added.add(str(i))
        if replay.scheduler.requests and rng.random() < 0.08:
            rid = rng.choice(sorted(replay.scheduler.requests))
            status = replay.scheduler.requests[rid].status.name
            aborted_running += status == "RUNNING"
            aborted_waiting += status != "RUNNING"
            replay.abort(rid)
        if replay.busy():
            replay.step()
        check_states(replay, added - set(replay.scheduler.requests))
    assert replay.result.preemptions > 0 and aborted_waiting > 0 and aborted_running > 0
    (policy,) = replay.connector.queue_relay.policies
    assert policy.queued_requests == 0  # every request ended: nothing is left behind


@pytest.mark.parametrize("forecast", [True, False])
def test_the_queue_hears_requests_past_the_gpu_prefix_cache(conversation, forecast):
    # The connector sizes the forecast from vLLM's KV cache config: the GPU's
    # blocks in offload keys (engine/front_cache_forecast.hpp); the extra
    # config's kvpolicy_forecast_front_cache: false turns it off.
    cfg = kvpolicy_config("kvpolicy_queue_aware_lru", gpu_blocks=96, cpu_chunks=64)
    cfg.connector_extra = {"kvpolicy_forecast_front_cache": forecast}
    replay = Replay(cfg)
    scheduler = replay.connector.connector_scheduler
    (group,) = scheduler.config.kv_group_configs
    (policy,) = replay.connector.queue_relay.policies
    assert policy.front_cache_blocks == (96 // group.hashes_per_chunk if forecast else 0)
    # The bookkeeping is unchanged by it: every request queued, then gone.
    added = sum(replay.add(str(i), req) for i, req in enumerate(conversation[:40]))
    assert added > 2 and policy.queued_requests == added
    while replay.busy():
        replay.step()
    assert policy.queued_requests == 0


def test_store_admission_cuts_offers_where_the_policy_ranks_a_chunk_its_next_victim():
    # kvpolicy_store_admission: vLLM's manager is handed each offer cut at
    # the policy's answer (admitted), and decides otherwise than without
    # it. The conversations as a chat client sends them
    # (sessions derived, their ends hinted).
    trace = read_trace(str(CONVERSATION), limit=300, derive_block=512)
    shape = dict(gpu_blocks=96, cpu_chunks=48, max_num_seqs=4, max_num_batched_tokens=512, max_output=8,
                 speedup=4.0)
    cfg = kvpolicy_config("kvpolicy_queue_aware_predicted_return", **shape)
    cfg.connector_extra = {"kvpolicy_store_admission": True}
    replay = Replay(cfg, record_steps=True)
    assert replay.connector.admits_stores
    manager = replay.connector.connector_scheduler.manager
    policy = manager._policy
    cuts = []
    admitted = policy.admitted

    def recording(keys, free, req_context):
        cut = admitted(keys, free, req_context)
        cuts.append((cut, len(keys)))
        return cut

    policy.admitted = recording
    replay.run(trace)
    assert any(cut < n for cut, n in cuts) and any(cut == n for cut, n in cuts)
    # Without it, the same policy stores every offer: other decisions.
    plain = kvpolicy_config("kvpolicy_queue_aware_predicted_return", **shape)
    unadmitted = Replay(plain, record_steps=True)
    assert not unadmitted.connector.admits_stores
    unadmitted.run(trace)
    assert unadmitted.result.step_log != replay.result.step_log


def test_store_admission_with_a_policy_that_cannot_decline_is_logged_and_off(caplog):
    cfg = kvpolicy_config("kvpolicy_queue_aware_lru", cpu_chunks=64)
    cfg.connector_extra = {"kvpolicy_store_admission": True}
    with caplog.at_level(logging.WARNING, logger="kvpolicy.vllm"):
        replay = Replay(cfg)
    assert not replay.connector.admits_stores
    assert any("kvpolicy_store_admission has no effect" in r.getMessage() for r in caplog.records)


def test_cache_reset_keeps_the_queue(conversation):
    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_lru", cpu_chunks=64, max_num_seqs=2))
    for i, req in enumerate(conversation[:8]):
        replay.add(str(i), req)
    replay.step()
    (policy,) = replay.connector.queue_relay.policies
    queued = policy.queued_requests
    assert queued > 0
    assert replay.scheduler.reset_connector_cache()  # the CPU tier's reset: the policy's clear()
    assert policy.queued_requests == queued
    while replay.busy():
        replay.step()
        check_states(replay, set())


def test_unknown_and_repeated_events_are_logged_never_raised(conversation, caplog):
    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_lru", cpu_chunks=64))
    relay = replay.connector.queue_relay
    replay.add("a", conversation[0])
    request = replay.scheduler.requests["a"]
    with caplog.at_level(logging.WARNING, logger="kvpolicy.vllm"):
        relay.arrived(request)  # a second arrival of the same id

        class Unknown:
            request_id = "nobody"

        relay.finished(Unknown())
        relay.step(_Output(preempted={"ghost"}, new=["ghost2"]))
    text = caplog.text
    assert "arrive: request 'a' arrived already; a request id is used once; ignored" in text
    assert "finish: request 'nobody' is not known" in text
    assert "preempted request 'ghost' never arrived; ignored" in text
    assert "schedule: request 'ghost2' is not known" in text
    (policy,) = relay.policies
    assert policy.request_state("a") == "waiting"


class _Output:
    """A SchedulerOutput's fields the relay reads."""

    def __init__(self, preempted=(), new=(), resumed=()):
        self.preempted_req_ids = set(preempted)
        self.scheduled_new_reqs = [type("New", (), {"req_id": r})() for r in new]
        self.scheduled_cached_reqs = type("Cached", (), {"resumed_req_ids": set(resumed)})()


# 4. Where no policy hears the queue, vLLM's decisions ----------------------------------------


def replay_log(cfg: ReplayConfig, trace: list) -> list:
    replay = Replay(cfg, record_steps=True)
    replay.run(trace)
    return replay.result.step_log


def tier_events(log: list, kind: str) -> int:
    return sum(1 for step in log for e in step[-1] if e[0] == kind)


def test_kvpolicy_connector_runs_vllms_scheduler_as_vllms(conversation):
    shape = dict(gpu_blocks=128, cpu_chunks=1500, max_num_seqs=8, max_num_batched_tokens=512, max_output=8,
                 speedup=2.0)
    trace = conversation[:600]
    vllms = replay_log(ReplayConfig(policy="lru", **shape), trace)
    with_vllm_lru = replay_log(kvpolicy_config("vllm_lru", **shape), trace)
    connector_only = replay_log(ReplayConfig(policy="lru", connector="KvpolicyOffloadingConnector",
                                             connector_module="kvpolicy.vllm", **shape), trace)
    evictions = sum(len(e[3][1]) for step in vllms for e in step[-1] if e[0] == "store" and e[3] is not None)
    assert evictions > 1000 and tier_events(vllms, "load") >= 5  # the tier was full and was read (130 chunks)
    for other in (with_vllm_lru, connector_only):
        assert len(other) == len(vllms)
        for n, (a, b) in enumerate(zip(vllms, other)):
            assert a == b, f"step {n} differs"


def test_a_queue_aware_policy_reaches_vllms_tier_through_the_connector(conversation):
    """Not a quality claim (bench/vllm_replay.py measures those): the relay
    is live, so a queue-aware policy decides differently from LRU."""
    shape = dict(gpu_blocks=128, cpu_chunks=1500, max_num_seqs=8, max_num_batched_tokens=512, max_output=8,
                 speedup=2.0)
    trace = conversation[:600]
    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_lru", **shape), record_steps=True)
    replay.run(trace)
    assert replay.connector.queue_relay is not None
    assert replay.result.step_log != replay_log(ReplayConfig(policy="lru", **shape), trace)


def test_a_requests_end_is_told_in_vllms_own_order(conversation):
    """At a request's end the policy orders its keys in C++ over the
    context's positions (CachePolicyCore.order_keys): on every end of a
    replay in vLLM's scheduler, the order vLLM's order_request_keys gives."""
    from vllm.v1.kv_offload.cpu.policies.base import order_request_keys

    from kvpolicy._kvpolicy import CachePolicyCore

    shape = dict(gpu_blocks=128, cpu_chunks=400, max_num_seqs=8, max_num_batched_tokens=512, max_output=8,
                 speedup=2.0)
    replay = Replay(kvpolicy_config("kvpolicy_queue_aware_predicted_return", **shape))
    policy = replay.manager._policy
    finish = policy.on_request_finished
    ends = []

    def checked(key_groups, insertion_only_keys, reused_keys, req_context):
        ours = CachePolicyCore.order_keys(key_groups, req_context._offload_key_positions)
        assert ours == order_request_keys(key_groups, req_context)
        ends.append(len(ours))
        return finish(key_groups, insertion_only_keys, reused_keys, req_context)

    policy.on_request_finished = checked
    replay.run(conversation[:300])
    assert len(ends) >= 250 and sum(n > 1 for n in ends) >= 100
