"""TieredCache's remote tier (Redis) from Python, against real redis-server
processes started here on free 127.0.0.1 ports: blocks one instance wrote
read by another of the same namespace, nothing read across tenants, ranks or
dtypes, values planted without the deployment's secret refused, a server
killed mid-run costing misses and never an exception or a silent loss, bad
configuration refused naming the field, and the hits against a naive model
of the store."""

import hashlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import kvpolicy

REDIS_SERVER = shutil.which("redis-server")
ITEM_BYTES = 256

needs_server = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not on PATH (scripts/install-deps.sh installs it)")
needs_redis = pytest.mark.skipif(not kvpolicy.HAS_REDIS, reason="this kvpolicy was built without Redis support")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Raw:
    """A RESP client on a plain socket (no redis-py): what a writer without
    kvpolicy, or without the deployment's secret, can do to the store."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def close(self):
        self.s.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            assert chunk, "redis closed the connection"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(65536)
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise AssertionError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.s.sendall(resp(*args))
        return self._reply()


class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvpolicy-redis-")
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log")])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                r = Raw(self.port)
                ok = r.call("PING") == "PONG"
                r.close()
                if ok:
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer")

    def kill(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server():
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not on PATH (scripts/install-deps.sh installs it)")
    if not kvpolicy.HAS_REDIS:
        pytest.skip("this kvpolicy was built without Redis support (hiredis and OpenSSL missing at build time)")
    s = RedisServer()
    yield s
    s.close()


def remote_config(at, **fields):
    cfg = {"host": "127.0.0.1", "port": at, "model": "test-model", "io_timeout_ms": 300, "connect_timeout_ms": 200}
    cfg.update(fields)
    return cfg


def cache(at, gpu=4, cpu=4, **fields):
    return kvpolicy.TieredCache(gpu, cpu, item_bytes=ITEM_BYTES, remote=remote_config(at, **fields))


def pattern(digest, salt=b""):
    """The bytes a block holds when correct: no two blocks share them."""
    return np.frombuffer(hashlib.sha256(salt + bytes(digest)).digest() * (ITEM_BYTES // 32), dtype=np.uint8)


def doc(n, seed):
    """The digests of an n-block document."""
    tokens = np.arange(n * 16, dtype=np.int32) + seed * 100_000
    return [bytes(d) for d in kvpolicy.block_digests(tokens, 16)]


def step(c, session, digests, salt=b""):
    """One request: admit through the store, run the plan, compute what was
    not fetched (and what a failed fetch must recompute), check every held
    block's bytes, release. Returns (admission, run_plan's report)."""
    a = c.admit_through(session, digests)
    rep = c.run_plan()
    blocks = a["blocks"]
    for i in range(a["hit_blocks"], len(digests)):  # the forward pass: the miss tail
        c.gpu_arena[blocks[i]] = pattern(digests[i], salt)
    by_key = dict(zip(a["hashes"].tolist(), digests))
    for key, slot in zip(rep["recompute_keys"].tolist(), rep["recompute_blocks"].tolist()):
        c.gpu_arena[slot] = pattern(by_key[key], salt)
    for i, d in enumerate(digests):
        assert np.array_equal(c.gpu_arena[blocks[i]], pattern(d, salt)), f"block {i} holds another block's bytes"
    c.release(session)
    assert c.check_invariants() == ""
    return a, rep


_others = itertools.count(10_000)


def publish(c, digests, salt=b""):
    """Computes `digests` and pushes them out of both tiers (4 + 4 blocks)
    with two other documents never seen before: every block is written back
    to the store."""
    step(c, 1, digests, salt)
    written = set()
    for other in (2, 3):
        _, rep = step(c, other, doc(4, next(_others)), salt)
        assert rep["failed"] == 0
        written |= set(rep["written_keys"].tolist())
    assert set(kvpolicy.digest_handles(digests).tolist()) <= written


@needs_server
def test_blocks_one_instance_wrote_are_read_by_another_of_the_same_namespace(server):
    a, b = cache(server.port), cache(server.port)
    d = doc(4, 1)
    publish(a, d)
    adm, rep = step(b, 7, d)
    assert adm["remote_blocks"] == 4 and adm["hit_blocks"] == 4 and adm["computed_blocks"] == 0
    assert sorted(rep["fetched_keys"].tolist()) == sorted(kvpolicy.digest_handles(d).tolist())
    assert rep["failed"] == 0 and len(rep["recompute_keys"]) == 0
    stats = b.remote_stats()
    assert stats["rejected_values"] == 0 and stats["bytes_received"] >= 4 * ITEM_BYTES
    assert stats["key_prefix"].startswith("kvp:test-model:default:1:16:256:tp0.1:pp0.1:")
    # The store holds the digest whole in each key.
    raw = Raw(server.port)
    keys = raw.call("KEYS", "*")
    raw.close()
    assert [k.decode().split(":")[-2] for k in keys if bytes(d[0]).hex() in k.decode()] == [bytes(d[0]).hex()]


@needs_server
@pytest.mark.parametrize("field,value", [("tenant", "acme"), ("tp_rank", 1), ("dtype", "fp8_e4m3"), ("model", "other-model")])
def test_another_tenant_rank_dtype_or_model_reads_nothing(server, field, value):
    writer = cache(server.port, tp_size=2)
    d = doc(4, 2)
    publish(writer, d)
    same = cache(server.port, tp_size=2)
    assert same.admit_through(1, d)["remote_blocks"] == 4
    same.run_plan()
    other = cache(server.port, **{"tp_size": 2, field: value})
    adm, rep = step(other, 1, d)
    assert adm["remote_blocks"] == 0 and adm["computed_blocks"] == 4
    assert len(rep["fetched_keys"]) == 0


@needs_server
@pytest.mark.parametrize("mac", ["poly1305", "hmac-sha256"])
def test_values_planted_without_the_deployment_secret_are_refused_with_a_mac(server, mac):
    secret, wrong = b"deployment-secret-0123456789abcdef", b"attacker-secret-0123456789abcdef!"
    d = doc(4, 3)
    honest = cache(server.port, mac_secret=secret, mac=mac)
    publish(honest, d)
    # A writer without the secret overwrites the values with its own bytes (MACed under its key).
    forger = cache(server.port, mac_secret=wrong, mac=mac)
    publish(forger, d, salt=b"forged")
    reader = cache(server.port, mac_secret=secret, mac=mac)
    adm, rep = step(reader, 1, d)  # step checks the bytes: the honest ones, recomputed
    assert adm["remote_blocks"] == 4  # present, so staged...
    assert rep["failed"] == 8 and len(rep["recompute_keys"]) == 4  # ...refused at fetch (and their swap-ins)
    assert reader.remote_stats()["rejected_values"] == 4
    # Without a MAC the same planted values would be taken: what the secret stops.
    open_reader = cache(server.port)
    open_forger = cache(server.port)
    publish(open_forger, d, salt=b"forged")
    adm = open_reader.admit_through(1, d)
    rep = open_reader.run_plan()
    assert rep["failed"] == 0
    assert np.array_equal(open_reader.gpu_arena[adm["blocks"][0]], pattern(d[0], b"forged"))


@needs_server
def test_a_value_moved_under_another_blocks_key_is_refused(server):
    d, e = doc(4, 4), doc(4, 5)
    w = cache(server.port, mac_secret=b"s" * 32)
    publish(w, d)
    publish(w, e)
    raw = Raw(server.port)
    prefix = w.remote_stats()["key_prefix"]
    key_of = lambda digest: (prefix + bytes(digest).hex() + ":0").encode()
    assert raw.call("SET", key_of(d[0]), raw.call("GET", key_of(e[0]))) == "OK"  # e's value under d's first key
    raw.close()
    r = cache(server.port, mac_secret=b"s" * 32)
    adm, rep = step(r, 1, d)
    assert adm["remote_blocks"] == 4 and rep["failed"] >= 1
    assert r.remote_stats()["rejected_values"] == 1


@needs_server
def test_server_killed_mid_run_costs_misses_never_an_exception_nor_a_silent_loss(server):
    rng = random.Random(5)
    docs = [doc(rng.randint(1, 4), 100 + i) for i in range(12)]
    c = cache(server.port, gpu=6, cpu=6)
    seen, accounted = set(), set()  # every block admitted; those written to the store or reported dropped
    written_after_restart = 0
    s = 0
    while s < 120 or written_after_restart == 0:  # on until the restarted store takes write-backs
        assert s < 2000, "no write-back reached the restarted server"
        if s >= 120:
            time.sleep(0.02)  # the node's reconnect backoff (100 ms, doubling) runs on the clock
        if s == 50:
            server.kill()
        if s == 90:
            server.start()  # empty: what it held is gone with it
        d = docs[rng.randrange(len(docs))]
        a = c.admit_through(s, d)
        seen |= set(a["hashes"].tolist())
        accounted |= set(a["dropped_keys"].tolist())  # victims the plan gave up
        rep = c.run_plan()
        accounted |= set(rep["written_keys"].tolist()) | set(rep["dropped_keys"].tolist())
        if s >= 90:
            written_after_restart += len(rep["written_keys"])
        if 50 <= s < 90:
            assert a["remote_blocks"] == 0 and len(rep["written_keys"]) == 0 and len(rep["fetched_keys"]) == 0
        blocks = a["blocks"]
        by_key = dict(zip(a["hashes"].tolist(), d))
        for i in range(a["hit_blocks"], len(d)):
            c.gpu_arena[blocks[i]] = pattern(d[i])
        for key, slot in zip(rep["recompute_keys"].tolist(), rep["recompute_blocks"].tolist()):
            c.gpu_arena[slot] = pattern(by_key[key])
        for i, digest in enumerate(d):
            assert np.array_equal(c.gpu_arena[blocks[i]], pattern(digest))
        c.release(s)
        assert c.check_invariants() == ""
        # Nothing lost silently: each block is cached here, or in the store, or reported dropped.
        for h in seen:
            assert c.where(h) in ("gpu", "cpu") or h in accounted, f"block {h} vanished at step {s}"
        s += 1


@needs_server
def test_hits_equal_a_naive_model_of_the_store_over_two_instances(server):
    """Each admission's remote_blocks is the run of blocks past the local
    prefix that the store holds, by a model that is only the set of blocks
    run_plan reported written."""
    rng = random.Random(11)
    docs = [doc(rng.randint(1, 6), 500 + i) for i in range(30)]
    caches = [cache(server.port, gpu=8, cpu=8), cache(server.port, gpu=8, cpu=8)]
    stored = set()
    remote_hits = 0
    for s in range(400):
        c = caches[rng.randrange(2)]
        d = docs[rng.randrange(len(docs))]
        handles = kvpolicy.digest_handles(d)
        local = c.lookup(handles)["run"]
        handles = handles.tolist()
        expect = 0
        while local + expect < len(d) and handles[local + expect] in stored:
            expect += 1
        a, rep = step(c, s, d)
        assert a["remote_blocks"] == expect, f"step {s}"
        assert rep["failed"] == 0
        stored |= set(rep["written_keys"].tolist())
        remote_hits += expect
    assert remote_hits > 50


@needs_server
def test_64_bit_hash_identity_and_digests_refused_there(server):
    a, b = cache(server.port, identity="hash64"), cache(server.port, identity="hash64")
    hashes = [11, 22, 33, 44]
    def step_h(c, s, h):
        out = c.admit_through(s, h), c.run_plan()
        c.release(s)
        return out

    step_h(a, 1, hashes)
    for x in (2, 3):
        step_h(a, x, [x * 100 + i for i in range(4)])
    adm, rep = step_h(b, 1, hashes)
    assert adm["remote_blocks"] == 4 and rep["failed"] == 0
    with pytest.raises(kvpolicy.UsageError, match="64-bit hashes"):
        a.admit_through(9, [b"x" * 32])
    c = cache(server.port)
    with pytest.raises(kvpolicy.UsageError, match=r"blocks\[0\]: expected 32 bytes.*identity='hash64'"):
        c.admit_through(9, [1, 2])
    with pytest.raises(kvpolicy.UsageError, match="expected 32 bytes .*got 3 bytes"):
        c.admit_through(9, [b"abc"])
    assert c.check_invariants() == ""


@needs_server
def test_run_plan_runs_each_plan_once(server):
    c = cache(server.port)
    with pytest.raises(kvpolicy.UsageError, match="no step has ended yet"):
        c.run_plan()
    c.admit_through(1, doc(2, 6))
    c.run_plan()
    with pytest.raises(kvpolicy.UsageError, match="already run or reported"):
        c.run_plan()
    c.begin_step()
    with pytest.raises(kvpolicy.UsageError, match="a step is open"):
        c.run_plan()
    c.end_step()
    plain = kvpolicy.TieredCache(4, 4)
    with pytest.raises(kvpolicy.UsageError, match="no remote tier"):
        plain.admit_through(1, [1])


@needs_server
def test_bad_configuration_is_refused_naming_the_field_and_the_fix(server):
    p = server.port
    bad = [
        (dict(port=72953), r"nodes\[0\]\.port is 72953.*1-65535"),
        (dict(port=0), r"port is 0"),
        (dict(host=""), r"host is empty"),
        (dict(io_timeout_ms=0), r"io_timeout is 0 ms.*does not switch it off"),
        (dict(connect_timeout_ms=-5), r"connect_timeout is -5 ms"),
        (dict(tp_rank=2, tp_size=2), r"tp_rank 2 is not below tp_size 2"),
        (dict(model=""), r"model is empty"),
        (dict(model="llama{70b}"), r"without braces"),
        (dict(user="alice"), r"user is \"alice\" but store_config::password is empty"),
        (dict(tls_ca_file="/tmp/ca.pem"), r"'tls' is not True"),
        (dict(tls=True, tls_cert_file="c.pem"), r"cert_file and tls.key_file go together"),
        (dict(mac_secret=b"short"), r"the secret has 5 bytes; give at least 16"),
        (dict(mac="poly1305"), r"mac_secret.*is not"),
        (dict(mac="md5", mac_secret=b"s" * 32), r"remote\['mac'\] is 'md5'; give 'poly1305'"),
        (dict(identity="sha1"), r"remote\['identity'\] is 'sha1'; give 'digest'"),
        (dict(colour="red"), r"unknown field 'colour'; the fields are: host, port"),
        (dict(port="6379"), r"remote\['port'\]: expected an int, got str"),
        (dict(port=2 ** 70), r"remote\['port'\] is"),
        (dict(cluster="yes"), r"remote\['cluster'\]: expected True or False"),
        (dict(nodes=["127.0.0.1"], host=None, port=None), r"give \"host:port\""),
        (dict(nodes=["127.0.0.1:6379"], host="h"), r"'nodes' and 'host'/'port' both given"),
    ]
    for fields, message in bad:
        with pytest.raises(kvpolicy.ConfigError, match=message):
            kvpolicy.TieredCache(4, 4, item_bytes=ITEM_BYTES, remote=remote_config(p, **fields))
    with pytest.raises(kvpolicy.ConfigError, match="remote tier needs item_bytes"):
        kvpolicy.TieredCache(4, 4, remote=remote_config(p))
    with pytest.raises(kvpolicy.ConfigError, match="remote tier without a CPU tier"):
        kvpolicy.TieredCache(4, 0, item_bytes=ITEM_BYTES, remote=remote_config(p))
    closed = free_port()
    with pytest.raises(kvpolicy.ConfigError, match=f"127.0.0.1:{closed}: cannot connect.*start redis-server there"):
        cache(closed)
    with pytest.raises(kvpolicy.ConfigError, match="kvpolicy-no-such-host.invalid.*give a host name this machine resolves"):
        cache(p, host="kvpolicy-no-such-host.invalid")
    # nodes as "host:port" and (host, port) both work, and "localhost" resolves.
    assert cache(0, nodes=[f"localhost:{p}"], host=None, port=None).has_remote
    assert cache(0, nodes=[("127.0.0.1", p)], host=None, port=None).has_remote


def test_without_redis_support_a_remote_tier_says_so():
    if kvpolicy.HAS_REDIS:
        pytest.skip("this kvpolicy has Redis support (the case checked is a build without hiredis)")
    with pytest.raises(kvpolicy.ConfigError, match="built without Redis support"):
        kvpolicy.TieredCache(4, 4, item_bytes=64, remote={"port": 6379})
    with pytest.raises(kvpolicy.ConfigError, match="block_digests needs the Redis remote tier"):
        kvpolicy.block_digests(list(range(16)))


@needs_server
def test_the_documented_example_runs_and_a_second_instance_hits(server):
    port = server.port
    secret = os.urandom(32)  # the deployment's secret: the same on every instance that shares the store
    tokens = np.arange(64, dtype=np.int32)

    def compute_block(i):  # stands for the model's forward pass writing block i's KV
        return pattern(digests[i])

    caches = []
    for _ in range(2):
        # example-begin remote
        import kvpolicy

        cache = kvpolicy.TieredCache(
            gpu_blocks=4, cpu_blocks=4, item_bytes=256,  # item_bytes: one block's KV bytes
            remote={
                "host": "127.0.0.1", "port": port,
                "model": "llama-3-8b", "dtype": "bfloat16", "tp_rank": 0, "tp_size": 1,
                "tenant": "acme",  # vLLM's cache_salt: instances of other tenants share nothing
                "mac_secret": secret,  # values without a valid MAC under it are refused
                "io_timeout_ms": 200,  # one deadline per batch, whatever the server does
            })
        digests = kvpolicy.block_digests(tokens, block_size=16)  # SHA-256 chain: (n, 32) uint8
        a = cache.admit_through(session=1, blocks=digests)  # asks the store past the local prefix
        report = cache.run_plan()  # fetches, write-backs and local copies, then reported
        for i in range(a["hit_blocks"], len(digests)):  # the forward pass fills the miss tail...
            cache.gpu_arena[a["blocks"][i]] = compute_block(i)
        for key, slot in zip(report["recompute_keys"], report["recompute_blocks"]):  # ...and failed fetches
            cache.gpu_arena[slot] = compute_block(list(a["hashes"]).index(key))
        cache.release(1)
        # example-end
        caches.append((cache, a))
    first = caches[0][1]
    assert first["remote_blocks"] == 0 and first["computed_blocks"] == 4
    # The first instance's blocks are still in its own tiers: push them out so the second can hit.
    c0 = caches[0][0]
    for s in (2, 3):
        c0.admit_through(s, kvpolicy.block_digests(tokens + 1000 * s, 16))
        c0.run_plan()
        c0.release(s)
    third = kvpolicy.TieredCache(4, 4, item_bytes=256, remote={
        "host": "127.0.0.1", "port": port, "model": "llama-3-8b", "dtype": "bfloat16", "tenant": "acme",
        "mac_secret": secret})
    a = third.admit_through(1, digests)
    assert a["remote_blocks"] == 4 and third.run_plan()["failed"] == 0
    for i in range(4):
        assert np.array_equal(third.gpu_arena[a["blocks"][i]], pattern(digests[i]))
