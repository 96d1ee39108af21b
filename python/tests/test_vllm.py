"""kvpolicy.vllm.OffloadingManager: every primitive, against a naive model too."""

import array
import hashlib
import importlib
import itertools
import random
import sys
import types
from collections import OrderedDict

import numpy as np
import pytest

import kvpolicy
from kvpolicy.vllm import OffloadingManager


def test_store_then_lookup_load_and_complete():
    m = OffloadingManager(4, enable_events=True)
    out = m.prepare_store([10, 11, 12])
    assert out.block_hashes_to_store == [10, 11, 12] and out.block_hashes_evicted == []
    assert out.store_spec.medium() == "CPU" and out.store_spec.block_ids.tolist() == [0, 1, 2]
    assert m.lookup([10, 11]) == 0  # still being stored: not loadable
    assert m.block_state(10) == ("storing", 0)
    m.complete_store([10, 11, 12])
    assert m.lookup([10, 11, 12, 13]) == 3 and m.lookup([11]) == 1 and m.lookup([99, 10]) == 0
    spec = m.prepare_load([10, 11])
    assert spec.block_ids.tolist() == [0, 1] and m.block_state(10) == ("ready", 1)
    m.complete_load([10, 11])
    assert m.block_state(10) == ("ready", 0)
    events = list(m.take_events())
    assert [(e.block_hashes, e.removed, e.medium) for e in events] == [([10, 11, 12], False, "CPU")]
    assert list(m.take_events()) == []


def test_prepare_store_skips_stored_blocks_and_evicts_in_policy_order():
    m = OffloadingManager(3, enable_events=True)
    m.prepare_store([1, 2, 3])
    m.complete_store([1, 2, 3])
    m.touch([2, 1])  # 2 then 1 most recent: 3 is the least recent
    out = m.prepare_store([2, 4])
    assert out.block_hashes_to_store == [4] and out.block_hashes_evicted == [3]
    assert out.store_spec.block_ids.tolist() == [2]  # 3's slot, reused
    assert [(e.block_hashes, e.removed) for e in m.take_events()] == [([1, 2, 3], False), ([3], True)]


def test_events_are_off_by_default_as_in_vllm():
    m = OffloadingManager(1)
    m.prepare_store([1])
    m.complete_store([1])
    m.prepare_store([2])
    assert list(m.take_events()) == []


def test_loading_and_storing_blocks_are_never_evicted_and_none_changes_nothing():
    m = OffloadingManager(3)
    m.prepare_store([1, 2])
    m.complete_store([1, 2])
    m.prepare_load([1, 2])
    m.prepare_store([3])  # storing, not yet complete
    assert m.prepare_store([4]) is None  # every block is protected
    assert len(m) == 3 and m.num_free == 0 and m.lookup([1, 2]) == 2
    m.complete_load([2])
    out = m.prepare_store([4])
    assert out.block_hashes_evicted == [2]


def test_loads_of_blocks_being_stored_raise():
    m = OffloadingManager(4)
    m.prepare_store([1, 2])
    with pytest.raises(kvpolicy.UsageError, match=r"^prepare_load: block hash 2 is still being stored; load it after complete_store$"):
        m.prepare_load([2])
    with pytest.raises(kvpolicy.UsageError, match=r"^prepare_load: block hash 7 is not offloaded"):
        m.prepare_load([7])
    assert m.block_state(2) == ("storing", 0)


def test_a_failed_store_removes_the_blocks_still_being_stored():
    m = OffloadingManager(4, enable_events=True)
    m.prepare_store([1])
    m.complete_store([1])
    m.prepare_store([1, 2, 3])  # 1 is already stored: only 2 and 3 are new
    m.complete_store([1, 2, 3], success=False)
    assert m.block_state(1) == ("ready", 0)  # a stored block stays
    assert m.block_state(2) == (None, 0) and m.block_state(3) == (None, 0)
    assert m.num_free == 3 and m.lookup([1, 2]) == 1
    assert [e.removed for e in m.take_events()] == [False]  # only 1's store
    out = m.prepare_store([2])
    assert out.block_hashes_to_store == [2]  # the slot is free again


