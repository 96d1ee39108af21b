#!/usr/bin/env python3
"""Could a policy *learn* to decide like Belady from what an engine sees online?

README "Which policy" asks whether any online policy could close half of the
LRU -> Belady gap on the traces in ../shared/traces. popularity-bounds.py
answers for oracles of popularity and session returns; this script answers
for learned policies of the LRB / Parrot kind (a model over a block's online
features that ranks eviction candidates), at three levels of honesty:

- hindsight: trained on the whole trace's labels (each candidate's true next
  use) and replayed on the same trace, DAgger style (each round adds the
  candidates its own replay met). A frozen model of online features is an
  online policy, but this one has seen the answers: how far a fit to *these
  files* can go.
- forward: the same, with training samples from the first half of the trace
  only; judged on the second half. Whether what the first half teaches holds
  later.
- online: LRB's loop, no future anywhere. Candidates met at evictions are
  labelled only once the label is known (the block came back, or a horizon
  of twice the requests the cache's capacity lasts passed without it), and a
  model is refit every 250 requests on the last 2000 requests' labelled
  samples (LRU until the first fit).

The replay is kvpolicy-sim's prefix mode (requests one at a time, a hit up to
the first miss, a request's blocks held while it runs, a request longer than
the capacity served uncached). Victims are leaves of the cached prefix forest
(a block with no cached child), so the cache stays ancestor-closed; at each
request's evictions up to SAMPLE leaves are scored at once (all of them where
there are fewer) and a parent that becomes a leaf is scored when it does.
Ranked by age this is LRU and ranked by next use it is Belady: both must
equal kvpolicy-sim's figures (tests/python: test_learned_bounds.py checks the
replay against naive models). Features of a block, all known online: log
idle time, log use count, log time since first use, log previous reuse gap,
depth, blocks after it in its last request, that request's length and output
tokens, children seen in the prefix tree, and use counts decayed with
half-lives of 4, 32 and 256 requests. The model is LightGBM's gradient-
boosted trees (pip install lightgbm; needed for the learned rows only),
regressing log(1 + requests to the next use) on up to 100,000 samples; the
largest prediction goes.

    scripts/learned-bounds.py [--modes hindsight,forward,online] [--capacity 1,5,10]
                              TRACE [TRACE ...]

Prints per trace and capacity (percent of distinct blocks) the hit ratio of
each row over the whole trace and over its second half, and the share of the
LRU -> Belady gap each closes on the same span.
"""
import argparse, bisect, gzip, heapq, json, math, os, random, sys

SAMPLE = 256          # candidates scored per request's evictions
SAMPLES_PER_EVICT = 32  # of them kept as training samples
HALF_LIVES = (4.0, 32.0, 256.0)
HORIZON = 2.0         # online labels: "no reuse" after HORIZON x the capacity's lifetime in requests
RETRAIN, WINDOW = 250, 2000


