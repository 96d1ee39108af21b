"""simulate() agrees with the C++ simulator (its binary, and libCacheSim's committed counts)."""

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kvpolicy
from conftest import REPO


def kvpolicy_sim():
    env = os.environ.get("KVPOLICY_SIM")
    for p in ([env] if env else []) + [str(REPO / "build/release/tools/kvpolicy-sim"), shutil.which("kvpolicy-sim")]:
        if p and Path(p).is_file():
            return p
    pytest.skip("no kvpolicy-sim binary (build the release preset, or set KVPOLICY_SIM)")


def test_flat_misses_equal_libcachesim_on_the_mooncake_block_csvs(traces):
    """tests/data/libcachesim_miss_counts.csv: the C++ simulator matches these exactly."""
    rows = list(csv.DictReader(open(REPO / "tests/data/libcachesim_miss_counts.csv")))
    # s3fifo is left out: libCacheSim's is the fill-main variant, not kvpolicy's default (the C++
    # test tests/sim_replay.cpp compares that variant by name).
    wanted = [r for r in rows if r["policy"] in ("lru", "arc", "belady") and int(r["capacity"]) <= 10000]
    assert wanted
    for trace in sorted({r["trace"] for r in wanted}):
        mine = [r for r in wanted if r["trace"] == trace]
        got = kvpolicy.simulate(
            str(traces / "mooncake" / trace),
            policies=sorted({r["policy"] for r in mine}),
            capacities=sorted({int(r["capacity"]) for r in mine}),
        )
        by = {(g["policy"], g["capacity"]): g for g in got}
        for r in mine:
            g = by[(r["policy"], int(r["capacity"]))]
            assert g["mode"] == "flat"
            assert (g["accesses"], g["misses"]) == (int(r["accesses"]), int(r["misses"])), (trace, r)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (["--trace", "{m}/conversation_trace.jsonl", "--block-size", "512", "--policy", "lru,arc,belady", "--capacity", "500,5000"],
         dict(trace="{m}/conversation_trace.jsonl", block_size=512, policies=["lru", "arc", "belady"], capacities=[500, 5000])),
        (["--trace", "{m}/synthetic_trace.jsonl", "--block-size", "512", "--mode", "tiered", "--policy", "lru,s3fifo",
          "--capacity", "1000", "--cpu-capacity", "5000"],
         dict(trace="{m}/synthetic_trace.jsonl", block_size=512, mode="tiered", policies="lru,s3fifo", capacities=1000,
              cpu_capacity=5000)),
        (["--trace", "{m}/conversation_trace.jsonl", "--block-size", "512", "--policy", "lru,session_aware_lru,belady",
          "--capacity", "1827", "--return-hints", "oracle:0.5"],
         dict(trace="{m}/conversation_trace.jsonl", block_size=512, policies="lru,session_aware_lru,belady",
              capacities=1827, return_hints="oracle:0.5")),
        (["--trace", "{m}/conversation_trace.jsonl", "--block-size", "512", "--mode", "offload",
          "--policy", "lru,queue_aware_adaptive_kv,belady", "--capacity", "300", "--cpu-capacity", "2000",
          "--serve-rate", "3e6", "--prefill-chunk", "65536", "--return-hints", "ends"],
         dict(trace="{m}/conversation_trace.jsonl", block_size=512, mode="offload",
              policies="lru,queue_aware_adaptive_kv,belady", capacities=300, cpu_capacity=2000, serve_rate=3e6,
              prefill_chunk=65536, return_hints="ends")),
        (["--trace", "{m}/conversation_trace.jsonl", "--block-size", "512", "--mode", "offload",
          "--policy", "queue_aware_predicted_return", "--capacity", "300", "--cpu-capacity", "2000",
          "--serve-rate", "3e6", "--queue-past-gpu"],
         dict(trace="{m}/conversation_trace.jsonl", block_size=512, mode="offload",
              policies="queue_aware_predicted_return", capacities=300, cpu_capacity=2000, serve_rate=3e6,
              queue_past_gpu=True)),
        (["--trace", "{m}/conversation_trace.jsonl", "--block-size", "512", "--mode", "offload",
          "--policy", "queue_aware_predicted_return", "--capacity", "300", "--cpu-capacity", "500",
          "--serve-rate", "3e6", "--return-hints", "ends", "--store-admission"],
         dict(trace="{m}/conversation_trace.jsonl", block_size=512, mode="offload",
              policies="queue_aware_predicted_return", capacities=300, cpu_capacity=500, serve_rate=3e6,
              return_hints="ends", store_admission=True)),
        (["--policy", "s3fifo,lru", "--capacity", "800", "--sessions", "50", "--option", "s3fifo.small_fraction=0.6",
          "--option", "s3fifo.move_to_main_threshold=3"],
         dict(policies="s3fifo,lru", capacities=800, sessions=50,
              policy_options={"s3fifo": {"small_fraction": 0.6, "move_to_main_threshold": 3}})),
        (["--policy", "arc", "--capacity", "600", "--sessions", "50", "--match-lru"],
         dict(policies="arc", capacities=600, sessions=50, match_lru=True)),
        (["--policy", "lru,s3fifo", "--capacity", "300", "--sessions", "60", "--mode", "tiered", "--cpu-capacity",
          "600", "--instances", "3", "--remote-capacity", "2000", "--remote-bandwidth", "3"],
         dict(policies="lru,s3fifo", capacities=300, sessions=60, mode="tiered", cpu_capacity=600, instances=3,
              remote_capacity=2000, remote_bandwidth=3)),
        (["--policy", "lru,gdsf", "--capacity", "800", "--sessions", "50"],
         dict(policies=["lru", "gdsf"], capacities=[800], sessions=50)),
        (["--policy", "arc", "--capacity", "800", "--sessions", "50", "--bounds"],
         dict(policies="arc", capacities=800, sessions=50, bounds=True)),
        (["--policy", "s3fifo", "--capacity", "400,800", "--sessions", "50"],
         dict(policies="s3fifo", capacities=[400, 800], sessions=50)),
    ],
)
def test_same_results_as_the_kvpolicy_sim_binary(traces, args, kwargs):
    m = str(traces / "mooncake")
    args = [a.replace("{m}", m) for a in args]
    kwargs = {k: (v.replace("{m}", m) if isinstance(v, str) else v) for k, v in kwargs.items()}
    out = subprocess.run([kvpolicy_sim(), *args, "--output", "json"], check=True, capture_output=True, text=True).stdout
    # Both run exactly what was asked: one row per (policy, capacity), plus lru and belady with
    # --bounds / bounds=True.
    asked = kwargs["policies"].split(",") if isinstance(kwargs["policies"], str) else kwargs["policies"]
    caps = kwargs["capacities"] if isinstance(kwargs["capacities"], list) else [kwargs["capacities"]]
    runs = asked + [p for p in ("lru", "belady") if kwargs.get("bounds") and p not in asked]
    expect = [json.loads(line) for line in out.splitlines()]
    assert [(e["policy"], e["capacity"]) for e in expect] == [(p, c) for c in caps for p in runs]
    got = kvpolicy.simulate(**kwargs)
    assert len(got) == len(expect) > 0
    timing = {"seconds", "accesses_per_second"}
    for g, e in zip(got, expect):
        assert set(g) == set(e)  # the same fields
        assert {k: v for k, v in g.items() if k not in timing} == {k: v for k, v in e.items() if k not in timing}


