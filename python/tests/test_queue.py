"""TieredCache's waiting queue (enqueue / dequeue) and the queue-aware policies from Python.

The C++ tests (tests/eviction_queue_aware.cpp) check queue_aware against naive models; these check
that Python reaches the same decisions: a worked example, the bad-input errors, and that with no
queue a queue-aware policy decides exactly as its base.
"""

import random

import pytest

import kvpolicy


def serve(c, session, hashes):
    c.admit(session, hashes)  # a whole step: begin, admit, end
    c.release(session)


def test_a_queued_request_keeps_its_blocks_and_a_dropped_one_gives_them_back():
    # Capacity 4: a = (1, 2) is the least recent, then b = (3, 4). A queued request reads a,
    # so c's admit evicts b. Dropped, the queue lets go of a, tail first, as a release: a's
    # blocks become more recent than c's and go after them, 2 before 1.
    c = kvpolicy.TieredCache(4, 0, "queue_aware_lru")
    serve(c, 1, [1, 2])
    serve(c, 2, [3, 4])
    c.enqueue(10, 1, [1, 2])
    assert c.queued_requests == 1
    serve(c, 3, [5, 6])
    assert [c.where(h) for h in (1, 2, 3, 4)] == ["gpu", "gpu", "free", "free"]
    assert c.dequeue(10) == 1
    assert c.queued_requests == 0
    serve(c, 4, [7])
    assert c.where(6) == "free"
    serve(c, 5, [9])
    assert c.where(5) == "free"
    serve(c, 6, [11])
    assert (c.where(2), c.where(1)) == ("free", "gpu")
    assert c.check_invariants() == ""


def test_plain_lru_does_not_hear_the_queue():
    c = kvpolicy.TieredCache(4, 0, "lru")
    serve(c, 1, [1, 2])
    serve(c, 2, [3, 4])
    c.enqueue(10, 1, [1, 2])
    serve(c, 3, [5, 6])
    assert [c.where(h) for h in (1, 2, 3, 4)] == ["free", "free", "gpu", "gpu"]


def test_bad_queue_calls_are_refused_and_change_nothing():
    c = kvpolicy.TieredCache(4, 0, "queue_aware_lru")
    c.enqueue(7, 1, [1, 2, 3])
    with pytest.raises(kvpolicy.UsageError, match=r"^enqueue: request 7 is already queued; dequeue it"):
        c.enqueue(7, 2, [4])
    assert c.queued_requests == 1
    with pytest.raises(kvpolicy.UsageError, match=r"^dequeue: request 8 is not queued \(dequeued twice, or never"):
        c.dequeue(8)
    assert c.dequeue(7) == 1
    with pytest.raises(kvpolicy.UsageError, match=r"^dequeue: request 7 is not queued"):
        c.dequeue(7)
    with pytest.raises(kvpolicy.UsageError, match=r"^enqueue: block_hashes: expected integers"):
        c.enqueue(9, 1, "not hashes")
    assert c.queued_requests == 0


@pytest.mark.parametrize("base", ["lru", "adaptive_kv"])
def test_with_no_queue_a_queue_aware_policy_decides_as_its_base(base):
    rng = random.Random(5)
    a = kvpolicy.TieredCache(24, 12, "queue_aware_" + base, "lru")
    b = kvpolicy.TieredCache(24, 12, base, "lru")
    turns = {}
    for r in range(1500):
        conv = rng.randrange(15)
        turns[conv] = min(turns.get(conv, 0) + 1 + rng.randrange(3), 12)
        hashes = [1000 + j if j < 2 else (conv + 1) * 100_000 + j for j in range(turns[conv])]
        x, y = a.admit(conv, hashes, now=r * 1000), b.admit(conv, hashes, now=r * 1000)
        assert (x["hit_blocks"], x["gpu_evictions"]) == (y["hit_blocks"], y["gpu_evictions"])
        a.release(conv, 100)
        b.release(conv, 100)
    assert a.metrics()["gpu"]["evictions"] == b.metrics()["gpu"]["evictions"] > 0