def load(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    return [r["hash_ids"] for r in rows], [int(r.get("output_length", 0)) for r in rows]


class Trace:
    """Requests, each block's uses (for next_use) and its parent in the prefix tree."""

    def __init__(self, requests, outputs):
        self.requests, self.outputs = requests, outputs
        self.uses, self.parent = {}, {}
        for i, h in enumerate(requests):
            for k, b in enumerate(h):
                self.uses.setdefault(b, []).append(i)
                if k:
                    self.parent[b] = h[k - 1]
        self.distinct = len(self.uses)

    def next_use(self, b, i, capacity):
        """The first request after i that reads b and is served (fits the capacity), or None."""
        u = self.uses[b]
        k = bisect.bisect_right(u, i)
        while k < len(u) and len(self.requests[u[k]]) > capacity:
            k += 1
        return u[k] if k < len(u) else None


class Block:
    __slots__ = ("first", "last", "count", "decayed", "decayed_at", "prev_gap", "depth", "after", "req_len", "out", "kids")


def features(s, t):
    f = [math.log1p(t - s.last), math.log1p(s.count), math.log1p(t - s.first),
         math.log1p(s.prev_gap if s.prev_gap is not None else 1e6), s.depth, s.after,
         math.log1p(s.req_len), math.log1p(s.out), math.log1p(s.kids)]
    f += [math.log(d * 0.5 ** ((t - s.decayed_at) / hl) + 1e-9) for d, hl in zip(s.decayed, HALF_LIVES)]
    return f


def replay(trace, capacity, score, samples=None, on_request=None, seed=1, per_request=None):
    """Prefix-mode replay. score(blocks, feature_rows, i) -> list, highest evicted first.
    samples: list to append (i, block, features) of candidates met; on_request(i) before each request;
    per_request: list to append each request's hits to.
    Returns (hit ratio, hit ratio of the second half's requests)."""
    rng = random.Random(seed)
    R, n = trace.requests, len(trace.requests)
    state, cached, children, leaves, where = {}, set(), {}, [], {}

    def add_leaf(b):
        where[b] = len(leaves)
        leaves.append(b)

    def drop_leaf(b):
        p, last = where.pop(b), leaves.pop()
        if last != b:
            leaves[p], where[last] = last, p

    hits = [0, 0]
    accesses = [0, 0]
    for i, h in enumerate(R):
        half = int(i >= n // 2)
        accesses[half] += len(h)
        if on_request is not None:
            on_request(i)
        if len(h) > capacity:
            if per_request is not None:
                per_request.append(0)
            continue
        run = 0
        while run < len(h) and h[run] in cached:
            run += 1
        hits[half] += run
        if per_request is not None:
            per_request.append(run)
        held = set(h)
        need = sum(1 for b in h if b not in cached)
        for b in h:
            if b in where:
                drop_leaf(b)
        if capacity - len(cached) < need:
            cand = rng.sample(leaves, SAMPLE) if len(leaves) > SAMPLE else list(leaves)
            rows = [features(state[b], i) for b in cand]
            if samples is not None:
                samples.extend((i, b, x) for b, x in zip(cand[:SAMPLES_PER_EVICT], rows[:SAMPLES_PER_EVICT]))
            heap = [(-v, k, b) for k, (v, b) in enumerate(zip(score(cand, rows, i), cand))]
            heapq.heapify(heap)
            tick = len(heap)
            while capacity - len(cached) < need:
                _, _, b = heapq.heappop(heap)
                cached.discard(b)
                drop_leaf(b)
                p = trace.parent.get(b)
                if p is not None and p in cached:
                    children[p] -= 1
                    if children[p] == 0 and p not in held:
                        add_leaf(p)
                        tick += 1
                        heapq.heappush(heap, (-score([p], [features(state[p], i)], i)[0], tick, p))
        for k, b in enumerate(h):
            if b not in cached:
                cached.add(b)
                children[b] = 0
                p = trace.parent.get(b)
                if p is not None:
                    children[p] += 1
            s = state.get(b)
            if s is None:
                s = state[b] = Block()
                s.first = s.last = s.decayed_at = i
                s.count, s.decayed, s.prev_gap, s.kids = 0, [0.0] * len(HALF_LIVES), None, 0
                if k:
                    state[h[k - 1]].kids += 1
            else:
                s.prev_gap = i - s.last
            s.decayed = [d * 0.5 ** ((i - s.decayed_at) / hl) + 1.0 for d, hl in zip(s.decayed, HALF_LIVES)]
            s.decayed_at = s.last = i
            s.count += 1
            s.depth, s.after, s.req_len, s.out = k, len(h) - 1 - k, len(h), trace.outputs[i]
        for b in h:
            if children[b] == 0:
                add_leaf(b)
    return (hits[0] + hits[1]) / max(1, sum(accesses)), hits[1] / max(1, accesses[1])


def lru_score(blocks, rows, i):
    return [x[0] for x in rows]  # log idle time


def belady_score(trace, capacity):
    def score(blocks, rows, i):
        far = 10 * len(trace.requests)
        return [nu if nu is not None else far for nu in (trace.next_use(b, i - 1, capacity) for b in blocks)]
    return score


def label(trace, capacity, i, b):
    nu = trace.next_use(b, i - 1, capacity)
    return math.log1p(nu - i if nu is not None else 4 * len(trace.requests))


def fit_lightgbm(xs, ys, max_rows=100_000):
    """Gradient-boosted trees (100 of 31 leaves) on at most max_rows samples (a fixed-seed subsample)."""
    import lightgbm as lgb
    import numpy as np
    x, y = np.array(xs), np.array(ys)
    if len(y) > max_rows:
        keep = np.random.default_rng(0).choice(len(y), max_rows, replace=False)
        x, y = x[keep], y[keep]
    return lgb.LGBMRegressor(n_estimators=100, num_leaves=31, learning_rate=0.1, verbose=-1).fit(x, y)


def model_score(model):
    import numpy as np
    # LightGBM's own Booster where there is one: its sklearn wrapper costs ~4 ms a call in checks, and
    # a replay scores every parent its evictions expose, one call each.
    predict = model.booster_.predict if hasattr(model, "booster_") else model.predict
    return lambda blocks, rows, i: list(predict(np.array(rows)))


def hindsight(trace, capacity, first_half_only, rounds=4, fit=fit_lightgbm):
    """DAgger on true labels: round 0 learns from LRU's candidates, each later round adds its own replay's."""
    cut = len(trace.requests) // 2 if first_half_only else len(trace.requests)
    met = []
    replay(trace, capacity, lru_score, samples=met)
    xs, ys, result = [], [], None
    for r in range(rounds):
        for i, b, x in met:
            if i < cut:
                xs.append(x)
                ys.append(label(trace, capacity, i, b))
        met = []
        result = replay(trace, capacity, model_score(fit(xs, ys)), samples=met, seed=r + 2)
    return result


def online(trace, capacity, fit=fit_lightgbm, retrain=RETRAIN, window=WINDOW, min_samples=1000, per_request=None):
    """LRB's loop: labels revealed only when known, a refit every `retrain` requests on the last `window`'s."""
    pending, labelled, model = [], [], [None]
    seen = [0, 0]  # requests, block accesses so far

    def score(blocks, rows, i):
        return lru_score(blocks, rows, i) if model[0] is None else model_score(model[0])(blocks, rows, i)

    def on_request(i):
        if i:
            seen[0] += 1
            seen[1] += len(trace.requests[i - 1])
        if i == 0 or i % retrain:
            return
        horizon = HORIZON * capacity / (seen[1] / seen[0])  # requests the capacity lasts, a few times over
        keep = []
        for t, b, x in pending:
            nu = trace.next_use(b, t - 1, capacity)
            if nu is not None and nu < i:  # came back: seen by now
                labelled.append((t, x, math.log1p(nu - t)))
            elif i - t >= horizon:         # not back within the horizon: censored there
                labelled.append((t, x, math.log1p(horizon)))
            else:
                keep.append((t, b, x))
        pending[:] = keep
        labelled[:] = [d for d in labelled if d[0] >= i - window]
        if len(labelled) >= min_samples:
            model[0] = fit([d[1] for d in labelled], [d[2] for d in labelled])

    return replay(trace, capacity, score, samples=pending, on_request=on_request, per_request=per_request)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="hindsight,forward,online")
    ap.add_argument("--capacity", default="1,5,10", help="percent of distinct blocks")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    for path in a.traces:
        trace = Trace(*load(path))
        for pct in a.capacity.split(","):
            cap = max(1, round(trace.distinct * float(pct) / 100))
            lru, bel = replay(trace, cap, lru_score), replay(trace, cap, belady_score(trace, cap))
            print(f"{os.path.basename(path)} {pct}% ({cap} blocks): LRU {lru[0]:.4f} (2nd half {lru[1]:.4f}), "
                  f"Belady {bel[0]:.4f} ({bel[1]:.4f})", flush=True)
            for m in modes:
                got = {"hindsight": lambda: hindsight(trace, cap, False), "forward": lambda: hindsight(trace, cap, True),
                       "online": lambda: online(trace, cap)}[m]()
                closed = [100 * (got[k] - lru[k]) / (bel[k] - lru[k]) if bel[k] > lru[k] else 0.0 for k in (0, 1)]
                print(f"    {m:9s} {got[0]:.4f} ({closed[0]:+.0f}% of the gap), 2nd half {got[1]:.4f} ({closed[1]:+.0f}%)",
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
