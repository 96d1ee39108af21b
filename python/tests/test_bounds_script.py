"""scripts/popularity-bounds.py's session-return oracle against a naive model.

The script's README figures rest on replay_by_session (a heap of sessions,
keys that change at each of a session's requests). Here a naive replay scans
every cached block at each eviction and computes its next use from the
definition, on random prefix forests read by a few sessions; it must give the
same hit ratio. With one session the oracle must be LRU, and it never beats
Belady. Plain Python: no module or binary needed.
"""
import importlib.util
import pathlib
import random

import pytest
from prefix_forests import next_served_uses, random_requests

_path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "popularity-bounds.py"
_spec = importlib.util.spec_from_file_location("popularity_bounds", _path)
bounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bounds)


def random_trace(rng, requests, sessions, nodes=120):
    trace = random_requests(rng, requests, nodes)
    return trace, [rng.randrange(sessions) for _ in trace]


def naive_session_oracle(requests, sessions, capacity):
    """The oracle by its definition: at each eviction (during request i) every evictable block's next use
    after i is recomputed (a block only one session has read: that session's next request served cached;
    else the block's own next use), the farthest goes, ties to the block released first."""
    inf = float("inf")

    def served(i):
        return len(requests[i]) <= capacity

    def next_request(s, i):
        return next((j for j in range(i + 1, len(requests)) if sessions[j] == s and served(j)), inf)

    def next_use(b, i):
        return next((j for j in range(i + 1, len(requests)) if b in requests[j] and served(j)), inf)

    cached, readers, hits, accesses, seq = {}, {}, 0, 0, 0  # cached: block -> release seq (None: held)
    for i, h in enumerate(requests):
        accesses += len(h)
        if not served(i):
            continue
        run = 0
        while run < len(h) and h[run] in cached:
            run += 1
        hits += run
        need = sum(1 for b in h if b not in cached)
        for b in h:
            if b in cached:
                cached[b] = None
        while capacity - len(cached) < need:
            def key(b):
                r = readers[b]
                far = next_use(b, i) if len(r) > 1 else next_request(next(iter(r)), i)
                return (-far, cached[b])
            victim = min((b for b in cached if cached[b] is not None), key=key)
            del cached[victim]
        for b in h:
            readers.setdefault(b, set()).add(sessions[i])
        for pos in range(len(h) - 1, -1, -1):
            cached[h[pos]] = seq
            seq += 1
    return hits / accesses


def oracle(requests, sessions, capacity):
    return bounds.bounds(requests, sessions, capacity, ["session"])["session"]


@pytest.mark.parametrize("seed", range(6))
def test_session_oracle_matches_the_naive_model(seed):
    rng = random.Random(seed)
    requests, sessions = random_trace(rng, 400, 1 + seed)
    for capacity in (8, 20, 45):
        assert oracle(requests, sessions, capacity) == pytest.approx(naive_session_oracle(requests, sessions, capacity),
                                                                     abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_with_one_session_the_oracle_is_lru_and_never_beats_belady(seed):
    rng = random.Random(100 + seed)
    requests, _ = random_trace(rng, 800, 1)
    for capacity in (10, 30):
        lru = bounds.replay(requests, capacity, lambda i, pos, b: i)
        assert oracle(requests, [0] * len(requests), capacity) == lru
        _, sessions = random_trace(random.Random(seed), 800, 5)
        later = next_served_uses(requests, capacity)
        belady = bounds.replay(requests, capacity, lambda i, pos, b: -later[i][pos])
        assert oracle(requests, sessions, capacity) <= belady + 1e-12


def test_the_session_back_first_keeps_its_blocks():
    # Sessions 1 and 2 read 3 blocks each, then session 3 reads 2 (capacity 6: two must go), then
    # session 1 comes back, then session 2. LRU evicts session 1's older blocks (tail first: 3, 2);
    # the oracle evicts session 2's (back later): session 1 then hits all 3, session 2 its first.
    requests = [[1, 2, 3], [11, 12, 13], [21, 22], [1, 2, 3], [11, 12, 13]]
    sessions = [1, 2, 3, 1, 2]
    assert oracle(requests, sessions, 6) == pytest.approx(4 / 14)
    assert naive_session_oracle(requests, sessions, 6) == pytest.approx(4 / 14)
    assert bounds.replay(requests, 6, lambda i, pos, b: i) == pytest.approx(2 / 14)
