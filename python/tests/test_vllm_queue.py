"""The waiting queue through kvpolicy's vLLM cache-policy core (the calls a
connector makes: request_arrived / scheduled / preempted / finished; C++:
engine/request_lifecycle.hpp, tested there against a naive model victim for
victim): a queue-aware policy keeps what queued requests read, ignored events
say why, vLLM's own orders decide as if there were no queue."""

import random

import pytest

from kvpolicy._kvpolicy import CachePolicyCore


class Chunk:
    ref_cnt = 0


def key(i: int) -> bytes:
    return b"k%04d" % i


def insert(core, k):
    core.insert(k, Chunk(), None, 0, 0)


def test_queued_keys_stay_and_leave_in_the_queues_order():
    core = CachePolicyCore("queue_aware_lru", 4, {})
    for k in (b"a", b"b", b"c", b"d"):
        insert(core, k)
    assert core.request_arrived("r1", [b"a", b"c"]) is None
    assert core.queued_requests == 1
    assert [k for k, _ in core.evict(2, [])] == [b"b", b"d"]  # LRU order, skipping what r1 reads
    assert core.request_scheduled("r1") is None  # r1 started: c, then a, go back to LRU's recent end
    assert core.queued_requests == 0
    assert [k for k, _ in core.evict(1, [])] == [b"c"]


def test_ignored_events_say_why():
    core = CachePolicyCore("queue_aware_lru", 4, {})
    assert core.request_arrived("r", [b"a"], 7) is None
    assert core.request_arrived("r", [b"a"]) == "arrive: request 'r' arrived already; a request id is used once; ignored"
    assert core.request_scheduled("x") == "schedule: request 'x' is not known (never arrived, or ended); ignored"
    assert core.request_preempted("r", [b"a"]) == "preempt: request 'r' is waiting already; ignored"
    assert core.request_finished("r") is None  # aborted while waiting: nothing left behind
    assert core.queued_requests == 0
    assert core.request_finished("r") == "finish: request 'r' is not known (never arrived, or ended already); ignored"


@pytest.mark.parametrize("policy", ["vllm_lru", "vllm_arc", "lru", "s3fifo"])
def test_a_policy_that_does_not_hear_the_queue_decides_as_without_one(policy):
    rng = random.Random(5)
    with_queue, without = CachePolicyCore(policy, 16, {}), CachePolicyCore(policy, 16, {})
    present = set()
    for step in range(3000):
        i = rng.randrange(40)
        r = rng.random()
        if r < 0.3:
            with_queue.request_arrived("r%d" % rng.randrange(10), [key(j) for j in rng.sample(range(40), 3)])
        elif r < 0.45:
            with_queue.request_scheduled("r%d" % rng.randrange(10))
        elif r < 0.55:
            with_queue.request_finished("r%d" % rng.randrange(10))
        elif key(i) not in present:
            if len(present) == 16:
                a, b = with_queue.evict(1, []), without.evict(1, [])
                assert [k for k, _ in a] == [k for k, _ in b]
                present.discard(a[0][0])
            insert(with_queue, key(i))
            insert(without, key(i))
            present.add(key(i))
        else:
            with_queue.touch([key(i)])
            without.touch([key(i)])
    assert with_queue.queued_requests == 0


def test_random_lifecycles_never_evict_a_queued_key_while_another_can_go():
    rng = random.Random(11)
    core = CachePolicyCore("queue_aware_adaptive_kv", 24, {})
    present, waiting, running = set(), {}, set()  # waiting: request -> keys
    queued_victims = 0
    for step in range(20000):
        r = rng.random()
        rid = "r%d" % rng.randrange(30)
        if r < 0.15:
            keys = [key(j) for j in rng.sample(range(60), rng.randrange(1, 6))]
            reason = core.request_arrived(rid, keys)
            assert (reason is None) == (rid not in waiting and rid not in running)
            if reason is None:
                waiting[rid] = keys
        elif r < 0.25:
            reason = core.request_scheduled(rid)
            assert (reason is None) == (rid in waiting)
            if reason is None:
                del waiting[rid]
                running.add(rid)
        elif r < 0.3:
            keys = [key(j) for j in rng.sample(range(60), rng.randrange(1, 6))]
            reason = core.request_preempted(rid, keys)
            assert (reason is None) == (rid in running)
            if reason is None:
                running.discard(rid)
                waiting[rid] = keys
        elif r < 0.38:
            reason = core.request_finished(rid)
            assert (reason is None) == (rid in waiting or rid in running)
            waiting.pop(rid, None)
            running.discard(rid)
        else:
            k = key(rng.randrange(60))
            if k in present:
                core.touch([k])
                continue
            if len(present) == 24:
                queued = {q for keys in waiting.values() for q in keys}
                victim = core.evict(1, [])[0][0]
                if present - queued:
                    assert victim not in queued, "a key a queued request reads went while others could"
                else:
                    queued_victims += 1
                present.discard(victim)
            insert(core, k)
            present.add(k)
        assert core.queued_requests == len(waiting)
    assert queued_victims > 0


def test_offload_keys_take_a_plain_suffix_and_call_any_other_derivation_per_key():
    """kvpolicy's connector derives a request's offload keys as vLLM does
    (python/engine_tests checks them against vLLM 0.33's own); where the
    derivation is the hash and a fixed suffix it appends the suffix itself,
    and any other derivation is called per key."""
    from types import SimpleNamespace

    from kvpolicy.vllm._connector import offload_keys

    rng = random.Random(7)
    hashes = [bytes(rng.randrange(256) for _ in range(32)) for _ in range(40)]
    groups = [SimpleNamespace(group_idx=0, hashes_per_chunk=4), SimpleNamespace(group_idx=3, hashes_per_chunk=1)]

    def suffixed(h, g):  # vLLM 0.33's make_offload_key
        return h + g.to_bytes(4, "big")

    calls = []

    def hashed(h, g):  # not a suffix: each key must come from a call
        calls.append(h)
        return bytes(reversed(h)) + bytes([g])

    want = [suffixed(h, 0) for h in hashes[3::4]] + [suffixed(h, 3) for h in hashes]
    assert offload_keys(hashes, groups, suffixed) == want
    assert offload_keys(iter(hashes), groups, suffixed) == want
    assert offload_keys(hashes, groups, hashed) == [hashed(h, 0) for h in hashes[3::4]] + [hashed(h, 3) for h in hashes]
    assert len(calls) == 2 * 2 + 2 * (10 + 40)  # two probes per group, then every key twice (ours, expected)


def test_a_cycle_through_the_policy_is_collected():
    """The engine's chunk objects may reach back to the policy that holds
    them (a chunk naming its manager): the garbage collector sees what the
    policy holds and frees such a cycle."""
    import gc
    import weakref

    class Chunk:
        ref_cnt = 0

    core = CachePolicyCore("queue_aware_lru", 4, {})
    chunk = Chunk()
    chunk.owner = core  # the cycle: core -> chunks -> chunk -> core
    core.insert(b"k", chunk, None, 0, 0)
    assert gc.is_tracked(core)
    assert core.chunks in gc.get_referents(core)
    alive = weakref.ref(chunk)
    del core, chunk
    gc.collect()
    assert alive() is None
