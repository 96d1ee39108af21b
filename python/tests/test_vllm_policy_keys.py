"""CachePolicyCore finds each chunk by its key's Python hash (a key_index,
no dict per slot) and keeps keys whose hash another present key holds apart
(python/src/vllm_policy.cpp): with keys whose hashes collide by design, every
decision and every chunk equals a run over keys that never collide."""

import random

import pytest

from kvpolicy._kvpolicy import CachePolicyCore


class Chunk:
    def __init__(self, ref_cnt=0):
        self.ref_cnt = ref_cnt


class Colliding:
    """A key whose hash is one of three values: most present keys share one."""

    def __init__(self, i):
        self.i = i

    def __hash__(self):
        return self.i % 3

    def __eq__(self, other):
        return isinstance(other, Colliding) and other.i == self.i

    def __repr__(self):
        return "Colliding(%d)" % self.i


def plain(i):
    return b"k%05d" % i


@pytest.mark.parametrize("policy", ["lru", "fifo", "vllm_lru"])
def test_colliding_hashes_decide_as_distinct_ones(policy):
    rng = random.Random(17)
    capacity = 24
    a, b = CachePolicyCore(policy, capacity, {}), CachePolicyCore(policy, capacity, {})
    present, held = set(), set()
    for _ in range(20000):
        i = rng.randrange(60)
        r = rng.random()
        if r < 0.35 and i not in present:
            if len(present) == capacity:
                protect = rng.sample(sorted(present - held), min(3, len(present - held)))
                ea = a.evict(2, [Colliding(j) for j in protect])
                eb = b.evict(2, [plain(j) for j in protect])
                assert (ea is None) == (eb is None)
                if ea is None:
                    continue
                assert [k.i for k, _ in ea] == [int(k[1:]) for k, _ in eb]
                assert [c for _, c in ea] == [c for _, c in eb]
                present -= {k.i for k, _ in ea}
            chunk = Chunk()
            a.insert(Colliding(i), chunk, None, 0, 0)
            b.insert(plain(i), chunk, None, 0, 0)
            present.add(i)
        elif r < 0.55 and i in present:
            a.touch([Colliding(i)])
            b.touch([plain(i)])
        elif r < 0.65 and i in present and i not in held:
            a.mark_non_evictable(Colliding(i))
            b.mark_non_evictable(plain(i))
            held.add(i)
        elif r < 0.8 and i in held:
            a.mark_evictable(Colliding(i))
            b.mark_evictable(plain(i))
            held.discard(i)
        elif r < 0.9 and i in present and i not in held:
            a.remove(Colliding(i))
            b.remove(plain(i))
            present.discard(i)
        elif r < 0.95 and i not in present:
            with pytest.raises(KeyError):
                a.remove(Colliding(i))
        assert len(a) == len(b) == len(present)
    assert sorted(k.i for k in a.chunks) == sorted(present)
    assert all(a.chunks[Colliding(i)] is b.chunks[plain(i)] for i in present)


def test_an_overwritten_colliding_key_is_one_chunk():
    core = CachePolicyCore("lru", 4, {})
    first, second = Chunk(), Chunk()
    core.insert(Colliding(0), first, None, 0, 0)
    core.insert(Colliding(3), Chunk(), None, 0, 0)  # same hash as 0
    core.insert(Colliding(0), second, None, 0, 0)  # vLLM overwrites
    assert len(core) == 2
    assert core.chunks[Colliding(0)] is second
    core.remove(Colliding(0))
    core.remove(Colliding(3))
    assert len(core) == 0
    with pytest.raises(KeyError):
        core.remove(Colliding(3))
