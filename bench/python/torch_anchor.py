#!/usr/bin/env python3
"""PyTorch's own kernels at exactly bench/flashinfer_bench.cu's shapes: the anchor
its figures are read against, timed in the same run by scripts/gpu-check.sh.

32 query / 8 KV heads, head dim 128, bf16, on the GPU:
  - decode (one query token, one request and a batch of 16) over 2K / 4K / 32K /
    128K tokens: torch.nn.functional.scaled_dot_product_attention with each
    backend this torch has (flash, cuDNN, efficient; GQA by enable_gqa=True,
    else by repeating K and V), the same request shapes the bench's dense rows
    use (16 requests at 32K and 128K only, as the bench's Quest baseline);
  - causal prefill at 32K / 64K / 128K (--tokens): SDPA, is_causal=True, per
    backend;
  - torch.topk(largest=False) of k = 1% of 10^6 and 10^7 float32 scores, and
    sorted=False, the victim-selection anchor.
Times are medians of --reps CUDA-event-timed runs after a warm-up (a first
run of a second or more is the measurement, as in the bench). A backend that
refuses a shape is reported as such, not as a time.

Output: a table on stdout and, with --json FILE, one object per row in
flashinfer_bench's format: section, name, tokens, requests, us, baseline,
baseline_us, ratio (here baseline is empty and ratio 1: scripts/gpu-check.sh
prints both files side by side, and docs/gpu.md's table takes the fastest
row of each shape as the anchor).

    python3 bench/python/torch_anchor.py [--reps N] [--json FILE] [--tokens N[,N...]]

Exits 77 (skipped) where torch or a CUDA device is missing.
"""

import argparse
import json
import sys

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=20, help="timed runs per row (prefill rows: at most 3)")
    p.add_argument("--json", help="write the rows here too")
    p.add_argument("--tokens", default="32768,65536,131072", help="prefill lengths, comma-separated")
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_anchor: torch is not installed: skipped")
        return 77
    if not torch.cuda.is_available():
        print("torch_anchor: no CUDA device: skipped")
        return 77
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = torch.device("cuda")
    torch.manual_seed(46)
    rows = []
    print(f"torch_anchor: torch {torch.__version__} on {torch.cuda.get_device_name()}")

    def time_us(fn, reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        first = start.elapsed_time(stop) * 1000.0
        if first >= 1e6:
            return first
        times = []
        for _ in range(reps):
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1000.0)
        times.sort()
        return times[len(times) // 2]

    def add(section, name, tokens, requests, us):
        shown = "refused" if us is None else f"{us:12.1f} us"
        print(f"  {name:44s} {tokens:8d} tok {requests:3d} req {shown}")
        if us is not None:
            rows.append({"section": section, "name": name, "tokens": tokens, "requests": requests, "us": us,
                         "baseline": "", "baseline_us": us, "ratio": 1.0})

    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    backends = [(n, b) for n, b in backends if b is not None]

    def sdpa(q, k, v, causal):
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:  # torch without enable_gqa
            rep = Q_HEADS // KV_HEADS
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                  is_causal=causal)

    def per_backend(section, label, tokens, requests, q, k, v, causal, reps):
        for name, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    us = time_us(lambda: sdpa(q, k, v, causal), reps)
            except RuntimeError:
                us = None
            add(section, f"torch sdpa {name} {label}", tokens, requests, us)
            torch.cuda.empty_cache()

    print("\ndecode, bf16 (SDPA per backend)")
    for tokens, batches in ((2048, (1,)), (4096, (1,)), (32768, (1, 16)), (131072, (1, 16))):
        for b in batches:
            q = torch.randn(b, Q_HEADS, 1, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, KV_HEADS, tokens, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, KV_HEADS, tokens, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            per_backend("dense_decode", "decode", tokens, b, q, k, v, False, args.reps)
            del q, k, v

    print("\ntop-K, k = 1% lowest float32 (torch.topk)")
    for n in (1_000_000, 10_000_000):
        s = torch.rand(n, device=dev, dtype=torch.float32)
        add("victims", "torch.topk largest=False sorted", n, 1,
            time_us(lambda: torch.topk(s, n // 100, largest=False, sorted=True), args.reps))
        add("victims", "torch.topk largest=False unsorted", n, 1,
            time_us(lambda: torch.topk(s, n // 100, largest=False, sorted=False), args.reps))
        del s

    print("\ncausal prefill, bf16 (SDPA per backend)")
    for tokens in (int(t) for t in args.tokens.split(",") if t):
        q = torch.randn(1, Q_HEADS, tokens, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        per_backend("prefill", "causal prefill", tokens, 1, q, k, v, True, min(args.reps, 3))
        del q, k, v
        torch.cuda.empty_cache()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
