"""TieredCache: the classic two-tier property, plans, failed copies, bad input."""

import random

import numpy as np
import pytest

import kvpolicy


def requests(seed, n, conversations, longest):
    rng = random.Random(seed)
    for _ in range(n):
        c = rng.randrange(conversations)
        yield c, [c * 1000 + i for i in range(rng.randint(1, longest))]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lru_over_lru_serves_the_hits_of_one_lru_tier_of_both_sizes(seed):
    two = kvpolicy.TieredCache(16, 48, "lru", "lru")
    one = kvpolicy.TieredCache(64)
    hits_two = hits_one = 0
    for session, (conv, hashes) in enumerate(requests(seed, 3000, 40, 12)):
        a = two.admit(session, hashes)
        b = one.admit(session, hashes)
        assert a["gpu_hits"] + a["cpu_hits"] == a["hit_blocks"]
        assert len(a["blocks"]) == len(hashes)
        # every CPU hit is a copy in the plan, every GPU victim a swap-out or an exchange
        assert a["swap_ins"] + a["exchanges"] == a["cpu_hits"]
        hits_two += a["hit_blocks"]
        hits_one += b["hit_blocks"]
        two.release(session)
        one.release(session)
        assert two.check_invariants() == ""
    assert hits_two == hits_one > 0
    m = two.metrics()
    assert m["gpu"]["hit_blocks"] + m["cpu"]["hit_blocks"] == hits_two
    assert m["requests"] == 3000


def test_any_pair_of_policy_names():
    for gpu, cpu in (("arc", "checkerboard"), ("s3fifo", "lirs"), ("belady", "fifo")):
        c = kvpolicy.TieredCache(8, 16, gpu, cpu)
        for session, (_, hashes) in enumerate(requests(5, 200, 10, 6)):
            c.admit(session, hashes)
            c.release(session)
        assert c.check_invariants() == ""
        assert (c.gpu_policy, c.cpu_policy) == (gpu, cpu)


def test_a_step_with_several_requests_and_its_plan():
    c = kvpolicy.TieredCache(4, 8)
    c.admit(1, [1, 2, 3, 4])
    c.release(1)
    c.begin_step()
    a = c.admit(2, [11, 12])
    assert "transfer_src" not in a  # inside a step: the admission only
    c.admit(3, [1, 2])
    plan = c.end_step()
    assert plan["swap_outs"] == 2  # two victims of request 2 sheltered
    assert plan["transfer_from"].tolist() == [0, 0] and plan["transfer_to"].tolist() == [1, 1]
    assert c.where(11) == "gpu" and c.where(3) == "cpu"
    assert "kvpolicy_hit_blocks_total" in c.to_prometheus()


def test_failed_swap_outs_drop_the_blocks():
    c = kvpolicy.TieredCache(2, 4)
    c.admit(1, [1, 2])
    c.release(1)
    plan = c.admit(2, [11, 12])
    assert plan["swap_outs"] == 2
    report = c.complete_transfers(np.ones(2, dtype=np.uint8))  # both copies failed
    assert report["failed"] == 2
    assert sorted(report["dropped_keys"].tolist()) == [1, 2]
    assert c.lookup([1, 2])["run"] == 0
    assert c.metrics()["failed_transfers"] == 2
    assert c.check_invariants() == ""


def test_bad_input_raises_with_the_cpp_message_and_changes_nothing():
    with pytest.raises(kvpolicy.ConfigError, match=r"^cache_config: gpu_capacity 0 cannot hold a block; give at least one block$"):
        kvpolicy.TieredCache(0)
    with pytest.raises(kvpolicy.UnknownNameError, match=r"^unknown eviction policy 'lruu'; accepted: fifo, lru"):
        kvpolicy.TieredCache(4, cpu_blocks=4, cpu_policy="lruu")
    c = kvpolicy.TieredCache(4, 8)
    c.admit(1, [1, 2, 3])
    c.release(1)
    before = (c.metrics(), c.lookup([1, 2, 3]))
    with pytest.raises(kvpolicy.UsageError) as e:
        c.admit(2, [9, 2])  # block 2 is cached under parent 1, not 9
    assert str(e.value) == (
        "admit: malformed hash chain: block 1 (hash 2) is cached under another parent; equal hashes must mean "
        "equal prefixes, so chain each hash from its parent's"
    )
    with pytest.raises(kvpolicy.UsageError, match="block hash 5 appears twice in one request"):
        c.admit(2, [5, 6, 5])
    with pytest.raises(kvpolicy.CapacityError) as e:
        c.admit(3, list(range(100, 110)))
    assert isinstance(e.value, RuntimeError)
    assert "needs 10 GPU items but only 4 are free or evictable" in str(e.value)
    assert (c.metrics(), c.lookup([1, 2, 3])) == before
    with pytest.raises(kvpolicy.UsageError, match=r"^release: session 3 holds no blocks"):
        c.release(3)
    assert c.check_invariants() == ""