def test_protocol_errors():
    m = OffloadingManager(4)
    with pytest.raises(kvpolicy.UsageError, match=r"^complete_load: block hash 5 has no load in flight"):
        m.complete_load([5])
    m.prepare_store([5])
    m.complete_store([5])
    m.prepare_load([5])
    with pytest.raises(kvpolicy.UsageError, match="complete_load: block hash 5 has no load in flight"):
        m.complete_load([5, 5])  # one load, completed twice
    assert m.block_state(5) == ("ready", 1)  # nothing changed
    with pytest.raises(kvpolicy.UsageError, match=r"^complete_store: block hash 6 was never prepared"):
        m.complete_store([6])
    with pytest.raises(kvpolicy.UsageError, match=r"^prepare_store: block hash 8 appears twice; list each block once$"):
        m.prepare_store([8, 9, 8])
    assert m.num_free == 3
    with pytest.raises(kvpolicy.ConfigError, match="num_blocks 0 cannot hold a block"):
        OffloadingManager(0)
    with pytest.raises(kvpolicy.UnknownNameError):
        OffloadingManager(4, "nope")


def test_hash_objects_come_back_as_given():
    m = OffloadingManager(2)
    a, b, c = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32  # vLLM's sha256 block hashes are bytes
    out = m.prepare_store(iter([a, b]))
    assert out.block_hashes_to_store == [a, b]
    m.complete_store([a, b])
    assert m.lookup((a, b)) == 2
    assert m.prepare_store([c]).block_hashes_evicted == [a]
    arr = OffloadingManager(2)
    out = arr.prepare_store(np.array([7, 8], dtype=np.uint64))
    assert out.block_hashes_to_store.dtype == np.uint64 and out.block_hashes_to_store.tolist() == [7, 8]


def test_hash_keys_are_ints_modulo_2_64_whatever_the_container():
    # Every kind of int, and arrays of both signs, name the same 64-bit keys.
    big = 2**64
    ints = [0, 1, 2**30 - 1, 2**30, 2**62 + 3, 2**64 - 1]
    m = OffloadingManager(16)
    m.complete_store(m.prepare_store(ints).block_hashes_to_store)
    assert m.lookup([i + big for i in ints]) == 6
    assert m.lookup([0, True, 2**30 - 1, 2**30, 2**62 + 3, -1]) == 6  # bool is an int; -1 is 2^64 - 1
    assert m.lookup(np.array(ints, dtype=np.uint64)) == 6
    assert m.lookup(np.array([0, 1, 2**30 - 1, 2**30, 2**62 + 3, -1], dtype=np.int64)) == 6
    assert m.lookup(array.array("Q", ints)) == 6
    assert m.lookup(np.repeat(np.array(ints, dtype=np.uint64), 2)[::2]) == 6  # strided
    assert m.lookup(np.array(ints, dtype=np.uint64)[::-1][::-1]) == 6
    assert m.lookup(tuple(ints)) == 6 and m.lookup(iter(ints)) == 6
    assert m.lookup([-2]) == 0 and m.lookup([2**64 - 2]) == 0


