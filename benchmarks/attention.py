"""Causal scaled dot-product attention: mgegraph's tiled kernel against PyTorch's
``scaled_dot_product_attention``, each alone in a fresh process.

    python benchmarks/attention.py                    # L = 128, 512, 2048; 1 and 2 threads
    python benchmarks/attention.py --lengths 512 --threads 2 --rounds 3

Batch 4, 8 heads, head dim 64, float32, ``is_causal=True``. For each (implementation, pass,
length, threads) a child process times the forward ("fwd") or the forward and backward
("fwd+bwd", the gradients of q, k and v) and prints the median of its calls; rounds are
interleaved so that a burst of load on a shared machine hits every row, and the table shows
the median of the rounds' medians with the ratio to PyTorch's. Memory: the peak growth of the
resident set over the timed calls (VmHWM after /proc/self/clear_refs, as peak_memory.py), and
for mgegraph the plan's arena (the planned bytes of every temporary and workspace): linear in
L because the kernel never holds an (L, L) matrix, where the scores alone would be
4 * 8 * L^2 * 4 bytes (512 MiB at 2048).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH, HEADS, HEAD_DIM = 4, 8, 64
IMPLS = ("mgegraph", "torch")
PASSES = ("fwd", "fwd+bwd")


def _runs(length: int) -> int:
    return {128: 30, 512: 10}.get(length, 3)


def _arrays(length: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.standard_normal((BATCH, HEADS, length, HEAD_DIM)).astype(np.float32)
            for _ in range(3)]


def mgegraph_call(mode: str, length: int):
    """(call, the plan's arena bytes)."""
    import mgegraph as mg
    import mgegraph.functional as F

    g = mg.Graph()
    xs = [g.input(n, (BATCH, HEADS, length, HEAD_DIM), "float32") for n in "qkv"]
    out = F.nn.scaled_dot_product_attention(*xs, is_causal=True)
    outputs = [out] if mode == "fwd" else [out, *mg.grad(F.sum(out * out), xs)]
    plan = mg.compile(outputs)
    feeds = dict(zip("qkv", _arrays(length)))
    return (lambda: plan.run(feeds)), plan.arena_bytes


def torch_call(mode: str, length: int):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    ts = [torch.from_numpy(a) for a in _arrays(length)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if mode == "fwd":
        def call():
            with torch.no_grad():
                return sdpa(*ts, is_causal=True)
        return call, None
    ts = [t.requires_grad_() for t in ts]

    def call():
        out = sdpa(*ts, is_causal=True)
        return torch.autograd.grad((out * out).sum(), ts)
    return call, None


def measure(impl: str, mode: str, length: int) -> dict:
    """Median seconds of the calls after two warm-up calls, and the memory figures (child)."""
    sys.path.insert(0, str(HERE))
    from peak_memory import reset_peak, settle, status

    call, arena = (mgegraph_call if impl == "mgegraph" else torch_call)(mode, length)
    for _ in range(2):
        call()
    settle()
    before = status()["VmRSS"]
    exact = reset_peak()
    times = []
    for _ in range(_runs(length)):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    peak = status()["VmHWM"] if exact else None
    return {"seconds": statistics.median(times), "arena": arena,
            "peak_growth": None if peak is None else peak - before}


def child(impl: str, mode: str, length: int, threads: int) -> dict | str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", impl, mode, str(length)],
                          env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def table(results: dict, rows: list) -> list[str]:
    lines = [(f"{'pass':8} {'L':>5} {'thr':>3} {'impl':9} {'median ms':>10} {'x torch':>8} "
              f"{'arena MiB':>10} {'peak RSS MiB':>13}  rounds, ms")]
    for mode, length, threads in rows:
        torch_ms = None
        for impl in reversed(IMPLS):
            got = results.get((impl, mode, length, threads), [])
            done = [r for r in got if isinstance(r, dict)]
            if not done:
                lines.append(f"{mode:8} {length:5} {threads:3} {impl:9} "
                             f"{(got or ['not run'])[-1]}")
                continue
            ms = statistics.median(r["seconds"] for r in done) * 1e3
            torch_ms = ms if impl == "torch" else torch_ms
            ratio = f"{ms / torch_ms:8.2f}" if torch_ms else f"{'-':>8}"
            peak = statistics.median(r["peak_growth"] or 0 for r in done)
            lines.append(f"{mode:8} {length:5} {threads:3} {impl:9} {ms:10.2f} {ratio} "
                         f"{_mib(done[0]['arena']):>10} {_mib(peak):>13}  "
                         + " ".join(f"{r['seconds'] * 1e3:.1f}" for r in done))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, mode, length = args.child
        print(json.dumps(measure(impl, mode, int(length))))
        return 0
    rows = [(m, n, t) for m in PASSES for n in args.lengths for t in args.threads]
    results: dict = {}
    for _ in range(args.rounds):
        for mode, length, threads in rows:
            for impl in IMPLS:
                results.setdefault((impl, mode, length, threads), []).append(
                    child(impl, mode, length, threads))
    print("\n".join(table(results, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
