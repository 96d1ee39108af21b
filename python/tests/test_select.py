"""select_victims and VictimBatchSelector against obviously-correct references."""

import math
import threading

import numpy as np
import pytest

import kvpolicy


def lowest(scores, ids, k):
    order = sorted(range(len(scores)), key=lambda i: (scores[i], ids[i]))
    return [ids[i] for i in order[:k]]


@pytest.mark.parametrize("seed", range(5))
def test_select_victims_is_the_k_lowest_by_score_then_id(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    scores = rng.integers(0, 50, n).astype(np.float64)  # many ties: the id breaks them
    ids = rng.permutation(10 * n)[:n].astype(np.uint32)
    for k in (0, 1, 7, n // 2, n, n + 3):
        got = kvpolicy.select_victims(scores, ids, k)
        assert got.tolist() == lowest(scores.tolist(), ids.tolist(), k)


def test_select_victims_default_ids_and_errors():
    assert kvpolicy.select_victims([3.0, 1.0, 2.0], None, 2).tolist() == [1, 2]
    with pytest.raises(kvpolicy.UsageError, match=r"^select_lowest: score of item 1 is NaN; check the cost model's parameters$"):
        kvpolicy.select_victims(np.array([1.0, math.nan]), None, 1)
    with pytest.raises(kvpolicy.UsageError, match=r"^select_lowest: 2 scores for 3 ids; pass one score per id$"):
        kvpolicy.select_victims([1.0, 2.0], [0, 1, 2], 1)


def test_select_victims_runs_in_threads():
    """The GIL is released: four threads at once get the same answers as one."""
    rng = np.random.default_rng(7)
    scores = rng.random(200_000)
    expect = kvpolicy.select_victims(scores, None, 1000)
    out = [None] * 4

    def work(t):
        out[t] = kvpolicy.select_victims(scores, None, 1000)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in out:
        assert np.array_equal(o, expect)


def naive_batch(ids, blocks, last, pinned, required):
    order = sorted((last[i], ids[i], blocks[i]) for i in range(len(ids)) if not pinned[i])
    chosen, freed = [], 0
    for _, sid, b in order:
        if freed >= required:
            break
        chosen.append(sid)
        freed += b
    return chosen, freed, max(0, required - freed)


@pytest.mark.parametrize("seed", range(5))
def test_batch_lru_is_the_shortest_prefix_in_rule_order(seed):
    rng = np.random.default_rng(seed)
    n = 1000
    ids = rng.permutation(10**6)[:n].astype(np.uint64)
    blocks = rng.integers(1, 40, n).astype(np.uint64)
    last = rng.integers(0, 300, n).astype(np.uint64)
    pinned = rng.random(n) < 0.1
    s = kvpolicy.VictimBatchSelector("lru")
    for required in (0, 1, 100, 2000, 10**6):
        got = s.select_victims(ids, blocks, required, last_access=last, pinned=pinned)
        chosen, freed, shortfall = naive_batch(ids.tolist(), blocks.tolist(), last.tolist(), pinned.tolist(), required)
        assert got["evicted"].tolist() == chosen
        assert got["freed_blocks"] == freed and got["shortfall"] == shortfall


def test_batch_errors_and_metrics():
    s = kvpolicy.VictimBatchSelector("lfu")
    with pytest.raises(kvpolicy.UsageError, match="sequence 7 appears twice among the candidates"):
        s.select_victims([7, 8, 7], [1, 1, 1], 2)
    with pytest.raises(kvpolicy.UsageError, match="num_blocks: 2 values for 3 sequences"):
        s.select_victims([1, 2, 3], [1, 1], 2)
    with pytest.raises(kvpolicy.UnknownNameError, match="unknown batch rule 'arc'; accepted: lru, lfu, fifo, qos_aware, predictive"):
        kvpolicy.VictimBatchSelector("arc")
    r = s.select_victims([1, 2, 3], [4, 4, 4], 5, access_count=[3, 1, 2], last_access=[0, 0, 0])
    assert r["evicted"].tolist() == [2, 3]
    s.update_access([2], [10])
    m = s.metrics()
    assert m["total_evictions"] == 2 and m["re_prefills"] == 1
