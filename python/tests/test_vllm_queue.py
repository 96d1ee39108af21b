"""The waiting queue through kvpolicy's vLLM cache-policy core (the calls a
connector makes: request_arrived / scheduled / preempted / finished; C++:
engine/request_lifecycle.hpp, tested there against a naive model victim for
victim): a queue-aware policy keeps what queued requests read, ignored events
say why, vLLM's own orders decide as if there were no queue."""

import random

import pytest

from kvpolicy import UsageError
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


def test_offload_key_hashes_are_the_keys_own_hashes_without_making_them():
    """The connector tells a queue-aware policy of a queued request by its
    keys' hashes, computed in C++ (offload_key_hashes): each one Python's
    own hash() of the key vLLM would make, so the policy meets the same
    chunk when vLLM inserts it; None where the derivation is not a plain
    suffix or a hash is not bytes, and the caller makes the keys."""
    from types import SimpleNamespace

    from kvpolicy.vllm._connector import offload_key_hashes, offload_keys, request_keys

    rng = random.Random(11)
    hashes = [bytes(rng.randrange(256) for _ in range(32)) for _ in range(57)]
    groups = [SimpleNamespace(group_idx=0, hashes_per_chunk=4), SimpleNamespace(group_idx=2, hashes_per_chunk=1)]

    def suffixed(h, g):
        return h + g.to_bytes(4, "big")

    def reversed_key(h, g):
        return bytes(reversed(h)) + bytes([g])

    keys = offload_keys(hashes, groups, suffixed)
    got = offload_key_hashes(hashes, groups, suffixed)
    assert got.dtype.name == "uint64" and len(got) == len(keys) == 14 + 57
    assert [int(x) for x in got] == [hash(k) % 2**64 for k in keys]
    assert [int(x) for x in request_keys(iter(hashes), groups, suffixed)] == [hash(k) % 2**64 for k in keys]
    assert offload_key_hashes(hashes, groups, reversed_key) is None
    assert request_keys(hashes, groups, reversed_key) == offload_keys(hashes, groups, reversed_key)
    ints = list(range(1, 9))  # not bytes: the keys are made, as before
    assert offload_key_hashes(ints, groups[:1], suffixed) is None
    assert offload_key_hashes([], groups, suffixed).tolist() == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_queue_heard_by_hashes_decides_as_one_heard_by_keys(seed):
    """Arrivals, preemptions, schedules and finishes told with the keys'
    hashes (the connector's path) leave a queue-aware policy deciding
    exactly as when told with the keys themselves."""
    import numpy as np

    rng = random.Random(seed)
    by_keys = CachePolicyCore("queue_aware_predicted_return", 24, {})
    by_hashes = CachePolicyCore("queue_aware_predicted_return", 24, {})
    universe = [key(i) for i in range(80)]
    live = set()
    for step in range(400):
        op = rng.random()
        rid = f"r{rng.randrange(12)}"
        if op < 0.25:
            ks = rng.sample(universe, rng.randrange(1, 10))
            hs = np.array([hash(k) % 2**64 for k in ks], dtype=np.uint64)
            session = rng.randrange(1, 4)
            assert by_keys.request_arrived(rid, ks, session) == by_hashes.request_arrived(rid, hs, session)
        elif op < 0.35:
            ks = rng.sample(universe, rng.randrange(1, 10))
            hs = np.array([hash(k) % 2**64 for k in ks], dtype=np.uint64)
            assert by_keys.request_preempted(rid, ks) == by_hashes.request_preempted(rid, hs)
        elif op < 0.45:
            assert by_keys.request_scheduled(rid) == by_hashes.request_scheduled(rid)
        elif op < 0.5:
            assert by_keys.request_finished(rid) == by_hashes.request_finished(rid)
        else:
            k = rng.choice(universe)
            if k in live:
                continue
            if len(live) == 24:
                a, b = by_keys.evict(1, ()), by_hashes.evict(1, ())
                assert [v for v, _ in a] == [v for v, _ in b]
                live.discard(a[0][0])
            insert(by_keys, k)
            insert(by_hashes, k)
            live.add(k)
        assert by_keys.queued_requests == by_hashes.queued_requests


def reference_order(key_groups, positions):
    """vLLM 0.33's order_request_keys (policies/base.py), restated."""
    keys = [k for g in key_groups for k in g]
    have = {k: p for k in keys if (p := positions.get(k)) is not None}
    return sorted(keys, key=have.__getitem__) if len(have) == len(keys) else keys


@pytest.mark.parametrize("seed", range(4))
def test_order_keys_orders_a_requests_keys_as_vllm_does(seed):
    """A request's end is told head to tail: CachePolicyCore.order_keys
    flattens the groups and sorts them by position (stably, ties in the
    groups' order) where every key has one, else keeps the groups' order,
    as vLLM's order_request_keys, against a restatement of it."""
    rng = random.Random(seed)
    order = CachePolicyCore.order_keys
    for _ in range(300):
        groups = [[key(rng.randrange(200)) for _ in range(rng.randrange(0, 12))] for _ in range(rng.randrange(1, 4))]
        flat = [k for g in groups for k in g]
        positions = {k: rng.randrange(0, 50) * 16 for k in flat}  # ties included
        if flat and rng.random() < 0.3:  # one key without a position: None, or absent
            k = rng.choice(flat)
            if rng.random() < 0.5:
                positions[k] = None
            else:
                del positions[k]
        assert order(groups, positions) == reference_order(groups, positions)
    assert order([[b"a"]], {b"a": 2**70}) is None  # past int64: vLLM's own ordering is asked


def test_insert_hinted_asks_each_contexts_session_once_and_inserts_as_insert():
    """vLLM inserts a step's chunks one call each with one request context:
    insert_hinted asks the context's session once per context and then
    inserts exactly as insert(..., session=) does."""
    asked = []

    def session_of(ctx):
        asked.append(ctx)
        return ctx.session

    class Ctx:
        def __init__(self, session):
            self.session = session

    hinted = CachePolicyCore("predicted_return", 16, {})
    plain = CachePolicyCore("predicted_return", 16, {})
    with pytest.raises(UsageError, match="hear_sessions"):
        hinted.insert_hinted(key(0), Chunk(), Ctx(1))
    hinted.hear_sessions(session_of)
    contexts = [Ctx(1), Ctx(2), Ctx(1)]
    n = 0
    for ctx in contexts:
        for _ in range(5):
            hinted.insert_hinted(key(n), Chunk(), ctx)
            plain.insert(key(n), Chunk(), None, 0, 0, ctx.session)
            n += 1
    assert asked == contexts
    for _ in range(8):
        assert [k for k, _ in hinted.evict(1, ())] == [k for k, _ in plain.evict(1, ())]


def test_a_cycle_through_the_session_callable_is_collected():
    """hear_sessions' callable is usually the policy's own bound method (the
    policy holds the core, the core the method): the collector sees it."""
    import gc
    import weakref

    class Policy:
        def __init__(self):
            self.core = CachePolicyCore("predicted_return", 4, {})
            self.core.hear_sessions(self.session)

        def session(self, ctx):
            return 1

    p = Policy()
    p.core.insert_hinted(b"k", Chunk(), object())
    alive = weakref.ref(p)
    del p
    gc.collect()
    assert alive() is None