def test_array_and_list_callers_share_one_manager():
    m = OffloadingManager(2)
    m.complete_store(m.prepare_store(np.array([1, 2], dtype=np.uint64)).block_hashes_to_store)
    a = b"\x0a" * 32
    out = m.prepare_store([a])  # evicts 1, stored from an array: its int key comes back
    assert out.block_hashes_to_store == [a] and out.block_hashes_evicted == [1]
    m.complete_store([a])
    out = m.prepare_store(np.array([3], dtype=np.uint64))  # evicts 2
    assert out.block_hashes_evicted.tolist() == [2]
    m.complete_store(out.block_hashes_to_store)
    out = m.prepare_store([4])  # evicts a, the caller's bytes object
    assert out.block_hashes_evicted == [a] and out.block_hashes_evicted[0] is a
    m.complete_store([4])
    out = m.prepare_store([5])  # evicts 3, stored from an array after a list was stored
    assert out.block_hashes_evicted == [3]
    m.complete_store([5])
    out = m.prepare_store(np.array([6], dtype=np.uint64))  # evicts 4: its slot now holds no object
    assert out.block_hashes_evicted.tolist() == [4]
    m.complete_store(out.block_hashes_to_store)
    m.complete_store(m.prepare_store([7]).block_hashes_to_store)  # evicts 5
    assert m.prepare_store([8]).block_hashes_evicted == [6]  # not 4, the slot's last list object


class _Hashed:
    """A hash object that is neither an int nor bytes, whose __hash__ may
    empty the list being read."""

    def __init__(self, h, victim=None):
        self.h, self.victim = h, victim

    def __hash__(self):
        if self.victim is not None:
            self.victim.clear()
        return self.h

    def __eq__(self, other):
        return isinstance(other, _Hashed) and other.h == self.h


def test_a_list_changed_between_calls_is_read_again():
    # The reader keeps the last list's objects: a list changed in place, or
    # new objects where the old ones were, must not reuse their keys.
    m, ref = OffloadingManager(64), NaiveManager(64)
    rng = random.Random(7)
    hashes = [2**40 + i for i in range(8)]
    for _ in range(3000):
        op = rng.randrange(6)
        if op == 0:
            hashes[rng.randrange(len(hashes))] = 2**40 + rng.randrange(40)  # in place, new object
        elif op == 1:
            hashes = [int(str(h)) for h in hashes]  # equal values, new objects
        elif op == 2:
            hashes = [2**40 + rng.randrange(40) for _ in range(rng.randint(1, 10))]
        elif op == 3 and len(hashes) > 1:
            hashes.reverse()
        view = rng.choice([hashes, hashes[: rng.randint(1, len(hashes))], hashes[rng.randint(0, len(hashes) - 1):]])
        hit = m.lookup(view)
        assert hit == ref.lookup(view)
        m.touch(view)
        ref.touch(view)
        new = list(dict.fromkeys(view[hit:]))
        out, expect = m.prepare_store(new), ref.prepare_store(new)
        if expect is None:
            assert out is None
            continue
        assert (out.block_hashes_to_store, out.block_hashes_evicted) == expect
        m.complete_store(out.block_hashes_to_store)
        ref.complete_store(expect[0], True)


def test_other_hash_objects_are_read_from_a_copy_of_the_list():
    m = OffloadingManager(4)
    a, b = _Hashed(11), _Hashed(12)
    out = m.prepare_store([a, b])
    assert out.block_hashes_to_store == [a, b]
    m.complete_store([a, b])
    victim = [_Hashed(11), _Hashed(12)]
    victim.append(_Hashed(11, victim))  # empties the list while it is read
    assert m.lookup(victim) == 3
    assert victim == []
    assert m.lookup([_Hashed(11), 12]) == 2  # other objects' keys are their hash()


def _digest(i):
    """A vLLM-style block hash: 32 bytes, a new object on every call."""
    d = hashlib.sha256(i.to_bytes(8, "little")).digest()
    return d[:16] + d[16:]


