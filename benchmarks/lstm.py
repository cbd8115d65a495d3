"""The LSTM classifier's training step (examples/lstm_classifier.py: embedding, LSTM, linear,
cross entropy, Adam) against PyTorch eager with the same sizes, each implementation alone in a
fresh process per thread count and round, rounds interleaved; prints the median of the rounds'
medians and each one's ratio to PyTorch's.

    python benchmarks/lstm.py --threads 1 2 --rounds 3        # batch 64, seq 32, 64, 128

"mgegraph" is ``compile_train_step`` at its default level (the LSTM's time loop unrolled in
the plan: one GEMM for every step's input projection, then per step the hidden GEMM adding into
the step's rows of it (an addmm), the split of its gates and one fused kernel of the gate
arithmetic), "mgegraph -O2" the same step at optimize=2, "torch" PyTorch eager (its LSTM a
single fused ATen op with its own backward). The machine may be shared: each line also gives
every round's median, and the ratios compare medians of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fresh_process  # noqa: E402  the fresh-process benchmarks' timing loop (stdlib only)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
IMPLS = ("mgegraph", "mgegraph -O2", "torch")
SIZES = {"batch": 64, "seq": 32, "embed": 64, "hidden": 128}


def _data():
    sys.path.insert(0, str(EXAMPLES))
    import lstm_classifier  # the example's synthetic task

    return lstm_classifier, lstm_classifier.make_data(SIZES["batch"], SIZES["seq"], seed=0)


def mgegraph_step(optimize: int):
    example, (x, y) = _data()
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph import nn, optim

    nn.init.manual_seed(0)
    model = example.Classifier(SIZES["embed"], SIZES["hidden"])
    step = mg.compile_train_step(model, F.cross_entropy, optim.Adam(model.parameters(), lr=1e-3),
                                 example_batch=(x, y), optimize=optimize)
    return lambda: step(x, y)


def torch_step():
    example, (x, y) = _data()
    import torch

    torch.manual_seed(0)
    embed = torch.nn.Embedding(example.DIGITS, SIZES["embed"])
    lstm = torch.nn.LSTM(SIZES["embed"], SIZES["hidden"], batch_first=True)
    head = torch.nn.Linear(SIZES["hidden"], 2)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()

    def step():
        opt.zero_grad()
        _, (h_n, _) = lstm(embed(xt))
        loss = torch.nn.functional.cross_entropy(head(h_n[-1]), yt)
        loss.backward()
        opt.step()
        return loss

    return step


def measure(impl: str, runs: int) -> float:
    """Median seconds of ``runs`` steps after 3 warm-up steps (in the child process)."""
    if impl == "torch":
        import torch
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        call = torch_step()
    else:
        call = mgegraph_step(2 if impl.endswith("-O2") else 1)
    return fresh_process.median_seconds(call, runs)


def child(impl: str, threads: int, runs: int) -> float | str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--child", impl, str(runs)], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20, help="timed steps per process")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps({"seconds": measure(args.child[0], int(args.child[1]))}))
        return 0
    results: dict = {}
    for _ in range(args.rounds):
        for t in args.threads:
            for impl in IMPLS:
                got = child(impl, t, args.runs)
                results.setdefault((impl, t), []).append(got)
    sizes = ", ".join(f"{k} {v}" for k, v in SIZES.items())
    print(f"LSTM classifier training step ({sizes}); median of {args.rounds} rounds' medians")
    print(f"{'threads':>7} {'implementation':16} {'median ms':>10} {'x torch':>8}  rounds, ms")
    for t in args.threads:
        done = {i: [v for v in results[i, t] if not isinstance(v, str)] for i in IMPLS}
        medians = {i: statistics.median(v) for i, v in done.items() if v}
        for impl in IMPLS:
            if impl not in medians:
                print(f"{t:>7} {impl:16} {'failed':>10}  {results[impl, t][-1]}")
                continue
            ratio = medians[impl] / medians["torch"] if "torch" in medians else float("nan")
            rounds = " ".join(f"{v * 1e3:.2f}" for v in done[impl])
            print(f"{t:>7} {impl:16} {medians[impl] * 1e3:>10.2f} {ratio:>8.2f}  {rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
