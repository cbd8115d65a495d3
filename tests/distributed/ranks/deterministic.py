"""The deterministic all-reduce: a gradient reduced with ``deterministic=True`` equals, bitwise,
one process that computes each rank's gradient with the same graph and adds them in rank order,
((g0 + g1) + g2) + ..., then scales; the kernel alone against that sum in NumPy on float32,
float64 and int32, and the eager callback's option likewise; every rank's bits the same. Each
rank reports its checks, and whether MPI's own sum (not deterministic) gave other bits."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import data, report

import mgegraph as mg
import mgegraph.distributed as dist
import mgegraph.functional as F
from mgegraph.autodiff import grad
from mgegraph.ir.graph import Graph
from mgegraph.ops.collective import all_reduce

dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
COMM = dist.WORLD.comm
CHECKS = [0]


def in_rank_order(arrays, scale=None):
    """((a0 + a1) + a2) + ... in the arrays' dtype, then times ``scale`` (that dtype)."""
    total = arrays[0].copy()
    for a in arrays[1:]:
        total = total + a
    return total if scale is None else total * np.asarray(scale, total.dtype)


def same_everywhere(x: np.ndarray, what: str) -> None:
    every = COMM.allgather(np.ascontiguousarray(x))
    assert all(e.tobytes() == every[0].tobytes() for e in every), what


def check_kernel(dtype: str, shape, mean: bool) -> None:
    g = Graph()
    x = g.input("x", shape, dtype)
    scale = 1.0 / N if mean else 1.0
    out = -all_reduce(-x, group=dist.WORLD.key, scale=scale, deterministic=True)
    with mg.planner.checking():
        plan = mg.compile([out])
    assert [ins.op for ins in plan.instructions].count("all_reduce") == 1, str(plan)
    arrays = [data(k, shape, dtype, salt=3) for k in range(N)]
    (got,) = plan.run({"x": arrays[R]})
    want = -in_rank_order([-a for a in arrays], scale if mean else None)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), \
        f"rank {R}: {dtype}{shape} mean {mean}: {np.max(np.abs(got - want))}"
    same_everywhere(got, f"{dtype}{shape}")
    CHECKS[0] += 1


for dtype in ("float32", "float64", "int32"):
    for shape in ((3, 5), (1000,), (1, 1, 13)):
        for mean in (False, True) if dtype != "int32" else (False,):
            check_kernel(dtype, shape, mean)


def gradient_graph(deterministic: bool | None):
    """A softmax classifier's weight gradient on this rank's batch of 16; reduced over the
    ranks (mean) unless ``deterministic`` is None."""
    g = Graph()
    x, y = g.input("x", (16, 32), "float32"), g.input("y", (16,), "int32")
    w = g.input("w", (32, 10), "float32")
    h = F.relu(F.matmul(x, w))
    (dw,) = grad(F.cross_entropy(h * 3.0, y), [w])
    if deterministic is not None:
        dw = all_reduce(dw, group=dist.WORLD.key, scale=1.0 / N, deterministic=deterministic)
    return mg.compile([dw])


def batch(rank: int):
    rng = np.random.default_rng([11, rank])
    return {"x": rng.standard_normal((16, 32)).astype(np.float32),
            "y": rng.integers(0, 10, 16).astype(np.int32),
            "w": np.random.default_rng(5).standard_normal((32, 10)).astype(np.float32)}


# one process: each rank's gradient by the graph without the reduction, added in rank order
own = gradient_graph(None)
accumulated = in_rank_order([own.run(batch(k))[0] for k in range(N)], 1.0 / N)
(reduced,) = gradient_graph(True).run(batch(R))
assert reduced.tobytes() == accumulated.tobytes(), \
    f"rank {R}: {np.max(np.abs(reduced - accumulated))}"
same_everywhere(reduced, "the deterministic gradient")
CHECKS[0] += 1
(mpis,) = gradient_graph(False).run(batch(R))
np.testing.assert_allclose(mpis, accumulated, rtol=1e-5, atol=1e-7)
# the eager callback's option: a bucket of two gradients, added in rank order
callback = dist.make_allreduce_cb("mean", deterministic=True)
parts = [[data(k, (257,), "float32", salt=9), data(k, (3, 4), "float32", salt=10)]
         for k in range(N)]
futures = [callback(None, mg.tensor(p)) for p in parts[R]]
for i, future in enumerate(futures):
    want = (in_rank_order([p[i] for p in parts]) / N).astype(np.float32)
    assert future.get().value.tobytes() == want.tobytes(), f"rank {R}: eager gradient {i}"
CHECKS[0] += 1
report(R, checks=CHECKS[0], mpi_sum_other_bits=mpis.tobytes() != accumulated.tobytes())