@pytest.mark.parametrize("seed", [4, 5])
def test_bytes_hashes_from_fresh_objects_agree_with_the_naive_model(seed):
    # vLLM V1's BlockHash is bytes, each request holding its own objects and
    # its connector passing islice views of them: equal values from new
    # objects (and from iterators over the same ones) name the same blocks.
    rng = random.Random(seed)
    m, ref = OffloadingManager(48), NaiveManager(48)
    for _ in range(3000):
        conv = rng.randrange(25)
        ids = [conv * 100 + i for i in range(rng.randint(1, 10))]
        hashes = [_digest(i) for i in ids]
        hit = m.lookup(itertools.islice(hashes, 0, None))
        assert hit == ref.lookup(ids)
        m.touch(iter(hashes))
        ref.touch(ids)
        if hit:
            prefix = [_digest(i) for i in ids[:hit]]  # new objects, same blocks
            assert m.prepare_load(prefix).block_ids.size == hit
            ref.prepare_load(ids[:hit])
        out, expect = m.prepare_store(hashes[hit:]), ref.prepare_store(ids[hit:])
        if hit:
            m.complete_load(hashes[:hit])
            ref.complete_load(ids[:hit])
        if expect is None:
            assert out is None
            continue
        assert out.block_hashes_to_store == [_digest(i) for i in expect[0]]
        position = {i: k for k, i in enumerate(ids)}  # the caller's own objects come back
        assert all(o is hashes[position[i]] for o, i in zip(out.block_hashes_to_store, expect[0]))
        assert out.block_hashes_evicted == [_digest(i) for i in expect[1]]
        m.complete_store(out.block_hashes_to_store)
        ref.complete_store(expect[0], True)
    assert len(m) == len(ref.state)


def test_distinct_bytes_hashes_are_distinct_blocks():
    # Structured bytes (zero runs of every length, counters at either end,
    # repeated words, a byte flipped anywhere) must not fold to one key: a
    # collision would make prepare_store see a block twice, or one stored.
    hashes = {bytes(n) for n in range(70)}
    hashes |= {i.to_bytes(32, "little") for i in range(3000)} | {i.to_bytes(32, "big") for i in range(3000)}
    hashes |= {i.to_bytes(8, "little") * 4 for i in range(3000)} | {i.to_bytes(40, "little") for i in range(3000)}
    base = hashlib.sha256(b"kvpolicy").digest()
    hashes |= {base[:k] + bytes([base[k] ^ (1 << b)]) + base[k + 1:] for k in range(32) for b in range(8)}
    hashes = sorted(hashes)
    m = OffloadingManager(len(hashes))
    out = m.prepare_store(hashes)
    assert out.block_hashes_to_store == hashes and out.block_hashes_evicted == []
    m.complete_store(hashes)
    assert len(m) == len(hashes) and m.lookup(hashes) == len(hashes)
    assert m.lookup([b"\x00" * 70]) == 0 and m.lookup([base[:31]]) == 0


def test_bad_items_raise_usage_error_naming_the_item_and_change_nothing():
    m = OffloadingManager(4)
    m.complete_store(m.prepare_store([1, 2]).block_hashes_to_store)
    for call in (m.lookup, m.touch, m.prepare_load, m.complete_load, m.prepare_store, m.complete_store):
        with pytest.raises(kvpolicy.UsageError,
                           match=r"^block_hashes\[2\]: type 'list' is not hashable; a block hash is an int, "
                                 r"bytes or another hashable object$"):
            call([1, 2, [3], 4])
        with pytest.raises(kvpolicy.UsageError, match=r"^block_hashes: type 'int' is not iterable; pass a list"):
            call(7)
        with pytest.raises(kvpolicy.UsageError, match=r"^block_hashes: one bytes object is one block hash, not a "
                                                      r"list of them; pass \[block_hash\]$"):
            call(b"\x01" * 32)
    assert m.num_free == 2 and m.block_state(1) == ("ready", 0) and m.block_state(2) == ("ready", 0)
    assert m.lookup([1, 2]) == 2  # the reader kept nothing of the bad lists
    with pytest.raises(kvpolicy.UsageError, match=r"^block_hash: type 'dict' is not hashable"):
        m.block_state({})

    class Boom(Exception):
        pass

    class Raises:
        def __hash__(self):
            raise Boom("from __hash__")

    with pytest.raises(Boom):  # the object's own exception, not ours
        m.prepare_store([3, Raises()])
    assert m.num_free == 2