def _session_story(output_tokens_known):
    """Session 9 teaches session_aware_lru that a session stays away as many
    ticks as its last answer had tokens; then session 2 (mean gap 1000, last
    answer 10 tokens) and session 1 (mean gap 100, last answer 5000 tokens)
    finish a request each, 1 apart. Margin 0: the session expected back last
    loses its block first when a new block needs room."""
    c = kvpolicy.TieredCache(
        3, gpu_policy="session_aware_lru",
        gpu_policy_options={"far_factor": 0, "tune_margin": 0, "gap_min_samples": 16})
    t = 1
    for i in range(200):
        out = (10, 100, 1000, 5000)[i % 4]
        c.admit(9, [0x51], now=t)
        c.release(9, output_tokens=out if output_tokens_known else 0)
        t += out
    for when, session, block, out in ((10, 2, 0xB, 0), (920, 1, 0xA, 0), (1010, 2, 0xB, 10), (1020, 1, 0xA, 5000)):
        c.admit(session, [block], now=t + when)
        c.release(session, output_tokens=out if output_tokens_known else 0)
    c.admit(3, [0xC], now=t + 1030)  # the tier is full: one victim
    return c.where(0xA), c.where(0xB)


def test_release_output_tokens_reach_session_aware_lru():
    # Told the outputs, the long answer's session (1) is expected back last.
    assert _session_story(True) == ("free", "gpu")
    # Not told, session 2's mean gap (1000) puts it back last.
    assert _session_story(False) == ("gpu", "free")


def test_release_expected_return_ranks_the_session():
    # Sessions 1 and 2 each make two requests 100 ticks apart; margin 0 evicts
    # the session expected back last first. Without hints session 2 is (its
    # latest request is later); hinted, session 1 (back at 5000) is.
    def story(hint1, hint2):
        c = kvpolicy.TieredCache(
            2, gpu_policy="session_aware_lru",
            gpu_policy_options={"far_factor": 0, "tune_margin": 0, "predict_gaps": 0})
        for when, session, block, hint in ((10, 1, 0xA, 0), (20, 2, 0xB, 0), (110, 1, 0xA, hint1), (120, 2, 0xB, hint2)):
            c.admit(session, [block], now=when)
            c.release(session, expected_return=hint)
        c.admit(3, [0xC], now=130)  # the tier is full: one victim
        return c.where(0xA), c.where(0xB)

    assert story(0, 0) == ("gpu", "free")
    assert story(5000, 400) == ("free", "gpu")
    assert story(0, kvpolicy.NEVER) == ("gpu", "free")
    assert story(kvpolicy.NEVER, 0) == ("free", "gpu")


def test_free_session_tells_session_aware_lru_the_session_ended():
    # As above without hints, then the engine closes session 1 long after its last release:
    # session_aware_lru expects it back never, so its block goes first.
    def story(close):
        c = kvpolicy.TieredCache(
            2, gpu_policy="session_aware_lru",
            gpu_policy_options={"far_factor": 0, "tune_margin": 0, "predict_gaps": 0})
        for when, session, block in ((10, 1, 0xA), (20, 2, 0xB), (110, 1, 0xA), (120, 2, 0xB)):
            c.admit(session, [block], now=when)
            c.release(session)
        if close:
            assert c.free_session(1) == 0
        c.admit(3, [0xC], now=130)
        return c.where(0xA), c.where(0xB)

    assert story(False) == ("gpu", "free")
    assert story(True) == ("free", "gpu")


def test_release_expected_return_must_be_after_now():
    c = kvpolicy.TieredCache(4, gpu_policy="session_aware_lru")
    c.admit(1, [1, 2], now=50)
    with pytest.raises(kvpolicy.UsageError, match=r"expected back at 40, not after now \(50\)"):
        c.release(1, expected_return=40)
    assert c.release(1, expected_return=51) == 2


def test_release_output_tokens_must_be_a_count():
    c = kvpolicy.TieredCache(4)
    c.admit(1, [1, 2])
    with pytest.raises(TypeError):
        c.release(1, output_tokens=-3)
    assert c.release(1, output_tokens=12) == 2
