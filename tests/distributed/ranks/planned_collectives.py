"""The planned collectives' kernels against NumPy on every dtype they take, odd sizes: a
blocking all_reduce, and a bucket of three values (start and wait, reduced in place); sums
and means; every rank's bits the same. Each rank reports how many checks passed."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import assert_close, data, report, summed

import mgegraph as mg
import mgegraph.distributed as dist
from mgegraph.ir.graph import Graph
from mgegraph.ops.collective import all_reduce

dist.init_process_group(timeout=120)
R, N = dist.get_rank(), dist.get_world_size()
SHAPES = [(3, 5), (7,), (1, 1, 13)]
CHECKS = [0]


def plan(dtype: str, scale: float, bucket_bytes: int):
    g = Graph()
    xs = [g.input(f"x{i}", shape, dtype) for i, shape in enumerate(SHAPES)]
    # the values are computed (a bucket takes temporaries), then reduced
    values = [-x for x in xs]
    # and read by another node (a plan's outputs have buffers of their own)
    outs = [-all_reduce(v, group=dist.WORLD.key, scale=scale, bucket_bytes=bucket_bytes)
            for v in values]
    with mg.planner.checking():
        return mg.compile(outs)


for dtype in ("float32", "float64", "int32", "int64"):
    for bucket_bytes in (0, 1 << 20):
        for mean in (False, True) if dtype.startswith("float") else (False,):
            p = plan(dtype, 1.0 / N if mean else 1.0, bucket_bytes)
            ops = [ins.op for ins in p.instructions]
            assert ops.count("all_reduce_start") == (bucket_bytes > 0), ops
            arrays = [[data(k, shape, dtype, salt=i) for k in range(N)]
                      for i, shape in enumerate(SHAPES)]
            got = p.run({f"x{i}": a[R] for i, a in enumerate(arrays)})
            for i, (g, a) in enumerate(zip(got, arrays)):
                want = summed(a, dtype)
                if mean:
                    want = (want * np.asarray(1.0 / N, dtype)).astype(dtype)
                what = f"rank {R}: all_reduce {dtype} {SHAPES[i]} bucket {bucket_bytes} " \
                       f"mean {mean}"
                assert_close(g, want, dtype, what)
                every = dist.WORLD.comm.allgather(np.ascontiguousarray(g))
                assert all(e.tobytes() == every[0].tobytes() for e in every), what
                CHECKS[0] += 1
report(R, checks=CHECKS[0])