class NaiveManager:
    """The documented semantics over an OrderedDict, kvpolicy's LRU: a
    protection ending (a load, a store, prepare_store's input) re-enters at
    the most-recent end (complete_load tail first)."""

    def __init__(self, n):
        self.n, self.order, self.state, self.loads = n, OrderedDict(), {}, {}

    def lookup(self, hs):
        k = 0
        for h in hs:
            if self.state.get(h) != "ready":
                break
            k += 1
        return k

    def prepare_load(self, hs):
        for h in hs:
            if self.loads[h] == 0:
                self.order.pop(h)
            self.loads[h] += 1

    def touch(self, hs):
        for h in reversed(hs):
            if h in self.order:
                self.order.move_to_end(h)

    def complete_load(self, hs):
        for h in hs:
            self.loads[h] -= 1
        for h in reversed(hs):
            if self.loads[h] == 0 and self.state[h] == "ready" and h not in self.order:
                self.order[h] = True

    def prepare_store(self, hs):
        # The input's blocks are never victims: kvpolicy's lru holds them
        # while it evicts, so they re-enter at the most-recent end, in input order.
        new = [h for h in hs if h not in self.state]
        need = len(new) - (self.n - len(self.state))
        shielded = [h for h in dict.fromkeys(hs) if h in self.order] if need > 0 else []
        if need > len(self.order) - len(shielded):
            return None
        for h in shielded:
            self.order.pop(h)
        evicted = [self.order.popitem(last=False)[0] for _ in range(max(need, 0))]
        for v in evicted:
            del self.state[v], self.loads[v]
        for h in shielded:
            self.order[h] = True
        for h in new:
            self.state[h], self.loads[h] = "storing", 0
        return new, evicted

    def complete_store(self, hs, success):
        for h in hs:
            if self.state.get(h) != "storing":
                continue
            if success:
                self.state[h] = "ready"
                self.order[h] = True
            else:
                del self.state[h], self.loads[h]


@pytest.mark.parametrize("policy_seed", [1, 2, 3])
def test_random_schedules_agree_with_the_naive_model(policy_seed):
    rng = random.Random(policy_seed)
    m, ref = OffloadingManager(64), NaiveManager(64)
    loading, storing = [], []
    for _ in range(5000):
        conv = rng.randrange(30)
        hashes = [conv * 100 + i for i in range(rng.randint(1, 12))]
        op = rng.randrange(5)
        assert m.lookup(hashes) == ref.lookup(hashes)
        if op == 0:
            hit = hashes[: ref.lookup(hashes)]
            m.touch(hashes)
            ref.touch(hashes)
            if hit:
                m.prepare_load(hit)
                ref.prepare_load(hit)
                loading.append(hit)
        elif op == 1 and loading:
            hs = loading.pop(rng.randrange(len(loading)))
            m.complete_load(hs)
            ref.complete_load(hs)
        elif op == 2:
            out, expect = m.prepare_store(hashes), ref.prepare_store(hashes)
            if expect is None:
                assert out is None
            else:
                assert (out.block_hashes_to_store, out.block_hashes_evicted) == expect
                storing.append(expect[0])
        elif op in (3, 4) and storing:
            hs = storing.pop(rng.randrange(len(storing)))
            ok = op == 3 or rng.random() < 0.7
            m.complete_store(hs, ok)
            ref.complete_store(hs, ok)
        assert len(m) == len(ref.state)


