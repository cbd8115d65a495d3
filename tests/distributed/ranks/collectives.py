"""Every collective against NumPy on every dtype the engine has, odd sizes, both axes; the
gradients against their closed forms; a subgroup; the errors. Each rank checks its own results
and reports how many checks passed (a failed check aborts the job)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, HALF, assert_close, data, report, summed

import mgegraph as mg
import mgegraph.distributed as dist
from mgegraph.distributed import functional as DF

dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
CHECKS = [0]


def check(got, want, dtype, what):
    got = got.numpy() if isinstance(got, mg.Tensor) else got
    assert_close(got, want, dtype, f"rank {R}: {what} {dtype}")
    CHECKS[0] += 1


def reductions(dtype):
    xs = [data(k, (3, 5), dtype) for k in range(N)]
    x = mg.tensor(xs[R], dtype=dtype)
    total = DF.all_reduce_sum(x)
    check(total, summed(xs, dtype), dtype, "all_reduce_sum")
    every = dist.WORLD.comm.allgather(total.numpy())
    assert all(e.tobytes() == every[0].tobytes() for e in every), "ranks' sums differ in bits"
    check(DF.all_reduce_max(x), np.maximum.reduce(np.stack(xs)), dtype, "all_reduce_max")
    check(DF.all_reduce_min(x), np.minimum.reduce(np.stack(xs)), dtype, "all_reduce_min")
    if dtype.startswith(("float", "bfloat")):
        wide = np.stack(xs).astype(np.float32 if dtype in HALF else dtype)
        check(DF.all_reduce_mean(x), (np.add.reduce(wide) / N).astype(xs[0].dtype), dtype,
              "all_reduce_mean")
    root_sum = DF.reduce_sum(x)
    if R == 0:
        check(root_sum, summed(xs, dtype), dtype, "reduce_sum")
    else:
        assert root_sum is None


def movements(dtype):
    xs = [data(k, (N * 3, 2 * N + 1), dtype, salt=1) for k in range(N)]
    x = mg.tensor(xs[R], dtype=dtype)
    for axis in (0, 1, -1):
        check(DF.all_gather(x, axis=axis), np.concatenate(xs, axis), dtype, f"all_gather {axis}")
    check(DF.reduce_scatter_sum(x), np.split(summed(xs, dtype), N, 0)[R], dtype,
          "reduce_scatter_sum")
    ys = [data(k, (5, 2 * N), dtype, salt=2) for k in range(N)]
    check(DF.reduce_scatter_sum(mg.tensor(ys[R], dtype=dtype), axis=1),
          np.split(summed(ys, dtype), N, 1)[R], dtype, "reduce_scatter_sum axis 1")
    check(DF.broadcast(x), xs[0], dtype, "broadcast")
    check(DF.scatter(x), np.split(xs[0], N, 0)[R], dtype, "scatter")
    gathered = DF.gather(x, axis=1)
    if R == 0:
        check(gathered, np.concatenate(xs, 1), dtype, "gather axis 1")
    want = np.concatenate([np.split(xs[k], N, 0)[R] for k in range(N)], 1)
    check(DF.all_to_all(x, split_axis=0, concat_axis=1), want, dtype, "all_to_all")


def gradient(function, x_shape, y_shape, want):
    """Attach this rank's x, take sum(function(x) * c_r), compare x.grad with ``want(cs)``."""
    x = mg.tensor(data(R, x_shape, "float32", salt=3))
    cs = [data(k, y_shape, "float32", salt=4) for k in range(N)]
    gm = mg.autodiff.GradManager().attach([x])
    with gm:
        y = function(x)
        gm.backward((y * mg.tensor(cs[R])).sum())
    expected = want(cs)
    if expected is None:
        assert x.grad is None, f"rank {R}: {function} gave a gradient"
    else:
        check(x.grad, expected, "float32", f"gradient of {function.__name__}")


def gradients():
    gradient(DF.all_reduce_sum, (3, 4), (3, 4), lambda cs: summed(cs, "float32"))
    gradient(DF.all_reduce_mean, (3, 4), (3, 4), lambda cs: summed(cs, "float32") / N)
    xs = [data(k, (3, 4), "float32", salt=3) for k in range(N)]
    top = np.maximum.reduce(np.stack(xs))
    gradient(DF.all_reduce_max, (3, 4), (3, 4),
             lambda cs: summed(cs, "float32") * (xs[R] == top))
    gradient(DF.all_gather, (2, 3), (2 * N, 3),
             lambda cs: np.split(summed(cs, "float32"), N, 0)[R])
    gradient(DF.reduce_scatter_sum, (2 * N, 3), (2, 3), lambda cs: np.concatenate(cs, 0))
    gradient(lambda x: DF.all_to_all(x, split_axis=1, concat_axis=0), (2, N), (2 * N, 1),
             lambda cs: np.concatenate([np.split(cs[k], N, 0)[R] for k in range(N)], 1))
    gradient(DF.broadcast, (3,), (3,), lambda cs: summed(cs, "float32") if R == 0 else None)
    gradient(DF.scatter, (2 * N, 3), (2, 3), lambda cs: np.concatenate(cs, 0) if R == 0
             else None)


def subgroup():
    if N < 2 or R not in (0, N - 1):
        return
    pair = dist.new_group([N - 1, 0])  # rank N-1 is its root
    assert (pair.size, pair.rank) == (2, 0 if R == N - 1 else 1)
    xs = {k: data(k, (7,), "float64", salt=5) for k in (0, N - 1)}
    check(DF.all_reduce_sum(mg.tensor(xs[R], dtype="float64"), group=pair),
          xs[0] + xs[N - 1], "float64", "all_reduce_sum in a subgroup")
    check(DF.broadcast(mg.tensor(xs[R], dtype="float64"), group=[N - 1, 0]), xs[N - 1],
          "float64", "broadcast from a subgroup's root")


def errors() -> dict:
    """The messages of what each collective refuses (raised before any communication)."""
    found = {}
    cases = {
        "mean_of_ints": lambda: DF.all_reduce_mean(mg.tensor([1, 2])),
        "indivisible": lambda: DF.reduce_scatter_sum(mg.tensor(np.zeros((N * 2 + 1, 2)))),
        "bad_axis": lambda: DF.all_gather(mg.tensor(np.zeros((2, 2))), axis=2),
        "not_tensor": lambda: DF.all_reduce_sum(np.zeros(3)),
        "scalar_gather": lambda: DF.all_gather(mg.tensor(1.0)),
        "bad_group": lambda: dist.new_group([0, N]),
        "twice": lambda: dist.init_process_group(),
        "traced": lambda: mg.jit.trace(DF.all_reduce_sum)(mg.tensor([1.0])),
    }
    for name, case in cases.items():
        try:
            case()
        except dist.DistributedError as exc:
            found[name] = str(exc)
    x = mg.tensor(data(R, (3,), "float32"))
    gm = mg.autodiff.GradManager().attach([x])
    with gm:
        total = DF.reduce_sum(x)
        if R == 0:
            try:
                gm.backward(total.sum())
            except dist.DistributedError as exc:
                found["reduce_sum_gradient"] = str(exc)
    return found


for dtype in DTYPES:
    reductions(dtype)
    movements(dtype)
gradients()
subgroup()
report(R, size=N, checks=CHECKS[0], errors=errors())
