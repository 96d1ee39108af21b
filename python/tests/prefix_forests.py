"""Random prefix forests for the bounds scripts' tests: each request is a root-to-node chain of one
random forest (block ids 1000 + node), half of them within the first 30 nodes, so prefixes repeat."""


def random_requests(rng, requests, nodes):
    parent = [-1 if v == 0 or rng.random() < 0.15 else rng.randrange(v) for v in range(nodes)]
    trace = []
    for _ in range(requests):
        end = rng.randrange(30 if rng.random() < 0.5 else nodes)
        chain = []
        while end >= 0:
            chain.insert(0, 1000 + end)
            end = parent[end]
        trace.append(chain)
    return trace


def next_served_uses(requests, capacity):
    """later[i][pos]: the next request after i that reads requests[i][pos] and fits the capacity (a
    longer one is served uncached, so it is no use), or infinity: Belady's key in popularity-bounds'
    replay (priority -later[i][pos])."""
    later, seen = [None] * len(requests), {}
    for i in range(len(requests) - 1, -1, -1):
        later[i] = [seen.get(b, float("inf")) for b in requests[i]]
        if len(requests[i]) <= capacity:
            for b in requests[i]:
                seen[b] = i
    return later