@pytest.mark.parametrize("policy", ["arc", "s3fifo", "sieve", "lfu", "w_tinylfu"])
def test_every_policy_works_behind_the_manager(policy):
    m = OffloadingManager(32, policy)
    rng = random.Random(policy)
    for _ in range(2000):
        conv = rng.randrange(20)
        hashes = [conv * 100 + i for i in range(rng.randint(1, 8))]
        hit = m.lookup(hashes)
        m.touch(hashes)
        if hit:
            m.prepare_load(hashes[:hit])  # protected while the tail is stored
        out = m.prepare_store(hashes[hit:])
        if out is not None:
            m.complete_store(out.block_hashes_to_store)
        assert m.lookup(hashes) >= hit  # the loading prefix was not evicted
        if out is not None:  # what was stored is loadable (a later block may have made room)
            assert all(m.block_state(h) == ("ready", 0) for h in out.block_hashes_to_store)
        if hit:
            m.complete_load(hashes[:hit])
    assert m.policy == policy


def test_vllm_subclass_when_vllm_is_installed(monkeypatch):
    """A stand-in for vllm.v1.kv_offload.abstract: the subclass appears and delegates."""
    abstract = types.ModuleType("vllm.v1.kv_offload.abstract")

    class OffloadingManagerABC:
        pass

    class PrepareStoreOutput:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    abstract.OffloadingManager = OffloadingManagerABC
    abstract.PrepareStoreOutput = PrepareStoreOutput
    abstract.OffloadingEvent = PrepareStoreOutput
    for name in ("vllm", "vllm.v1", "vllm.v1.kv_offload"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.kv_offload.abstract", abstract)
    import kvpolicy.vllm as kv
    import kvpolicy.vllm._legacy as legacy

    importlib.reload(legacy)
    kv2 = importlib.reload(kv)
    try:
        assert kv2.KvpolicyOffloadingSpec is None  # the stand-in has no CPU spec to build on
        m = kv2.VllmOffloadingManager(4, "arc", enable_events=True)
        assert isinstance(m, OffloadingManagerABC)
        out = m.prepare_store([1, 2])
        assert isinstance(out, PrepareStoreOutput) and out.block_hashes_to_store == [1, 2]
        m.complete_store([1, 2])
        assert m.lookup([1, 2]) == 2
        assert [e.removed for e in m.take_events()] == [False]
    finally:
        monkeypatch.undo()
        importlib.reload(legacy)
        importlib.reload(kv)
    assert kv.VllmOffloadingManager is None and kv.KvpolicyOffloadingSpec is None


# --- vLLM's own decisions (policy "vllm_lru", "vllm_arc") and the manager's
# semantics for every policy. vLLM's own tests and a differential test
# against vLLM 0.19.1 and 0.20.2 run in test_vllm_legacy_peers.py.


@pytest.mark.parametrize("policy", ["vllm_lru", "vllm_arc", "lru", "arc", "fifo", "s3fifo"])
def test_a_block_in_prepare_stores_input_is_never_its_victim(policy):
    m = OffloadingManager(1, policy, enable_events=True)
    m.complete_store(m.prepare_store([0]).block_hashes_to_store)
    assert m.prepare_store([1, 0]) is None  # vLLM answers None: 0 is the input's
    assert m.block_state(0) == ("ready", 0) and m.num_free == 0
    assert [e.removed for e in m.take_events()] == [False]  # no eviction was recorded


@pytest.mark.parametrize("policy", ["vllm_lru", "vllm_arc", "fifo", "clock", "sieve", "s3fifo", "round_robin", "lfu"])
def test_completing_a_store_leaves_the_block_in_place(policy):
    # vLLM: 3 slots, store [0, 1, 2], complete [1, 0] then 2, store 3: 0 goes
    # (it was inserted first), not 1 (completed last of the first two).
    m = OffloadingManager(3, policy)
    m.prepare_store([0, 1, 2])
    m.complete_store([1, 0])
    m.complete_store([2])
    assert m.prepare_store([3]).block_hashes_evicted == [0]


def test_kvpolicy_lru_releases_a_completed_store_at_its_most_recent_end():
    # The documented difference of kvpolicy's recency-ordered policies.
    m = OffloadingManager(3, "lru")
    m.prepare_store([0, 1, 2])
    m.complete_store([1, 0])
    m.complete_store([2])
    assert m.prepare_store([3]).block_hashes_evicted == [1]


@pytest.mark.parametrize("policy", ["vllm_lru", "vllm_arc", "lru", "fifo"])
def test_a_multi_block_eviction_hands_its_slots_out_in_reverse_as_vllm(policy):
    m = OffloadingManager(2, policy)
    m.complete_store(m.prepare_store([0, 1]).block_hashes_to_store)
    out = m.prepare_store([2, 3])
    assert out.block_hashes_evicted == [0, 1] and out.store_spec.block_ids.tolist() == [1, 0]
    m.complete_store([2], success=False)  # its slot 1 is freed: the next store takes it
    assert m.prepare_store([4]).store_spec.block_ids.tolist() == [1]


def test_vllm_arc_keeps_a_block_touched_while_storing_in_t1_and_refuses_when_t2_is_pinned():
    m = OffloadingManager(2, "vllm_arc")
    m.prepare_store([0])
    m.touch([0])  # still being stored: not a second use
    m.complete_store([0])
    t1, t2, b1, b2 = (list(map(int, l)) for l in m._order_state()[0])
    assert (t1, t2) == ([OffloadingManager._key(0)], [])
    m.touch([0])  # ready: to T2
    m.complete_store(m.prepare_store([1]).block_hashes_to_store)
    assert [len(l) for l in m._order_state()[0]] == [1, 1, 0, 0]
    m._set_arc_target(2.0)  # |T1| = 1 < 2: vLLM takes from T2, whose only block is loading
    m.prepare_load([0])
    assert m.prepare_store([2]) is None  # vLLM refuses rather than take 1 from T1
    m.complete_load([0])
    assert m.prepare_store([2]).block_hashes_evicted == [0]
    assert list(map(int, m._order_state()[0][3])) == [OffloadingManager._key(0)]  # B2
    m.touch([0])  # a B2 ghost: the target goes down by max(1, |B1|/|B2|)
    assert m._order_state()[1] == 1.0


def test_vllm_policies_bad_input():
    # vllm_lru and vllm_arc here are the registry's 0.11-0.20 orders, vllm_0_11_lru and vllm_0_11_arc.
    with pytest.raises(kvpolicy.ConfigError, match=r"^vllm_0_11_arc: takes no options, got 'small_fraction'$"):
        OffloadingManager(4, "vllm_arc", small_fraction=0.1)
    with pytest.raises(kvpolicy.UnknownNameError,
                       match=r"^unknown eviction policy 'vllm_nope'; accepted: fifo, .*lru.*, "
                             r"vllm_0_11_lru, vllm_0_11_arc, vllm_lru, vllm_arc$"):
        OffloadingManager(4, "vllm_nope")
    assert OffloadingManager(4, "vllm_0_11_arc").policy == "vllm_0_11_arc"
    assert OffloadingManager(4, "vllm_arc").policy == "vllm_arc"  # as given
    assert OffloadingManager(4, "kvpolicy_s3fifo").policy == "s3fifo"  # both name forms
    m = OffloadingManager(4, "vllm_arc")
    with pytest.raises(kvpolicy.UsageError, match=r"^vllm_arc target_t1_size 5\.0+ is outside \[0, 4\]"):
        m._set_arc_target(5)
    assert m._order_state()[1] == 0.0
    with pytest.raises(kvpolicy.UsageError, match=r"^target_t1_size: policy 'vllm_lru' has no ARC target; only policy 'vllm_arc' has one$"):
        OffloadingManager(4, "vllm_lru")._set_arc_target(1)
    assert OffloadingManager(4, "lru")._order_state() == ([], None)


# Which policies keep a block's place when its store or load completes: the
# vLLM orders, kvpolicy's position-based policies (their hold rule), and, as
# measured here though their concept does not promise it, lirs and
# checkerboard. The others (lru and its family, arc, slru, w_tinylfu's
# window, the time-varying scores: qos_aware, predictive, retention_value,
# gdsf, lrfu, adaptive_kv, belady, reuse_oracle_lru) release at their
# most-recent end or rescore at the release's time (the header of
# include/kvpolicy/engine/offload_manager.hpp says why).
KEEP_PLACE = ["vllm_lru", "vllm_arc", "fifo", "round_robin", "lfu", "clock", "sieve", "two_q", "s3fifo",
              "lirs", "checkerboard"]


def _victims_with_completions(policy, seed, shuffled):
    """Victims of one random schedule of stores and touches; `shuffled`:
    each store completed in a random order, and loads (prepare, complete, no
    touch) of random ready blocks between the steps."""
    rng, noise = random.Random(seed), random.Random(seed + 1000)
    n = rng.randint(2, 10)
    m = OffloadingManager(n, policy)
    victims, ready, key = [], [], 0
    for _ in range(300):
        if rng.random() < 0.3 and ready:
            m.touch(rng.sample(ready, rng.randint(1, min(3, len(ready)))))
            continue
        new = list(range(key, key + rng.randint(1, n)))
        key += len(new)
        out = m.prepare_store(new)
        assert out is not None
        victims.append(list(out.block_hashes_evicted))
        ready = [h for h in ready if h not in out.block_hashes_evicted]
        done = list(new)
        if shuffled:
            noise.shuffle(done)
        m.complete_store(done)
        ready += new
        if shuffled and noise.random() < 0.5:
            loads = noise.sample(ready, noise.randint(1, min(4, len(ready))))
            m.prepare_load(loads)
            m.complete_load(loads[::-1] if noise.random() < 0.5 else loads)
    return victims


@pytest.mark.parametrize("policy", KEEP_PLACE)
def test_completions_and_loads_do_not_move_blocks(policy):
    for seed in range(40):
        assert _victims_with_completions(policy, seed, True) == _victims_with_completions(policy, seed, False), seed


@pytest.mark.parametrize("policy", ["lru", "arc", "slru", "w_tinylfu", "retention_value"])
def test_recency_ordered_policies_move_a_block_whose_store_or_load_completes(policy):
    assert any(_victims_with_completions(policy, s, True) != _victims_with_completions(policy, s, False)
               for s in range(40))


def _victims_with_failed_stores(policy, seed, failing):
    """Victims of one random schedule; at random points every ready block is
    loaded and, with `failing`, a prepare_store of more blocks than are free
    (recently evicted ones among them: ghosts) is made, which must answer
    None and change nothing."""
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    m = OffloadingManager(n, policy)
    victims, ready, gone, key = [], [], [], 0
    for _ in range(200):
        r = rng.random()
        if r < 0.25 and ready:
            m.touch(rng.sample(ready, rng.randint(1, min(3, len(ready)))))
        elif r < 0.4 and ready:
            m.prepare_load(ready)
            asked = (gone[-2:] + list(range(key, key + n)))[: m.num_free + 1 + rng.randint(0, 2)]
            if failing:
                assert m.prepare_store(asked) is None
            m.complete_load(ready)
        else:
            new = list(range(key, key + rng.randint(1, n)))
            key += n
            out = m.prepare_store(new)
            victims.append(list(out.block_hashes_evicted))
            gone += out.block_hashes_evicted
            ready = [h for h in ready if h not in out.block_hashes_evicted] + new
            m.complete_store(new)
    return victims


@pytest.mark.parametrize("policy", ["vllm_lru", "vllm_arc"] + kvpolicy.policies())
def test_a_prepare_store_answering_none_changes_nothing(policy):
    for seed in range(20):
        assert _victims_with_failed_stores(policy, seed, True) == _victims_with_failed_stores(policy, seed, False), seed
