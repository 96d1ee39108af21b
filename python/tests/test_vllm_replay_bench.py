"""bench/vllm_replay.py's parts that need no vLLM: the Belady bound of a
CPU tier's access sequence (against an exhaustive search of every admission
and eviction choice), the prompts made from a trace's block hashes, the
tokens each request decodes, and the trace reader's errors."""

import functools
import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from vllm_replay import ReplayConfig, TraceRequest, belady_hits, decode_tokens, prompt_tokens, read_trace  # noqa: E402


def exhaustive_hits(accesses, capacity):
    """The most lookup hits any policy gets: every choice tried. A lookup
    (0, k) hits if k is held; at any reference a key not held may be
    admitted (evicting any held key when full) or not; any held key may be
    dropped."""

    @functools.lru_cache(maxsize=None)
    def best(i, held):
        if i == len(accesses):
            return 0
        op, key = accesses[i]
        if key in held:
            return (op == 0) + max([best(i + 1, held)] + [best(i + 1, held - {v}) for v in held])
        options = [best(i + 1, held)]  # bypass
        if len(held) < capacity:
            options.append(best(i + 1, held | {key}))
        else:
            options += [best(i + 1, (held - {v}) | {key}) for v in held]
        return max(options)

    return best(0, frozenset())


@pytest.mark.parametrize("seed", range(300))
def test_belady_hits_are_the_exhaustive_optimum(seed):
    rng = random.Random(seed)
    keys = [bytes([k]) for k in range(rng.randint(2, 6))]
    accesses = [(rng.randrange(2), rng.choice(keys)) for _ in range(rng.randint(1, 16))]
    capacity = rng.randint(1, 3)
    assert belady_hits(accesses, capacity) == exhaustive_hits(accesses, capacity)


def test_belady_hits_worked_example():
    a, b, c = b"a", b"b", b"c"
    # Capacity 1: keep a (read again at 3) over b (never read): 1 hit; LRU would hold b.
    assert belady_hits([(1, a), (1, b), (0, a), (0, b)], 1) == 1
    # Capacity 2 holds both: 2 hits; c, admitted at its missed lookup, hits once.
    assert belady_hits([(1, a), (1, b), (0, a), (0, b), (0, c), (0, c)], 2) == 3


def test_prompts_follow_the_traces_prefix_hashes():
    r1 = TraceRequest(0, [7, 8, 9], 1100, 4)  # 512-token trace blocks; the last 76 tokens
    r2 = TraceRequest(0, [7, 8, 5], 1536, 4)
    p1, p2 = prompt_tokens(r1, 16, 512), prompt_tokens(r2, 16, 512)
    assert p1[:32] == p2[:32] and p1[32] != p2[32]  # the same two blocks, then a different one
    assert len(p1) == 32 + 3  # ceil(76 * 16 / 512): the last block as full as the trace's
    assert len(p2) == 48
    assert p1[0] == 8 and p1[1:16] == [0] * 15


def test_decode_tokens_scale_as_the_prompt_does():
    def tokens(output, **cfg):
        return decode_tokens(TraceRequest(0, [1], 100, output), ReplayConfig(**cfg))

    assert tokens(361) == 361  # the trace's own
    assert tokens(361, max_output=16) == 16
    # One vLLM block of 16 tokens per trace block of 512: 361 * 16 / 512 = 11.3, rounded up.
    assert tokens(361, trace_block=512, scale_outputs=True) == 12
    assert tokens(264, trace_block=64, scale_outputs=True) == 66  # the agentic trace's blocks of 64
    assert tokens(264, trace_block=64, scale_outputs=True, max_output=16) == 16  # scaled, then capped
    assert tokens(1, trace_block=512, scale_outputs=True) == 1
    assert tokens(0) == 1 and tokens(0, scale_outputs=True) == 1  # a request decodes at least one token
    for out in range(0, 2000, 7):  # against the quotient, rounded up (exact in floating point here)
        assert tokens(out, trace_block=512, scale_outputs=True) == max(1, math.ceil(out * 16 / 512))


def test_trace_reader_names_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not a trace request"):
        read_trace(str(path))
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], "session": 3}\n'
                    '{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1, 2], "session": 3}\n')
    first, last = read_trace(str(path))
    assert (first.session_end, last.session_end) == (False, True)
