"""kvpolicy.vllm.OffloadingManager keeps vLLM's 32-byte block hashes whole:
two distinct hashes whose 64-bit folds are equal stay two blocks. The fold
is forced to collide through a test hook (every hash folded to the same few
keys), and the manager's answers must be exactly those of one whose folds
never collide, over long random runs of every primitive."""

import hashlib
import random

import pytest

import kvpolicy
from kvpolicy.vllm import OffloadingManager


def digests(n, seed=0):
    return [hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range(n)]


@pytest.mark.parametrize("mask", [0, 1, 7])
def test_hashes_with_one_fold_are_distinct_blocks(mask):
    m = OffloadingManager(64)
    m._set_fold_mask_for_testing(mask)
    hashes = digests(50)
    assert len({OffloadingManager._key(h) & mask for h in hashes}) <= mask + 1  # they collide
    out = m.prepare_store(hashes)
    assert out.block_hashes_to_store == hashes and out.block_hashes_evicted == []
    assert m.prepare_store(hashes).block_hashes_to_store == []  # every one known, none taken for another
    m.complete_store(hashes)
    assert len(m) == 50 and m.lookup(hashes) == 50
    assert all(m.block_state(h) == ("ready", 0) for h in hashes)
    other = digests(5, seed=1)
    assert m.lookup(other) == 0 and all(m.block_state(h) == (None, 0) for h in other)
    m.prepare_load(hashes[10:20])
    assert all(m.block_state(h) == ("ready", 1) for h in hashes[10:20])
    m.complete_load(hashes[10:20])
    # The same bytes in a new object are the same block.
    assert m.lookup([bytes(bytearray(h)) for h in hashes]) == 50


def test_a_hash_stored_past_its_fold_is_found_after_the_block_at_the_fold_leaves():
    m = OffloadingManager(2, policy="vllm_lru")
    m._set_fold_mask_for_testing(0)
    a, b, c = digests(3)
    m.complete_store(m.prepare_store([a]).block_hashes_to_store)
    m.complete_store(m.prepare_store([b]).block_hashes_to_store)  # b's fold is a's key: b goes past it
    assert m._probed_hashes == 1
    out = m.prepare_store([c])  # evicts a (least recent), whose key b's probe went past
    assert out.block_hashes_evicted == [a]
    m.complete_store(out.block_hashes_to_store)
    assert m.lookup([b]) == 1 and m.lookup([c]) == 1 and m.lookup([a]) == 0
    assert len(m) == 2


def test_new_hashes_with_one_fold_in_one_call_are_distinct_blocks_and_a_repeated_one_is_refused():
    m = OffloadingManager(8)
    m._set_fold_mask_for_testing(0)
    hashes = digests(6)
    with pytest.raises(kvpolicy.UsageError, match="appears twice; list each block once"):
        m.prepare_store(hashes + [bytes(bytearray(hashes[3]))])  # the same bytes, another object
    assert len(m) == 0
    out = m.prepare_store(hashes)
    assert out.block_hashes_to_store == hashes
    m.complete_store(hashes)
    assert len(m) == 6 and m.lookup(hashes[::-1]) == 6


# Not vllm_arc: its ghost lists (B1, B2) remember evicted blocks by 64-bit
# key, so a forced fold collision can count as a ghost hit and move its
# target (a policy decision; never a block taken for another).
@pytest.mark.parametrize("policy", ["vllm_lru", "lru", "fifo"])
@pytest.mark.parametrize("seed", [1, 2])
def test_colliding_folds_answer_as_distinct_ones_over_random_runs(policy, seed):
    """A manager whose folds all collide in 4 keys against one whose folds
    are whole (distinct for these hashes): the same answers to every call."""
    rng = random.Random(seed)
    universe = digests(60, seed)
    ref, m = OffloadingManager(16, policy), OffloadingManager(16, policy)
    m._set_fold_mask_for_testing(3)
    loading = []
    for step in range(3000):
        op = rng.random()
        run = [universe[i] for i in rng.sample(range(len(universe)), rng.randint(1, 6))]
        if op < 0.35:
            outs = [x.prepare_store(run) for x in (ref, m)]
            if outs[0] is None:
                assert outs[1] is None
                continue
            assert outs[0].block_hashes_to_store == outs[1].block_hashes_to_store, step
            assert outs[0].block_hashes_evicted == outs[1].block_hashes_evicted, step
            ok = rng.random() < 0.9
            for x in (ref, m):
                x.complete_store(outs[0].block_hashes_to_store, ok)
        elif op < 0.6:
            assert ref.lookup(run) == m.lookup(run), step
        elif op < 0.75:
            for x in (ref, m):
                x.touch(run)
        elif op < 0.9:
            n = ref.lookup(run)
            assert m.lookup(run) == n
            if n:
                for x in (ref, m):
                    x.prepare_load(run[:n])
                loading.append(run[:n])
        elif loading:
            done = loading.pop(rng.randrange(len(loading)))
            for x in (ref, m):
                x.complete_load(done)
        assert len(ref) == len(m) and ref.num_free == m.num_free, step
    assert all(ref.block_state(h) == m.block_state(h) for h in universe)
