"""scripts/learned-bounds.py's replay and its online learner, against naive models.

The script's README figures rest on three things checked here on random
prefix forests: its leaf-only replay ranked by idle time is LRU and ranked by
next use is Belady (both as popularity-bounds.py, which kvpolicy-sim's figures
pin, replays them), and its online learner never uses what it could not know
yet: its decisions up to a request do not change when every later request
is replaced. The learner's model is a least-squares fit here (numpy), not
LightGBM: what is checked is the loop, not the model.
"""
import importlib.util
import pathlib
import random

import pytest

from prefix_forests import next_served_uses, random_requests

np = pytest.importorskip("numpy")

_scripts = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, _scripts / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


learned = _load("learned_bounds", "learned-bounds.py")
bounds = _load("popularity_bounds", "popularity-bounds.py")


def random_trace(rng, requests):
    return random_requests(rng, requests, 150)


def make(requests, rng):
    return learned.Trace(requests, [rng.randrange(1, 2000) for _ in requests])


def belady_by_popularity_bounds(requests, capacity):
    later = next_served_uses(requests, capacity)
    return bounds.replay(requests, capacity, lambda i, pos, b: -later[i][pos])


@pytest.mark.parametrize("seed", range(5))
def test_ranked_by_age_it_is_lru_and_by_next_use_it_is_belady(seed):
    rng = random.Random(seed)
    requests = random_trace(rng, 600)
    trace = make(requests, rng)
    for capacity in (6, 15, 40):  # 6 and 15: some requests are longer and are served uncached
        whole, _ = learned.replay(trace, capacity, learned.lru_score)
        assert whole == pytest.approx(bounds.replay(requests, capacity, lambda i, pos, b: i), abs=1e-12)
        whole, _ = learned.replay(trace, capacity, learned.belady_score(trace, capacity))
        assert whole == pytest.approx(belady_by_popularity_bounds(requests, capacity), abs=1e-12)


def test_the_second_half_is_counted_apart():
    # Two requests of one block each, capacity 1: the second (second half) hits.
    trace = learned.Trace([[7], [7]], [1, 1])
    assert learned.replay(trace, 1, learned.lru_score) == (0.5, 1.0)


def least_squares(xs, ys):
    a = np.c_[np.array(xs), np.ones(len(xs))]
    w = np.linalg.lstsq(a, np.array(ys), rcond=None)[0]

    class Model:
        def predict(self, rows):
            return np.c_[rows, np.ones(len(rows))] @ w

    return Model()


@pytest.mark.parametrize("seed", range(3))
def test_the_online_learner_decides_without_the_future(seed):
    # Two traces that share their first `cut` requests and differ after: every decision the
    # learner makes up to `cut` (so each of those requests' hits) must be the same in both.
    rng = random.Random(50 + seed)
    cut, capacity = 600, 20
    requests = random_trace(rng, 900)
    tail = random.Random(999 + seed)  # other requests of the same prefix forest (a block id names one prefix)
    other = requests[:cut] + [tail.choice(requests) for _ in range(900 - cut)]
    outputs = [rng.randrange(1, 2000) for _ in requests]
    runs = []
    for reqs in (requests, other):
        fits, hits = [], []

        def fit(xs, ys):
            fits.append(len(xs))
            return least_squares(xs, ys)

        learned.online(learned.Trace(reqs, outputs), capacity, fit=fit, retrain=50, window=300, min_samples=50,
                       per_request=hits)
        runs.append((fits, hits))
    (fits, hits), (other_fits, other_hits) = runs
    assert len(fits) >= 5  # models were fitted and used before the cut ...
    lru = []
    learned.replay(learned.Trace(requests, outputs), capacity, learned.lru_score, per_request=lru)
    assert hits[:cut] != lru[:cut]  # ... and they decided differently from LRU there
    assert hits[:cut] == other_hits[:cut]
    assert fits[: cut // 50 - 1] == other_fits[: cut // 50 - 1]