def test_capacities_take_percentages_as_the_binary_does(traces):
    """capacities=... takes --capacity's forms; P% is of the trace's distinct blocks (counted here)."""
    trace = traces / "mooncake" / "conversation_trace.jsonl"
    distinct = set()
    for line in open(trace):
        distinct.update(json.loads(line)["hash_ids"])
    args = ["--trace", str(trace), "--block-size", "512", "--policy", "lru,arc", "--capacity", "1%,5%,700"]
    out = subprocess.run([kvpolicy_sim(), *args, "--output", "json"], check=True, capture_output=True, text=True).stdout
    expect = [json.loads(line) for line in out.splitlines()]
    assert [e["capacity"] for e in expect] == [len(distinct) // 100] * 2 + [len(distinct) * 5 // 100] * 2 + [700] * 2
    timing = {"seconds", "accesses_per_second"}
    for capacities in ("1%,5%,700", ["1%", "5%", 700]):
        got = kvpolicy.simulate(str(trace), block_size=512, policies="lru,arc", capacities=capacities)
        assert [{k: v for k, v in g.items() if k not in timing} for g in got] == [
            {k: v for k, v in e.items() if k not in timing} for e in expect
        ]
    with pytest.raises(kvpolicy.ConfigError, match=r"^--capacity: '150%' is outside \(0%, 100%\]"):
        kvpolicy.simulate(str(trace), capacities="150%")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--capacity: '-5' is neither a number of blocks nor a percentage"):
        kvpolicy.simulate(capacities=[-5])


def test_built_in_workload_fields_and_frame():
    rows = kvpolicy.simulate(policies=["lru", "belady"], capacities=[300], sessions=40)
    assert [r["policy"] for r in rows] == ["lru", "belady"]
    assert rows[1]["hits"] >= rows[0]["hits"]  # Belady is the offline optimum
    for r in rows:
        assert r["hits"] + r["misses"] == r["accesses"]
        assert {"token_hit_ratio", "bypassed_requests", "miss_ratio"} <= set(r)
    pandas = pytest.importorskip("pandas")
    frame = kvpolicy.simulate(policies="lru", capacities=[300, 600], sessions=40, as_frame=True)
    assert isinstance(frame, pandas.DataFrame) and list(frame["capacity"]) == [300, 600]


def test_simulate_errors():
    with pytest.raises(kvpolicy.UnknownNameError, match=r"^unknown eviction policy 'nope'; accepted: all, fifo"):
        kvpolicy.simulate(policies=["nope"])
    with pytest.raises(kvpolicy.ConfigError, match=r"^--mode tiered needs --cpu-capacity N"):
        kvpolicy.simulate(mode="tiered")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--capacity: '0' blocks cannot hold anything"):
        kvpolicy.simulate(capacities=[0])
    with pytest.raises(kvpolicy.ConfigError, match=r"cannot open trace '/nonexistent.jsonl'"):
        kvpolicy.simulate("/nonexistent.jsonl")
    with pytest.raises(kvpolicy.ConfigError, match="unknown option 'sesions'; workload options: sessions"):
        kvpolicy.simulate(sesions=3)
    with pytest.raises(kvpolicy.ConfigError, match=r"^unknown option 'alhpa'.*; prefill cost options: alpha, beta"):
        kvpolicy.simulate(alhpa=1e-9)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--format xml: give mooncake or csv$"):
        kvpolicy.simulate(format="xml")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--mode fast: give flat, prefix, tiered or offload$"):
        kvpolicy.simulate(mode="fast")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--mode prefix needs requests .*a CSV holds only block accesses"):
        kvpolicy.simulate("/nonexistent.csv", mode="prefix")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--policy: give at least one policy name, or all$"):
        kvpolicy.simulate(policies=[])
    with pytest.raises(kvpolicy.ConfigError, match=r"^--capacity: give at least one capacity"):
        kvpolicy.simulate(capacities=[])
    with pytest.raises(kvpolicy.ConfigError, match=r"^--block-size 0: give the tokens per block, at least 1$"):
        kvpolicy.simulate(block_size=0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--layers 0: give the layers per block, at least 1$"):
        kvpolicy.simulate(layers=0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--mode offload needs --cpu-capacity N"):
        kvpolicy.simulate(mode="offload")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--prefill-chunk applies to offload mode"):
        kvpolicy.simulate(prefill_chunk=4096)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--mode offload: reuse_oracle_lru reads each block's next use"):
        kvpolicy.simulate(mode="offload", cpu_capacity=100, policies="lru,reuse_oracle_lru")
    with pytest.raises(kvpolicy.ConfigError, match=r"^--layers applies to prefix and tiered modes; offload mode"):
        kvpolicy.simulate(mode="offload", cpu_capacity=100, layers=4)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--lookahead and --serve-rate both model the waiting queue"):
        kvpolicy.simulate(lookahead=4, serve_rate=1e6)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--queue-past-gpu applies to offload mode with a waiting queue"):
        kvpolicy.simulate(mode="offload", cpu_capacity=100, queue_past_gpu=True)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--store-admission applies to offload mode"):
        kvpolicy.simulate(mode="tiered", cpu_capacity=100, store_admission=True)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--remote-capacity and --instances need --mode tiered"):
        kvpolicy.simulate(instances=2)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--instances 0 serves nothing; give at least 1"):
        kvpolicy.simulate(instances=0)
    with pytest.raises(kvpolicy.ConfigError, match=r"^--option arc.p: arc is not compared here; add it to --policy"):
        kvpolicy.simulate(policies="lru", policy_options={"arc": {"p": 1}})
    with pytest.raises(kvpolicy.ConfigError, match=r"s3fifo: option small_fraction = 2 is outside"):
        kvpolicy.simulate(policies="s3fifo", policy_options={"s3fifo": {"small_fraction": 2}})


def test_derive_sessions_is_the_simulators_conversations():
    """A turn joins the conversation whose last full block is its deepest; a shared first block
    (a system prompt another conversation computed first) ties nothing together."""
    hashes = [[1, 2], [1, 2, 3, 4], [1, 9], [1, 2, 3, 4, 5], [1, 9, 10], [7]]
    lengths = [32, 64, 32, 80, 48, 16]
    assert kvpolicy.derive_sessions(hashes, lengths, 16) == [0, 0, 1, 0, 1, 2]
    with pytest.raises(kvpolicy.ConfigError, match="2 hash lists and 1 input lengths"):
        kvpolicy.derive_sessions([[1], [2]], [16], 16)


def test_return_hints_reach_session_aware_lru(traces):
    """The conversation trace at 1%: told when each conversation comes back (or that it ends),
    session_aware_lru keeps what returns, and adaptive_kv, whose session expert hears the hints,
    follows it; LRU ignores the hints."""
    trace = str(traces / "mooncake" / "conversation_trace.jsonl")
    run = lambda hints: {r["policy"]: r["hit_ratio"] for r in kvpolicy.simulate(
        trace, policies="lru,session_aware_lru,adaptive_kv", capacities=1827, block_size=512, return_hints=hints)}
    plain, ends, oracle = run(None), run("ends"), run("oracle")
    assert plain["lru"] == ends["lru"] == oracle["lru"]
    assert plain["session_aware_lru"] + 0.05 < ends["session_aware_lru"] < oracle["session_aware_lru"]
    assert plain["adaptive_kv"] + 0.03 < oracle["adaptive_kv"]
    assert oracle["adaptive_kv"] > plain["session_aware_lru"] + 0.05
    with pytest.raises(kvpolicy.ConfigError, match=r"--return-hints oracle:x: give ends"):
        kvpolicy.simulate(trace, return_hints="oracle:x")
    with pytest.raises(kvpolicy.ConfigError, match="applies to prefix, tiered and offload modes"):
        kvpolicy.simulate(trace, mode="flat", return_hints="ends")


def test_return_hints_from_a_file_equal_the_oracle_when_they_are_the_truth(tmp_path):
    """A hints file of each session's true gaps (ms) replays exactly as --return-hints oracle;
    a malformed line is a ParseError naming file:line."""
    import random

    rng = random.Random(7)
    requests, chains, t = [], {}, 0
    for _ in range(600):
        t += rng.randint(1, 40)
        s = rng.randrange(30)
        chain = chains.setdefault(s, [])
        chain.extend([1000 * s + len(chain) + k for k in range(rng.randint(1, 3))])
        requests.append({"timestamp": t, "input_length": 16 * len(chain), "output_length": rng.randint(1, 500),
                         "hash_ids": list(chain), "session": s})
    trace = tmp_path / "sessions.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in requests))
    nxt, gaps = {}, [None] * len(requests)
    for i in range(len(requests) - 1, -1, -1):
        s = requests[i]["session"]
        gaps[i] = "never" if s not in nxt else str(nxt[s] - requests[i]["timestamp"])
        nxt[s] = requests[i]["timestamp"]
    hints = tmp_path / "hints.txt"
    hints.write_text("\n".join(gaps) + "\n")
    run = lambda h: kvpolicy.simulate(str(trace), policies="session_aware_lru", capacities=[40, 120], block_size=16,
                                      return_hints=h)
    timing = {"seconds", "accesses_per_second"}
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]
    assert strip(run(f"file:{hints}")) == strip(run("oracle"))
    assert strip(run(f"file:{hints}")) != strip(run(None))
    gaps[3] = "soon"
    hints.write_text("\n".join(gaps) + "\n")
    with pytest.raises(kvpolicy.ParseError, match=r"hints.txt:4: 'soon' is not a hint"):
        run(f"file:{hints}")
    with pytest.raises(kvpolicy.ConfigError, match=r"cannot open it"):
        run(f"file:{tmp_path}/missing.txt")
